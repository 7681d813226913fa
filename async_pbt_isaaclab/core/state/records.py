"""The member record: what one member publishes to the workspace for its peers to read.

A record is replaced atomically (``members/NNN/record.json``) at every publish and heartbeat. It is
the *only* thing selection reads about a peer, and a copy of every record a decision used goes into
that decision's audit entry, so the decision can be recomputed later.

Parsing is strict: a record with a wrong type, a missing key, NaN evidence or an unknown schema
version raises :class:`RecordError` naming the file and the key, and the reader skips that peer.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from async_pbt_isaaclab.core.state.evidence import MAX_ABS_OBJECTIVE, ConditionLabel, EvidenceError, EvidenceSummary
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters

SCHEMA_VERSION = 2
"""Version of the record layout; readers refuse other versions rather than guess (2: interval history,
settled evidence, origin checkpoint)."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

STATUSES = ("running", "finished", "stopped")
"""``running``: training; ``finished``: reached its frame/epoch limit; ``stopped``: interrupted by the user."""


class RecordError(ValueError):
    """A workspace record is unreadable or malformed. The message names the file and the key."""


HISTORY_KEYS = frozenset(
    {
        "frame",
        "generation",
        "mean",
        "std",
        "count",
        "condition",
        "checkpoint",
        "checkpoint_sha256",
        "hyperparameters",
        "live_learning_rate",
    }
)
"""The keys a history entry may have (an unknown one is refused: the writer runs another version)."""


