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

import copy
import json
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.generation import LineageEntry, PendingExploit
from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceError, EvidenceSummary
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters, HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng, RngState
from async_pbt_isaaclab.core.state.records import HistoryEntry, RecordError

STATE_SCHEMA_VERSION = 2
"""Version of ``state.json`` (2: evidence, history, origin and finish kept with the member)."""


@dataclass(frozen=True)
class SavedEvidence:
    """The evidence window at the last save, so a resumed member publishes at once instead of waiting."""

    summary: EvidenceSummary
    """The window's episodes and statistics."""
    condition: ConditionLabel
    """The condition they were collected under."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"summary": self.summary.to_dict(), "condition": self.condition.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SavedEvidence:
        """Parse ``state.evidence``; raises :class:`RecordError`."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected null or an object, got {data!r:.80}")
        try:
            return cls(
                EvidenceSummary.from_dict(data.get("summary"), f"{where}.summary"),
                ConditionLabel.from_dict(data.get("condition"), f"{where}.condition"),
            )
        except EvidenceError as exc:
            raise RecordError(str(exc)) from None


@dataclass(frozen=True)
class FinishedMark:
    """Where a member reached its training limit."""

    frame: int
    """Frame at the end."""
    epoch: int
    """Epoch at the end."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"frame": self.frame, "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> FinishedMark:
        """Parse ``state.finished``; raises :class:`RecordError`."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected null or an object, got {data!r:.80}")
        values = [data.get("frame", 0), data.get("epoch", 0)]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise RecordError(f"{where}: expected integer frame and epoch, got {dict(data)!r:.80}")
        return cls(frame=values[0], epoch=values[1])

    def still_reached(self, max_epochs: int, max_frames: int) -> str:
        """Why a member that finished here must not train again under these limits (-1: none): the limit it
        reached, in words; ``""`` when its limits grew since (it trains on). What a restarted member and the
        CPU population's resume both say."""
        if max_epochs != -1 and self.epoch >= max_epochs:
            return f"finished at epoch {self.epoch} >= max_epochs={max_epochs} (frame {self.frame})"
        if max_frames != -1 and self.frame >= max_frames:
            return f"finished at frame {self.frame} >= max_frames={max_frames}"
        return ""


@dataclass(frozen=True)
class AuditHead:
    """The member's last audit entry when its state was saved: cutting entries from the log's end shows."""

    seq: int
    """Sequence number."""
    hash: str
    """Its chain hash."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"seq": self.seq, "hash": self.hash}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> AuditHead:
        """Parse ``state.audit_head``; raises :class:`RecordError`."""
        if not (
            isinstance(data, Mapping)
            and set(data) == {"seq", "hash"}
            and type(data["seq"]) is int
            and data["seq"] >= 0
            and isinstance(data["hash"], str)
        ):
            raise RecordError(f"{where}: expected null or {{seq: int >= 0, hash: str}}, got {data!r:.80}")
        return cls(seq=data["seq"], hash=data["hash"])


@dataclass(frozen=True)
class Publish:
    """What a publish makes the member's state name (:meth:`MemberState.publish`)."""

    checkpoint: str
    """The checkpoint (workspace-relative), the resume point from now on."""
    sha256: str
    """Its sha256."""
    evidence: SavedEvidence
    """The evidence window at it (a resumed member continues it)."""
    entry: HistoryEntry | None = None
    """Its history entry, when the evidence is settled and large enough."""
    best: tuple[BestEntry, ...] | None = None
    """The best list with it, when it made the list (``None``: unchanged)."""


