"""The launcher's command line: ``async-pbt launch`` and ``python -m async_pbt_isaaclab.launch``, every backend.

One command starts ``N`` members of a training command::

    async-pbt launch --members 4 --workspace /shared/pbt -- \\
        ./isaaclab.sh -p scripts/train_pbt.py --task Isaac-Ant-v0 --headless

    python -m async_pbt_isaaclab.launch --members 4 --workspace /shared/pbt -- python train.py ...

This module is the launcher's entry point: the argparse options shared by ``async-pbt launch`` and
``python -m async_pbt_isaaclab.launch`` (:func:`add_launch_parser`, :func:`cmd_launch`, :func:`main`). The
SLURM and Ray backends are reached through :mod:`~async_pbt_isaaclab.launch.backends`; the local backend it runs
itself is :func:`async_pbt_isaaclab.launch.local_backend.launch_population` (the process model, crash restarts and
stopping are described in :mod:`async_pbt_isaaclab.launch.supervisor`).

Exit code of the launcher: 0 when every member finished; 1 when any member was given up;
``128 + signal`` when stopped by a signal; 2 for bad usage.

This module imports only the standard library and the pure core (no torch).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.pbt_section import population_size_problem
from async_pbt_isaaclab.core.workspace.launcher_lock import release_launcher_locks
from async_pbt_isaaclab.exit_codes import EXIT_USAGE
from async_pbt_isaaclab.launch.arguments import LaunchError
from async_pbt_isaaclab.launch.backends import add_backend_arguments, run_backend
from async_pbt_isaaclab.launch.gpus import GPU_PLACEMENTS
from async_pbt_isaaclab.launch.local_backend import launch_population
from async_pbt_isaaclab.launch.torchrun import ranks_per_member

# ============================================================================ command line


def parse_indices(text: str) -> list[int]:
    """``"0,2,4-6"`` -> ``[0, 2, 4, 5, 6]``."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected indices like 0,2,4-6, got {text!r}") from None
    return out


def _parse_gpus(text: str) -> list[str] | None:
    lowered = text.strip().lower()
    if lowered == "auto":
        return None
    if lowered in ("", "none", "cpu"):
        return []
    return [g.strip() for g in text.split(",") if g.strip()]


def _parse_env(text: str) -> tuple[str, str]:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    return key, value


def add_launch_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the launcher's options and the trailing member command to ``p``."""
    _add_population_arguments(p)
    _add_restart_arguments(p)
    _add_stopping_arguments(p)
    _add_member_environment_arguments(p)
    add_backend_arguments(p)
    p.add_argument(
        "member_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the training command, after '--'; the launcher appends --pbt-workspace, --pbt-members and --pbt-index",
    )
    return p


def _add_population_arguments(p: argparse.ArgumentParser) -> None:
    """Which members run, in which workspace, on which GPUs."""
    p.add_argument("--members", "-n", type=int, required=True, metavar="N", help="population size (--pbt-members)")
    p.add_argument(
        "--workspace", "-w", required=True, metavar="DIR", help="population workspace folder (--pbt-workspace)"
    )
    p.add_argument(
        "--gpus",
        type=_parse_gpus,
        default=None,
        metavar="LIST",
        help="comma-separated CUDA_VISIBLE_DEVICES values assigned round-robin (e.g. 0,1,2,3); "
        "'none' for no assignment; default 'auto': CUDA_VISIBLE_DEVICES or nvidia-smi -L",
    )
    p.add_argument(
        "--gpu-placement",
        choices=GPU_PLACEMENTS,
        default="auto",
        help="how a member is put on its GPU: 'device' passes --device cuda:<i> (Isaac Lab 2.x: masking "
        "CUDA_VISIBLE_DEVICES breaks its renderer, Isaac Lab issue #2756), 'mask' sets "
        "CUDA_VISIBLE_DEVICES; default 'auto': device on Isaac Lab 2.x, else mask",
    )
    p.add_argument(
        "--indices",
        type=parse_indices,
        default=None,
        metavar="LIST",
        help="run only these members (e.g. 0-3 on this node, 4-7 on the next); default all",
    )


def _add_restart_arguments(p: argparse.ArgumentParser) -> None:
    """How often a crashed member is restarted, and how soon."""
    p.add_argument(
        "--max-retries",
        type=int,
        default=3,
        metavar="N",
        help="crash restarts allowed per member within --retry-window (default 3)",
    )
    p.add_argument(
        "--retry-window",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="sliding window for --max-retries; 0 counts every crash of the run (default 3600)",
    )
    p.add_argument(
        "--backoff",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wait before the first restart, doubled per crash in the window (default 5)",
    )


