"""Selection: a pure function from (my record, peers' records, config, rng, now) to a :class:`Decision`.

Nothing here reads files or clocks: ``now`` is an input, so the audit verifier can recompute every
decision from the values recorded in its entry. The steps are always the same:

1. **Am I eligible?** enough evidence, past the start and restart grace periods, under ``max_restarts``.
2. **Which peers count?** A peer is excluded (with the reason recorded) when it is me, its heartbeat is
   too old or in the future, its evidence belongs to an older generation, its window holds fewer than
   ``min_episodes`` episodes, its condition label differs from mine, or its frames are not comparable
   to mine (too far ahead, or lagging more than the cap).
3. **The rule** (``dexpbt``, ``isaaclab``, ``welch``) compares the window means of me and the eligible
   peers and returns keep, exploit (with a donor) or explore (mutate my own hyperparameters).

The donor is never me, never an excluded peer and never a peer without a published checkpoint.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.mutation import MemberRng
from async_pbt_isaaclab.core.records import MemberRecord


class Outcome(str, enum.Enum):
    """What a member does after a decision."""

    KEEP = "keep"
    """Carry on training unchanged."""
    EXPLOIT = "exploit"
    """Copy the donor's checkpoint, mutate hyperparameters, restart as a new generation."""
    EXPLORE = "explore"
    """Keep my weights, mutate my hyperparameters, restart as a new generation."""


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
    """Window mean of every compared member."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "rule": self.rule,
            "donor": self.donor,
            "reasons": list(self.reasons),
            "compared": list(self.compared),
            "excluded": {str(k): v for k, v in sorted(self.excluded.items())},
            "thresholds": dict(self.thresholds),
            "objectives": {str(k): v for k, v in sorted(self.objectives.items())},
        }

    def summary(self) -> str:
        head = self.outcome.value if self.donor is None else f"{self.outcome.value} from {self.donor}"
        return f"{head}: {self.reasons[-1]}" if self.reasons else head


def _keep(rule: str, reason: str, **kw: Any) -> Decision:
    return Decision(Outcome.KEEP, rule, None, tuple(kw.pop("reasons", ())) + (reason,), **kw)


def peer_exclusion(me: MemberRecord, peer: MemberRecord, cfg: PopulationConfig, now: float) -> str | None:
    """Why ``peer`` must not be compared with ``me`` (``None`` when it may)."""
    if peer.member == me.member:
        return "is me"
    age = now - peer.heartbeat
    if age > cfg.max_heartbeat_age_s:
        return f"stale: heartbeat {age:.0f}s old > max_heartbeat_age_s={cfg.max_heartbeat_age_s:g}"
    if -age > cfg.max_clock_skew_s:
        return f"heartbeat {-age:.0f}s in the future > max_clock_skew_s={cfg.max_clock_skew_s:g} (clock skew)"
    if peer.evidence.generation != peer.generation:
        return f"stale: evidence from generation {peer.evidence.generation}, member is at generation {peer.generation}"
    if peer.evidence.count < cfg.min_episodes:
        return f"window has {peer.evidence.count} episodes < min_episodes={cfg.min_episodes}"
    if peer.evidence.objective != me.evidence.objective:
        return f"objective {peer.evidence.objective!r} != mine {me.evidence.objective!r}"
    diffs = me.condition.differences(peer.condition)
    if diffs:
        return "incompatible condition: " + "; ".join(diffs)
    ahead = peer.frame - me.frame
    if ahead > cfg.resolved_frame_tolerance():
        return f"ahead by {ahead} frames > frame_tolerance={cfg.resolved_frame_tolerance()}"
    if -ahead > cfg.resolved_max_frame_lag():
        return f"stale: lags by {-ahead} frames > max_frame_lag={cfg.resolved_max_frame_lag()}"
    return None


def _donor_ok(peer: MemberRecord) -> bool:
    return peer.checkpoint is not None and peer.checkpoint_sha256 is not None


def decide(
    me: MemberRecord,
    peers: Sequence[MemberRecord],
    cfg: PopulationConfig,
    rng: MemberRng,
    now: float,
) -> Decision:
    """Decide keep / exploit / explore for ``me``. Pure: same inputs and RNG state, same decision."""
    rule = cfg.rule
    if me.evidence.count < cfg.min_episodes or me.evidence.generation != me.generation:
        return _keep(rule, f"my window has {me.evidence.count} episodes of generation {me.evidence.generation} "
                           f"(< min_episodes={cfg.min_episodes} of generation {me.generation})")
    if me.frame < cfg.resolved_start_grace():
        return _keep(rule, f"start grace: frame {me.frame} < start_grace_frames={cfg.resolved_start_grace()}")
    in_generation = me.frame - me.generation_start_frame
    if me.generation > 0 and in_generation < cfg.resolved_restart_grace():
        return _keep(rule, f"restart grace: {in_generation} frames in generation {me.generation} "
                           f"< restart_grace_frames={cfg.resolved_restart_grace()}")
    if cfg.max_restarts >= 0 and me.restarts >= cfg.max_restarts:
        return _keep(rule, f"max_restarts={cfg.max_restarts} reached")

    excluded: dict[int, str] = {}
    eligible: dict[int, MemberRecord] = {}
    for peer in sorted(peers, key=lambda r: r.member):
        why = peer_exclusion(me, peer, cfg, now)
        if why is None and peer.member in eligible:
            why = "duplicate record for this member"
        if why is None:
            eligible[peer.member] = peer
        elif peer.member != me.member:
            excluded[peer.member] = why
    members = {me.member: me, **eligible}
    objectives = {m: r.evidence.mean for m, r in members.items()}
    # Best first; ties broken by member index so the order never depends on input order.
    ranked = tuple(sorted(objectives, key=lambda m: (-objectives[m], m)))
    common = dict(excluded=excluded, compared=ranked, objectives=objectives)
    if len(members) < cfg.min_members:
        return _keep(rule, f"{len(members)} compatible live members with evidence < min_members={cfg.min_members}", **common)

    if rule == "dexpbt":
        return _dexpbt(me, members, ranked, objectives, cfg, rng, common)
    if rule == "isaaclab":
        return _isaaclab(me, members, ranked, objectives, cfg, rng, common)
    if rule == "welch":
        return _welch(me, members, ranked, objectives, cfg, rng, common)
    if rule == "fixture_forced_exploit":
        return _fixture_forced(me, members, ranked, common)
    if rule == "fixture_exploit_every_decision":
        return _fixture_every_decision(me, members, ranked, common)
    raise ValueError(f"unknown selection rule {rule!r}")


def _group_size(fraction: float, n: int) -> int:
    return max(1, int(math.floor(fraction * n)))


def _trimmed_std(values: list[float], trim: float) -> float:
    vals = sorted(values)
    k = int(math.floor(trim * len(vals)))
    core = vals[k: len(vals) - k] if len(vals) - 2 * k >= 2 else vals
    if len(core) < 2:
        return 0.0
    m = math.fsum(core) / len(core)
    return math.sqrt(math.fsum((v - m) ** 2 for v in core) / len(core))


def _dexpbt(me, members, ranked, objectives, cfg, rng, common) -> Decision:
    n = len(ranked)
    k_worst = _group_size(cfg.worst_fraction, n)
    k_top = _group_size(cfg.top_fraction, n)
    top = ranked[:k_top]
    worst = ranked[n - k_worst:]
    top_cutoff = objectives[top[-1]]
    leader = objectives[ranked[0]]
    t_std = _trimmed_std(list(objectives.values()), cfg.trim_fraction)
    required_gap = max(cfg.gap_std_fraction * t_std, cfg.gap_leader_fraction * abs(leader))
    thresholds = {"top_cutoff": top_cutoff, "trimmed_std": t_std, "required_gap": required_gap,
                  "k_top": float(k_top), "k_worst": float(k_worst)}
    reasons = [f"rank {ranked.index(me.member) + 1}/{n}"]
    if me.member not in worst:
        return _keep("dexpbt", f"not in the worst {k_worst} of {n}", thresholds=thresholds, reasons=reasons, **common)
    if cfg.protect_interval_best and me.interval_best is not None and me.interval_best >= top_cutoff:
        return _keep("dexpbt", f"protected: best window mean this interval {me.interval_best:.6g} reaches the top "
                               f"group cut-off {top_cutoff:.6g}", thresholds=thresholds, reasons=reasons, **common)
    candidates = [m for m in top if m != me.member and _donor_ok(members[m])]
    if not candidates:
        return _keep("dexpbt", "no member of the top group has a published checkpoint",
                     thresholds=thresholds, reasons=reasons, **common)
    donor = candidates[rng.choice_index(len(candidates))]
    gap = objectives[donor] - objectives[me.member]
    thresholds["gap"] = gap
    if gap <= required_gap:
        return _keep("dexpbt", f"gap to donor {donor} is {gap:.6g} <= required {required_gap:.6g} "
                               f"(max(gap_std_fraction*trimmed_std, gap_leader_fraction*|leader|))",
                     thresholds=thresholds, reasons=reasons, **common)
    reasons.append(f"in the worst {k_worst} of {n}; donor {donor} drawn from the top {k_top}; "
                   f"gap {gap:.6g} > required {required_gap:.6g}")
    return Decision(Outcome.EXPLOIT, "dexpbt", donor, tuple(reasons), thresholds=thresholds, **common)


def _isaaclab(me, members, ranked, objectives, cfg, rng, common) -> Decision:
    vals = [objectives[m] for m in ranked]
    mean = math.fsum(vals) / len(vals)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))  # population std, as Isaac Lab
    upper = max(mean + cfg.threshold_std * std, mean + cfg.threshold_abs)
    lower = min(mean - cfg.threshold_std * std, mean - cfg.threshold_abs)
    thresholds = {"mean": mean, "std": std, "upper": upper, "lower": lower}
    leaders = [m for m in ranked if objectives[m] > upper and m != me.member and _donor_ok(members[m])]
    mine = objectives[me.member]
    if mine >= lower:
        return _keep("isaaclab", f"objective {mine:.6g} >= lower cut {lower:.6g}", thresholds=thresholds, **common)
    if leaders:
        # Sorted so the draw depends only on the set of leaders.
        leaders.sort()
        donor = leaders[rng.choice_index(len(leaders))]
        return Decision(Outcome.EXPLOIT, "isaaclab", donor,
                        (f"objective {mine:.6g} < lower cut {lower:.6g}; donor {donor} drawn from leaders {leaders} "
                         f"above {upper:.6g}",), thresholds=thresholds, **common)
    if cfg.explore_without_donor:
        return Decision(Outcome.EXPLORE, "isaaclab", None,
                        (f"objective {mine:.6g} < lower cut {lower:.6g} and no leader above {upper:.6g}: "
                         f"explore from my own weights",), thresholds=thresholds, **common)
    return _keep("isaaclab", f"underperformer but no leader above {upper:.6g}", thresholds=thresholds, **common)


def welch_p_value(donor: Sequence[float], mine: Sequence[float]) -> float:
    """One-sided p-value of Welch's t-test for "donor's mean > my mean"."""
    import numpy as np
    from scipy import stats

    a, b = np.asarray(donor, dtype=float), np.asarray(mine, dtype=float)
    if len(a) < 2 or len(b) < 2 or (a.var(ddof=1) == 0 and b.var(ddof=1) == 0):
        # Degenerate windows (e.g. all-success): the test is undefined; decide on the means alone.
        return 0.0 if a.mean() > b.mean() else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)


