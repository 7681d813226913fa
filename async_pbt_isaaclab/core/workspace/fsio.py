"""Crash-safe file primitives for a shared filesystem.

Every file in a workspace is written the same way: to a uniquely named temp file *in the same
folder* (so the rename never crosses filesystems), flushed and fsynced, then ``os.replace``d over
the final name, and the folder fsynced so the rename itself survives a power loss. A reader
therefore sees either the old complete file or the new complete file, never a partial one.
NFS gives the same guarantee for rename within a directory plus close-to-open consistency.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

#: Temp files carry this marker so cleanup can find the ones a killed writer left behind.
TEMP_MARKER = ".tmp-"


def temp_name(final: Path) -> Path:
    """A temp path beside ``final`` that no other process or thread will pick:
    ``.NAME.tmp-HOST-PID-NANOSECONDS``. The writer's host and pid in the name let the next start tell a dead
    writer's leftover from a live writer's file (:func:`temp_writer`, :func:`remove_stale_temp_files`)."""
    unique = f"{socket.gethostname()}-{os.getpid()}-{time.monotonic_ns()}"
    return final.with_name(f".{final.name}{TEMP_MARKER}{unique}")


def temp_writer(name: str) -> tuple[str, int] | None:
    """(host, pid) of the process that made the temp file ``name`` (:func:`temp_name`), ``None`` when the name
    does not say (a host name may hold dashes: the pid and the counter are the last two fields)."""
    if not is_temp_name(name):
        return None
    tail = name[name.rindex(TEMP_MARKER) + len(TEMP_MARKER) :]
    parts = tail.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or not parts[0]:
        return None
    return parts[0], int(parts[1])


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def writer_is_dead(name: str, host: str | None = None) -> bool:
    """The temp file ``name`` was made by a process of this host that no longer exists (its pid is gone).
    ``False`` when the writer is alive, on another host (which this host cannot see) or unknown."""
    writer = temp_writer(name)
    host = socket.gethostname() if host is None else host
    return writer is not None and writer[0] == host and writer[1] != os.getpid() and not process_alive(writer[1])


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


def atomic_write(final: Path | str, write: Callable[[BinaryIO], object]) -> None:
    """Write a file atomically: ``write(fh)`` fills a temp file that then replaces ``final``.

    If ``write`` raises, the temp file is removed and ``final`` is untouched. The folder is opened once, refusing a
    link there (``O_NOFOLLOW``), and the temp file is created, renamed and synced through that descriptor: a link
    planted at the folder after the check cannot redirect the write.
    """
    final = Path(final)
    refuse_links_at(final)
    dfd = open_folder(final.parent)
    tmp = temp_name(final).name
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dfd)
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
        try:
            os.fsync(dfd)  # the rename is durable
        except OSError:
            pass
    finally:
        os.close(dfd)


def open_folder(folder: Path) -> int:
    """A descriptor of ``folder`` for ``dir_fd`` calls; :class:`UnsafePathError` when it is a symbolic link or not a
    folder (``FileNotFoundError`` when it does not exist)."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(folder, "it is a symbolic link or not a folder") from None
        raise


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
                f"{src}: sha256 {h.hexdigest()} does not match the published {expected_sha256}; not copied to {dst}"
            )

    atomic_write(dst, write)
    return h.hexdigest()


class ChecksumMismatch(RuntimeError):
    """A file's content does not match the checksum its record published."""


def is_temp_file(path: Path) -> bool:
    return is_temp_name(path.name)


def is_temp_name(name: str) -> bool:
    """A name :func:`temp_name` produces."""
    return name.startswith(".") and TEMP_MARKER in name


# ------------------------------------------------------------ refusing planted links
# Members share the workspace with every other process that can write it. A folder or file there replaced by a
# symbolic link would make a member read, write or delete outside the workspace, so every file and folder a
# member uses is opened without following links, and deletion only touches regular files with names we write.


class UnsafePathError(OSError):
    """A workspace file or folder is a symbolic link, a hard link to another file, or another kind of file than
    expected: refused."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(
            errno.ELOOP,
            f"refusing {path}: {why} (files and folders in a workspace must not be symbolic or hard links; remove it)",
            str(path),
        )

    def __str__(self) -> str:
        return str(self.strerror)


def check_no_links(root: Path, path: Path) -> None:
    """Refuse ``path`` when a component of it below ``root`` (``path`` itself included) is a symbolic link, or
    when it names ``..``. Components that do not exist yet are fine (they will be created as real folders)."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        raise UnsafePathError(path, f"it is not inside the workspace {root}") from None
    current = Path(root)
    for part in parts:
        if part == "..":
            raise UnsafePathError(path, "it contains '..'")
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(current, "it is a symbolic link")


