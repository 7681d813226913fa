"""The ``async-pbt`` command: check a config, watch and audit a population workspace, launch a population.

Subcommands::

    async-pbt check-config AGENT.yaml [KEY=VALUE ...] [--train-dir DIR] [--json]
    async-pbt status WORKSPACE [--json] [--stale-after SECONDS] [--watch [--interval S] [--count N]]
    async-pbt audit WORKSPACE [--member N] [--json]
    async-pbt best WORKSPACE [--top N] [--json]
    async-pbt lineage WORKSPACE [--member N] [--json]
    async-pbt report WORKSPACE [--out FILE] [--png DIR] [--max-decisions N]
    async-pbt replay WORKSPACE --member K [--out schedule.yaml] [--frame F]
    async-pbt launch --members N --workspace DIR [--backend local|slurm|ray ...] -- COMMAND ...
    async-pbt doctor WORKSPACE [--json]
    async-pbt stop WORKSPACE
    async-pbt evaluate CHECKPOINT [CHECKPOINT ...] [--task ID] [--agent-yaml YAML] [--episodes N] [--seed S] [--json]

Exit codes: 0 success; 1 the audit found a failing entry; 2 bad usage, an invalid config or a path
that is not a population workspace.

This module is the entry point only (:data:`SUBCOMMANDS`, :func:`build_parser`, :func:`main`). The
subcommands live in :mod:`async_pbt_isaaclab.commands`: ``evaluate`` in
:mod:`~async_pbt_isaaclab.commands.evaluate`, ``check-config`` in
:mod:`~async_pbt_isaaclab.commands.check_config`, ``status``/``audit``/``best`` in
:mod:`~async_pbt_isaaclab.commands.workspace_views`, ``lineage`` in :mod:`~async_pbt_isaaclab.commands.lineage_view`,
:class:`CliError` in :mod:`~async_pbt_isaaclab.commands.common` and the exit codes in
:mod:`async_pbt_isaaclab.exit_codes`; ``launch`` comes from :mod:`async_pbt_isaaclab.launch.cli`.
Import a subcommand's names from its own module.

It imports only the pure core (no torch, rl_games or Isaac Lab), so every subcommand here
runs on a laptop. A subcommand that needs heavy packages imports them inside its ``cmd_<name>``
function. Adding one takes two functions and one line::

    def add_export_parser(subparsers) -> None:
        p = subparsers.add_parser("export", help="...")
        p.add_argument(...)
        p.set_defaults(func=cmd_export)

    def cmd_export(args) -> int:
        from async_pbt_isaaclab.export import main as export_main   # lazy
        return export_main(args)

    SUBCOMMANDS.append(add_export_parser)   # or list it in SUBCOMMANDS below
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from async_pbt_isaaclab._version import __version__
from async_pbt_isaaclab.commands.check_config import add_check_config_parser
from async_pbt_isaaclab.commands.cluster import add_stop_parser
from async_pbt_isaaclab.commands.common import CliError
from async_pbt_isaaclab.commands.doctor import add_doctor_parser
from async_pbt_isaaclab.commands.evaluate import add_evaluate_parser  # torch/rl_games imported lazily
from async_pbt_isaaclab.commands.lineage_view import add_lineage_parser
from async_pbt_isaaclab.commands.replay import add_replay_parser
from async_pbt_isaaclab.commands.report import add_report_parser  # matplotlib is imported when it runs
from async_pbt_isaaclab.commands.workspace_views import add_audit_parser, add_best_parser, add_status_parser
from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.exit_codes import EXIT_OK, EXIT_USAGE
from async_pbt_isaaclab.launch.cli import add_launch_parser  # stdlib + core only
from async_pbt_isaaclab.member.trainer import SUPPORTED_TRAINERS  # stdlib only

# ============================================================================ entry point

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], object]] = [
    add_check_config_parser,
    add_status_parser,
    add_audit_parser,
    add_best_parser,
    add_lineage_parser,
    add_report_parser,
    add_replay_parser,
    add_launch_parser,
    add_doctor_parser,
    add_stop_parser,
    add_evaluate_parser,
]
"""Parser builders, one per subcommand, in ``--help`` order. Each sets ``func`` to its ``cmd_<name>``."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="async-pbt")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    # Named from the registries, so a new subcommand or trainer is listed without editing this text.
    trainers = "; ".join(f"{name} ({what})" for name, what in SUPPORTED_TRAINERS.items())
    parser.description = (
        f"Asynchronous population-based training on Isaac Lab and gymnasium tasks. Supported trainers: {trainers}. "
        f"Commands: {', '.join(subparsers.choices)} (async-pbt COMMAND --help for each)."
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``async-pbt`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"async-pbt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `async-pbt status WS | head`
        return EXIT_OK


__all__ = ["SUBCOMMANDS", "build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