@dataclass(frozen=True)
class HistoryEntry:
    """One interval of a member's past: what its evidence was at ``frame`` and the checkpoint taken there.

    Peers behind this member compare themselves with the newest entry at or before their own frame, and
    an exploit copies the checkpoint of the entry that was compared.
    """

    frame: int
    """Member frames when the entry was published."""
    generation: int
    """Policy generation the evidence and checkpoint belong to."""
    mean: float
    """Window mean of the objective (settled evidence of ``generation``)."""
    std: float
    """Sample standard deviation of the window (0.0 for one episode)."""
    count: int
    """Episodes in the window."""
    condition: ConditionLabel
    """Conditions the evidence was collected under."""
    checkpoint: str | None = None
    """Checkpoint saved at this entry, workspace-relative (kept on disk while the entry is in the history)."""
    checkpoint_sha256: str | None = None
    """Its sha256."""
    hyperparameters: Hyperparameters = field(default_factory=dict)
    """Hyperparameters at this entry; ``learning_rate`` is the live rate (adaptive schedule included)."""
    live_learning_rate: float | None = None
    """The learning rate the member trained with at this entry (under an adaptive schedule, the rate reached), whether
    or not it is searched: a recipient of this checkpoint starts from it when the rate is not searched (``None`` in
    entries written before it was published: the rate in the checkpoint's optimizer is taken then)."""

    def to_dict(self) -> dict[str, Any]:
        """The entry as the JSON mapping a record's ``history`` holds."""
        return _with_rate(
            self.live_learning_rate,
            {
                "frame": self.frame,
                "generation": self.generation,
                "mean": self.mean,
                "std": self.std,
                "count": self.count,
                "condition": self.condition.to_dict(),
                "checkpoint": self.checkpoint,
                "checkpoint_sha256": self.checkpoint_sha256,
                "hyperparameters": dict(self.hyperparameters),
            },
        )

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "HistoryEntry":
        """An entry from its JSON mapping, every field checked; :class:`RecordError` naming ``where`` otherwise."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = set(data) - HISTORY_KEYS
        if unknown:
            raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
        ints: dict[str, Any] = {}
        for key in ("frame", "generation", "count"):
            v = data.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RecordError(f"{where}.{key}: expected a non-negative integer, got {v!r:.40}")
            ints[key] = v
        floats: dict[str, Any] = {}
        for key in ("mean", "std"):
            v = data.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise RecordError(f"{where}.{key}: expected a number, got {v!r:.40}")
            floats[key] = _finite(v, f"{where}.{key}")
        if abs(floats["mean"]) > MAX_ABS_OBJECTIVE or abs(floats["std"]) > MAX_ABS_OBJECTIVE:
            raise RecordError(f"{where}: mean/std out of range (|v| > {MAX_ABS_OBJECTIVE:g})")
        ckpt, sha = _checkpoint_of(data, where)
        hparams = _checked_hyperparameters(data.get("hyperparameters", {}), f"{where}.hyperparameters")
        try:
            condition = ConditionLabel.from_dict(data.get("condition", {}), f"{where}.condition")
        except EvidenceError as exc:
            raise RecordError(str(exc)) from None
        return cls(
            **ints,
            **floats,
            condition=condition,
            checkpoint=ckpt,
            checkpoint_sha256=sha,
            hyperparameters=hparams,
            live_learning_rate=_optional_rate(data, where),
        )


@dataclass(frozen=True)
class MemberRecord:
    """A member's published state. Frames are env frames as rl_games counts them (``algo.frame``)."""

    member: int
    """Member index (``policy_idx``)."""
    generation: int
    """Policy generation: 0 at first start, +1 at every exploit or explore."""
    frame: int
    """Frames trained by this member (its own counter, kept across exploits)."""
    generation_start_frame: int
    """``frame`` when the current generation started (for the grace period after a restart)."""
    restarts: int
    """Number of exploit/explore restarts so far."""
    heartbeat: float
    """Wall-clock time (unix seconds) of the last write; peers judge liveness by it."""
    evidence: EvidenceSummary
    """Completed-episode evidence of the current generation."""
    condition: ConditionLabel
    """Conditions the evidence was collected under."""
    hyperparameters: Hyperparameters = field(default_factory=dict)
    """Current values of the mutated hyperparameters (short names)."""
    checkpoint: str | None = None
    """Latest checkpoint, relative to the workspace root; ``None`` before the first publish."""
    checkpoint_sha256: str | None = None
    """sha256 of that checkpoint file; a copy that does not match is refused."""
    interval_best: float | None = None
    """Best evidence-window mean seen during the current interval (for ``dexpbt`` protection)."""
    status: str = "running"
    """One of ``STATUSES``."""
    epoch: int = 0
    """rl_games epoch counter of this member."""
    last_decision: str = ""
    """Outcome and short reason of the last decision (for ``async-pbt status``)."""
    host: str = ""
    """Host name of the process."""
    pid: int = 0
    """Process id of the writer."""
    history: tuple[HistoryEntry, ...] = ()
    """Interval entries, oldest first: the newest ``history_length`` and as many older ones thinned out over the run
    (``member_state.thin_history``); only settled evidence makes an entry."""
    origin_sha256: str = ""
    """sha256 of the donor checkpoint the current generation was copied from ("" when not copied), so the
    member never copies the same checkpoint again."""
    live_learning_rate: float | None = None
    """The learning rate the member trains with now, searched or not (an explore continues from the rate of the
    record it was decided on); ``None`` in records written before it was published."""
    record_write_failures: int = 0
    """Writes of ``record.json`` that failed in the member's process so far (the first one written again says how
    many: ``async-pbt status`` shows it); 0, and not in the file, while none has."""
    schema_version: int = SCHEMA_VERSION
    """Layout version of this record."""

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object ``record.json`` holds."""
        failures = {"record_write_failures": self.record_write_failures} if self.record_write_failures else {}
        return _with_rate(
            self.live_learning_rate,
            {
                "schema_version": self.schema_version,
                "member": self.member,
                "generation": self.generation,
                "frame": self.frame,
                "generation_start_frame": self.generation_start_frame,
                "restarts": self.restarts,
                "heartbeat": self.heartbeat,
                "evidence": self.evidence.to_dict(),
                "condition": self.condition.to_dict(),
                "hyperparameters": dict(self.hyperparameters),
                "checkpoint": self.checkpoint,
                "checkpoint_sha256": self.checkpoint_sha256,
                "interval_best": self.interval_best,
                "status": self.status,
                "epoch": self.epoch,
                "last_decision": self.last_decision,
                "host": self.host,
                "pid": self.pid,
                "history": [e.to_dict() for e in self.history],
                "origin_sha256": self.origin_sha256,
                **failures,
            },
        )

    @classmethod
    def from_dict(cls, data: Any, where: str = "record") -> "MemberRecord":
        """A record from its JSON object, schema version and every field checked; :class:`RecordError` naming
        ``where`` otherwise."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):  # true == 1 in Python, not in the schema
            raise RecordError(
                f"{where}: schema_version {version!r} is not supported (this version reads {SCHEMA_VERSION}); "
                f"the writer runs a different async-pbt-isaaclab version"
            )
        get = functools.partial(_typed_field, data, where)
        heartbeat = _finite(get("heartbeat", (int, float)), f"{where}.heartbeat")
        interval_best = get("interval_best", (int, float), optional=True)
        if interval_best is not None:
            interval_best = _finite(interval_best, f"{where}.interval_best")
        status = get("status", str)
        if status not in STATUSES:
            raise RecordError(f"{where}.status: {status!r} is not one of {', '.join(STATUSES)}")
        hparams = _checked_hyperparameters(get("hyperparameters", dict), f"{where}.hyperparameters")
        history = _read_history(get("history", list), where)
        origin = get("origin_sha256", str)
        if origin and not _SHA256_HEX.fullmatch(origin):
            raise RecordError(f"{where}.origin_sha256: not a sha256 hex digest: {origin!r:.80}")
        sha = get("checkpoint_sha256", str, optional=True)
        if sha is not None and not _SHA256_HEX.fullmatch(sha):
            raise RecordError(f"{where}.checkpoint_sha256: not a sha256 hex digest: {sha!r}")
        ints: dict[str, Any] = {}
        for key in ("member", "generation", "frame", "generation_start_frame", "restarts", "record_write_failures"):
            v = get(key, int, optional=key == "record_write_failures") or 0
            if v < 0:
                raise RecordError(f"{where}.{key}: must be >= 0, got {v}")
            ints[key] = v
        try:
            evidence = EvidenceSummary.from_dict(get("evidence", dict), f"{where}.evidence")
            condition = ConditionLabel.from_dict(get("condition", dict), f"{where}.condition")
        except EvidenceError as exc:
            raise RecordError(str(exc)) from None
        return cls(
            **ints,
            heartbeat=heartbeat,
            evidence=evidence,
            condition=condition,
            hyperparameters=dict(hparams),
            checkpoint=get("checkpoint", str, optional=True),
            checkpoint_sha256=sha,
            interval_best=None if interval_best is None else float(interval_best),
            status=status,
            epoch=int(get("epoch", int, optional=True) or 0),
            last_decision=str(get("last_decision", str, optional=True) or ""),
            host=str(get("host", str, optional=True) or ""),
            pid=int(get("pid", int, optional=True) or 0),
            history=history,
            origin_sha256=origin,
            live_learning_rate=_optional_rate(data, where),
            schema_version=version,
        )


