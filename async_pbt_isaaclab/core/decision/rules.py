"""The selection rules: ``dexpbt``, ``isaaclab`` and ``welch``, each a :class:`RuleSpec` (name, decision function,
the config keys it reads), listed with the test fixtures in :mod:`async_pbt_isaaclab.core.decision.catalog`.

A rule is a pure function ``(field, cfg, rng) -> Decision`` over the members that count
(:class:`~async_pbt_isaaclab.core.decision.selection.Field`: me and every compared peer at matching progress,
ranked best first on the ``objective_direction`` scale); :func:`~async_pbt_isaaclab.core.decision.step.decide` runs
the shared selection steps and hands the field to the configured rule. To add a rule, write its function and its
:class:`RuleSpec` and list it in the catalog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.registry import OptionalExtra
from async_pbt_isaaclab.core.decision.selection import (
    Decision,
    Field,
    Standing,
    donor_candidates,
    exploit_decision,
    explore_decision,
    keep_decision,
)
from async_pbt_isaaclab.core.state.member_rng import MemberRng

RuleFunction = Callable[[Field, PopulationConfig, MemberRng], Decision]
"""``(field, cfg, rng) -> Decision``: pure; draws only through ``rng``."""


@dataclass(frozen=True)
class RuleSpec:
    """One selection rule."""

    name: str
    """Value of ``pbt.rule``."""
    decide: RuleFunction
    """The decision function."""
    keys: tuple[str, ...]
    """Config keys only this rule (or a few rules) reads; check-config warns when others set them."""
    summary: str = ""
    """One line for ``--help`` and docs."""
    fixture: bool = False
    """A test fixture: refused unless ``ASYNC_PBT_TEST_FIXTURE`` names it."""
    needs: OptionalExtra | None = None
    """The optional dependency it needs (a config naming it is refused when that cannot be imported)."""


# ------------------------------------------------------------------------------------------ helpers


def group_size(fraction: float, n: int) -> int:
    """How many of ``n`` members a group of ``fraction`` holds (at least one)."""
    return max(1, math.floor(fraction * n))


def worst_group(fld: Field, cfg: PopulationConfig) -> tuple[tuple[int, ...], str]:
    """The compared members in the worst group, and the group in words for the reasons. The group is
    ``worst_fraction`` of the compared members; with ``unsettled_fill_worst`` of them and the unsettled peers,
    whose slots come first (they left the worst group at their own decision and are being refilled). Peers that will
    not change generation again (out of restarts, finished, stopped) count in the population but hold no slot: the
    slots go to the lowest ranked members that can act."""
    n = len(fld.ranked)
    held = len(fld.unsettled)  # empty unless unsettled_fill_worst
    k = group_size(cfg.worst_fraction, n + held)
    words = f"worst {k} of {n + held}"
    if held:
        words += f" (unsettled peers {list(fld.unsettled)} take its slots first)"
    if fld.cannot_act:
        why = "; ".join(f"{m} {reason}" for m, reason in fld.cannot_act.items())
        words += f" (peers that will not act again hold no slot: {why})"
    can_act = [m for m in fld.ranked if m not in fld.cannot_act]
    return tuple(can_act[max(0, len(can_act) - (k - held)) :]) if k > held else (), words


def low_trimmed_std(values: list[float], trim: float) -> float:
    """Population std (ddof 0) after leaving out the ``floor(trim * n)`` lowest values (at least two stay).

    Only the low tail is cut, as DexPBT does: a member that collapsed (or just restarted) must not
    inflate the spread that decides whether a gap is worth a copy, while a real leader still counts.
    """
    vals = sorted(values)
    k = math.floor(trim * len(vals))
    core = vals[k:] if len(vals) - k >= 2 else vals
    if len(core) < 2:
        return 0.0
    m = math.fsum(core) / len(core)
    return math.sqrt(math.fsum((v - m) ** 2 for v in core) / len(core))


def standard_error_of_difference(a: Standing, b: Standing) -> float:
    """Standard error of the difference of two window means, ``sqrt(s_a^2/n_a + s_b^2/n_b)`` (sample stds): how
    far apart two members' means lie by sampling noise alone. Invariant to a constant added to every objective."""
    return math.sqrt(sum(s.std**2 / s.count for s in (a, b) if s.count > 0))


