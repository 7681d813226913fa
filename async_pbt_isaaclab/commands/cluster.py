"""Cluster views of a workspace: the scheduler state next to each member, and ``async-pbt stop WORKSPACE``.

A workspace launched with ``--backend slurm`` records its job ids in ``cluster/slurm_jobs.json``; one launched
with ``--backend ray`` keeps per-member attempt files in ``cluster/ray/`` and its driver in
``cluster/ray_driver.json``. :func:`scheduler_states` turns those into one line per member for ``async-pbt status``;
``stop`` cancels the SLURM jobs (``scancel``: SIGTERM, members save and stop, resumable) or asks the Ray
launch to stop (``cluster/ray_stop.json``, seen by every member task).

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from async_pbt_isaaclab.commands.common import CliError, open_workspace
from async_pbt_isaaclab.exit_codes import EXIT_OK


def scheduler_states(root: Path) -> dict[int, str]:
    """Member index -> what the scheduler says about it (SLURM task state, Ray attempt); ``{}`` for a local
    launch. Never raises: a scheduler that cannot be asked is reported in the text."""
    from async_pbt_isaaclab.launch.ray_backend import member_states
    from async_pbt_isaaclab.launch.slurm import task_states

    out: dict[int, str] = {}
    slurm = task_states(root)
    if slurm:
        out.update({i: f"slurm {text}" for i, text in slurm.items()})
    for i, text in (member_states(root) or {}).items():
        out[i] = f"{out[i]}; {text}" if i in out else text
    return out


def add_stop_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "stop",
        help="cancel a population's SLURM jobs or stop its Ray launch",
        description="Stop the members a cluster launch started for WORKSPACE: `scancel` every SLURM job recorded in "
        "WORKSPACE/cluster/slurm_jobs.json, or ask the Ray launch recorded in "
        "WORKSPACE/cluster/ray_driver.json to stop (from any host). Members get SIGTERM/SIGINT, "
        "save and stop; launching again with the same workspace resumes them.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    from async_pbt_isaaclab.launch.arguments import LaunchError
    from async_pbt_isaaclab.launch.ray_backend import stop_driver
    from async_pbt_isaaclab.launch.slurm import cancel

    ws = open_workspace(args.workspace)
    did = False
    try:
        ids = cancel(ws.root)
    except LaunchError as exc:
        raise CliError(str(exc)) from None
    if ids:
        did = True
        print(f"cancelled SLURM job(s) {', '.join(ids)}: members get SIGTERM, save and stop")
    message = stop_driver(ws.root)
    if message:
        did = True
        print(message)
    if not did:
        raise CliError(
            f"no SLURM job or Ray driver is recorded in {ws.root}/cluster/; a local launcher "
            f"is stopped with Ctrl-C (or SIGINT to its pid)"
        )
    return EXIT_OK
