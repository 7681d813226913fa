"""Where ``async-pbt launch`` places members: this machine (``local``), a SLURM job array, or Ray tasks.

This module adds the backend options to the launch parser (:func:`add_backend_arguments`) and runs what every
backend shares before members start (:func:`prepare_launch`: validate, run the filesystem doctor), then hands
over to :mod:`~async_pbt_isaaclab.launch.slurm` or :mod:`~async_pbt_isaaclab.launch.ray_backend`. The local
backend is :mod:`~async_pbt_isaaclab.launch.local_backend`.

Imports only the standard library and the pure core; ``ray`` only when the Ray backend runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.workspace.filesystem_checks import doctor_report
from async_pbt_isaaclab.core.workspace.fsio import folder_problem
from async_pbt_isaaclab.core.workspace.launcher_lock import acquire_launcher_locks
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError
from async_pbt_isaaclab.exit_codes import EXIT_CHECK_FAILED, EXIT_USAGE
from async_pbt_isaaclab.launch.arguments import (
    LaunchError,
    check_indices,
    check_member_command,
    check_workspace_conditions,
    hosted_members,
)
from async_pbt_isaaclab.launch.torchrun import ranks_per_member, torchrun_command

BACKENDS = ("local", "slurm", "ray")
"""Values of ``--backend``."""


def add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``--backend`` and of the SLURM and Ray backends."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="local",
        help="local: processes on this machine (default); slurm: one job array task per member; "
        "ray: one Ray task per member (see docs/cluster.md)",
    )
    p.add_argument(
        "--no-doctor", action="store_true", help="skip the filesystem checks of `async-pbt doctor` before launching"
    )
    p.add_argument(
        "--gpus-per-member",
        type=float,
        default=0.0,
        metavar="K",
        help="GPUs of each member: K >= 2 runs each member as a torchrun of K ranks (local: on its block of K "
        "of --gpus; slurm: a task of K GPUs; ray: a task of K GPUs; docs/distributed.md); ray also takes "
        "fractions, which share a GPU (0.5: two members per GPU)",
    )
    _add_slurm_arguments(p.add_argument_group("SLURM backend (--backend slurm)"))
    _add_ray_arguments(p.add_argument_group("Ray backend (--backend ray)"))


def _add_slurm_arguments(s: argparse._ArgumentGroup) -> None:
    """What the batch script asks sbatch for, and what it runs before the member."""
    s.add_argument("--partition", default=None, help="sbatch --partition")
    s.add_argument("--gres", default=None, metavar="SPEC", help="sbatch --gres per member, e.g. gpu:1")
    s.add_argument("--time", default=None, metavar="LIMIT", help="sbatch --time per member, e.g. 2-00:00:00")
    s.add_argument("--cpus-per-task", type=int, default=None, metavar="N", help="sbatch --cpus-per-task")
    s.add_argument("--mem", default=None, metavar="SIZE", help="sbatch --mem per member, e.g. 32G")
    s.add_argument("--job-name", default=None, help="sbatch --job-name (default async-pbt-<workspace name>)")
    s.add_argument(
        "--sbatch-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra #SBATCH line; use the = form: --sbatch-arg=--account=rl (repeatable)",
    )
    s.add_argument(
        "--setup",
        action="append",
        default=[],
        metavar="LINE",
        help="shell line run in the batch script before the member, e.g. 'module load cuda' (repeatable)",
    )
    s.add_argument(
        "--python",
        default=None,
        metavar="CMD",
        help="interpreter that runs the per-member supervisor on the compute node "
        "(default: the Python running this launcher); must have this package installed",
    )
    s.add_argument("--dry-run", action="store_true", help="print the batch script instead of submitting it")


def _add_ray_arguments(r: argparse._ArgumentGroup) -> None:
    """Which Ray cluster runs the members, and what each member's task requests."""
    r.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join: 'auto' (the cluster started on this node with `ray start`) or "
        "HOST:PORT; default: start a local Ray instance for this launch",
    )
    r.add_argument(
        "--cpus-per-member",
        type=float,
        default=1.0,
        metavar="C",
        help="CPUs each member's Ray task requests (default 1)",
    )


SLURM_OPTIONS = (
    "partition",
    "gres",
    "time",
    "cpus_per_task",
    "mem",
    "job_name",
    "sbatch_arg",
    "setup",
    "python",
    "dry_run",
)
"""Destinations of the options that only ``--backend slurm`` reads."""

RAY_OPTIONS = ("address", "cpus_per_member")
"""Destinations of the options that only ``--backend ray`` reads."""


