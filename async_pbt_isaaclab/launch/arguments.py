"""Checks of what a launch is asked to do, shared by every backend: the member command, the member indices
and the workspace and log folders (the supervision limits check themselves:
:class:`~async_pbt_isaaclab.launch.supervision.SupervisionOptions`). A bad value is a :class:`LaunchError` naming it
(the command line turns it into one line and exit code 2).

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Sequence

from async_pbt_isaaclab.core.slices import SLICES_FLAG, process_members
from async_pbt_isaaclab.core.workspace.fsio import UnsafePathError, check_no_links, folder_problem

MEMBER_FLAGS = ("--pbt-workspace", "--pbt-members", "--pbt-index")
"""Flags the launcher appends to the member command; the user must not pass them too."""

MEMBER_OVERRIDES = ("pbt.workspace=", "pbt.num_policies=", "pbt.policy_idx=")
"""Hydra-style overrides meaning the same as :data:`MEMBER_FLAGS` (refused in the command as well)."""


class LaunchError(ValueError):
    """The launch cannot start as asked (bad command, indices, GPU list ...)."""


def member_command(command: Sequence[str], workspace: str, members: int, index: int) -> list[str]:
    """The command member ``index`` runs: ``command`` plus the three population flags."""
    return [*command, "--pbt-workspace", workspace, "--pbt-members", str(members), "--pbt-index", str(index)]


def check_member_command(command: Sequence[str]) -> list[str]:
    """``command`` as strings; refuses an empty command and one that already holds a population flag."""
    command = [str(c) for c in command]
    if not command:
        raise LaunchError("no member command given; put it after '--', e.g. -- python scripts/train_pbt.py ...")
    for token in command[1:]:
        name = token.split("=", 1)[0]
        if name in MEMBER_FLAGS or any(o in token for o in MEMBER_OVERRIDES):
            raise LaunchError(
                f"the member command contains {token!r}; the launcher sets --pbt-workspace, "
                f"--pbt-members and --pbt-index itself, remove it"
            )
    return command


def check_indices(
    members: int, indices: Sequence[int] | None, *, command: Sequence[str] = (), flag_prefix: str = ""
) -> list[int]:
    """The sorted indices of the processes to launch: each process's first member (``--pbt-index``).

    Default: every member, or with ``--pbt-slices M`` in ``command`` every M-th (``0, M, 2M, ...``: each process
    hosts M contiguous members). Refuses an index outside the population, a process whose members would run past it
    and two processes that would host the same member. ``flag_prefix="--"`` names the values as the command line's
    flags (``--members``, ``--indices``) in the error."""
    if isinstance(members, bool) or not isinstance(members, int) or members < 1:
        raise LaunchError(f"{flag_prefix}members must be a positive integer, got {members!r}")
    slices = slices_per_process(command)
    if indices is None and members % slices:
        raise LaunchError(
            f"{SLICES_FLAG} {slices} in the member command: {flag_prefix}members {members} is not a multiple of it; "
            f"give {flag_prefix}indices (each process's first member) and launch the other members separately"
        )
    chosen = list(range(0, members, slices)) if indices is None else list(indices)
    if not chosen:
        raise LaunchError(f"no member indices to launch ({flag_prefix}indices is empty)")
    bad = [i for i in chosen if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < members]
    if bad:
        raise LaunchError(f"{flag_prefix}indices {bad} must be within 0..{members - 1}")
    if len(set(chosen)) != len(chosen):
        raise LaunchError(f"{flag_prefix}indices repeat: {chosen}")
    chosen.sort()
    if slices > 1:
        check_slice_processes(members, chosen, slices, flag_prefix)
    return chosen


def slices_per_process(command: Sequence[str]) -> int:
    """How many members each process of ``command`` hosts (``--pbt-slices M``; 1 without it)."""
    return len(process_members([str(c) for c in command], 0))


def check_slice_processes(members: int, chosen: Sequence[int], slices: int, flag_prefix: str = "") -> None:
    """Refuses processes of ``slices`` members that would run past the population or share a member (``chosen``:
    sorted first members)."""
    for first, nxt in zip(chosen, chosen[1:], strict=False):
        if nxt < first + slices:
            raise LaunchError(
                f"{flag_prefix}indices {first} and {nxt}: under {SLICES_FLAG} {slices} the process started at {first} "
                f"hosts members {first}..{first + slices - 1}, so both would run member {nxt}; give each process's "
                f"first member ({first}, {first + slices}, ...)"
            )
    last = chosen[-1]
    if last + slices > members:
        raise LaunchError(
            f"{flag_prefix}indices {last}: under {SLICES_FLAG} {slices} that process would host members "
            f"{last}..{last + slices - 1}, past the population of {flag_prefix}members {members}"
            + ("" if members % slices == 0 else f" (not a multiple of {slices}: launch the rest without slices)")
        )


def hosted_members(command: Sequence[str], chosen: Sequence[int]) -> list[int]:
    """Every member the processes started at ``chosen`` host (each launcher lock and progress line is a member's)."""
    command = [str(c) for c in command]
    return [member for first in chosen for member in process_members(command, first)]


def _command_value(command: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``) in ``command``, the last one given; ``None`` without it."""
    found = None
    for i, token in enumerate(command):
        if token == flag and i + 1 < len(command):
            found = command[i + 1]
        elif token.startswith(flag + "="):
            found = token.split("=", 1)[1]
    return found


def _pbt_value(command: Sequence[str], key: str) -> str | None:
    """``pbt.<key>``'s value in ``command``: its ``--pbt-*`` flag or an ``agent.pbt.<key>=`` override."""
    found = _command_value(command, "--pbt-" + key.replace("_", "-"))
    for token in command:
        name, sep, value = token.lstrip("+").partition("=")
        if sep and name in (f"pbt.{key}", f"agent.pbt.{key}"):
            found = value
    return found


def check_workspace_conditions(workspace: Path, members: int, command: Sequence[str], flag_prefix: str = "") -> None:
    """Refuse, before anything is written or started, a launch into an existing workspace whose population was
    created under another condition than ``members`` and the member command ask for: its size, and the task
    (``--task``), objective and seed (``--pbt-objective``/``--pbt-seed`` or their ``agent.pbt.*`` overrides) when the
    command names them (:func:`~async_pbt_isaaclab.core.workspace.layout.population_conflicts`, the rule every member's
    start applies). One line naming each value and the workspace."""
    from async_pbt_isaaclab.core.config import objective_term
    from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError, population_conflicts

    if not (workspace / "population.json").is_file():
        return
    try:
        meta = Workspace(workspace).population_meta()
    except WorkspaceError as exc:
        raise LaunchError(str(exc)) from None
    objective, seed = _pbt_value(command, "objective"), _pbt_value(command, "seed")
    asked_by = {
        "num_policies": f"{flag_prefix}members {members}",
        "task": f"--task {_command_value(command, '--task')} in the member command",
        "objective": f"pbt.objective={objective} in the member command",
        "seed": f"pbt.seed={seed} in the member command",
    }
    try:
        seed_value = int(seed) if seed is not None else -1
    except ValueError:
        seed_value = -1  # not a number: the member's own config check says so
    conflicts = population_conflicts(
        meta,
        members,
        objective_term(objective) if objective is not None else None,
        _command_value(command, "--task"),
        seed_value,
    )
    if conflicts:
        differences = "; ".join(f"{key}={recorded!r}, not {asked_by[key]}" for key, recorded, _ in conflicts)
        raise LaunchError(
            f"workspace {workspace} was created with {differences} (resume it with the values it was created with, "
            f"or use a new workspace for an independent experiment)"
        )


def check_launch_paths(root: Path, paths: Sequence[Path]) -> None:
    """Refuse (:class:`LaunchError`, one line naming the path) a launch whose files in the workspace ``root`` would
    be written through a link planted there: a symbolic link on the way to a path, or a path that is a hard link
    (an appended file sharing its content with another). Paths outside ``root`` are the user's choice."""
    for path in paths:
        if not path.is_relative_to(root):
            continue
        try:
            check_no_links(root, path)
            st = os.lstat(path)
        except UnsafePathError as exc:
            raise LaunchError(str(exc)) from None
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise LaunchError(str(UnsafePathError(path, f"it is a hard link ({st.st_nlink} names share its content)")))


def make_folders(workspace: str | os.PathLike, log_dir: str | os.PathLike | None) -> tuple[Path, Path]:
    """Absolute workspace and log folders (default ``WORKSPACE/logs``), created; refuses a path that cannot be
    a folder (a file, a dangling link) with the reason."""
    root = Path(os.path.expanduser(os.fspath(workspace))).absolute()
    logs = Path(os.path.expanduser(os.fspath(log_dir))).absolute() if log_dir is not None else root / "logs"
    for folder, what in ((root, "workspace"), (logs, "log folder")):
        problem = folder_problem(folder)
        if problem:
            raise LaunchError(f"{what} {folder} {problem}")
    check_launch_paths(root, [logs, root / "launcher.jsonl"])
    try:
        root.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"cannot create the workspace or log folder {exc.filename}: {exc.strerror}") from None
    return root, logs
