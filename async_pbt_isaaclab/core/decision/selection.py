"""Selection: the steps every rule shares, pure functions of (my record, peers' records, config, now).

:func:`async_pbt_isaaclab.core.decision.step.decide` runs them in order and hands the result to the configured
rule. Nothing here reads files or clocks: ``now`` is an input, so the audit verifier can recompute every
decision from the values recorded in its entry. The steps are always the same:

1. **Am I eligible?** (:func:`my_ineligibility`) settled evidence of my current generation with
   ``min_episodes`` episodes, past the start and restart grace periods, under ``max_restarts``.
2. **What does each peer count as?** (:func:`peer_entry`, :func:`build_field`) A peer is compared at its
   newest *history entry* at a frame no later than mine (DexPBT's "compare at matching progress"): a peer
   ahead of me is judged by what it had achieved when it had trained as long as I have, never excluded for
   being ahead. A peer is excluded (with the reason recorded) when its heartbeat is too old or in the
   future, it optimises another objective, its new generation has not settled yet (it just exploited), it
   has no entry at or before my frame, its newest entry lags more than ``max_frame_lag`` behind me, or the
   entry's condition differs.
3. **The rule** (``dexpbt``, ``isaaclab``, ``welch``; :mod:`async_pbt_isaaclab.core.decision.rules`) ranks me and the
   compared peers and returns keep, exploit (with a donor entry, whose checkpoint is the one copied) or
   explore (mutate my own hyperparameters, keep my weights), built with :func:`keep_decision`,
   :func:`exploit_decision` and :func:`explore_decision`.

The donor is never me, never an excluded peer, never an entry without a checkpoint, and never the
checkpoint my current generation was copied from (:func:`donor_candidates`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

from async_pbt_isaaclab.core.config import REFERENCE_MEMBER, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import MUTATION_SEMANTICS
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord

PEER_UNSETTLED = "has not settled yet"
"""How the reason ends that leaves out a peer whose new generation has not settled (the report counts by it)."""


class Outcome(str, enum.Enum):
    """What a member does after a decision."""

    KEEP = "keep"
    """Carry on training unchanged."""
    EXPLOIT = "exploit"
    """Copy the donor's checkpoint, mutate hyperparameters, start a new generation."""
    EXPLORE = "explore"
    """Keep my weights, mutate my hyperparameters, start a new generation."""


@dataclass(frozen=True)
class Decision:
    """The outcome of one selection step, with everything needed to explain it."""

    outcome: Outcome
    """Keep, exploit or explore."""
    rule: str
    """Rule that decided (``dexpbt``, ``isaaclab``, ``welch`` or a test fixture)."""
    donor: int | None = None
    """Member whose checkpoint is copied (exploit only)."""
    reasons: tuple[str, ...] = ()
    """Human-readable reasons, in the order they were established."""
    compared: tuple[int, ...] = ()
    """Members whose evidence was compared (me included), ordered best first."""
    excluded: dict[int, str] = field(default_factory=dict)
    """Peers not compared, with why."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Numbers the rule compared against (cut-offs, gaps, p-values)."""
    objectives: dict[int, float] = field(default_factory=dict)
    """Objective (window mean) of every compared member, at the frame it was compared at."""
    compared_frames: dict[int, int] = field(default_factory=dict)
    """Frame of the evidence each compared member was judged by (mine: my current frame)."""
    donor_entry: HistoryEntry | None = None
    """The donor's history entry that was compared; its checkpoint is the one an exploit copies."""

    def to_dict(self) -> dict[str, Any]:
        """The decision as the JSON mapping the audit log records."""
        return {
            "outcome": self.outcome.value,
            "rule": self.rule,
            "donor": self.donor,
            "reasons": list(self.reasons),
            "compared": list(self.compared),
            "excluded": {str(k): v for k, v in sorted(self.excluded.items())},
            "thresholds": dict(self.thresholds),
            "objectives": {str(k): v for k, v in sorted(self.objectives.items())},
            "compared_frames": {str(k): v for k, v in sorted(self.compared_frames.items())},
            "donor_entry": None if self.donor_entry is None else self.donor_entry.to_dict(),
        }

    def summary(self) -> str:
        """One line: the outcome, the donor and the last reason (``exploit from 3: in the worst 1 of 4``)."""
        head = self.outcome.value if self.donor is None else f"{self.outcome.value} from {self.donor}"
        return f"{head}: {self.reasons[-1]}" if self.reasons else head