def check_backend_options(args: argparse.Namespace, parser_defaults: dict[str, object]) -> None:
    """Refuse an option of another backend (``--dry-run`` on a local launch would otherwise start the members)
    and negative Ray resource requests, before anything is written."""
    backend = getattr(args, "backend", "local")
    for owner, names in (("slurm", SLURM_OPTIONS), ("ray", RAY_OPTIONS)):
        if backend == owner:
            continue
        for name in names:
            if getattr(args, name, None) != parser_defaults.get(name):
                flag = "--" + name.replace("_", "-")
                raise LaunchError(f"{flag} applies only to --backend {owner} (this launch: --backend {backend})")
    for name in ("gpus_per_member", "cpus_per_member"):
        value = getattr(args, name, 0.0)
        if value < 0:
            raise LaunchError(f"--{name.replace('_', '-')} {value:g}: must be >= 0")


def _backend_defaults() -> dict[str, object]:
    parser = argparse.ArgumentParser(add_help=False)
    add_backend_arguments(parser)
    return vars(parser.parse_args([]))


BACKEND_DEFAULTS = _backend_defaults()
"""The default of every backend option, read from :func:`add_backend_arguments` itself."""


def run_doctor(workspace: str | os.PathLike) -> bool:
    """Run the filesystem checks at launch; print any that is not ``ok``; ``False`` on a hard failure."""
    lines, failed = doctor_report(workspace)
    shown = [line for line in lines if not line.startswith("ok")]
    if shown:
        print(
            "async-pbt launch: filesystem checks of the workspace:\n" + "\n".join("  " + x for x in shown),
            file=sys.stderr,
        )
    if failed:
        print(
            f"async-pbt launch: error: the workspace's filesystem fails {', '.join(c.name for c in failed)}; "
            f"nothing launched (see `async-pbt doctor {workspace}`; --no-doctor skips the checks)",
            file=sys.stderr,
        )
    return not failed


def hold_workspace(workspace: Path, indices: list[int], held: list[Path]) -> None:
    """Create the workspace folder and take the launcher lock of each of ``indices`` into ``held``: a second
    launcher of the same members is refused here, before anything else is written or started."""
    try:
        workspace.mkdir(parents=True, exist_ok=True)
        held.extend(acquire_launcher_locks(workspace, indices))
        Workspace(workspace).clear_temp_files(PopulationConfig.temp_grace_s)
    except WorkspaceError as exc:
        raise LaunchError(str(exc)) from None
    except OSError as exc:
        raise LaunchError(f"cannot create the workspace {workspace}: {exc.strerror}") from None


def run_backend(args: argparse.Namespace, command: list[str], held: list[Path] | None = None) -> int | None:
    """Common launch steps; runs the SLURM or Ray backend and returns its exit code, or ``None`` for local
    (after the doctor passed), which the caller then runs. The launcher locks taken (:func:`hold_workspace`) are
    added to ``held``, for the caller to release when the launch ends."""
    held = [] if held is None else held
    backend = getattr(args, "backend", "local")
    try:
        check_backend_options(args, BACKEND_DEFAULTS)
        check_member_command(command)
        torchrun_command(command, ranks_per_member(args.gpus_per_member, backend))  # refused now, not in a task
        indices = check_indices(args.members, args.indices, command=command, flag_prefix="--")
        check_workspace_conditions(Path(os.path.expanduser(args.workspace)).absolute(), args.members, command, "--")
        if backend == "slurm" and args.dry_run:
            from async_pbt_isaaclab.launch.slurm import launch_slurm

            return launch_slurm(args, command, Path(os.path.expanduser(args.workspace)).absolute(), indices)
        # A workspace path that cannot be a folder is a usage error, said in one line before any check writes.
        problem = folder_problem(Path(os.path.expanduser(args.workspace)).absolute())
        if problem:
            raise LaunchError(f"workspace {args.workspace} {problem}")
        workspace = Path(os.path.expanduser(args.workspace)).absolute()
        hold_workspace(workspace, hosted_members(command, indices), held)
        if not args.no_doctor and not run_doctor(args.workspace):
            return EXIT_CHECK_FAILED  # nothing was launched
        if backend == "slurm":
            from async_pbt_isaaclab.launch.slurm import launch_slurm

            return launch_slurm(args, command, workspace, indices)
        if backend == "ray":
            from async_pbt_isaaclab.launch.ray_backend import launch_ray

            return launch_ray(args, command, workspace, indices)
    except LaunchError as exc:
        print(f"async-pbt launch: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return None
