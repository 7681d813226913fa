"""The audit log: append-only, hash-chained JSON lines, one file per member, and its verifier.

Every decision is logged *before* it is acted on (write-ahead), keep decisions included. A decision
entry holds everything :func:`~async_pbt_isaaclab.core.decision.rules.decide` and
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

A crash in the middle of an append leaves a line without its newline; since the entry was not
complete, nothing it described was acted on. :meth:`AuditLog.open` moves such a torn tail to
``audit.jsonl.torn`` (kept for inspection) before appending again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from async_pbt_isaaclab.core.config import ConfigError
from async_pbt_isaaclab.core.decision.exploit_plan import aborted_mismatches, applied_mismatches
from async_pbt_isaaclab.core.decision.mutation import replay_semantics
from async_pbt_isaaclab.core.decision.start import initial_draw
from async_pbt_isaaclab.core.decision.step import (
    InitialMutation,
    PopulationView,
    StepResult,
    initial_step,
    pbt_step,
    replay_records,
)
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.member_rng import MemberRng
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
)
"""``decision``, ``initial_draw`` and ``initial_mutation`` entries are recomputed by the verifier; the others are
chained facts. The verifier also follows the member's RNG stream: every recomputed entry's ``rng_before`` must be the
previous one's ``rng_after`` (and a ``start`` entry's ``rng_state`` the same), so a member whose state.json was
replaced or deleted, restarting its random stream, is caught. ``donor_in_memory`` (a slice member took its donor's
state from memory) and ``fault`` (non-finite weights repaired or the member stopped) are facts
(``rl_games/slices.py``)."""


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


@dataclass(frozen=True)
class VerifyProblem:
    """One entry that failed verification."""

    path: str
    line: int
    seq: int | None
    problem: str

    def __str__(self) -> str:
        seq = "" if self.seq is None else f" (seq {self.seq})"
        return f"{self.path}:{self.line}{seq}: {self.problem}"


def replay_decision(entry: dict[str, Any]) -> tuple[StepResult | None, list[str]]:
    """Replay a decision entry through :func:`~async_pbt_isaaclab.core.decision.step.pbt_step`: the recomputed step
    (``None``
    when the entry cannot be replayed) and the differences from what was recorded (empty when it reproduces)."""
    try:
        # A recorded fixture decision replays as it ran; this does not enable the fixture anywhere else.
        cfg = population_config_from_dict(recorded_config(entry), allow_test_fixture=True)
        me, peers, now = replay_records(entry)
        rng_before = entry["rng_before"]
        MemberRng.from_state(rng_before)
    except (KeyError, TypeError, ValueError, OverflowError, ConfigError, RecordError) as exc:
        return None, [f"entry cannot be replayed: {exc}"]
    try:
        with replay_semantics(_recorded_semantics(entry)):
            step = pbt_step(PopulationView(me, tuple(peers), now), cfg, rng_before)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        # Recorded inputs a member could not have produced (e.g. a start value missing for a mutated key).
        return None, [f"entry cannot be replayed: {type(exc).__name__}: {exc}"]
    return step, _replay_differences(step, entry)


def _replay_differences(step: StepResult, entry: dict[str, Any]) -> list[str]:
    """What a replayed step produced that the entry did not record (empty when it reproduces)."""
    recorded = entry.get("decision")
    if not isinstance(recorded, dict):
        return [f"decision: recorded {recorded!r:.80} is not an object"]
    problems: list[str] = []
    mine = step.decision.to_dict()
    for key in ("outcome", "donor", "compared", "excluded", "donor_entry"):
        if mine[key] != recorded.get(key):
            problems.append(f"decision.{key}: recorded {recorded.get(key)!r:.300}, recomputed {mine[key]!r:.300}")
    for key in ("start_hyperparameters", "new_hyperparameters"):
        if getattr(step, key) != entry.get(key):
            problems.append(f"{key}: recorded {entry.get(key)!r}, recomputed {getattr(step, key)!r}")
    if [c.to_dict() for c in step.changes] != entry.get("changes"):
        problems.append("changes: recorded mutation changes do not match the recomputed ones")
    if step.explore_note != entry.get("explore_note", ""):
        problems.append(
            f"explore_note: recorded {entry.get('explore_note')!r:.200}, recomputed {step.explore_note!r:.200}"
        )
    if step.rng_after != entry.get("rng_after"):
        problems.append("rng_after: recorded RNG state does not match the state after replay")
    return problems


def _recorded_semantics(entry: dict[str, Any]) -> int:
    """The rules an entry was written under (``mutation_semantics``; none: 0.1.x, replayed as version 1)."""
    version = entry.get("mutation_semantics", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"mutation_semantics: expected an integer, got {version!r}")
    return version


ADDED_CONFIG_KEYS = {"min_mutated_keys": 0, "gap_z": 0.0, "resample_probability": 0.0}
"""Config keys added after entries were first written, with the value that reproduces what an entry recorded
without them did (before ``min_mutated_keys``, the per-key coin alone decided; before ``gap_z``, the dexpbt gap
had no sampling-noise floor; before ``resample_probability``, no key was resampled)."""


def recorded_config(entry: dict[str, Any]) -> dict[str, Any]:
    """The ``config`` an entry recorded, with :data:`ADDED_CONFIG_KEYS` filled in where it predates them (and, for an
    entry written before ``max_frame_lag: -1`` bounded the lag, that placeholder as the "no limit" it meant)."""
    config = {**ADDED_CONFIG_KEYS, **entry["config"]}
    if entry.get("mutation_semantics", 1) in (1, 2) and config.get("max_frame_lag") == -1:
        config["max_frame_lag"] = sys.maxsize
    return config


def recompute_decision(entry: dict[str, Any]) -> list[str]:
    """The differences between a decision entry and its replay (empty when it reproduces)."""
    return replay_decision(entry)[1]


def recompute_initial_mutation(entry: dict[str, Any]) -> list[str]:
    """Replay an ``initial_mutation`` entry through :func:`~async_pbt_isaaclab.core.decision.step.initial_step`, or an
    ``initial_draw`` entry (the diverse start) through :func:`~async_pbt_isaaclab.core.decision.start.initial_draw`."""
    try:
        cfg = population_config_from_dict(recorded_config(entry), allow_test_fixture=True)
        member, start, rng_before = int(entry["member"]), entry["start_hyperparameters"], entry["rng_before"]
        with replay_semantics(_recorded_semantics(entry)):
            if entry.get("kind") == "initial_draw":
                strata_seed = entry.get("strata_seed")
                pinned = _string_list(entry.get("pinned", []))
                step: InitialMutation = initial_draw(member, start, cfg, rng_before, _optional_int(strata_seed), pinned)
            else:
                step = initial_step(member, start, cfg, rng_before)
    except (KeyError, TypeError, ValueError, OverflowError, ArithmeticError, ConfigError) as exc:
        return [f"entry cannot be replayed: {exc}"]
    problems = []
    if step.new_hyperparameters != entry.get("new_hyperparameters"):
        problems.append(
            f"new_hyperparameters: recorded {entry.get('new_hyperparameters')!r}, "
            f"recomputed {step.new_hyperparameters!r}"
        )
    if [c.to_dict() for c in step.changes] != entry.get("changes"):
        problems.append("changes: recorded changes do not match the recomputed ones")
    if step.rng_after != entry.get("rng_after"):
        problems.append("rng_after: recorded RNG state does not match the state after replay")
    return problems


def _optional_int(value: Any) -> int | None:
    """A recorded optional integer (``strata_seed``): ``None`` or an int; anything else cannot be replayed."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"strata_seed: expected an integer, got {value!r}")