def welch_p_value(donor: tuple[float, float, int], mine: tuple[float, float, int]) -> float:
    """One-sided p-value of Welch's t-test for "donor's mean > my mean", from (mean, sample std, count)."""
    from scipy import stats

    (m1, s1, n1), (m2, s2, n2) = donor, mine
    if n1 < 2 or n2 < 2 or (s1 == 0 and s2 == 0):
        # Degenerate windows (e.g. all-success): the test is undefined; decide on the means alone.
        return 0.0 if m1 > m2 else 1.0
    return float(stats.ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False, alternative="greater").pvalue)


# ------------------------------------------------------------------------------------------ rules


def dexpbt(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """DexPBT: the worst group copies a random member of the top group, or explores in place when the gap
    to it is small (docs/selection.md lists where this differs from IsaacGymEnvs' pbt.py)."""
    me, ranked, scores = fld.me.member, fld.ranked, fld.scores
    n = len(ranked)
    k_top = group_size(cfg.top_fraction, n)
    top, (worst, group) = ranked[:k_top], worst_group(fld, cfg)
    top_cutoff = scores[top[-1]]
    t_std = low_trimmed_std(list(scores.values()), cfg.trim_fraction)
    thresholds = {
        "top_cutoff": cfg.score(top_cutoff),
        "trimmed_std": t_std,
        "k_top": float(k_top),
        "k_worst": float(len(worst)),
    }
    reasons = [f"rank {ranked.index(me) + 1}/{n}"]
    common = dict(fld.common)
    if me not in worst:
        return keep_decision("dexpbt", f"not in the {group}", thresholds=thresholds, reasons=reasons, **common)
    best = fld.me.interval_best
    if cfg.protect_interval_best and best is not None and cfg.score(best) >= top_cutoff:
        return keep_decision(
            "dexpbt",
            f"protected: best window mean this interval {best:.6g} reaches the top group "
            f"cut-off {cfg.score(top_cutoff):.6g}",
            thresholds=thresholds,
            reasons=reasons,
            **common,
        )
    candidates = donor_candidates(fld, top)
    if not candidates:
        reasons.append(
            f"in the {group}, and no member of the top {k_top} has a checkpoint I do not already hold: explore in place"
        )
        return explore_decision("dexpbt", fld, reasons, thresholds)
    donor = candidates[rng.choice_index(len(candidates))]
    donor_mean = fld.standings[donor].mean
    noise = standard_error_of_difference(fld.standings[donor], fld.standings[me])
    required_gap = max(cfg.gap_std_fraction * t_std, cfg.gap_donor_fraction * abs(donor_mean), cfg.gap_z * noise)
    gap = scores[donor] - scores[me]
    thresholds.update(required_gap=required_gap, gap=gap, standard_error=noise)
    if gap <= required_gap:
        reasons.append(
            f"in the {group}; gap to donor {donor} is {gap:.6g} <= required "
            f"{required_gap:.6g} (max(gap_std_fraction*trimmed_std, gap_donor_fraction*|donor|, "
            f"gap_z*standard error {noise:.6g})): explore in place"
        )
        return explore_decision("dexpbt", fld, reasons, thresholds)
    reasons.append(
        f"in the {group}; donor {donor} (at frame {fld.standings[donor].frame}) drawn "
        f"from the top {k_top}; gap {gap:.6g} > required {required_gap:.6g}"
    )
    return exploit_decision("dexpbt", fld, donor, reasons, thresholds)


def isaaclab(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """Isaac Lab's bands: an underperformer below mean - max(k*std, abs) copies a leader above the upper band."""
    me, ranked, scores = fld.me.member, fld.ranked, fld.scores
    vals = [scores[m] for m in ranked]
    mean = math.fsum(vals) / len(vals)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))  # population std, as Isaac Lab
    upper = max(mean + cfg.threshold_std * std, mean + cfg.threshold_abs)
    lower = min(mean - cfg.threshold_std * std, mean - cfg.threshold_abs)
    thresholds = {"mean": mean, "std": std, "upper": upper, "lower": lower}
    common = dict(fld.common)
    mine = scores[me]
    if mine >= lower:
        return keep_decision(
            "isaaclab",
            f"objective {cfg.score(mine):.6g} within the lower cut {cfg.score(lower):.6g}",
            thresholds=thresholds,
            **common,
        )
    # Sorted so the draw depends only on the set of leaders.
    leaders = sorted(donor_candidates(fld, [m for m in ranked if scores[m] > upper]))
    if leaders:
        donor = leaders[rng.choice_index(len(leaders))]
        return exploit_decision(
            "isaaclab",
            fld,
            donor,
            [
                f"objective {cfg.score(mine):.6g} beyond the lower cut {cfg.score(lower):.6g}; donor {donor} drawn "
                f"from leaders {leaders} beyond {cfg.score(upper):.6g}"
            ],
            thresholds,
        )
    if cfg.explore_without_donor:
        return explore_decision(
            "isaaclab",
            fld,
            [
                f"objective {cfg.score(mine):.6g} beyond the lower cut {cfg.score(lower):.6g} and no leader beyond "
                f"{cfg.score(upper):.6g}: explore from my own weights"
            ],
            thresholds,
        )
    return keep_decision(
        "isaaclab", f"underperformer but no leader beyond {cfg.score(upper):.6g}", thresholds=thresholds, **common
    )