@dataclass(frozen=True)
class Standing:
    """What one compared member counts as in a decision."""

    member: int
    """Member index."""
    frame: int
    """Frame of the evidence (a peer's entry frame; my current frame)."""
    mean: float
    """Objective window mean, as published."""
    std: float
    """Sample std of the window."""
    count: int
    """Episodes in the window."""
    entry: HistoryEntry | None
    """The peer's compared history entry (``None`` for me)."""


@dataclass(frozen=True)
class Field:
    """The compared members of one decision, ready for a rule."""

    me: MemberRecord
    """My record."""
    standings: dict[int, Standing]
    """Me and every compared peer, by member index."""
    ranked: tuple[int, ...]
    """Members best first (by score, ties to the lower index)."""
    scores: dict[int, float]
    """Objective on a larger-is-better scale (``objective_direction``)."""
    common: dict[str, Any]
    """Decision fields every outcome carries (compared, excluded, objectives, frames)."""
    unsettled: tuple[int, ...] = ()
    """Excluded peers in a new generation that has not settled, which every other check would compare at their
    previous generation: members that left the worst group at their own decision (found with
    ``unsettled_fill_worst`` only)."""
    cannot_act: dict[int, str] = field(default_factory=dict)
    """Compared peers that will not change generation again, with why (out of ``max_restarts``, finished, stopped):
    they hold no slot of the worst group (ranked there they would hold it at every decision, and the worst of the
    others would keep)."""


def keep_decision(rule: str, reason: str, **kw: Any) -> Decision:
    """A ``keep`` decision for ``reason`` (after any ``reasons=`` given); other keywords go to :class:`Decision`."""
    return Decision(Outcome.KEEP, rule, None, tuple(kw.pop("reasons", ())) + (reason,), **kw)


def entry_at_or_before(history: Sequence[HistoryEntry], frame: int) -> HistoryEntry | None:
    """The newest entry with ``entry.frame <= frame`` (history is oldest first)."""
    for entry in reversed(history):
        if entry.frame <= frame:
            return entry
    return None


def _live_peer_exclusion(
    me: MemberRecord,
    peer: MemberRecord,
    cfg: PopulationConfig,
    now: float,
    semantics: int = MUTATION_SEMANTICS,
    settled_only: bool = True,
) -> str | None:
    """Why ``peer`` cannot be compared at all (not live, another objective, nothing settled, far behind), or
    ``None``; which of its entries is compared is :func:`peer_entry`'s. ``settled_only=False`` lets a peer whose
    new generation has not settled through, to be judged at its previous generation's entries."""
    if peer.member == me.member:
        return "is me"
    why = heartbeat_exclusion(peer, cfg, now, semantics)
    if why is not None:
        return why
    if peer.evidence.objective != me.evidence.objective:
        return f"objective {peer.evidence.objective!r} != mine {me.evidence.objective!r}"
    if not peer.history:
        return (
            f"no settled evidence yet: window has {peer.evidence.count} episodes of generation "
            f"{peer.evidence.generation}, member is at generation {peer.generation}"
        )
    if settled_only and _in_unsettled_generation(peer):
        # It decided to exploit/explore: its old generation must not be offered, its new one has not settled.
        return f"new generation {peer.generation} (from frame {peer.generation_start_frame}) {PEER_UNSETTLED}"
    newest = peer.history[-1]
    lag = me.frame - newest.frame
    if lag > cfg.resolved_max_frame_lag():
        # Ranked against me it would take my worst slot at every decision; it decides at its own progress instead.
        return (
            f"far behind: newest entry lags by {lag} frames > max_frame_lag={cfg.resolved_max_frame_lag()} "
            f"(it compares itself with us at its own progress)"
        )
    return None


