"""The claim of one member folder by one process: a POSIX record lock on ``members/NNN/lock``.

The kernel releases the lock when its holder dies, so a killed member never blocks its own restart; a second
claim of the same index, from another process or this one, is refused with who holds it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import WorkspaceError

_HELD_IN_PROCESS: dict[tuple[int, int], int] = {}
"""(st_dev, st_ino) of lock files this process holds -> member. POSIX record locks are per process, so
a second claim from the same process would succeed silently (and closing either descriptor would drop
both claims); this table refuses it instead."""


@dataclass
class MemberLock:
    """Exclusive claim of one member folder by one process (``fcntl.lockf`` on ``lock``).

    POSIX record locks are released by the kernel when the holder dies, so a killed member never
    leaves a lock that blocks its restart; NFSv4 implements them through the server.
    """

    path: Path
    """The lock file."""
    fd: int = -1
    """Open descriptor holding the lock, -1 when not held."""

    def acquire(self, member: int, wait_s: float = 0.0) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            st = os.lstat(self.path)
            held = (st.st_dev, st.st_ino) in _HELD_IN_PROCESS
        except FileNotFoundError:
            held = False
        if held:
            # Checked before opening: closing a second descriptor of the file would drop the holder's lock.
            raise WorkspaceError(
                f"member {member} is already claimed by this process (pid {os.getpid()}); lock file {self.path}"
            )
        try:
            fd = fsio.open_in_place(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except fsio.UnsafePathError as exc:
            raise WorkspaceError(f"member {member}: {exc}") from None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    os.close(fd)
                    raise WorkspaceError(f"{self.path}: cannot lock ({exc.strerror})") from None
                if time.monotonic() >= deadline:
                    owner = read_lock_owner(fd)
                    os.close(fd)
                    raise WorkspaceError(
                        f"member {member} is already claimed by a live process ({owner}); lock file {self.path}. "
                        f"Each --pbt-index / policy_idx may run once: pick another index or stop that process"
                    ) from None
                time.sleep(0.1)
        claim = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(claim).encode(), 0)
        os.fsync(fd)
        self.fd = fd
        st = os.fstat(fd)
        _HELD_IN_PROCESS[(st.st_dev, st.st_ino)] = member

    def release(self) -> None:
        if self.fd >= 0:
            try:
                st = os.fstat(self.fd)
                _HELD_IN_PROCESS.pop((st.st_dev, st.st_ino), None)
                fcntl.lockf(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = -1


def read_lock_owner(fd: int) -> str:
    """Who holds the lock open as ``fd``, in words, from the owner info its holder wrote; never raises."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        if not isinstance(data, dict):
            return "owner unknown"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.get("since", 0)))
        return f"pid {data.get('pid')} on host {data.get('host')} since {since}"
    except (OSError, ValueError, TypeError, OverflowError, RecursionError):
        # Only a diagnostic for the "already claimed" error: never let a garbled lock file replace that error.
        return "owner unknown"


def lock_holder(path: Path) -> str | None:
    """Who holds the lock on ``path`` now, in words (``None`` when nobody does, or there is no lock file). Takes a
    shared lock for an instant to find out, on a read-only descriptor, so a reader writes nothing. A lock this
    process holds is answered from its own table: probing it would drop it (POSIX locks are per process)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if (st.st_dev, st.st_ino) in _HELD_IN_PROCESS:
        return f"pid {os.getpid()} (this process)"
    try:
        fd = fsio.open_nofollow(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return read_lock_owner(fd)
            return None
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