def welch(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """The worst group copies a top-group donor only when Welch's t-test says the donor is better."""
    me, ranked = fld.me.member, fld.ranked
    k_top = group_size(cfg.top_fraction, len(ranked))
    worst, group = worst_group(fld, cfg)
    common = dict(fld.common)
    if me not in worst:
        return keep_decision("welch", f"not in the {group}", **common)
    candidates = donor_candidates(fld, ranked[:k_top])
    if not candidates:
        return keep_decision("welch", "no member of the top group has a checkpoint I do not already hold", **common)
    donor = candidates[rng.choice_index(len(candidates))]
    d, m = fld.standings[donor], fld.standings[me]
    p = welch_p_value((cfg.score(d.mean), d.std, d.count), (cfg.score(m.mean), m.std, m.count))
    thresholds = {"p_value": p, "alpha": cfg.welch_alpha}
    if not p < cfg.welch_alpha:
        return keep_decision(
            "welch",
            f"donor {donor} not significantly better: p={p:.4g} >= alpha={cfg.welch_alpha:g}",
            thresholds=thresholds,
            **common,
        )
    return exploit_decision(
        "welch",
        fld,
        donor,
        [f"in the {group}; donor {donor} better with p={p:.4g} < alpha={cfg.welch_alpha:g}"],
        thresholds,
    )


DEXPBT = RuleSpec(
    "dexpbt",
    dexpbt,
    (
        "worst_fraction",
        "unsettled_fill_worst",
        "top_fraction",
        "gap_std_fraction",
        "gap_donor_fraction",
        "gap_z",
        "trim_fraction",
        "protect_interval_best",
    ),
    "worst group copies a top-group donor, or explores in place when the gap is small",
)
ISAACLAB = RuleSpec(
    "isaaclab",
    isaaclab,
    ("threshold_std", "threshold_abs", "explore_without_donor"),
    "Isaac Lab's mean +- max(k*std, abs) bands",
)
WELCH = RuleSpec(
    "welch",
    welch,
    ("worst_fraction", "unsettled_fill_worst", "top_fraction", "welch_alpha"),
    "worst group copies a donor that Welch's t-test finds better",
    needs=OptionalExtra(
        ("scipy.stats",),
        "welch",
        "welch needs scipy (its Welch t-test)",
        keep=("numpy",),
    ),
)
"""The rules a user may choose; :mod:`async_pbt_isaaclab.core.decision.catalog` lists them."""