def _string_list(value: Any) -> list[str]:
    """A recorded list of key names (``pinned``); anything else cannot be replayed."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"pinned: expected a list of key names, got {value!r:.80}")


def applied_exploit_mismatches(applied: dict[str, Any], decision: dict[str, Any] | None) -> list[str]:
    """How an ``exploit_applied`` entry differs from the plan its ``decision`` entry makes (empty when it carries out
    exactly that decision): the plan is replayed through
    :func:`~async_pbt_isaaclab.core.decision.exploit_plan.plan_exploit`
    as the member made it, and its donor source, generation, hyperparameters and changes compared, and, where the
    entry records the plan's inputs, its path, keys set live and starting learning rate."""
    if decision is None:
        return ["no exploit or explore decision precedes it (an exploit applied that no logged decision made)"]
    replayed = _replayed_decision(decision)
    if isinstance(replayed, str):
        return [replayed]
    step, me = replayed
    try:
        mismatches = applied_mismatches(applied, step, me)
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return [f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"]
    return [
        f"{key}: applied {value!r:.200}, but the decision at seq {decision.get('seq')!r} decided {planned!r:.200}"
        for key, value, planned in mismatches
    ]


def aborted_exploit_mismatches(aborted: dict[str, Any], decision: dict[str, Any] | None) -> list[str]:
    """How an ``exploit_aborted`` entry that records the plan's inputs (the plan refused to carry the decision out)
    differs from the plan its ``decision`` makes; entries without them (a donor that could not be copied, entries
    written before plans were recorded) are facts."""
    if aborted.get("plan_inputs") is None or decision is None:
        return []
    replayed = _replayed_decision(decision)
    if isinstance(replayed, str):
        return [replayed]
    try:
        return aborted_mismatches(aborted, *replayed)
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return [f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"]


def _replayed_decision(decision: dict[str, Any]) -> tuple[StepResult, Any] | str:
    """The replayed step of an exploit or explore ``decision`` entry and the record it was taken on, or why not."""
    step, _ = replay_decision(decision)
    if step is None or step.decision.outcome.value not in ("exploit", "explore"):
        return f"its decision (seq {decision.get('seq')!r}) cannot be replayed into a plan"
    try:
        return step, replay_records(decision)[0]
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"


def verify_log(
    path: str | os.PathLike[str],
    head: dict[str, Any] | None = None,
    *,
    genesis: Sequence[str] | None = None,
    final: bool = False,
) -> tuple[int, list[VerifyProblem]]:
    """Check the chain, replay every decision and check every applied exploit against its decision. Returns
    (entries checked, problems).

    ``head`` (``{seq, hash}``, what the member's ``state.json`` recorded as its last entry when it last saved)
    catches what the chain alone cannot: whole entries cut from the end leave a valid, shorter chain. With
    ``final`` (the member is not running, so its last save followed its last entry) an entry after the head is
    reported too: nothing anchors it. ``genesis`` (:func:`genesis_hash`) lists the ``prev_hash`` values the first
    entry may have: a log copied from another member or workspace starts elsewhere (``None``: not checked)."""
    walk = _LogWalk(str(path), head, genesis=None if genesis is None else tuple(genesis), final=final)
    for lineno, entry, err in read_entries(Path(path)):
        if entry is None:
            walk.problems.append(VerifyProblem(walk.path, lineno, None, err or "unreadable"))
            continue
        walk.count += 1
        walk.check_chain(lineno, entry)
        walk.check_content(lineno, entry)
        walk.check_head(lineno, entry)
        walk.check_rng_stream(lineno, entry)
        walk.advance(entry)
    walk.check_head_reached()
    return walk.count, walk.problems


@dataclass
class _LogWalk:
    """What :func:`verify_log` carries from one entry to the next."""

    path: str
    head: dict[str, Any] | None
    problems: list[VerifyProblem] = field(default_factory=list)
    count: int = 0
    prev_hash: str = GENESIS
    expected_seq: int = 0
    rng_stream: Any = None
    """``rng_after`` of the newest entry that drew from the member's RNG."""
    acting: dict[str, Any] | None = None
    """The newest exploit/explore decision not yet aborted or superseded."""
    head_found: bool = False
    last_seq: Any = None
    genesis: tuple[str, ...] | None = None
    """Accepted ``prev_hash`` values of the first entry (``None``: any)."""
    final: bool = False
    """The member is not running: its head must be the log's last entry."""
    unanchored: tuple[int, Any] | None = None
    """(line, seq) of the first entry after the head."""

    def problem(self, lineno: int, seq: Any, text: str) -> None:
        self.problems.append(VerifyProblem(self.path, lineno, seq, text))

    def check_chain(self, lineno: int, entry: dict[str, Any]) -> None:
        """Sequence number, link to the previous entry, and the entry's own hash."""
        seq = entry.get("seq")
        if seq != self.expected_seq:
            self.problem(
                lineno,
                seq,
                f"sequence number {seq!r}, expected {self.expected_seq} (entry missing, duplicated or reordered)",
            )
        if self.count == 1:
            self.check_genesis(lineno, entry)
        elif entry.get("prev_hash") != self.prev_hash:
            self.problem(lineno, seq, "chain broken: prev_hash does not match the previous entry's hash")
        try:
            recomputed: str | None = entry_hash(str(entry.get("prev_hash")), entry)
        except ValueError:  # NaN / Infinity: no writer of this log produces them
            recomputed = None
            self.problem(lineno, seq, "entry holds NaN or Infinity, which no member writes")
        if recomputed is not None and entry.get("hash") != recomputed:
            self.problem(lineno, seq, "hash mismatch: the entry was edited after it was written")

    def check_genesis(self, lineno: int, entry: dict[str, Any]) -> None:
        """The first entry links to this member's genesis in this workspace (:func:`genesis_hash`)."""
        if self.genesis is None or entry.get("prev_hash") in self.genesis:
            return
        self.problem(
            lineno,
            entry.get("seq"),
            "the log does not begin this member's chain in this workspace (its first entry links to "
            f"{str(entry.get('prev_hash'))[:16]}...): it was copied from another member or another workspace, "
            "or its first entries were removed",
        )

    def check_content(self, lineno: int, entry: dict[str, Any]) -> None:
        """Replay what can be replayed: decisions, the exploits applied for them, initial mutations."""
        kind, seq = entry.get("kind"), entry.get("seq")
        if kind == "decision":
            for p in recompute_decision(entry):
                self.problem(lineno, seq, f"decision does not reproduce: {p}")
            decided = entry.get("decision")
            outcome = decided.get("outcome") if isinstance(decided, dict) else None
            self.acting = entry if outcome in ("exploit", "explore") else None
        elif kind == "exploit_applied":
            for p in applied_exploit_mismatches(entry, self.acting):
                self.problem(lineno, seq, f"applied exploit does not match its decision: {p}")
        elif kind == "exploit_aborted":
            for p in aborted_exploit_mismatches(entry, self.acting):
                self.problem(lineno, seq, f"aborted exploit does not match its decision's plan: {p}")
            self.acting = None
        elif kind in ("initial_mutation", "initial_draw"):
            what = "initial mutation" if kind == "initial_mutation" else "initial draw (diverse start)"
            for p in recompute_initial_mutation(entry):
                self.problem(lineno, seq, f"{what} does not reproduce: {p}")

    def check_head(self, lineno: int, entry: dict[str, Any]) -> None:
        """The entry state.json named as the last one must still be the one at that seq."""
        seq = entry.get("seq")
        if self.head is None:
            return
        head_seq = self.head.get("seq")
        if self.unanchored is None and isinstance(seq, int) and isinstance(head_seq, int) and seq > head_seq:
            self.unanchored = (lineno, seq)
        if seq != head_seq:
            return
        self.head_found = True
        if entry.get("hash") != self.head.get("hash"):
            self.problem(
                lineno,
                seq,
                f"this entry's hash {str(entry.get('hash'))[:16]}... is not the "
                f"{str(self.head.get('hash'))[:16]}... "
                f"state.json recorded for seq {seq}: the log was rewritten after the member saved its state",
            )

    def check_rng_stream(self, lineno: int, entry: dict[str, Any]) -> None:
        """Every entry that draws continues the member's random stream where the previous one left it."""
        kind = entry.get("kind")
        rng_in = entry.get("rng_state") if kind == "start" else entry.get("rng_before")
        if kind not in ("start", "decision", "initial_mutation", "initial_draw") or rng_in is None:
            return
        if self.rng_stream is not None and rng_in != self.rng_stream:
            self.problem(
                lineno,
                entry.get("seq"),
                "RNG stream broken: this entry's RNG state does not continue the previous decision's "
                "rng_after (was the member's state.json replaced or deleted?)",
            )
        self.rng_stream = entry.get("rng_after", rng_in) if kind != "start" else rng_in

    def advance(self, entry: dict[str, Any]) -> None:
        seq = entry.get("seq")
        self.last_seq = seq
        self.prev_hash = str(entry.get("hash"))
        self.expected_seq = (seq if isinstance(seq, int) else self.expected_seq) + 1

    def check_head_reached(self) -> None:
        """Entries cut from the end leave a valid, shorter chain: only the saved head shows it. And when the member
        is not running, no entry may follow the head: nothing would show it cut."""
        if self.head is not None and self.final and self.unanchored is not None:
            lineno, seq = self.unanchored
            self.problem(
                lineno,
                seq,
                f"not anchored: state.json's last save records seq {self.head.get('seq')!r} as the member's last "
                f"entry, so this entry and any after it could be cut unnoticed (the member was killed between "
                f"writing it and saving its state, or state.json was replaced by an older copy); starting the "
                f"member again anchors it",
            )
        if self.head is None or self.head_found:
            return
        self.problem(
            self.count + 1,
            self.head.get("seq"),
            f"log ends at seq {self.last_seq!r} but state.json records seq {self.head.get('seq')!r} as the member's "
            f"last entry: entries were removed from the end of the log",
        )