def _add_stopping_arguments(p: argparse.ArgumentParser) -> None:
    """Progress reports, and how long a stop waits before the next signal."""
    p.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress reports (default 10)",
    )
    p.add_argument(
        "--stop-grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="after Ctrl-C, how long members may take to stop before SIGTERM (default 30)",
    )
    p.add_argument(
        "--term-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="after SIGTERM, how long before SIGKILL (default 10)",
    )


def _add_member_environment_arguments(p: argparse.ArgumentParser) -> None:
    """Where a member's log goes and what its environment adds."""
    p.add_argument("--log-dir", default=None, metavar="DIR", help="folder for member_NNN.log (default WORKSPACE/logs)")
    p.add_argument(
        "--env",
        type=_parse_env,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment variable for every member (repeatable)",
    )


_DESCRIPTION = (
    "Start N members of a training command on this machine: GPUs round-robin, crashed members "
    "restarted from their last checkpoint (bounded retries), Ctrl-C forwarded to all, progress "
    "every few seconds. See docs/launch.md."
)
_EPILOG = (
    "example:\n  async-pbt launch --members 4 --workspace /shared/pbt --gpus 0,1 -- \\\n"
    "      ./isaaclab.sh -p scripts/train_pbt.py --task Isaac-Ant-v0 --headless   (Isaac Lab 2.x)\n"
    "  async-pbt launch --members 4 --workspace /shared/pbt -- python scripts/train_pbt.py "
    "--task Isaac-Ant   (3.0)"
)


def add_launch_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``launch`` on the ``async-pbt`` command (sets ``func=cmd_launch``)."""
    p = subparsers.add_parser(
        "launch",
        help="start and supervise the members of a population on this machine",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_launch_arguments(p)
    p.set_defaults(func=cmd_launch)
    return p


def cmd_launch(args: argparse.Namespace) -> int:
    """Run the launcher from parsed arguments; returns the exit code."""
    command = list(args.member_command or [])
    if command and command[0] == "--":
        command = command[1:]
    too_few = population_size_problem(args.members) if args.members >= 1 else ""
    if too_few:
        # The rule every member's config check applies too: its members would refuse to start.
        print(
            f"async-pbt launch: error: --members {args.members}: {too_few}; to train one policy alone, run the "
            f"training command without the launcher and without the --pbt-* flags",
            file=sys.stderr,
        )
        return EXIT_USAGE
    held: list = []
    try:
        # The launcher locks (one launcher per member), the filesystem doctor; SLURM and Ray backends.
        code = run_backend(args, command, held)
        if code is not None:
            return code
        return _launch_local(args, command)
    finally:
        release_launcher_locks(held)


def _launch_local(args: argparse.Namespace, command: list[str]) -> int:
    try:
        result = launch_population(
            command,
            args.members,
            args.workspace,
            gpus=args.gpus,
            max_retries=args.max_retries,
            retry_window_s=args.retry_window if args.retry_window > 0 else None,
            restart_backoff_s=args.backoff,
            progress_interval_s=args.progress_interval,
            stop_grace_s=args.stop_grace,
            term_grace_s=args.term_grace,
            log_dir=args.log_dir,
            extra_env=dict(args.env),
            indices=args.indices,
            gpu_placement=args.gpu_placement,
            ranks_per_member=ranks_per_member(args.gpus_per_member, "local"),
        )
    except LaunchError as exc:
        print(f"async-pbt launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return result.exit_code


MODULE_PROG = "python -m async_pbt_isaaclab.launch"
"""How the launcher is run as a module (its name in usage and error lines)."""


def build_parser(prog: str = MODULE_PROG) -> argparse.ArgumentParser:
    """Parser of ``python -m async_pbt_isaaclab.launch`` (same options as ``async-pbt launch``)."""
    p = OneLineParser(
        prog=prog,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return add_launch_arguments(p)


def main(argv: Sequence[str] | argparse.Namespace | None = None, prog: str = MODULE_PROG) -> int:
    """Entry point: ``argv`` (default ``sys.argv[1:]``), or an already parsed namespace; ``prog`` names the
    command in usage and error lines."""
    if isinstance(argv, argparse.Namespace):
        return cmd_launch(argv)
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    return cmd_launch(args)