@dataclass(frozen=True)
class PublishUndo:
    """What a publish replaced in the state, put back if its checkpoint never reaches the disk."""

    checkpoint: str
    sha256: str
    history: list[HistoryEntry]
    best: list[BestEntry]
    evidence: SavedEvidence | None
    rng_state: Any = None
    """The RNG before the publish: put back by :meth:`MemberState.undo_decision` when the decision taken on it never
    reached the audit log (the next decision then draws what the log says it drew)."""


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
    """Generation changes so far (exploits and explores, in-process or by restart)."""
    process_starts: int = 0
    """How many times a process started as this member (exec restarts, crashes and resumes included)."""
    rng_state: RngState | dict[str, Any] = field(default_factory=dict)
    """State of the member's mutation/selection RNG (numpy's PCG64 state as JSON, :class:`RngState`); ``{}`` until
    the member first draws from it."""
    hyperparameters: Hyperparameters = field(default_factory=dict)
    """Current values of the mutated hyperparameters (short names); applied at every start."""
    lineage: list[LineageEntry] = field(default_factory=list)
    """One entry per generation change."""
    experiment_name: str = ""
    """rl_games ``full_experiment_name``: the same log dir and TensorBoard run across restarts."""
    last_checkpoint: str = ""
    """This member's newest checkpoint (workspace-relative) to resume from after a crash."""
    last_checkpoint_sha256: str = ""
    """Its sha256."""
    pending_exploit: PendingExploit | None = None
    """Set once an exploit's recipient checkpoint is written; cleared once it runs."""
    best: list[BestEntry] = field(default_factory=list)
    """Historical best checkpoints of this member (best first), mirrored to ``best.json``."""
    evidence: SavedEvidence | None = None
    """The evidence window at the last save, so a resumed member publishes at once instead of waiting for a new
    window."""
    history: list[HistoryEntry] = field(default_factory=list)
    """The record's interval entries (oldest first); continues across restarts."""
    origin_sha256: str = ""
    """sha256 of the donor checkpoint the current generation was copied from ("" when not copied)."""
    finished: FinishedMark | None = None
    """Set once the member reached its training limit; a later start with the same limit exits at once instead
    of training another epoch."""
    wandb_run_id: str = ""
    """The member's Weights & Biases run id, set at its first start and reused by every later process (exploit
    restart, resume) so the member stays one W&B run; a recipient keeps its own, never the donor's ("" in a
    state written before the id was kept: the next start sets it)."""
    audit_head: AuditHead | None = None
    """The last audit entry when the state was saved (``None`` before the first): the verifier reports a log that
    is shorter, or holds another entry at that seq (entries cut from its end)."""
    population: str | None = None
    """The id of the population (``population.json``) whose member this is: a ``state.json`` copied from another
    workspace is reported by the verifier (``None`` in a workspace or state written before ids)."""
    schema_version: int = STATE_SCHEMA_VERSION
    """Layout version."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form of ``state.json`` (the same layout as every release with this schema version)."""
        return {
            "member": self.member,
            "generation": self.generation,
            "generation_start_frame": self.generation_start_frame,
            "restarts": self.restarts,
            "process_starts": self.process_starts,
            "rng_state": self.rng_state,
            "hyperparameters": dict(self.hyperparameters),
            "lineage": [e.to_dict() for e in self.lineage],
            "experiment_name": self.experiment_name,
            "last_checkpoint": self.last_checkpoint,
            "last_checkpoint_sha256": self.last_checkpoint_sha256,
            "pending_exploit": None if self.pending_exploit is None else self.pending_exploit.to_dict(),
            "best": [b.to_dict() for b in self.best],
            "evidence": None if self.evidence is None else self.evidence.to_dict(),
            "history": [h.to_dict() for h in self.history],
            "origin_sha256": self.origin_sha256,
            "finished": None if self.finished is None else self.finished.to_dict(),
            "wandb_run_id": self.wandb_run_id,
            "audit_head": None if self.audit_head is None else self.audit_head.to_dict(),
            # Only when known, so a state of a workspace created before population ids writes back unchanged.
            **({"population": self.population} if self.population is not None else {}),
            "schema_version": self.schema_version,
        }

    # ---- transitions: the only places these fields change (tests/member/test_state_writes.py checks the package) ----
    def joined(self, population: str | None) -> None:
        """The member belongs to the workspace whose population id is ``population`` (kept once known)."""
        if self.population is None:
            self.population = population

    def process_started(self, searched: Mapping[str, Any]) -> None:
        """A process starts as this member: keys ``searched`` since it last ran start from the given values."""
        self.process_starts += 1
        for key, value in searched.items():
            self.hyperparameters.setdefault(key, value)

    def drew(self, hyperparameters: HyperparameterView, rng_after: RngState) -> None:
        """A logged draw (the diverse start, ``initial_mutation``) set the values; the RNG continues after it."""
        self.hyperparameters.update(hyperparameters)
        self.rng_state = rng_after

    def decided(self, rng_after: RngState) -> None:
        """A decision drew from the member's RNG (logged first: write-ahead); the stream continues after it."""
        self.rng_state = rng_after

    def trains_with(self, learning_rate: float) -> None:
        """The live learning rate, published with the values when it is searched (an adaptive schedule moves it)."""
        if "learning_rate" in self.hyperparameters:
            self.hyperparameters["learning_rate"] = learning_rate

    def published(self, checkpoint: str, sha256: str) -> None:
        """A checkpoint of the current generation was written: it is the resume point now."""
        self.last_checkpoint, self.last_checkpoint_sha256 = checkpoint, sha256

    def publish(self, publish: Publish, history_limit: int) -> PublishUndo:
        """A publish names its checkpoint as the resume point, with the evidence, history entry and best list that
        go with it. Returns what it replaced (:meth:`undo_publish` puts it back if the checkpoint is never written)."""
        undo = PublishUndo(
            self.last_checkpoint,
            self.last_checkpoint_sha256,
            list(self.history),
            list(self.best),
            self.evidence,
            copy.deepcopy(self.rng_state),
        )
        self.published(publish.checkpoint, publish.sha256)
        self.evidence = publish.evidence
        if publish.entry is not None:
            self.add_history(publish.entry, history_limit)
        if publish.best is not None:
            self.best = list(publish.best)
        return undo

    def add_history(self, entry: HistoryEntry, limit: int) -> None:
        """Append an interval entry: the newest ``limit`` stay, older ones are thinned (:func:`thin_history`)."""
        self.history = thin_history([*self.history, entry], limit)

    def undo_publish(self, undo: PublishUndo) -> None:
        """A publish's checkpoint was never written: the state names what it named before, history and all."""
        self.published(undo.checkpoint, undo.sha256)
        self.history, self.best, self.evidence = list(undo.history), list(undo.best), undo.evidence

    def undo_decision(self, undo: PublishUndo) -> None:
        """The decision taken at a publish never reached the audit log: the RNG is what it was before it."""
        self.rng_state = copy.deepcopy(undo.rng_state)

    def begin_generation(self, pending: PendingExploit, lineage_entry: LineageEntry, origin_sha256: str) -> int:
        """Exploit or explore decided and its recipient checkpoint written (``pending``): the next generation starts
        at ``pending.frame`` from ``pending.checkpoint``. Returns the new generation."""
        self.generation = pending.generation
        self.generation_start_frame = pending.frame
        self.restarts += 1
        self.hyperparameters = dict(pending.hyperparameters)
        self.lineage.append(lineage_entry)
        self.published(pending.checkpoint, pending.sha256)
        self.origin_sha256 = origin_sha256
        self.evidence = None
        self.pending_exploit = pending
        return self.generation

    def adopt(self, planned: MemberState) -> None:
        """Take every field of ``planned``: a copy of this state that the member loop changed while it planned a
        publish (the loop never changes the live state; the executor commits the plan with signals held). Deep
        copies: ``planned`` goes on to the background writer."""
        for name in (f.name for f in fields(self)):
            setattr(self, name, copy.deepcopy(getattr(planned, name)))

    def exploit_done(self) -> None:
        """The pending exploit was applied (its weights train now), or could not be and never will be."""
        self.pending_exploit = None

    def finish(self, mark: FinishedMark) -> None:
        """The member reached its training limit."""
        self.finished = mark

    def assign_wandb_run(self, run_id: str) -> None:
        """The member's one W&B run id, kept for every later process."""
        self.wandb_run_id = run_id

    def anchor(self, head: AuditHead) -> None:
        """The audit log's last entry when this state is saved (cutting entries from its end then shows)."""
        self.audit_head = head

    @classmethod
    def from_dict(cls, data: Any, where: str) -> MemberState:
        """Parse ``state.json``: the schema version, every key and its type; raises :class:`RecordError`."""
        _check_plain_keys(data, where, set(cls.__dataclass_fields__))
        state = cls(
            **{k: data[k] for k in _PLAIN_KEYS if k in data},
            lineage=_items(data, "lineage", where, LineageEntry.from_dict),
            best=_items(data, "best", where, _best_entry),
            history=_items(data, "history", where, HistoryEntry.from_dict),
            pending_exploit=_optional(data, "pending_exploit", where, PendingExploit.from_dict),
            evidence=_optional(data, "evidence", where, SavedEvidence.from_dict),
            finished=_optional(data, "finished", where, FinishedMark.from_dict),
            audit_head=_optional(data, "audit_head", where, AuditHead.from_dict),
        )
        _check_writable(state, where)
        return state