def _welch(me, members, ranked, objectives, cfg, rng, common) -> Decision:
    n = len(ranked)
    k_worst = _group_size(cfg.worst_fraction, n)
    k_top = _group_size(cfg.top_fraction, n)
    worst = ranked[n - k_worst:]
    if me.member not in worst:
        return _keep("welch", f"not in the worst {k_worst} of {n}", **common)
    candidates = [m for m in ranked[:k_top] if m != me.member and _donor_ok(members[m])]
    if not candidates:
        return _keep("welch", "no member of the top group has a published checkpoint", **common)
    donor = candidates[rng.choice_index(len(candidates))]
    p = welch_p_value(members[donor].evidence.values, me.evidence.values)
    thresholds = {"p_value": p, "alpha": cfg.welch_alpha}
    if not p < cfg.welch_alpha:
        return _keep("welch", f"donor {donor} not significantly better: p={p:.4g} >= alpha={cfg.welch_alpha:g}",
                     thresholds=thresholds, **common)
    return Decision(Outcome.EXPLOIT, "welch", donor,
                    (f"in the worst {k_worst} of {n}; donor {donor} better with p={p:.4g} < alpha={cfg.welch_alpha:g}",),
                    thresholds=thresholds, **common)


def _fixture_forced(me, members, ranked, common) -> Decision:
    """Test fixture: in generation 0, every member except the lowest-index one exploits it."""
    donors = sorted(m for m in members if m != me.member and _donor_ok(members[m]))
    if me.generation > 0 or not donors or me.member < donors[0]:
        return _keep("fixture_forced_exploit", "fixture: only generation-0 members above the lowest index exploit", **common)
    return Decision(Outcome.EXPLOIT, "fixture_forced_exploit", donors[0],
                    (f"fixture: forced exploit of member {donors[0]}",), **common)


def _fixture_every_decision(me, members, ranked, common) -> Decision:
    """Test fixture: every decision exploits the best-ranked peer that has a checkpoint, whatever the gap.
    Gives a reliability harness exploit windows at a steady rate that no objective value can change."""
    donors = [m for m in ranked if m != me.member and _donor_ok(members[m])]
    if not donors:
        return _keep("fixture_exploit_every_decision", "fixture: no peer with a checkpoint to exploit", **common)
    return Decision(Outcome.EXPLOIT, "fixture_exploit_every_decision", donors[0],
                    (f"fixture: exploit at every decision, best peer {donors[0]}",), **common)