def open_nofollow(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link or a non-regular file at ``path`` (a FIFO would block a reader)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(path, "it is a symbolic link") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(path, "it is not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in_place(path: Path | str, flags: int, mode: int = 0o644) -> int:
    """:func:`open_nofollow` for a file written in place (appended, truncated, locked and rewritten): also
    refuses a file with more than one hard link, whose content another name (perhaps outside the workspace)
    shares, so nothing is written into that other file. An atomic replace needs no such check: it replaces the
    name, never the content behind it."""
    fd = open_nofollow(path, flags, mode)
    try:
        links = os.fstat(fd).st_nlink
        if links > 1:
            raise UnsafePathError(path, f"it is a hard link ({links} names share its content)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def refuse_links_at(final: Path | str) -> None:
    """Refuse writing ``final`` when it or its folder is a symbolic link: an atomic replace would replace the
    link (harmless), but a linked folder puts the new file, and the temp file, outside where it belongs."""
    final = Path(final)
    for path in (final, final.parent):
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise UnsafePathError(path, "it is a symbolic link")
        except FileNotFoundError:
            continue


def append_line(path: Path | str, data: bytes, root: Path | str | None = None) -> None:
    """Append ``data`` with one ``write(2)`` (``O_APPEND``: concurrent writers' lines do not interleave) to the
    regular file ``path``, refusing a symbolic or hard link there and, with ``root``, a symbolic link in any
    folder between ``root`` and ``path``."""
    if root is not None:
        check_no_links(Path(root), Path(path))
    fd = open_in_place(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, f"{path}: short write (disk full?)")
    finally:
        os.close(fd)


def read_bytes_nofollow(path: Path | str) -> bytes:
    """The content of the regular file ``path``; a symbolic link there raises :class:`UnsafePathError`."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as fh:
        return fh.read()


def remove_files(
    folder: Path, accept: Callable[[str], bool], older_than_s: float | None = None, now: float | None = None
) -> list[Path]:
    """Delete the regular files in ``folder`` whose name ``accept`` takes (and, with ``older_than_s``, that are
    older than that). Links and sub-folders are never touched; a ``folder`` that is itself a symbolic link is
    refused (:class:`UnsafePathError`), so nothing outside it can be deleted through it."""
    now = time.time() if now is None else now
    try:
        dfd = open_folder(folder)
    except FileNotFoundError:
        return []
    removed = []
    try:
        for name in os.listdir(dfd):
            if not accept(name):
                continue
            try:
                st = os.lstat(name, dir_fd=dfd)
                if not stat.S_ISREG(st.st_mode):
                    continue
                if older_than_s is not None and now - st.st_mtime <= older_than_s:
                    continue
                os.unlink(name, dir_fd=dfd)
                removed.append(folder / name)
            except FileNotFoundError:
                continue
    finally:
        os.close(dfd)
    return removed


def rename_in(folder: Path, src: str, dst: str) -> bool:
    """Rename ``src`` to ``dst`` inside ``folder``, opened without following a link (a rename moves a link itself,
    never what it points to). ``False`` when ``src`` is not there."""
    dfd = open_folder(folder)
    try:
        os.rename(src, dst, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)


def remove_stale_temp_files(folder: Path, older_than_s: float, now: float | None = None) -> list[Path]:
    """Delete the temp files killed writers left in ``folder``: at once when the name says the writer was a process
    of this host that is gone (:func:`writer_is_dead`), else once older than the grace period, unless the writer is
    a live process of this host (a slow write of a large checkpoint is never pulled from under it)."""
    host = socket.gethostname()
    dead = remove_files(folder, lambda name: is_temp_name(name) and writer_is_dead(name, host))

    def old_and_not_live(name: str) -> bool:
        writer = temp_writer(name)
        live_here = writer is not None and writer[0] == host and process_alive(writer[1])
        return is_temp_name(name) and not live_here

    return dead + remove_files(folder, old_and_not_live, older_than_s, now)


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
