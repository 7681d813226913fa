"""What a population workspace needs from its filesystem, measured: ``async-pbt doctor`` and every launch run these.

The workspace is only crash-safe and only shared correctly between nodes when the filesystem provides:

* **atomic replace**: a file written under a temp name, fsynced and ``os.replace``d over an existing one is
  seen whole, never half-written, by a reader that opens it afterwards;
* **fsync** of files and of the folder (so a rename survives a crash of this node);
* **POSIX record locks** (``fcntl.lockf``, what :class:`~async_pbt_isaaclab.core.workspace.member_lock.MemberLock`
  uses): a second process must be refused the lock of a member that is running (one writer per member). On NFS they
  need the lock manager (NFSv3 ``lockd``/``statd``, or NFSv4); a mount with ``nolock`` or ``local_lock=all``
  only locks within one node, which this check cannot see from one node: the doctor says so for NFS;
* **clocks that agree**: heartbeats are wall-clock times written by each member's node. The doctor compares
  this node's clock with the file server's (the mtime of a file it just wrote) and, for every running
  member's recent record, the heartbeat its node wrote with the record file's mtime, which on NFS and
  Lustre the server sets: the spread of those offsets is the skew between nodes.

Each check ends ``ok``, ``warn`` (works, but worth knowing) or ``fail`` (the population would misbehave).
:func:`run_checks` runs them all; :func:`doctor_report` is the launchers' form (the workspace created first, the
lines to print and the failures). The command itself is :mod:`async_pbt_isaaclab.commands.doctor`.

Here in the core, below both the command and the launcher, so that each imports it downward. Imports only the
standard library (a child process tries the lock) and the core.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.workspace.fsio import check_no_links, fsync_dir

SKEW_WARN_S = 5.0
"""Clock differences above this are reported (heartbeat ages shift by as much)."""
SKEW_FAIL_S = PopulationConfig.max_clock_skew_s
"""Clock differences above this fail: peers' heartbeats would be refused as coming from the future."""
LIVE_RECORD_S = PopulationConfig.max_heartbeat_age_s
"""Only records of running members written within this many seconds are compared."""
LOW_SPACE_BYTES = 2 << 30
"""Less free space than this is reported: a checkpoint copy that fails midway stalls an exploit."""

NETWORK_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "beegfs",
    "cifs",
    "smb3",
    "ceph",
    "fuse.sshfs",
    "glusterfs",
    "fuse.glusterfs",
    "wekafs",
)


@dataclass
class Check:
    """The outcome of one filesystem check."""

    name: str
    """Short name: ``atomic-replace``, ``fsync``, ``lock``, ``clock``, ``node-clocks``, ``free-space``, ``mount``."""
    status: str
    """``ok``, ``warn`` or ``fail``."""
    detail: str
    """What was measured and, for ``warn``/``fail``, what to do about it."""


def _probe_dir(root: Path) -> Path:
    probe = root / ".doctor" / f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    check_no_links(root, probe)  # a planted .doctor link would have the probes written (and removed) elsewhere
    probe.mkdir(parents=True)
    check_no_links(root, probe)
    return probe


