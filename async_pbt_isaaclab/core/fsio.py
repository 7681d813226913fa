"""Crash-safe file primitives for a shared filesystem.

Every file in a workspace is written the same way: to a uniquely named temp file *in the same
folder* (so the rename never crosses filesystems), flushed and fsynced, then ``os.replace``d over
the final name, and the folder fsynced so the rename itself survives a power loss. A reader
therefore sees either the old complete file or the new complete file, never a partial one.
NFS gives the same guarantee for rename within a directory plus close-to-open consistency.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, BinaryIO

#: Temp files carry this marker so cleanup can find the ones a killed writer left behind.
TEMP_MARKER = ".tmp-"


def temp_name(final: Path) -> Path:
    """A temp path beside ``final`` that no other process or thread will pick."""
    unique = f"{socket.gethostname()}-{os.getpid()}-{time.monotonic_ns()}"
    return final.with_name(f".{final.name}{TEMP_MARKER}{unique}")


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(final: Path | str, write: Callable[[BinaryIO], None]) -> None:
    """Write a file atomically: ``write(fh)`` fills a temp file that then replaces ``final``.

    If ``write`` raises, the temp file is removed and ``final`` is untouched.
    """
    final = Path(final)
    tmp = temp_name(final)
    try:
        with open(tmp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    fsync_dir(final.parent)


def atomic_write_bytes(final: Path | str, data: bytes) -> None:
    atomic_write(final, lambda fh: fh.write(data))


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON (sorted keys, no spaces, no NaN): what hashes and checksums are taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def atomic_write_json(final: Path | str, obj: Any) -> None:
    data = json.dumps(obj, sort_keys=True, indent=1, allow_nan=False).encode() + b"\n"
    atomic_write_bytes(final, data)


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_copy_verified(src: Path | str, dst: Path | str, expected_sha256: str) -> str:
    """Copy ``src`` to ``dst`` atomically, hashing while copying; refuse on checksum mismatch.

    Returns the checksum. On mismatch nothing appears under ``dst`` and ``ChecksumMismatch`` names
    both files and both digests.
    """
    src, dst = Path(src), Path(dst)
    h = hashlib.sha256()

    def write(fh: BinaryIO) -> None:
        with open(src, "rb") as inp:
            while block := inp.read(1 << 20):
                h.update(block)
                fh.write(block)
        if h.hexdigest() != expected_sha256:
            raise ChecksumMismatch(
                f"{src}: sha256 {h.hexdigest()} does not match the published {expected_sha256}; "
                f"not copied to {dst}"
            )

    atomic_write(dst, write)
    return h.hexdigest()


class ChecksumMismatch(RuntimeError):
    """A file's content does not match the checksum its record published."""


def is_temp_file(path: Path) -> bool:
    return path.name.startswith(".") and TEMP_MARKER in path.name


def remove_stale_temp_files(folder: Path, older_than_s: float, now: float | None = None) -> list[Path]:
    """Delete temp files in ``folder`` older than the grace period (left by killed writers)."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return removed
    for p in entries:
        if not is_temp_file(p):
            continue
        try:
            if now - p.stat().st_mtime > older_than_s:
                p.unlink()
                removed.append(p)
        except FileNotFoundError:
            continue
    return removed


def folder_problem(folder: Path | str) -> str | None:
    """Why ``folder`` could not be created or written, checked without writing anything; ``None`` if it can.

    Looks at ``folder`` or, when it does not exist yet, its nearest existing parent: a file there, a
    read-only filesystem, or missing write permission for this user.
    """
    folder = Path(folder).absolute()
    existing = next(p for p in (folder, *folder.parents) if p.exists() or p == p.parent)
    where = "" if existing == folder else f" (its parent {existing})"
    if not existing.is_dir():
        return f"is a file{where}, not a folder" if existing == folder else f"cannot be created: {existing} is a file"
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"is on a read-only filesystem{where}"
    return f"is not writable by this user (uid {os.getuid()}){where}"
