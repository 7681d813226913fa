"""One launcher per member of a workspace: a POSIX record lock on ``WORKSPACE/launchers/member_NNN.lock``.

Every launcher (``async-pbt launch`` on this machine, each task of a SLURM job array, which runs the local launcher
for its one member, and the Ray driver) takes the lock of every member it runs before it runs anything else. A
second launcher of the same workspace is refused at once, in one line naming the holder (pid, host, start time);
launchers of other ``--indices`` of the same workspace (one per node) run side by side. The kernel drops a lock
when its holder dies, so a launcher killed with SIGKILL never blocks the next one; on NFS the lock manager does the
same for a crashed node (see :mod:`~async_pbt_isaaclab.core.workspace.filesystem_checks`, which ``async-pbt doctor``
runs).

The same kind of lock as :class:`~async_pbt_isaaclab.core.workspace.member_lock.MemberLock`: ``fcntl.lockf`` is what NFS
implements between nodes (``flock`` is emulated on some NFS clients and local to the node on others). POSIX locks
belong to a process, so within one process the locks are counted, not taken twice: the command line takes them
before its checks write anything and the local backend it then calls takes them again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import WorkspaceError, member_dirname
from async_pbt_isaaclab.core.workspace.member_lock import read_lock_owner

LAUNCHERS_DIR = "launchers"
"""Folder of the launcher locks, in the workspace."""


class LauncherBusy(WorkspaceError):
    """A member of the workspace is already run by a live launcher."""


@dataclass
class _Held:
    fd: int
    count: int


_HELD: dict[Path, _Held] = {}
"""Lock files this process holds -> descriptor and how many holders in this process share it."""


def launcher_lock_path(root: Path, index: int) -> Path:
    """``WORKSPACE/launchers/member_NNN.lock``."""
    return Path(root) / LAUNCHERS_DIR / f"member_{member_dirname(index)}.lock"


def acquire_launcher_locks(root: str | os.PathLike[str], indices: Iterable[int]) -> list[Path]:
    """Take the launcher lock of every member in ``indices`` of the workspace ``root`` (which must exist); returns
    the lock files, for :func:`release_launcher_locks`. Raises :class:`LauncherBusy` naming the holder when a live
    launcher holds any of them (none is kept then), and :class:`WorkspaceError` when the folder or a lock file is a
    symbolic or hard link."""
    root = Path(root).absolute()
    folder = root / LAUNCHERS_DIR
    try:
        fsio.check_no_links(root, folder)
        folder.mkdir(exist_ok=True)
        fsio.check_no_links(root, folder)  # made by someone else between the check and mkdir
    except fsio.UnsafePathError as exc:
        raise WorkspaceError(str(exc)) from None
    except OSError as exc:
        raise WorkspaceError(f"cannot create {folder}: {exc.strerror}") from None
    taken: list[Path] = []
    busy: dict[str, list[int]] = {}
    # One claim for every lock of this launch: a holder is named the same way in each (grouped in the refusal).
    claim = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "argv": sys.argv[:8]}
    try:
        for index in sorted(set(indices)):
            path = launcher_lock_path(root, index)
            owner = _take(path, claim)
            if owner is None:
                taken.append(path)
            else:
                busy.setdefault(owner, []).append(index)
    except BaseException:
        release_launcher_locks(taken)
        raise
    if busy:
        release_launcher_locks(taken)
        holders = "; ".join(f"member(s) {_indices(ix)} by {owner}" for owner, ix in busy.items())
        raise LauncherBusy(
            f"workspace {root} is already being launched: {holders} (lock files {folder}/member_NNN.lock); "
            f"nothing was started: stop that launcher first (or launch other --indices)"
        )
    return taken


def _take(path: Path, claim: dict[str, object]) -> str | None:
    """Lock ``path`` for this process (or count one more holder in it); ``None`` when taken, else who holds it."""
    held = _HELD.get(path)
    if held is not None:
        held.count += 1
        return None
    try:
        fd = fsio.open_in_place(path, os.O_RDWR | os.O_CREAT, 0o644)
    except fsio.UnsafePathError as exc:
        raise WorkspaceError(str(exc)) from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = read_lock_owner(fd)
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return f"a live launcher, {owner}"
        raise WorkspaceError(f"{path}: cannot lock ({exc.strerror})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(claim).encode(), 0)
    os.fsync(fd)
    _HELD[path] = _Held(fd, 1)
    return None


def release_launcher_locks(paths: Iterable[Path]) -> None:
    """Release what :func:`acquire_launcher_locks` returned (the lock itself once its last holder here releases)."""
    for path in paths:
        held = _HELD.get(path)
        if held is None:
            continue
        held.count -= 1
        if held.count <= 0:
            del _HELD[path]
            try:
                fcntl.lockf(held.fd, fcntl.LOCK_UN)
            finally:
                os.close(held.fd)


@contextmanager
def launcher_locks(root: str | os.PathLike[str], indices: Iterable[int]) -> Iterator[list[Path]]:
    """Hold the launcher locks of ``indices`` for the ``with`` block (:func:`acquire_launcher_locks`)."""
    taken = acquire_launcher_locks(root, indices)
    try:
        yield taken
    finally:
        release_launcher_locks(taken)


def _indices(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)