def parse_record_bytes(data: bytes, where: str) -> MemberRecord:
    """Parse a record file's bytes. Truncated or non-JSON content raises :class:`RecordError`."""
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise RecordError(f"{where}: not UTF-8 text (corrupt file?)") from None
    except json.JSONDecodeError as exc:
        raise RecordError(f"{where}: not valid JSON ({exc.msg} at byte {exc.pos}); truncated or corrupt") from None
    except RecursionError:
        raise RecordError(f"{where}: JSON nested too deeply") from None
    except RecordError as exc:
        raise RecordError(f"{where}: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits (int_max_str_digits)
        raise RecordError(f"{where}: not valid JSON ({exc})") from None
    return MemberRecord.from_dict(obj, where)


def _checked_hyperparameters(hparams: Any, where: str) -> Hyperparameters:
    """A copy of a hyperparameter mapping with only finite JSON values (the audit log refuses NaN anywhere)."""
    if not isinstance(hparams, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {hparams!r:.40}")
    for k, v in hparams.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise RecordError(f"{where}.{k}: not finite: {v!r}")
    try:
        json.dumps(hparams, allow_nan=False)
    except (ValueError, TypeError):
        raise RecordError(f"{where}: contains NaN, infinite or non-JSON values") from None
    return dict(hparams)


def _typed_field(
    data: Mapping[str, Any], where: str, key: str, types: type | tuple[type, ...], optional: bool = False
) -> Any:
    """``data[key]`` checked against ``types`` (a bool is not an int here); ``None`` for an absent optional key."""
    if key not in data:
        if optional:
            return None
        raise RecordError(f"{where}: missing key {key!r}")
    value = data[key]
    if value is None and optional:
        return None
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise RecordError(f"{where}.{key}: expected {types}, got {value!r}")
    if not isinstance(value, types):
        raise RecordError(f"{where}.{key}: expected {getattr(types, '__name__', types)}, got {value!r}")
    return value


def _read_history(raw_history: list[Any], where: str) -> tuple[HistoryEntry, ...]:
    """A record's ``history``: its entries, parsed, in frame order."""
    history = tuple(HistoryEntry.from_dict(e, f"{where}.history[{i}]") for i, e in enumerate(raw_history))
    if any(a.frame > b.frame for a, b in itertools.pairwise(history)):
        raise RecordError(f"{where}.history: entries are not in frame order")
    return history


def _checkpoint_of(data: Mapping[str, Any], where: str) -> tuple[str | None, str | None]:
    """A history entry's ``checkpoint`` and ``checkpoint_sha256``, checked (each may be null)."""
    ckpt, sha = data.get("checkpoint"), data.get("checkpoint_sha256")
    if ckpt is not None and not isinstance(ckpt, str):
        raise RecordError(f"{where}.checkpoint: expected a string or null, got {ckpt!r:.40}")
    if sha is not None and not (isinstance(sha, str) and _SHA256_HEX.fullmatch(sha)):
        raise RecordError(f"{where}.checkpoint_sha256: not a sha256 hex digest: {sha!r:.80}")
    return ckpt, sha


def _with_rate(rate: float | None, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``live_learning_rate`` when known: a record or entry written before it was published reads and
    writes back without it (the audit log's copies of them replay byte for byte)."""
    return data if rate is None else {**data, "live_learning_rate": rate}


def _optional_rate(data: Mapping[str, Any], where: str) -> float | None:
    """``live_learning_rate`` of a record or history entry: absent (``None``) or a finite positive number."""
    rate = data.get("live_learning_rate")
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not _finite(rate, where) > 0:
        raise RecordError(f"{where}.live_learning_rate: expected a positive number, got {rate!r:.40}")
    return float(rate)


def _finite(value: int | float, where: str) -> float:
    """``value`` as a finite float; an int too large for a float (``1e400`` written as digits) is refused."""
    try:
        out = float(value)
    except OverflowError:
        raise RecordError(f"{where}: number out of range: {value!r:.40}") from None
    if not math.isfinite(out):
        raise RecordError(f"{where}: not finite: {value!r}")
    return out


def _refuse_constant(name: str) -> Any:
    raise RecordError(f"JSON constant {name} is not allowed (NaN/Infinity are never valid evidence)")