def _check_plain_keys(data: Any, where: str, fields: set[str]) -> None:
    """``state.json``'s schema version, its keys (``fields`` known, ``member`` present) and the plain values' types;
    :class:`RecordError` naming the key."""
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected a JSON object")
    if data.get("schema_version") != STATE_SCHEMA_VERSION or isinstance(data.get("schema_version"), bool):
        raise RecordError(
            f"{where}: schema_version {data.get('schema_version')!r} is not supported (expected {STATE_SCHEMA_VERSION})"
        )
    unknown = set(data) - fields
    if unknown:
        raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
    if "member" not in data:
        raise RecordError(f"{where}: missing key 'member'")
    for key in ("member", "generation", "generation_start_frame", "restarts", "process_starts"):
        value = data.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RecordError(f"{where}.{key}: expected a non-negative integer, got {value!r}")
    if data.get("population") is not None and not isinstance(data["population"], str):
        raise RecordError(f"{where}.population: expected null or a string, got {data['population']!r:.80}")
    for key, typ in _PLAIN_TYPES.items():
        if key in data and not isinstance(data[key], typ):
            raise RecordError(f"{where}.{key}: expected {typ.__name__}, got {data[key]!r:.80}")


def _check_writable(state: MemberState, where: str) -> None:
    """A parsed state's RNG state continues a stream and its JSON can be written back; :class:`RecordError`."""
    if state.rng_state:  # {}: not drawn from yet (the member sets it at its first start)
        try:
            MemberRng.from_state(state.rng_state)
        except ValueError as exc:
            raise RecordError(f"{where}.rng_state: {exc}") from None
    try:
        json.dumps(state.to_dict(), allow_nan=False)  # save_state must be able to write it back
    except ValueError:
        raise RecordError(f"{where}: contains NaN or infinite values") from None


