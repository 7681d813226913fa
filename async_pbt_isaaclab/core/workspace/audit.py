"""The audit log: append-only, hash-chained JSON lines, one file per member, and its verifier.

Every decision is logged *before* it is acted on (write-ahead), keep decisions included. A decision
entry holds everything :func:`~async_pbt_isaaclab.core.decision.step.decide` and
:func:`~async_pbt_isaaclab.core.decision.mutation.mutate` need to recompute it: my record, the peers'
records, the selection config, ``now``, the RNG state before, the starting hyperparameters; and
what came out: the decision, the mutation changes and the RNG state after.

Chain: ``hash = sha256(prev_hash + canonical_json(entry without "hash"))``. Editing any entry,
removing one or reordering them breaks the chain at that point, and the verifier says where. The first entry's
``prev_hash`` is :func:`genesis_hash` of the workspace's population id and the member index, so a log copied
from another member or another workspace breaks at its first line.

The newest entries are anchored outside the log: ``state.json`` records the last entry when the member saves it
(after every append, the final ``stop`` included), and the verifier reports an entry after that head, a log
that ends before it, or a ``state.json`` that is missing, unreadable or another member's or workspace's
(``async-pbt audit``, :func:`verify_log`'s ``head`` and ``final``).

The verifier is :mod:`.audit_verify` (the walk) and :mod:`.audit_replay` (the replay of each entry).

A crash in the middle of an append leaves a line without its newline; since the entry was not
complete, nothing it described was acted on. :meth:`AuditLog.open` moves such a torn tail to
``audit.jsonl.torn`` (kept for inspection) before appending again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace import fsio

GENESIS = "0" * 64
"""``prev_hash`` of the first entry of a log written before logs were bound to their member and workspace."""

ENTRY_KINDS = (
    "start",
    "initial_draw",
    "initial_mutation",
    "restored",
    "decision",
    "exploit_applied",
    "exploit_aborted",
    "stop",
    "warning",
    "donor_in_memory",
    "fault",
    "publish_failed",
    "group_synced",
)
"""``decision``, ``initial_draw`` and ``initial_mutation`` entries are recomputed by the verifier; the others are
chained facts. The verifier also follows the member's RNG stream: every recomputed entry's ``rng_before`` must be the
previous one's ``rng_after`` (and a ``start`` entry's ``rng_state`` the same), so a member whose state.json was
replaced or deleted, restarting its random stream, is caught. ``donor_in_memory`` (a slice member took its donor's
state from memory) and ``fault`` (non-finite weights repaired or the member stopped) are facts
(``rl_games/slices.py``); so is ``group_synced`` (what rank 0 of a member of several ranks loaded reached every
rank: each rank's model fingerprint, ``member/group.py``)."""


def entry_hash(prev_hash: str, entry: dict[str, Any]) -> str:
    """The chain hash of ``entry``: sha256 of the previous hash and the entry's canonical JSON (without ``hash``)."""
    body = {k: v for k, v in entry.items() if k != "hash"}
    return hashlib.sha256(prev_hash.encode() + fsio.canonical_json(body)).hexdigest()


def genesis_hash(population: str | None, member: int) -> str:
    """``prev_hash`` of member ``member``'s first entry in the workspace whose population id is ``population``
    (``None`` for a workspace created before population ids): binds the chain to its member and workspace."""
    body = {"audit_chain": 1, "member": int(member), "population": population}
    return hashlib.sha256(fsio.canonical_json(body)).hexdigest()


class AuditLog:
    """Appends entries to one member's ``audit.jsonl``. One writer: the process holding the member lock. Within
    it, appends are serialised by a lock: the member's background writer appends its decisions while the training
    thread may log a warning."""

    def __init__(self, path: Path, last_seq: int, last_hash: str, genesis: str = GENESIS):
        self.path = path
        """The log file."""
        self.genesis = genesis
        """``prev_hash`` of the first entry (:func:`genesis_hash`)."""
        self.last_seq = last_seq
        """Sequence number of the last entry (-1 when empty)."""
        self.last_hash = last_hash
        """Hash of the last entry (``GENESIS`` when empty)."""
        self._lock = threading.Lock()

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last entry appended, read together (never half of one append and half of the next)."""
        with self._lock:
            return self.last_seq, self.last_hash

    @classmethod
    def open(cls, path: str | os.PathLike[str], genesis: str = GENESIS) -> "AuditLog":
        """The log at ``path``, ready to append after its last complete entry (a torn tail is moved aside).
        ``genesis`` (:func:`genesis_hash`) is the ``prev_hash`` of the first entry when the log is empty."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path, *cls._tail(path, genesis), genesis=genesis)

    @staticmethod
    def _tail(path: Path, genesis: str = GENESIS) -> tuple[int, str]:
        """(seq, hash) of the last complete entry, after moving a torn tail to ``.torn``."""
        last_seq, last_hash = -1, genesis
        if path.exists() or path.is_symlink():
            data = fsio.read_bytes_nofollow(path)
            if data and not data.endswith(b"\n"):
                cut = data.rfind(b"\n") + 1
                torn = path.with_name(path.name + ".torn")
                with os.fdopen(fsio.open_in_place(torn, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as fh:
                    fh.write(data[cut:] + b"\n")
                with os.fdopen(fsio.open_in_place(path, os.O_RDWR), "r+b") as fh:
                    fh.truncate(cut)
                    os.fsync(fh.fileno())
                data = data[:cut]
            lines = data.splitlines()
            if lines:
                try:
                    last = json.loads(lines[-1])
                    last_seq, last_hash = int(last["seq"]), str(last["hash"])
                except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
                    raise RecordError(f"{path}: last entry unreadable ({exc}); run `async-pbt audit` on it") from None
        return last_seq, last_hash

    def append(self, kind: str, body: dict[str, Any], now: float | None = None) -> dict[str, Any]:
        """Append one entry of ``kind`` with ``body``, chained and fsynced; returns the entry as written."""
        if kind not in ENTRY_KINDS:
            raise ValueError(f"unknown audit entry kind {kind!r}")
        with self._lock:
            return self._append(kind, body, now)

    def _append(self, kind: str, body: dict[str, Any], now: float | None) -> dict[str, Any]:
        entry = {
            "seq": self.last_seq + 1,
            "time": time.time() if now is None else now,
            "kind": kind,
            "prev_hash": self.last_hash,
            **body,
        }
        entry["hash"] = entry_hash(self.last_hash, entry)
        line = json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        fd = fsio.open_in_place(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.write(fd, line) != len(line):
                raise OSError(errno.ENOSPC, f"{self.path}: short write (disk full?)")
            self.last_seq, self.last_hash = entry["seq"], entry["hash"]
            os.fsync(fd)
        except BaseException:
            # Interrupted (Ctrl-C lands right after the write) or failed: the line may or may not be on disk.
            # Continue the chain from what is there, or the next entry would repeat this seq (a fork).
            try:
                self.last_seq, self.last_hash = self._tail(self.path, self.genesis)
            except (OSError, RecordError):
                pass
            raise
        finally:
            os.close(fd)
        return entry


def read_entries(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(line number, entry or None, parse error or None) for each line."""
    with os.fdopen(fsio.open_nofollow(path, os.O_RDONLY), "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                yield lineno, None, "torn line (no newline): a write was interrupted"
                continue
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError) as exc:  # ValueError covers UnicodeDecodeError
                yield lineno, None, f"not valid JSON ({exc})"
                continue
            if not isinstance(obj, dict):
                yield lineno, None, "not a JSON object"
                continue
            yield lineno, obj, None