def check_atomic_replace(probe: Path) -> list[Check]:
    """Write, fsync and ``os.replace`` over an existing file, then read it back through a new descriptor."""
    out: list[Check] = []
    target = probe / "target.json"
    try:
        target.write_bytes(b'{"old": true}')
        tmp = probe / ".target.json.tmp"
        payload = json.dumps({"new": uuid.uuid4().hex}).encode()
        with open(tmp, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        out.append(Check("fsync", "ok", "fsync of a file succeeded"))
    except OSError as exc:
        return [Check("fsync", "fail", f"writing or fsyncing a file in {probe.parent.parent} failed: {exc}")]
    try:
        os.replace(tmp, target)
        fsync_dir(probe)
    except OSError as exc:
        out.append(Check("atomic-replace", "fail", f"os.replace over an existing file failed: {exc}"))
        return out
    seen = target.read_bytes()
    if seen != payload or tmp.exists():
        out.append(
            Check(
                "atomic-replace",
                "fail",
                f"after os.replace the file reads {seen[:60]!r}, expected the new content; records and "
                f"checkpoints may be read half-written here",
            )
        )
    else:
        out.append(Check("atomic-replace", "ok", "os.replace over an existing file is seen whole at once"))
    return out


_LOCK_CHILD = """
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError as exc:
    sys.exit(3 if exc.errno in (errno.EACCES, errno.EAGAIN) else 4)
sys.exit(0)
"""


def check_lock(probe: Path, fs_type: str) -> Check:
    """Hold ``lockf`` on a file here and make sure a second process is refused it."""
    path = probe / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            hint = (
                " (on NFS: mount without 'nolock' and run the lock manager, or use NFSv4)"
                if exc.errno == errno.ENOLCK
                else ""
            )
            return Check(
                "lock",
                "fail",
                f"fcntl.lockf is not available on this filesystem: {exc.strerror}{hint}; "
                f"without it two processes could claim the same member",
            )
        child = subprocess.run([sys.executable, "-c", _LOCK_CHILD, str(path)], capture_output=True, timeout=60)
        if child.returncode == 0:
            return Check(
                "lock",
                "fail",
                "a second process got the lock while this one held it: locks are not "
                "enforced here, so two processes could claim the same member",
            )
        if child.returncode != 3:
            return Check(
                "lock",
                "fail",
                f"a second process could not even try the lock (exit {child.returncode}): "
                f"{child.stderr.decode(errors='replace').strip()[-300:]}",
            )
    finally:
        os.close(fd)
    if fs_type.startswith("nfs"):
        return Check(
            "lock",
            "ok",
            "lockf is enforced between processes of this node; on NFS it is enforced "
            "between nodes only through the lock manager: do not mount with 'nolock' "
            "or 'local_lock=all'",
        )
    return Check("lock", "ok", "lockf is enforced between processes (one writer per member)")


def check_clock(probe: Path) -> Check:
    """This node's clock against the filesystem's (mtime of a file written now)."""
    path = probe / "clock"
    before = time.time()
    path.write_bytes(b"t")
    after = time.time()
    mtime = path.stat().st_mtime
    if before - 1.0 <= mtime <= after + 1.0:
        return Check("clock", "ok", "this node's clock agrees with the filesystem's (within 1 s)")
    skew = mtime - after if mtime > after else mtime - before
    return _skew_check("clock", abs(skew), f"the filesystem stamps files {skew:+.1f} s from this node's clock")


def _skew_check(name: str, skew: float, what: str) -> Check:
    if skew > SKEW_FAIL_S:
        return Check(
            name,
            "fail",
            f"{what}: more than max_clock_skew_s={SKEW_FAIL_S:g} s, so peers' heartbeats "
            f"are refused or judged stale; synchronise the clocks (chrony/NTP)",
        )
    if skew > SKEW_WARN_S:
        return Check(name, "warn", f"{what}: heartbeat ages are off by as much; synchronise the clocks (chrony/NTP)")
    return Check(name, "ok", what)


def check_node_clocks(root: Path, now: float) -> Check:
    """Clock offsets of the nodes that wrote member records: heartbeat (writer's clock) minus file mtime."""
    offsets: dict[str, float] = {}
    future: list[str] = []
    members = root / "members"
    for record in sorted(members.glob("*/record.json")) if members.is_dir() else []:
        try:
            data = json.loads(record.read_text())
            heartbeat, host = float(data["heartbeat"]), str(data.get("host") or "?")
            mtime = record.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable records are `async-pbt status`'s business
        if data.get("status") != "running" or abs(now - mtime) > LIVE_RECORD_S:
            # Only running members' recent records: an old or stopped record (or a workspace copied without its
            # mtimes) says nothing about today's clocks.
            continue
        offsets.setdefault(host, heartbeat - mtime)
        if heartbeat - now > SKEW_WARN_S:
            future.append(f"{host} ({record.parent.name}: heartbeat {heartbeat - now:.0f} s ahead of this node)")
    if not offsets:
        return Check(
            "node-clocks",
            "ok",
            f"no running member's record written in the last {LIVE_RECORD_S:g} s: nothing to compare",
        )
    spread = max(offsets.values()) - min(offsets.values())
    hosts = ", ".join(f"{h} {o:+.1f} s" for h, o in sorted(offsets.items()))
    check = _skew_check("node-clocks", spread, f"{len(offsets)} node(s) against the file server: {hosts}")
    if future and check.status == "ok":
        check = Check("node-clocks", "warn", f"clocks ahead of this node: {'; '.join(future)}")
    return check


def _mount_of(path: Path) -> tuple[str, str]:
    """(mount point, filesystem type) of ``path`` from /proc/mounts; ('', '') when unknown."""
    best = ("", "")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    real = os.path.realpath(path)
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, parts[2])
    return best