def thin_history(history: list[HistoryEntry], limit: int) -> list[HistoryEntry]:
    """The newest ``limit`` entries, and at most ``limit`` older ones spread evenly over the whole run.

    The older part keeps the first entry of each frame bucket, with the narrowest power-of-two bucket width that
    leaves at most ``limit``: the width only grows as the run does, so an entry once dropped would be dropped again,
    and the archive always reaches back to the first entry. A member far behind (a late start, a long crash)
    finds an entry at or before its own frame, at most one bucket earlier. Pure."""
    recent, archive = history[-limit:], history[:-limit]
    width = 1
    while True:
        kept: dict[int, HistoryEntry] = {}
        for entry in archive:
            kept.setdefault(entry.frame // width, entry)
        if len(kept) <= limit:
            return [*kept.values(), *recent]
        width *= 2


_PLAIN_TYPES: dict[str, type] = {
    "rng_state": dict,
    "hyperparameters": dict,
    "experiment_name": str,
    "last_checkpoint": str,
    "last_checkpoint_sha256": str,
    "origin_sha256": str,
    "wandb_run_id": str,
}
"""Fields kept as they are in JSON, and their types."""

_PLAIN_KEYS = (
    "member",
    "generation",
    "generation_start_frame",
    "restarts",
    "process_starts",
    "schema_version",
    "population",
    *_PLAIN_TYPES,
)


def _best_entry(data: Any, where: str) -> BestEntry:
    try:
        return BestEntry.from_dict(data, where)
    except ValueError as exc:
        raise RecordError(str(exc)) from None


def _items(data: Mapping[str, Any], key: str, where: str, parse: Any) -> list[Any]:
    items = data.get(key, [])
    if not isinstance(items, list):
        raise RecordError(f"{where}.{key}: expected list, got {items!r:.80}")
    return [parse(item, f"{where}.{key}[{i}]") for i, item in enumerate(items)]


def _optional(data: Mapping[str, Any], key: str, where: str, parse: Any) -> Any:
    value = data.get(key)
    return None if value is None else parse(value, f"{where}.{key}")