def peer_entry(
    me: MemberRecord,
    peer: MemberRecord,
    cfg: PopulationConfig,
    now: float,
    semantics: int = MUTATION_SEMANTICS,
    settled_only: bool = True,
) -> tuple[HistoryEntry | None, str | None]:
    """``(entry, None)``: compare ``peer`` at ``entry``; ``(None, why)``: ``peer`` is excluded (under the rules of
    ``semantics``, :data:`~async_pbt_isaaclab.core.decision.mutation.MUTATION_SEMANTICS`; ``settled_only`` as in
    :func:`_live_peer_exclusion`)."""
    why = _live_peer_exclusion(me, peer, cfg, now, semantics, settled_only)
    if why is not None:
        return None, why
    entry = entry_at_or_before(peer.history, me.frame)
    if entry is None:
        return None, (
            f"no history entry at or before my frame {me.frame} (oldest at frame "
            f"{peer.history[0].frame}; history_length={cfg.history_length} too short for the spread)"
        )
    if entry.frame < cfg.resolved_start_grace() and semantics >= 3:
        # Its window holds the episodes of the start (with long episodes, all begun at frame 0): what the start
        # grace keeps my own first decision from resting on, it keeps from a peer's entry too.
        return None, f"entry at frame {entry.frame} is inside the start grace (< {cfg.resolved_start_grace()})"
    if entry.count < cfg.min_episodes:
        return None, f"entry at frame {entry.frame} has {entry.count} episodes < min_episodes={cfg.min_episodes}"
    diffs = me.condition.differences(entry.condition)
    if diffs:
        return None, "incompatible condition: " + "; ".join(diffs)
    return entry, None


def heartbeat_exclusion(
    peer: MemberRecord, cfg: PopulationConfig, now: float, semantics: int = MUTATION_SEMANTICS
) -> str | None:
    """Why ``peer``'s heartbeat says it is not live at ``now`` (too old, or in the future), or ``None``. A finished
    member stops its heartbeat with its final record (semantics 5 on): its age says nothing about that record, whose
    history stays evidence for the members still training (a stopped or crashed one's still goes stale)."""
    age = now - peer.heartbeat
    if age > cfg.max_heartbeat_age_s and not (semantics >= 5 and peer.status == "finished"):
        return f"stale: heartbeat {age:.0f}s old > max_heartbeat_age_s={cfg.max_heartbeat_age_s:g}"
    if -age > cfg.max_clock_skew_s:
        return f"heartbeat {-age:.0f}s in the future > max_clock_skew_s={cfg.max_clock_skew_s:g} (clock skew)"
    return None


def peer_exclusion(me: MemberRecord, peer: MemberRecord, cfg: PopulationConfig, now: float) -> str | None:
    """Why ``peer`` is not compared with ``me`` (``None`` when it is)."""
    return peer_entry(me, peer, cfg, now)[1]


def my_ineligibility(me: MemberRecord, cfg: PopulationConfig) -> str | None:
    """Why ``me`` may not decide now (``None`` when it may): too little settled evidence of my generation,
    inside a grace period, out of restarts, or the protected reference."""
    if protected_reference(me, cfg):
        return f"protect_reference: member {REFERENCE_MEMBER} trains the yaml's values to the end"
    ev = me.evidence
    if ev.generation != me.generation or ev.count < cfg.min_episodes:
        return (
            f"my window has {ev.count} episodes of generation {ev.generation} "
            f"(< min_episodes={cfg.min_episodes} of generation {me.generation})"
        )
    if not ev.settled:
        return f"my generation {me.generation} has not settled (not every env has finished an episode begun in it)"
    if me.frame < cfg.resolved_start_grace():
        return f"start grace: frame {me.frame} < start_grace_frames={cfg.resolved_start_grace()}"
    in_generation = me.frame - me.generation_start_frame
    if me.generation > 0 and in_generation < cfg.resolved_restart_grace():
        return (
            f"restart grace: {in_generation} frames in generation {me.generation} "
            f"< restart_grace_frames={cfg.resolved_restart_grace()}"
        )
    if out_of_restarts(me, cfg):
        return f"max_restarts={cfg.max_restarts} reached"
    if frozen(me, cfg):
        return f"freeze_at_frame: frame {me.frame} >= {cfg.freeze_at_frame}, kept to the end"
    return None


