"""``async-pbt doctor WORKSPACE``: does this filesystem give the workspace what it relies on?

Atomic replace, fsync, POSIX record locks enforced between processes, and clocks that agree (this node against
the file server, and every node that wrote a member record): the checks themselves, and why each matters, are
:mod:`async_pbt_isaaclab.core.workspace.filesystem_checks`. This module is the command: its parser and how the results
are printed.

Exit code 0 without failures, 1 with any failure, 2 for a path that cannot be a workspace. ``async-pbt launch`` runs
the same checks before starting members and refuses to launch on a failure (``--no-doctor`` skips them).

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import asdict
from pathlib import Path

from async_pbt_isaaclab.commands.common import CliError, emit_json
from async_pbt_isaaclab.core.workspace.filesystem_checks import failures, format_checks, run_checks
from async_pbt_isaaclab.exit_codes import EXIT_CHECK_FAILED, EXIT_OK


def add_doctor_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="check that a workspace's filesystem supports atomic replace, fsync, locks and synced clocks",
        description="Check what the workspace needs from its filesystem: atomic os.replace, fsync, POSIX locks "
        "enforced between processes, and clocks that agree (this node against the file server, "
        "and every node that wrote a member record). Exit 1 when a check fails.",
    )
    p.add_argument("workspace", help="population workspace folder (an existing folder; run it on each node)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        checks = run_checks(args.workspace)
    except NotADirectoryError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        emit_json(
            {
                "workspace": str(Path(args.workspace).absolute()),
                "host": socket.gethostname(),
                "checks": [asdict(c) for c in checks],
                "failed": [c.name for c in failures(checks)],
            }
        )
    else:
        print(f"filesystem checks for {Path(args.workspace).absolute()} from {socket.gethostname()}:")
        print("\n".join("  " + line for line in format_checks(checks)))
        bad = failures(checks)
        print(f"{len(bad)} check(s) failed" if bad else "all required checks passed")
    return EXIT_CHECK_FAILED if failures(checks) else EXIT_OK


__all__ = ["add_doctor_parser", "cmd_doctor"]