def run_checks(workspace: str | os.PathLike[str], create: bool = False, now: float | None = None) -> list[Check]:
    """All checks on ``workspace`` (created when ``create``); the probe files are removed afterwards."""
    root = Path(os.path.expanduser(os.fspath(workspace))).absolute()
    if create:
        root.mkdir(parents=True, exist_ok=True)
    if not root.is_dir():
        # An OSError, so that doctor_report reports it as a failed check; the doctor command says it as a usage error.
        raise NotADirectoryError(f"workspace {root} does not exist or is not a directory")
    mount, fs_type = _mount_of(root)
    checks = [
        Check(
            "mount",
            "ok",
            f"{root} is on {fs_type or 'an unknown filesystem'} mounted at {mount or '?'}"
            + (
                "; shared between nodes"
                if fs_type in NETWORK_FILESYSTEMS
                else "; local to this node: only members on this node can share it"
            ),
        )
    ]
    try:
        probe = _probe_dir(root)
    except OSError as exc:
        return checks + [Check("write", "fail", f"cannot create files in {root}: {exc}")]
    try:
        checks += check_atomic_replace(probe)
        checks.append(check_lock(probe, fs_type))
        checks.append(check_clock(probe))
    except OSError as exc:
        checks.append(Check("write", "fail", f"filesystem error in {probe}: {exc}"))
    finally:
        shutil.rmtree(probe, ignore_errors=True)
        try:
            probe.parent.rmdir()  # only when no other node is probing at the same time
        except OSError:
            pass
    checks.append(check_node_clocks(root, time.time() if now is None else now))
    free = shutil.disk_usage(root).free
    checks.append(
        Check(
            "free-space",
            "warn" if free < LOW_SPACE_BYTES else "ok",
            f"{free / 2**30:.1f} GiB free" + (" (checkpoints and copies need room)" if free < LOW_SPACE_BYTES else ""),
        )
    )
    return checks


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


def format_checks(checks: list[Check]) -> list[str]:
    return [f"{c.status.upper() if c.status != 'ok' else 'ok':4s}  {c.name}: {c.detail}" for c in checks]


def doctor_report(workspace: str | os.PathLike[str]) -> tuple[list[str], list[Check]]:
    """For launchers: (lines to print, failed checks), creating the workspace first."""
    try:
        checks = run_checks(workspace, create=True)
    except OSError as exc:
        checks = [Check("write", "fail", f"cannot create {workspace}: {exc}")]
    return format_checks(checks), failures(checks)


__all__ = [
    "LIVE_RECORD_S",
    "LOW_SPACE_BYTES",
    "SKEW_FAIL_S",
    "SKEW_WARN_S",
    "Check",
    "doctor_report",
    "failures",
    "format_checks",
    "run_checks",
]