def build_field(
    me: MemberRecord,
    peers: Sequence[MemberRecord],
    cfg: PopulationConfig,
    now: float,
    semantics: int = MUTATION_SEMANTICS,
) -> Field:
    """Me and the peers that count, each at the evidence it is compared by (under the rules of ``semantics``)."""
    ev = me.evidence
    standings = {me.member: Standing(me.member, me.frame, ev.mean, ev.std, ev.count, None)}
    excluded: dict[int, str] = {}
    for peer in sorted(peers, key=lambda r: r.member):
        entry, why = peer_entry(me, peer, cfg, now, semantics)
        if why is None and peer.member in standings:
            why = "duplicate record for this member"
        if why is None and entry is not None:
            standings[peer.member] = Standing(peer.member, entry.frame, entry.mean, entry.std, entry.count, entry)
        elif peer.member != me.member:
            excluded[peer.member] = why or "excluded"
    scores = {m: cfg.score(s.mean) for m, s in standings.items()}
    ranked = tuple(sorted(scores, key=lambda m: (-scores[m], m)))
    common = dict(
        excluded=excluded,
        compared=ranked,
        objectives={m: s.mean for m, s in standings.items()},
        compared_frames={m: s.frame for m, s in standings.items()},
    )
    unsettled = set()
    if cfg.unsettled_fill_worst:  # only this option reads them
        unsettled = {p.member for p in peers if p.member in excluded and _unsettled(me, p, cfg, now, semantics)}
    cannot_act = {}
    if semantics >= 4:
        compared = (p for p in peers if p.member != me.member and p.member in standings)
        cannot_act = {p.member: why for p in compared if (why := _acts_no_more(p, cfg)) is not None}
    return Field(me, standings, ranked, scores, common, tuple(sorted(unsettled)), dict(sorted(cannot_act.items())))


def _acts_no_more(peer: MemberRecord, cfg: PopulationConfig) -> str | None:
    """Why ``peer`` will not change generation again (so cannot be replaced), or ``None`` while it can."""
    if peer.status != "running":
        return peer.status
    if out_of_restarts(peer, cfg):
        return f"out of restarts (max_restarts={cfg.max_restarts})"
    if protected_reference(peer, cfg):
        return "the protected reference"
    if frozen(peer, cfg):
        return f"frozen (freeze_at_frame={cfg.freeze_at_frame})"
    return None


def frozen(record: MemberRecord, cfg: PopulationConfig) -> bool:
    """The member has reached ``freeze_at_frame``: it keeps to the end (never under -1)."""
    return 0 <= cfg.freeze_at_frame <= record.frame


def protected_reference(record: MemberRecord, cfg: PopulationConfig) -> bool:
    """The member is the reference and ``protect_reference`` is on: it never changes generation."""
    return cfg.protect_reference and record.member == REFERENCE_MEMBER


def out_of_restarts(record: MemberRecord, cfg: PopulationConfig) -> bool:
    """The member has changed generation ``max_restarts`` times and may not again (never under -1, no limit): it
    keeps at its own decisions and holds no slot of its peers' worst group."""
    return cfg.max_restarts >= 0 and record.restarts >= cfg.max_restarts


def _unsettled(me: MemberRecord, peer: MemberRecord, cfg: PopulationConfig, now: float, semantics: int) -> bool:
    """``peer`` trains a new generation that has not settled yet and passes every other check of :func:`peer_entry`
    at its previous generation's entries (live, my objective and condition, not far behind)."""
    return _in_unsettled_generation(peer) and peer_entry(me, peer, cfg, now, semantics, settled_only=False)[1] is None


def _in_unsettled_generation(peer: MemberRecord) -> bool:
    """Its newest history entry is of an older generation: it changed generation and the new one has not settled."""
    return bool(peer.history) and peer.history[-1].generation < peer.generation


def donor_candidates(fld: Field, members: Sequence[int]) -> list[int]:
    """Of ``members``, those an exploit may copy: not me, an entry with a checkpoint, not what I hold."""
    out = []
    for m in members:
        entry = fld.standings[m].entry
        if m == fld.me.member or entry is None or not entry.checkpoint or not entry.checkpoint_sha256:
            continue
        if fld.me.origin_sha256 and entry.checkpoint_sha256 == fld.me.origin_sha256:
            continue  # my current generation was copied from exactly this checkpoint
        out.append(m)
    return out


def exploit_decision(
    rule: str, fld: Field, donor: int, reasons: Sequence[str], thresholds: dict[str, float]
) -> Decision:
    """An ``exploit`` decision copying ``donor``, with the field's comparison and the donor's compared entry."""
    return Decision(
        Outcome.EXPLOIT,
        rule,
        donor,
        tuple(reasons),
        thresholds=thresholds,
        donor_entry=fld.standings[donor].entry,
        **fld.common,
    )


def explore_decision(rule: str, fld: Field, reasons: Sequence[str], thresholds: dict[str, float]) -> Decision:
    """An ``explore`` decision (new hyperparameters, own weights), with the field's comparison."""
    return Decision(Outcome.EXPLORE, rule, None, tuple(reasons), thresholds=thresholds, **fld.common)
