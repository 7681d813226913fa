"""A member's private, persistent state (``members/NNN/state.json``).

This is what the *recipient* keeps across an exploit and what survives a crash or a restart:
its generation, restart count, mutation RNG, current hyperparameters, lineage, log directory name
and the checkpoint to resume from. Peers never read it (they read the record).

Two-phase exploit across a process restart::

    decide -> audit "decision" -> copy + verify donor -> write recipient checkpoint
           -> state.pending_exploit = {checkpoint, sha256, ...}; save state -> os.execv
    new process: verify pending checkpoint's sha256 -> restore it -> audit "exploit_applied"
           -> pending_exploit = None; save state
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.evidence import ConditionLabel, EvidenceError, EvidenceSummary
from async_pbt_isaaclab.core.member_rng import MemberRng
from async_pbt_isaaclab.core.records import HistoryEntry, RecordError

STATE_SCHEMA_VERSION = 2
"""Version of ``state.json`` (2: evidence, history, origin and finish kept with the member)."""


@dataclass
class MemberState:
    """Everything the recipient keeps for itself across exploits, restarts and crashes."""

    member: int
    """Member index."""
    generation: int = 0
    """Current policy generation (0 at first start, +1 at each exploit/explore)."""
    generation_start_frame: int = 0
    """Frame at which the current generation started."""
    restarts: int = 0
    """Exploit/explore restarts so far."""
    process_starts: int = 0
    """How many times a process started as this member (exec restarts, crashes and resumes included)."""
    rng_state: dict[str, Any] = field(default_factory=dict)
    """State of the member's mutation/selection RNG (PCG64, JSON)."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    """Current values of the mutated hyperparameters (short names); applied at every start."""
    lineage: list[dict[str, Any]] = field(default_factory=list)
    """One entry per generation change: generation, outcome, donor, donor generation, frame, changes."""
    experiment_name: str = ""
    """rl_games ``full_experiment_name``: the same log dir and TensorBoard run across restarts."""
    last_checkpoint: str = ""
    """This member's newest checkpoint (workspace-relative) to resume from after a crash."""
    last_checkpoint_sha256: str = ""
    """Its sha256."""
    pending_exploit: dict[str, Any] | None = None
    """Set just before an exploit restart; cleared once the new process verified and loaded it."""
    best: list[dict[str, Any]] = field(default_factory=list)
    """Historical best checkpoints of this member (best first), mirrored to ``best.json``."""
    evidence: dict[str, Any] | None = None
    """The evidence window at the last save (``EvidenceSummary`` + ``condition``), so a resumed member
    publishes at once instead of waiting for a new window."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """The record's interval entries (``HistoryEntry`` dicts, oldest first); continues across restarts."""
    origin_sha256: str = ""
    """sha256 of the donor checkpoint the current generation was copied from ("" when not copied)."""
    finished: dict[str, Any] | None = None
    """``{frame, epoch}`` once the member reached its training limit; a later start with the same limit
    exits at once instead of training another epoch."""
    wandb_run_id: str = ""
    """The member's Weights & Biases run id, set at its first start and reused by every later process (exploit
    restart, resume) so the member stays one W&B run; a recipient keeps its own, never the donor's ("" in a
    state written before the id was kept: the next start sets it)."""
    audit_head: dict[str, Any] | None = None
    """``{seq, hash}`` of the last audit entry when the state was saved (``None`` before the first): the
    verifier reports a log that is shorter, or holds another entry at that seq (entries cut from its end)."""
    schema_version: int = STATE_SCHEMA_VERSION
    """Layout version."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ---- transitions (the only places these fields change together) ----
    def published(self, checkpoint: str, sha256: str) -> None:
        """A checkpoint of the current generation was written: it is the resume point now."""
        self.last_checkpoint, self.last_checkpoint_sha256 = checkpoint, sha256

    def add_history(self, entry: dict[str, Any], limit: int) -> None:
        """Append an interval entry, keeping the newest ``limit``."""
        self.history = [*self.history, entry][-limit:]

    def begin_generation(
        self,
        *,
        frame: int,
        hyperparameters: dict[str, Any],
        lineage_entry: dict[str, Any],
        checkpoint: str,
        sha256: str,
        origin_sha256: str,
        pending: dict[str, Any],
    ) -> int:
        """Exploit or explore decided and its recipient checkpoint written: the next generation starts at
        ``frame`` from ``checkpoint``. ``pending`` is what the next start must verify and apply. Returns the
        new generation."""
        self.generation += 1
        self.generation_start_frame = frame
        self.restarts += 1
        self.hyperparameters = dict(hyperparameters)
        self.lineage.append(lineage_entry)
        self.published(checkpoint, sha256)
        self.origin_sha256 = origin_sha256
        self.evidence = None
        self.pending_exploit = dict(pending)
        return self.generation

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "MemberState":
        if not isinstance(data, dict):
            raise RecordError(f"{where}: expected a JSON object")
        if data.get("schema_version") != STATE_SCHEMA_VERSION or isinstance(data.get("schema_version"), bool):
            raise RecordError(
                f"{where}: schema_version {data.get('schema_version')!r} is not supported "
                f"(expected {STATE_SCHEMA_VERSION})"
            )
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
        try:
            state = cls(**data)
        except TypeError as exc:
            raise RecordError(f"{where}: {exc}") from None
        for key in ("member", "generation", "generation_start_frame", "restarts", "process_starts"):
            value = getattr(state, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RecordError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
        _check_types(state, where)
        return state


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "rng_state": dict,
    "hyperparameters": dict,
    "lineage": list,
    "experiment_name": str,
    "last_checkpoint": str,
    "last_checkpoint_sha256": str,
    "best": list,
    "history": list,
    "origin_sha256": str,
    "wandb_run_id": str,
    "evidence": (dict, type(None)),
    "finished": (dict, type(None)),
    "audit_head": (dict, type(None)),
}


def _check_types(state: MemberState, where: str) -> None:
    """Refuse a state the member could not use (it would fail later, mid-training, with a bare TypeError)."""
    for key, typ in _FIELD_TYPES.items():
        if not isinstance(getattr(state, key), typ):
            name = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise RecordError(f"{where}.{key}: expected {name}, got {getattr(state, key)!r:.80}")
    if not all(isinstance(e, dict) for e in state.lineage):
        raise RecordError(f"{where}.lineage: every entry must be an object")
    for i, e in enumerate(state.best):
        if not isinstance(e, dict) or not isinstance(e.get("checkpoint"), str):
            raise RecordError(f"{where}.best[{i}]: expected an object with a checkpoint path, got {e!r:.80}")
    head = state.audit_head
    if head is not None and not (
        set(head) == {"seq", "hash"} and type(head["seq"]) is int and head["seq"] >= 0 and isinstance(head["hash"], str)
    ):
        raise RecordError(f"{where}.audit_head: expected null or {{seq: int >= 0, hash: str}}, got {head!r:.80}")
    pending = state.pending_exploit
    if pending is not None and not (
        isinstance(pending, dict)
        and isinstance(pending.get("checkpoint"), str)
        and isinstance(pending.get("sha256"), str)
    ):
        raise RecordError(
            f"{where}.pending_exploit: expected null or an object with checkpoint and sha256, got {pending!r:.80}"
        )
    for i, e in enumerate(state.history):
        HistoryEntry.from_dict(e, f"{where}.history[{i}]")
    if state.evidence is not None:
        try:
            EvidenceSummary.from_dict(state.evidence.get("summary"), f"{where}.evidence.summary")
            ConditionLabel.from_dict(state.evidence.get("condition"), f"{where}.evidence.condition")
        except EvidenceError as exc:
            raise RecordError(str(exc)) from None
    if state.rng_state:  # {}: not drawn from yet (the member sets it at its first start)
        try:
            MemberRng.from_state(state.rng_state)
        except ValueError as exc:
            raise RecordError(f"{where}.rng_state: {exc}") from None
    try:
        fsio.canonical_json(state.to_dict())  # save_state must be able to write it back
    except ValueError:
        raise RecordError(f"{where}: contains NaN or infinite values") from None


def load_state(path: Path) -> MemberState | None:
    """The member's state, ``None`` when it never ran. A corrupt file raises :class:`RecordError`."""
    try:
        raw = fsio.read_bytes_nofollow(path)  # a symbolic link here is refused (UnsafePathError), not followed
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError covers UnicodeDecodeError
        raise RecordError(
            f"{path}: corrupt member state ({exc}); restore it from a backup or start a new workspace"
        ) from None
    return MemberState.from_dict(data, str(path))


def save_state(path: Path, state: MemberState) -> None:
    fsio.atomic_write_json(path, state.to_dict())
