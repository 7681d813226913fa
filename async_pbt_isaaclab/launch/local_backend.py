"""The local backend: start a population on this machine, :func:`launch_population`.

It checks the arguments (:mod:`~async_pbt_isaaclab.launch.arguments`), puts each member on its GPU
(:mod:`~async_pbt_isaaclab.launch.gpus`), builds every member's command and environment once (identical at
every restart) and hands them to the :class:`~async_pbt_isaaclab.launch.supervisor.Supervisor`, whose module
docstring describes the process model: crash restarts, stopping, launcher death, progress and journal.

Imports only the standard library and the pure core (no torch).
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence, TextIO

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.workspace.launcher_lock import acquire_launcher_locks, release_launcher_locks
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError, member_dirname
from async_pbt_isaaclab.launch.arguments import (
    LaunchError,
    check_indices,
    check_launch_paths,
    check_member_command,
    hosted_members,
    make_folders,
    member_command,
    slices_per_process,
)
from async_pbt_isaaclab.launch.gpus import (
    check_device_flag,
    describe_placement,
    detect_gpus,
    place_member,
    resolve_gpu_placement,
)
from async_pbt_isaaclab.launch.results import LaunchResult, MemberOutcome
from async_pbt_isaaclab.launch.supervision import SupervisedMember, SupervisionOptions
from async_pbt_isaaclab.launch.supervisor import Supervisor
from async_pbt_isaaclab.launch.torchrun import check_group_command, member_gpus, torchrun_command


def launch_population(
    command: Sequence[str],
    members: int,
    workspace: str | os.PathLike,
    *,
    gpus: Sequence[str] | None = None,
    max_retries: int = 3,
    retry_window_s: float | None = 3600.0,
    restart_backoff_s: float = 5.0,
    max_backoff_s: float = 120.0,
    progress_interval_s: float = 10.0,
    stop_grace_s: float = 30.0,
    term_grace_s: float = 10.0,
    log_dir: str | os.PathLike | None = None,
    extra_env: Mapping[str, str] | None = None,
    indices: Sequence[int] | None = None,
    on_progress: Callable[[list[str]], None] | None = None,
    output: TextIO | None = None,
    stop_event: threading.Event | None = None,
    die_with_launcher: bool = True,
    gpu_placement: str = "auto",
    ranks_per_member: int = 1,
) -> LaunchResult:
    """Start members ``indices`` (default all ``members``) of ``command`` and supervise them until each
    has finished, been given up, or the launcher is stopped. Blocks; see the module docstring.

    Args:
        command: the training command, without the population flags (the launcher adds them).
        members: population size (``--pbt-members``).
        workspace: population workspace (``--pbt-workspace``); created if missing.
        gpus: ``CUDA_VISIBLE_DEVICES`` values, round-robin by member; ``None``: :func:`detect_gpus`; ``[]``: none.
        max_retries, retry_window_s, restart_backoff_s, max_backoff_s, progress_interval_s, stop_grace_s,
            term_grace_s, on_progress, stop_event, die_with_launcher: how the members are restarted, reported
            on and stopped: the fields of :class:`~async_pbt_isaaclab.launch.supervision.SupervisionOptions`.
        log_dir: folder of the ``member_NNN.log`` files (default ``WORKSPACE/logs``).
        extra_env: variables added to every member's environment (the GPU assignment wins).
        indices: the subset of members this launcher runs (e.g. one launcher per node).
        output: where launcher messages go (default ``sys.stdout``).
        gpu_placement: ``auto``, ``device`` or ``mask`` (:data:`GPU_PLACEMENTS`); ranks_per_member: each member
            a torchrun of this many ranks on its GPUs (:mod:`.torchrun`). Raises ``LaunchError`` on bad arguments.
    """
    command = check_member_command(command)
    chosen = check_indices(members, indices, command=command)
    check_group_command(command, ranks_per_member, slices_per_process(command))
    options = SupervisionOptions(
        max_retries=max_retries,
        retry_window_s=retry_window_s,
        restart_backoff_s=restart_backoff_s,
        max_backoff_s=max_backoff_s,
        progress_interval_s=progress_interval_s,
        stop_grace_s=stop_grace_s,
        term_grace_s=term_grace_s,
        die_with_launcher=die_with_launcher,
        on_progress=on_progress,
        stop_event=stop_event,
    )
    root, logs = make_folders(workspace, log_dir)
    with _launcher_locks(root, hosted_members(command, chosen)):
        gpu_options = (gpus, gpu_placement, ranks_per_member)
        return _supervise(command, members, chosen, root, logs, gpu_options, extra_env, output, options)


@contextmanager
def _launcher_locks(root: Path, hosted: Sequence[int]) -> Iterator[None]:
    """Hold the launcher lock of every member this launch hosts, and clear stale temporary files under them."""
    try:
        # One launcher per member: refused here, before anything starts, when a live launcher runs one of them.
        held = acquire_launcher_locks(root, hosted)
    except WorkspaceError as exc:
        raise LaunchError(str(exc)) from None
    try:
        Workspace(root).clear_temp_files(PopulationConfig.temp_grace_s)
        yield
    finally:
        release_launcher_locks(held)


def _supervise(
    command: list[str],
    members: int,
    chosen: list[int],
    root: Path,
    logs: Path,
    gpu_options: tuple[Sequence[str] | None, str, int],
    extra_env: Mapping[str, str] | None,
    output: TextIO | None,
    options: SupervisionOptions,
) -> LaunchResult:
    """Place the members (``gpu_options``: the GPUs, their placement, the ranks of each member) and run the
    :class:`Supervisor` until the population ends (the locks are held)."""
    gpus, gpu_placement, ranks = gpu_options
    gpu_ids = detect_gpus() if gpus is None else [str(g) for g in gpus]
    # A member of several ranks sees its block of GPUs through the mask: rank r is cuda:r in it.
    placement = resolve_gpu_placement(gpu_placement) if ranks == 1 else "mask"
    check_device_flag(command, gpu_ids, placement)
    out = output if output is not None else sys.stdout

    table = _member_table(command, members, chosen, root, logs, gpu_ids, placement, extra_env, ranks)
    # Before anything is written: no journal line or member output through a link planted in the workspace.
    check_launch_paths(root, [Path(m.outcome.log_path) for m in table.values()])

    sup = Supervisor(table, workspace=root, num_members=members, output=out, base_command=command, options=options)
    gpu_text = describe_placement({i: m.outcome.gpu for i, m in table.items()}, gpu_ids, placement)
    sup.say(
        f"launching {len(table)} of {members} members: {shlex.join(command)}\n"
        f"workspace {root}; {gpu_text}\n"
        f"logs {logs}/member_NNN.log; journal {root / 'launcher.jsonl'}; Ctrl-C stops all members"
    )
    return sup.run()


def _member_table(
    command: Sequence[str],
    members: int,
    chosen: Sequence[int],
    root: Path,
    logs: Path,
    gpu_ids: Sequence[str],
    placement: str,
    extra_env: Mapping[str, str] | None,
    ranks: int = 1,
) -> dict[int, SupervisedMember]:
    """Each chosen member's command, environment and GPU, built once: identical at every restart."""
    base_env = dict(os.environ)
    base_env.update({str(k): str(v) for k, v in (extra_env or {}).items()})
    table: dict[int, SupervisedMember] = {}
    # A process of M slices counts as one on the GPUs: process k (first member k*M) gets gpus[k % len(gpus)].
    slices = slices_per_process(command)
    for i in chosen:
        env = dict(base_env)
        cmd = member_command(command, str(root), members, i)
        if ranks > 1:
            cmd, gpu = torchrun_command(cmd, ranks), None
            if gpu_ids:
                gpu = env["CUDA_VISIBLE_DEVICES"] = ",".join(member_gpus(i, ranks, gpu_ids))
        else:
            gpu = place_member(i // slices, cmd, env, gpu_ids, placement, base_env)
        env["ASYNC_PBT_MEMBER_INDEX"] = str(i)
        outcome = MemberOutcome(index=i, gpu=gpu, log_path=str(logs / f"member_{member_dirname(i)}.log"))
        table[i] = SupervisedMember(outcome=outcome, command=cmd, env=env)
    return table
