"""The member record: what one member publishes to the workspace for its peers to read.

A record is replaced atomically (``members/NNN/record.json``) at every publish and heartbeat. It is
the *only* thing selection reads about a peer, and a copy of every record a decision used goes into
that decision's audit entry, so the decision can be recomputed later.

Parsing is strict: a record with a wrong type, a missing key, NaN evidence or an unknown schema
version raises :class:`RecordError` naming the file and the key, and the reader skips that peer.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab.core.evidence import ConditionLabel, EvidenceError, EvidenceSummary

SCHEMA_VERSION = 1
"""Version of the record layout; readers refuse other versions rather than guess."""

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

STATUSES = ("running", "finished", "stopped")
"""``running``: training; ``finished``: reached its frame/epoch limit; ``stopped``: interrupted by the user."""


class RecordError(ValueError):
    """A workspace record is unreadable or malformed. The message names the file and the key."""


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
    hyperparameters: dict[str, Any] = field(default_factory=dict)
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
    schema_version: int = SCHEMA_VERSION
    """Layout version of this record."""

    def to_dict(self) -> dict[str, Any]:
        return {
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
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "record") -> "MemberRecord":
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION or isinstance(version, bool):  # true == 1 in Python, not in the schema
            raise RecordError(
                f"{where}: schema_version {version!r} is not supported (this version reads {SCHEMA_VERSION}); "
                f"the writer runs a different async-pbt-isaaclab version"
            )

        def get(key: str, types: type | tuple[type, ...], optional: bool = False) -> Any:
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

        heartbeat = _finite(get("heartbeat", (int, float)), f"{where}.heartbeat")
        interval_best = get("interval_best", (int, float), optional=True)
        if interval_best is not None:
            interval_best = _finite(interval_best, f"{where}.interval_best")
        status = get("status", str)
        if status not in STATUSES:
            raise RecordError(f"{where}.status: {status!r} is not one of {', '.join(STATUSES)}")
        hparams = get("hyperparameters", dict)
        for k, v in hparams.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise RecordError(f"{where}.hyperparameters.{k}: not finite: {v!r}")
        try:
            # Every decision copies the records it used into the audit log, which refuses NaN anywhere.
            json.dumps(hparams, allow_nan=False)
        except ValueError:
            raise RecordError(f"{where}.hyperparameters: contains NaN or infinite values") from None
        sha = get("checkpoint_sha256", str, optional=True)
        if sha is not None and not _SHA256_HEX.fullmatch(sha):
            raise RecordError(f"{where}.checkpoint_sha256: not a sha256 hex digest: {sha!r}")
        ints = {}
        for key in ("member", "generation", "frame", "generation_start_frame", "restarts"):
            v = get(key, int)
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


def read_record(path: Path) -> MemberRecord:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_record_bytes(data, str(path))


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
