"""Selection (async_pbt_isaaclab.core.decision.selection and the rules in core/decision/rules.py): unit tests and
Hypothesis properties.

What is shown here:
1. decide is deterministic: same inputs and RNG state give the same Decision and the same RNG state
   after; the order of the peer list does not matter;
2. a member never copies itself, a stale peer (old heartbeat, heartbeat from the future, evidence of an
   older generation, too few episodes, too far ahead, lagging past the cap), an incompatible peer
   (condition label differs) or a peer without a checkpoint; every excluded peer is recorded with why;
3. no decision inside the start / restart grace periods, or with fewer than min_members;
4. dexpbt: only the worst group exploits, from the top group, past the required gap; a member whose
   best window this interval reaches the top group is protected;
5. isaaclab: bands are mean +- max(threshold_std*std, threshold_abs) with the population std;
   below the band with a leader above it exploits, without one explores;
6. welch: compares the per-episode windows with Welch's one-sided t-test at welch_alpha.
"""

from __future__ import annotations

import dataclasses
import random
import statistics

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from scipy import stats

from async_pbt_isaaclab.core.decision.rules import welch_p_value
from async_pbt_isaaclab.core.decision.selection import Outcome, peer_exclusion
from async_pbt_isaaclab.core.decision.step import decide
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.core.state.member_rng import MemberRng

NOW = 1_700_000_000.0
FRAME = 100_000
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def cfg_(**kw):
    base = {"interval_steps": 1000, "min_episodes": 8, "window": 16}
    base.update(kw)
    return population_config_from_dict(base)


def const(mean, n=16, spread=0.5):
    """A window of ``n`` values with the given mean (exactly, for even ``n``) and a small spread."""
    return [mean + (spread if i % 2 else -spread) for i in range(n)]


def replace(rec, **kw):
    return dataclasses.replace(rec, **kw)


def at_frame(rec, frame):
    """``rec`` published at ``frame`` (its newest history entry moved there too)."""
    history = rec.history[:-1] + (dataclasses.replace(rec.history[-1], frame=frame),) if rec.history else ()
    return dataclasses.replace(rec, frame=frame, history=history)


# ------------------------------------------------------------------ basics


def test_worst_member_exploits_a_better_peer(make_record):
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    d = decide(me, [me, peer], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 1
    assert d.compared == (1, 0)
    assert d.objectives == {0: pytest.approx(0.0), 1: pytest.approx(10.0)}
    assert d.excluded == {}
    # The better one keeps.
    d2 = decide(peer, [me, peer], cfg_(), MemberRng(0), NOW)
    assert d2.outcome is Outcome.KEEP and d2.donor is None


def test_deterministic_same_decision_and_rng_state(make_record):
    recs = [make_record(i, const(float(i * 3)), now=NOW, frame=FRAME) for i in range(8)]
    cfg = cfg_(top_fraction=0.5)
    rng_a, rng_b = MemberRng(42), MemberRng(42)
    a = decide(recs[0], recs, cfg, rng_a, NOW)
    b = decide(recs[0], recs, cfg, rng_b, NOW)
    assert a == b and a.outcome is Outcome.EXPLOIT
    assert rng_a.get_state() == rng_b.get_state()
    # The donor draw really uses the RNG: over seeds, several top members get picked.
    donors = {decide(recs[0], recs, cfg, MemberRng(s), NOW).donor for s in range(40)}
    assert donors == {7, 6, 5, 4}


def test_never_picks_itself_even_when_listed_twice(make_record):
    me = make_record(3, const(0.0), now=NOW, frame=FRAME)
    better_me = replace(me, evidence=dataclasses.replace(me.evidence, values=tuple(const(50.0))))
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    d = decide(me, [better_me, me, peer], cfg_(), MemberRng(0), NOW)
    assert d.donor == 1
    assert 3 not in d.excluded  # being me is not an exclusion worth reporting


# ------------------------------------------------------------------ exclusions


STALE_CASES = {
    "old heartbeat": (dict(heartbeat_age=601.0), "heartbeat"),
    "heartbeat from the future": (dict(heartbeat_age=-61.0), "clock skew"),
    "old-generation evidence": (dict(generation=1, evidence_generation=0, generation_start_frame=0), "generation 0"),
    "too few episodes": (dict(values=const(100.0, n=7)), "min_episodes"),
    "no entry at or before my frame": (dict(frame=FRAME + 1001), "no history entry at or before my frame"),
    "lagging past a set cap": (dict(frame=FRAME - 10_001, cfg={"max_frame_lag": 10_000}), "max_frame_lag"),
    "far behind, by default": (dict(frame=FRAME - 8_001), "far behind"),
    "other task": (dict(task="Isaac-Other-v0"), "incompatible condition"),
}


@pytest.mark.parametrize("case", sorted(STALE_CASES))
def test_stale_or_incompatible_peer_is_never_the_donor(make_record, case):
    kwargs, fragment = STALE_CASES[case]
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    ok = make_record(1, const(10.0), now=NOW, frame=FRAME)
    stale_kw = dict(values=const(100.0), now=NOW, frame=FRAME)
    stale_kw.update(kwargs)
    config = stale_kw.pop("cfg", {})
    stale = make_record(2, stale_kw.pop("values"), **stale_kw)
    d = decide(me, [me, ok, stale], cfg_(**config), MemberRng(0), NOW)
    # Had the stale member counted, it would be the only top member and the donor.
    assert d.outcome is Outcome.EXPLOIT and d.donor == 1
    assert 2 not in d.compared and 2 not in d.objectives
    assert fragment in d.excluded[2], d.excluded


def test_frame_and_clock_limits_are_inclusive(make_record):
    cfg = cfg_()
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    # max_frame_lag: -1 is 8 intervals (8,000 frames here).
    for kw in (dict(frame=FRAME), dict(frame=FRAME - 8_000), dict(heartbeat_age=600.0), dict(heartbeat_age=-60.0)):
        peer = make_record(1, const(1.0), now=NOW, **{"frame": FRAME, **kw})
        assert peer_exclusion(me, peer, cfg, NOW) is None, kw


def test_condition_label_difference_is_explained(make_record):
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    stage3 = ConditionLabel(task="t", curriculum_stage="3")
    peer = replace(
        peer, condition=stage3, history=tuple(dataclasses.replace(e, condition=stage3) for e in peer.history)
    )
    d = decide(me, [me, peer], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "min_members" in d.reasons[-1]
    assert "curriculum_stage '3'" in d.excluded[1]


def test_donor_without_checkpoint_is_never_chosen(make_record):
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    best_no_ckpt = make_record(1, const(20.0), now=NOW, frame=FRAME, checkpoint=False)
    second = make_record(2, const(15.0), now=NOW, frame=FRAME)
    cfg = cfg_(top_fraction=0.7)  # top group of 2: {1, 2}
    for seed in range(20):
        d = decide(me, [me, best_no_ckpt, second], cfg, MemberRng(seed), NOW)
        assert d.outcome is Outcome.EXPLOIT and d.donor == 2
    # If the only top member has no checkpoint: dexpbt explores in place (as DexPBT), and says why.
    d = decide(me, [me, best_no_ckpt], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLORE and d.donor is None and "checkpoint" in d.reasons[-1]
    # isaaclab and welch too.
    for rule in ("isaaclab", "welch"):
        d = decide(me, [me, best_no_ckpt], cfg_(rule=rule, explore_without_donor=False), MemberRng(0), NOW)
        assert d.donor is None, rule


def test_a_member_30_intervals_late_does_not_freeze_selection_among_the_others(make_record):
    """Four members, one 30 intervals behind and (being less trained) the lowest: ranked against the members ahead it
    took the worst slot at every decision, and the worst of the on-schedule members kept (50 of 50 trials before).
    Now it is left out of their ranking, so that member is in the worst group and acts at every decision."""
    late = make_record(3, const(-900.0), now=NOW, frame=FRAME - 30 * 1000)
    for trial in range(50):
        rng = MemberRng(trial)
        means = sorted((rng.uniform(-300.0, 0.0) for _ in range(3)), reverse=True)
        me = make_record(2, const(means[2] - 50.0), now=NOW, frame=FRAME)  # the worst of the three on schedule
        peers = [make_record(m, const(means[m]), now=NOW, frame=FRAME) for m in (0, 1)]
        d = decide(me, [me, *peers, late], cfg_(), rng, NOW)
        assert "far behind" in d.excluded[3] and 3 not in d.compared
        assert d.outcome is not Outcome.KEEP, d.reasons
    # The late member itself decides at its own progress: the others are compared at their entries at its frame.
    ahead = []
    for m in (0, 1):
        record = make_record(m, const(0.0), now=NOW, frame=FRAME)
        early = dataclasses.replace(record.history[0], frame=FRAME - 30 * 1000)
        ahead.append(replace(record, history=(early, record.history[0])))
    d = decide(late, [late, *ahead], cfg_(), MemberRng(0), NOW)
    assert d.compared_frames[0] == FRAME - 30 * 1000 and d.outcome is Outcome.EXPLOIT


def test_a_member_that_will_not_act_again_does_not_hold_the_worst_slot(make_record):
    """A peer that has used its ``max_restarts``, has finished or was stopped cannot be replaced: ranked in the worst
    group of four, it held the one slot at every decision of the members ahead of it, so the worst of the others kept
    and selection stopped for the rest of the run (or, for a finished one, until its heartbeat went stale). It still
    ranks and can be a donor; the worst slots go to members that can act."""
    me = make_record(2, const(-400.0), now=NOW, frame=FRAME)
    peers = [make_record(m, const(-100.0 * m), now=NOW, frame=FRAME) for m in (0, 1)]
    capped = make_record(3, const(-900.0), now=NOW, frame=FRAME, generation=3)
    ended = make_record(3, const(-900.0), now=NOW, frame=FRAME)
    for rule in ("dexpbt", "welch"):
        for last, cfg, why in (
            (capped, cfg_(rule=rule, max_restarts=3), "3 out of restarts (max_restarts=3)"),
            (replace(ended, status="finished"), cfg_(rule=rule), "3 finished"),
            (replace(ended, status="stopped"), cfg_(rule=rule), "3 stopped"),
        ):
            d = decide(me, [me, *peers, last], cfg, MemberRng(0), NOW)
            assert d.compared == (0, 1, 2, 3) and d.outcome is Outcome.EXPLOIT, (rule, why, d.reasons)
            assert f"(peers that will not act again hold no slot: {why})" in d.reasons[-1], d.reasons
        # Under a larger cap member 3 can still be replaced and holds the slot: member 2 keeps.
        d = decide(me, [me, *peers, capped], cfg_(rule=rule, max_restarts=4), MemberRng(0), NOW)
        assert d.outcome is Outcome.KEEP and d.reasons[-1] == "not in the worst 1 of 4", (rule, d.reasons)
    # Still a donor when it leads.
    leader = make_record(3, const(500.0), now=NOW, frame=FRAME, generation=3)
    d = decide(me, [me, *peers, leader], cfg_(max_restarts=3, top_fraction=0.25), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 3, d.reasons


def test_the_protected_reference_never_acts_and_holds_no_worst_slot(make_record):
    """``protect_reference``: member 0 trains the yaml's values to the end. Worst of four, it keeps; ranked last by
    the others, it holds no slot of their worst group, so the worst of them still acts; leading, it donates."""
    cfg = cfg_(protect_reference=True, top_fraction=0.25)
    ref = make_record(0, const(-900.0), now=NOW, frame=FRAME)
    peers = [make_record(m, const(-100.0 * m), now=NOW, frame=FRAME) for m in (1, 2, 3)]
    d = decide(ref, [ref, *peers], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and d.reasons[-1].startswith("protect_reference: member 0"), d.reasons
    d = decide(peers[2], [ref, *peers], cfg, MemberRng(0), NOW)
    assert (
        d.outcome is Outcome.EXPLOIT
        and "(peers that will not act again hold no slot: 0 the protected reference)" in (d.reasons[-1])
    ), d.reasons
    # Off (the default), member 0 is the worst and acts; member 3 keeps.
    assert decide(ref, [ref, *peers], cfg_(), MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    assert decide(peers[2], [ref, *peers], cfg_(), MemberRng(0), NOW).outcome is Outcome.KEEP
    leader = make_record(0, const(500.0), now=NOW, frame=FRAME)
    d = decide(peers[2], [leader, *peers], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 0, d.reasons


def test_a_member_past_freeze_at_frame_keeps_and_holds_no_worst_slot(make_record):
    """``freeze_at_frame``: a member that has reached it keeps to the end, whatever its rank; a peer that has reached
    it holds no slot of the worst group, so the worst member still short of it acts; before it, nothing changes."""
    worst = make_record(0, const(-900.0), now=NOW, frame=FRAME)
    peers = [make_record(m, const(-100.0 * m), now=NOW, frame=FRAME) for m in (1, 2, 3)]
    d = decide(worst, [worst, *peers], cfg_(freeze_at_frame=FRAME), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and d.reasons[-1] == f"freeze_at_frame: frame {FRAME} >= {FRAME}, kept to the end"
    assert decide(worst, [worst, *peers], cfg_(freeze_at_frame=FRAME + 1), MemberRng(0), NOW).outcome is not (
        Outcome.KEEP
    )
    # Member 0 has trained on past the freeze (its entries up to FRAME compared); member 3, second worst, has not.
    ahead, cfg = replace(worst, frame=FRAME + 1), cfg_(freeze_at_frame=FRAME + 1)
    d = decide(peers[2], [ahead, *peers], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and sorted(d.compared) == [0, 1, 2, 3], d.reasons
    assert f"hold no slot: 0 frozen (freeze_at_frame={FRAME + 1})" in d.reasons[-1], d.reasons
    # Off (the default), member 0 holds the slot and member 3 keeps.
    assert decide(peers[2], [ahead, *peers], cfg_(), MemberRng(0), NOW).outcome is Outcome.KEEP


def test_a_finished_peer_is_compared_after_its_heartbeat_has_stopped(make_record):
    """A finished member writes its final record and stops its heartbeat; its history is still the evidence of its
    run. Left out as stale once that heartbeat was ``max_heartbeat_age_s`` old, it was lost, as a peer and as a donor,
    to every member still training (a slower node, a later start): the last member running compared itself with
    nobody and kept to its end. A stopped member, or a crashed one (``running``, heartbeat old), still goes stale."""
    me = make_record(0, const(0.0), now=NOW, frame=FRAME)
    finished = replace(make_record(1, const(100.0), now=NOW, frame=FRAME, heartbeat_age=10_000.0), status="finished")
    d = decide(me, [me, finished], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 1 and not d.excluded, d.reasons
    # Under the rules before (mutation_semantics 4) it was stale and, with no other peer, I kept.
    d = decide(me, [me, finished], cfg_(), MemberRng(0), NOW, semantics=4)
    assert d.outcome is Outcome.KEEP and d.excluded[1].startswith("stale: heartbeat 10000s old"), d.excluded
    for status in ("running", "stopped"):
        d = decide(me, [me, replace(finished, status=status)], cfg_(), MemberRng(0), NOW)
        assert d.outcome is Outcome.KEEP and d.excluded[1].startswith("stale: heartbeat"), (status, d.excluded)
    # A heartbeat from the future is clock skew, finished or not.
    skewed = replace(finished, heartbeat=NOW + 3_600.0)
    assert "clock skew" in peer_exclusion(me, skewed, cfg_(), NOW)


def test_unsettled_peers_take_the_worst_slots_first(make_record):
    """Measured in the study's MuJoCo populations with ``unsettled_fill_worst`` off (the earlier default): most
    exploits were decided by a member compared with one peer, the two others excluded because their new generations
    had not settled; the worst quarter of the two compared is one, so the worse of them was replaced: three of four
    members changed generation at one frame. By default the unsettled peers count in the population the worst group
    is a fraction of and take its slots first."""

    def unsettled(member, mean):
        rec = make_record(member, const(mean), now=NOW, frame=FRAME)
        return replace(rec, generation=1, generation_start_frame=FRAME - 500)  # newest entry still generation 0

    me = make_record(0, const(500.0), now=NOW, frame=FRAME)
    leader = make_record(2, const(1100.0), now=NOW, frame=FRAME)
    records = [me, unsettled(1, 300.0), leader, unsettled(3, 400.0)]
    d = decide(me, records, cfg_(unsettled_fill_worst=False), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 2 and "worst 1 of 2" in d.reasons[-1]
    for rule in ("dexpbt", "welch"):
        d = decide(me, records, cfg_(rule=rule), MemberRng(0), NOW)
        assert d.outcome is Outcome.KEEP, (rule, d.reasons)
        assert "not in the worst 1 of 4 (unsettled peers [1, 3] take its slots first)" in d.reasons[-1]
        assert d.compared == (2, 0) and set(d.excluded) == {1, 3}
    # Nine members, worst fraction 1/4: two slots, one held by the unsettled peer; the worst compared member takes
    # the other, the second worst keeps.
    peers = [make_record(m, const(100.0 * m), now=NOW, frame=FRAME) for m in range(2, 8)]
    cfg = cfg_()
    worst, second = (make_record(m, const(-100.0 * m), now=NOW, frame=FRAME) for m in (1, 0))
    records = [second, worst, unsettled(8, 0.0), *peers]
    assert decide(worst, records, cfg, MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    d = decide(second, records, cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "worst 2 of 9" in d.reasons[-1]
    # A peer that is stale, far behind, optimises another objective or trains another task holds no slot, unsettled
    # or not: it would not be compared if it had settled.
    elsewhere = make_record(1, const(300.0), now=NOW, frame=FRAME, task="another")
    for gone in (
        replace(unsettled(1, 300.0), heartbeat=NOW - 10_000.0),
        at_frame(unsettled(1, 300.0), FRAME - 30 * 1000),
        replace(unsettled(1, 300.0), evidence=replace(me.evidence, objective="success")),
        replace(elsewhere, generation=1, generation_start_frame=FRAME - 500),
    ):
        d = decide(me, [me, gone, leader], cfg, MemberRng(0), NOW)
        assert d.outcome is Outcome.EXPLOIT and "worst 1 of 2" in d.reasons[-1], d.reasons


def test_a_peer_entry_inside_the_start_grace_is_not_compared(make_record):
    """The start grace keeps my first decision off the episodes of the start; a peer's entry from inside it (its
    window, with long episodes, all begun at frame 0) is not compared either (measured on HalfCheetah: member 0's first
    decision at 131,072 frames read member 1's entry at 98,304, before)."""
    cfg = cfg_(start_grace_frames=2500)
    me = make_record(0, const(0.0), now=NOW, frame=3000)
    early = make_record(1, const(10.0), now=NOW, frame=2000)
    d = decide(me, [me, early], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "inside the start grace" in d.excluded[1]
    assert decide(me, [me, make_record(1, const(10.0), now=NOW, frame=2500)], cfg, MemberRng(0), NOW).donor == 1


# ------------------------------------------------------------------ eligibility


def test_start_grace(make_record):
    cfg = cfg_()  # grace = 2 * interval_steps = 2000 frames
    me = make_record(0, const(0.0), now=NOW, frame=1999)
    peer = make_record(1, const(10.0), now=NOW, frame=1999)
    d = decide(me, [me, peer], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "start grace" in d.reasons[-1]
    me, peer = at_frame(me, 2000), at_frame(peer, 2000)
    assert decide(me, [me, peer], cfg, MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    early_me, early_peer = at_frame(me, 10), at_frame(peer, 10)
    assert decide(early_me, [early_me, early_peer], cfg_(start_grace_frames=0), MemberRng(0), NOW).donor == 1


def test_restart_grace(make_record):
    cfg = cfg_(restart_grace_frames=5000)
    me = make_record(0, const(0.0), now=NOW, frame=FRAME, generation=2, generation_start_frame=FRAME - 4999)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    d = decide(me, [me, peer], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "restart grace" in d.reasons[-1]
    me = replace(me, generation_start_frame=FRAME - 5000)
    assert decide(me, [me, peer], cfg, MemberRng(0), NOW).outcome is Outcome.EXPLOIT


def test_my_own_evidence_must_suffice(make_record):
    me = make_record(0, const(0.0, n=7), now=NOW, frame=FRAME)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    d = decide(me, [me, peer], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "min_episodes" in d.reasons[-1]
    stale_me = make_record(0, const(0.0), now=NOW, frame=FRAME, generation=1, evidence_generation=0)
    assert decide(stale_me, [stale_me, peer], cfg_(), MemberRng(0), NOW).outcome is Outcome.KEEP


def test_min_members(make_record):
    recs = [make_record(i, const(float(i * 10)), now=NOW, frame=FRAME) for i in range(3)]
    d = decide(recs[0], recs[:2], cfg_(min_members=3), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "min_members=3" in d.reasons[-1]
    assert decide(recs[0], recs, cfg_(min_members=3), MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    # Stale peers do not count towards min_members.
    stale = replace(recs[2], heartbeat=NOW - 10_000)
    assert decide(recs[0], [recs[0], recs[1], stale], cfg_(min_members=3), MemberRng(0), NOW).outcome is Outcome.KEEP


def test_max_restarts(make_record):
    me = make_record(0, const(0.0), now=NOW, frame=FRAME, generation=3, generation_start_frame=0)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    assert decide(me, [me, peer], cfg_(max_restarts=3), MemberRng(0), NOW).outcome is Outcome.KEEP
    assert decide(me, [me, peer], cfg_(max_restarts=4), MemberRng(0), NOW).outcome is Outcome.EXPLOIT


# ------------------------------------------------------------------ dexpbt


def test_dexpbt_only_the_worst_group_exploits(make_record):
    recs = [make_record(i, const(float(i)), now=NOW, frame=FRAME) for i in range(8)]
    cfg = cfg_(gap_std_fraction=0.0, gap_donor_fraction=0.0)
    outcomes = {r.member: decide(r, recs, cfg, MemberRng(1), NOW) for r in recs}
    assert {m for m, d in outcomes.items() if d.outcome is Outcome.EXPLOIT} == {0, 1}  # worst 25% of 8
    assert {outcomes[0].donor, outcomes[1].donor} <= {6, 7}  # top 25% of 8
    assert "not in the worst 2 of 8" in outcomes[2].reasons[-1]


def test_dexpbt_required_gap(make_record):
    me = make_record(0, const(9.5), now=NOW, frame=FRAME)
    peer = make_record(1, const(10.0), now=NOW, frame=FRAME)
    # Without the noise floor (gap_z 0, below) the required gap is the spread term: 0.5 * std(9.5, 10) = 0.125.
    d = decide(me, [me, peer], cfg_(gap_z=0.0), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.thresholds["required_gap"] == pytest.approx(0.125)
    # With the donor term set: max(0.125, 0.05 * |donor 10| = 0.5) = 0.5 >= gap 0.5: too close to be worth a
    # copy, so explore in place (mutate my hyperparameters, keep my weights), as DexPBT does
    d = decide(me, [me, peer], cfg_(gap_donor_fraction=0.05, gap_z=0.0), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLORE and d.donor is None and "explore in place" in d.reasons[-1]
    assert d.thresholds["required_gap"] == pytest.approx(0.5)
    assert d.thresholds["gap"] == pytest.approx(0.5)
    d = decide(me, [me, peer], cfg_(gap_donor_fraction=0.04), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT


def test_dexpbt_interval_best_protects(make_record):
    recs = [make_record(i, const(float(i * 10)), now=NOW, frame=FRAME) for i in range(4)]
    me = replace(recs[0], interval_best=30.0)  # reached the top member's mean earlier in this interval
    recs[0] = me
    d = decide(me, recs, cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "protected" in d.reasons[-1]
    assert d.thresholds["top_cutoff"] == pytest.approx(30.0)
    assert decide(me, recs, cfg_(protect_interval_best=False), MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    me = replace(me, interval_best=29.0)
    assert decide(me, recs, cfg_(), MemberRng(0), NOW).outcome is Outcome.EXPLOIT


def test_negative_objectives_rank_numerically(make_record):
    recs = [
        make_record(0, const(-100.0), now=NOW, frame=FRAME),
        make_record(1, const(-10.0), now=NOW, frame=FRAME),
        make_record(2, const(-3.0), now=NOW, frame=FRAME),
    ]
    d = decide(recs[0], recs, cfg_(), MemberRng(0), NOW)
    assert d.compared == (2, 1, 0)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 2


# ------------------------------------------------------------------ isaaclab


def _band(means, k, abs_):
    mean = statistics.fmean(means)
    std = statistics.pstdev(means)  # population std, as Isaac Lab's np.std
    half = max(k * std, abs_)
    return mean - half, mean + half


@pytest.mark.parametrize("k, abs_", [(0.1, 0.05), (1.0, 0.05), (0.1, 30.0), (0.5, 0.0)])
def test_isaaclab_bands_match_the_formula(make_record, k, abs_):
    means = [0.0, 20.0, 21.0, 22.0, 40.0, 41.0]
    recs = [make_record(i, const(m, spread=0.0), now=NOW, frame=FRAME) for i, m in enumerate(means)]
    cfg = cfg_(rule="isaaclab", threshold_std=k, threshold_abs=abs_)
    lower, upper = _band(means, k, abs_)
    for me in recs:
        d = decide(me, recs, cfg, MemberRng(0), NOW)
        assert d.thresholds["lower"] == pytest.approx(lower)
        assert d.thresholds["upper"] == pytest.approx(upper)
        mine = statistics.fmean(me.evidence.values)
        leaders = [r.member for r in recs if statistics.fmean(r.evidence.values) > upper]
        if mine >= lower:
            assert d.outcome is Outcome.KEEP
        elif leaders:
            assert d.outcome is Outcome.EXPLOIT and d.donor in leaders
        else:
            assert d.outcome is Outcome.EXPLORE and d.donor is None


def test_isaaclab_explores_without_a_leader_unless_disabled(make_record):
    # One far underperformer, nobody above the upper band (abs floor is wide).
    recs = [make_record(0, const(0.0, spread=0), now=NOW, frame=FRAME)] + [
        make_record(i, const(10.0, spread=0), now=NOW, frame=FRAME) for i in range(1, 4)
    ]
    cfg = cfg_(rule="isaaclab", threshold_std=0.0, threshold_abs=2.6)  # mean 7.5, band [4.9, 10.1]
    d = decide(recs[0], recs, cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLORE and d.donor is None
    d = decide(
        recs[0],
        recs,
        cfg_(rule="isaaclab", threshold_std=0.0, threshold_abs=2.6, explore_without_donor=False),
        MemberRng(0),
        NOW,
    )
    assert d.outcome is Outcome.KEEP
    # Narrower band: the others are leaders, and one of them is drawn.
    d = decide(recs[0], recs, cfg_(rule="isaaclab", threshold_std=0.0, threshold_abs=2.4), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor in (1, 2, 3)


@pytest.mark.parametrize("offset", [-1000.0, 0.0, 5000.0])
def test_dexpbt_does_not_copy_within_the_windows_sampling_noise(make_record, offset):
    """``gap_z``: a gap smaller than gap_z standard errors of the difference of the two window means explores
    instead of copying (the no_learn study, seed 1: the one member with a working learning rate was the worst by
    40 points of noise at its first decision and was overwritten); a clear gap still copies; the same at any
    offset added to every objective."""
    rnd = random.Random(3)
    noise = [rnd.gauss(0.0, 216.0) for _ in range(64)]
    noise = [v - statistics.fmean(noise) for v in noise]  # window means exactly as given: the gaps are 40 and 594
    windows = [[offset + mean + v for v in noise] for mean in (-1194.0, -1154.0, -600.0)]
    me, near, far = (make_record(i, w, now=NOW, frame=FRAME) for i, w in enumerate(windows))
    d = decide(me, [me, near], cfg_(), MemberRng(0), NOW)
    se = (statistics.stdev(windows[0]) ** 2 / 64 + statistics.stdev(windows[1]) ** 2 / 64) ** 0.5
    assert d.thresholds["standard_error"] == pytest.approx(se)
    assert d.thresholds["gap"] <= 1.64 * se and d.outcome is Outcome.EXPLORE and "gap_z" in d.reasons[-1]
    assert decide(me, [me, near], cfg_(gap_z=0.0), MemberRng(0), NOW).outcome is Outcome.EXPLOIT
    d = decide(me, [me, far], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 2


# ------------------------------------------------------------------ welch


def test_welch_uses_per_episode_windows_at_alpha(make_record):
    rnd = random.Random(0)
    noisy_low = [rnd.gauss(0.0, 20.0) for _ in range(16)]
    noisy_high = [rnd.gauss(5.0, 20.0) for _ in range(16)]
    clear_high = [rnd.gauss(30.0, 1.0) for _ in range(16)]
    me = make_record(0, noisy_low, now=NOW, frame=FRAME)
    noisy = make_record(1, noisy_high, now=NOW, frame=FRAME)
    p_noisy = stats.ttest_ind(noisy_high, noisy_low, equal_var=False, alternative="greater").pvalue
    assert p_noisy > 0.05  # same means as far as 16 episodes can tell
    d = decide(me, [me, noisy], cfg_(rule="welch"), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP
    assert d.thresholds["p_value"] == pytest.approx(p_noisy) and d.thresholds["alpha"] == 0.05
    # dexpbt on the means alone (no noise floor) would copy here: the welch rule is stricter by design.
    d = decide(me, [me, noisy], cfg_(gap_donor_fraction=0.0, gap_z=0.0), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT
    # A permissive alpha above the p-value exploits.
    d = decide(me, [me, noisy], cfg_(rule="welch", welch_alpha=min(0.99, p_noisy + 0.01)), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 1

    clear = make_record(2, clear_high, now=NOW, frame=FRAME)
    d = decide(me, [me, clear], cfg_(rule="welch"), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 2 and d.thresholds["p_value"] < 0.05


def _stats(values):
    return statistics.fmean(values), statistics.stdev(values), len(values)


def test_welch_p_value_matches_scipy_and_handles_degenerate_windows():
    a, b = [1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.5, 0.2]
    assert welch_p_value(_stats(a), _stats(b)) == pytest.approx(
        stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
    )
    assert welch_p_value(_stats([1.0] * 8), _stats([0.0] * 8)) == 0.0  # all-success vs all-failure
    assert welch_p_value(_stats([0.0] * 8), _stats([1.0] * 8)) == 1.0
    assert welch_p_value(_stats([1.0] * 8), _stats([1.0] * 8)) == 1.0


# ------------------------------------------------------------------ properties


@st.composite
def populations(draw, build):
    n = draw(st.integers(2, 10))
    members = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n, unique=True))
    recs = []
    for m in members:
        stale = draw(st.sampled_from(["none"] * 6 + ["old", "future", "oldgen", "few", "ahead", "lag", "task"]))
        # "ahead" with an older entry too: compared at that entry, never excluded for being ahead
        kw = dict(now=NOW, frame=FRAME + draw(st.integers(-9000, 900)))
        if stale == "old":
            kw["heartbeat_age"] = draw(st.floats(601.0, 1e6))
        elif stale == "future":
            kw["heartbeat_age"] = -draw(st.floats(61.0, 1e6))
        elif stale == "oldgen":
            kw.update(generation=2, evidence_generation=1, generation_start_frame=0)
        elif stale == "ahead":
            kw["frame"] = FRAME + draw(st.integers(1001, 10**6))
            if draw(st.booleans()):
                kw["history"] = "older entry"
        elif stale == "lag":
            kw["frame"] = FRAME - draw(st.integers(10_001, FRAME))
        elif stale == "task":
            kw["task"] = "other"
        size = draw(st.integers(1, 7)) if stale == "few" else 16
        values = draw(st.lists(st.floats(-100, 100), min_size=size, max_size=size))
        older = kw.pop("history", None)
        rec = build(m, values, checkpoint=draw(st.booleans()) or draw(st.booleans()), **kw)
        if older and rec.history:
            earlier = dataclasses.replace(
                rec.history[-1], frame=FRAME - draw(st.integers(0, 5000)), mean=draw(st.floats(-100, 100))
            )
            rec = replace(rec, history=(earlier, rec.history[-1]))
        if draw(st.integers(0, 4)) == 0:
            rec = replace(rec, interval_best=draw(st.floats(-100, 100)))
        recs.append(rec)
    me_index = draw(st.integers(0, n - 1))
    me = replace(
        recs[me_index],
        heartbeat=NOW,
        frame=FRAME,
        evidence=dataclasses.replace(recs[me_index].evidence, generation=recs[me_index].generation),
    )
    if me.evidence.count < 8:
        me = replace(me, evidence=dataclasses.replace(me.evidence, values=me.evidence.values * 8))
    recs[me_index] = me
    cfg = cfg_(
        rule=draw(st.sampled_from(["dexpbt", "isaaclab", "welch"])),
        top_fraction=draw(st.sampled_from([0.25, 0.5])),
        worst_fraction=draw(st.sampled_from([0.25, 0.5])),
        gap_donor_fraction=draw(st.sampled_from([0.0, 0.05])),
    )
    return me, recs, cfg, draw(st.integers(0, 2**64 - 1)), draw(st.randoms(use_true_random=False))


@SETTINGS
@given(data=st.data())
def test_property_decisions_are_sound(make_record, data):
    me, recs, cfg, seed, rnd = data.draw(populations(make_record))
    rng = MemberRng(seed)
    d = decide(me, recs, cfg, rng, NOW)

    # 1. Deterministic: same inputs and RNG state -> same decision and same RNG state after.
    rng2 = MemberRng(seed)
    assert decide(me, recs, cfg, rng2, NOW) == d
    assert rng2.get_state() == rng.get_state()

    # 2. Peer order in the input list does not matter.
    shuffled = list(recs)
    rnd.shuffle(shuffled)
    rng3 = MemberRng(seed)
    assert decide(me, shuffled, cfg, rng3, NOW) == d
    assert rng3.get_state() == rng.get_state()

    event(f"{cfg.rule}:{d.outcome.value}")
    by_member = {r.member: r for r in recs}
    if d.compared:  # past my own eligibility: every peer is either compared or excluded with a reason
        expected_excluded = {r.member for r in recs if r.member != me.member and peer_exclusion(me, r, cfg, NOW)}
        assert set(d.excluded) == expected_excluded
        assert all(isinstance(why, str) and why for why in d.excluded.values())
        assert set(d.compared) == {me.member} | (set(by_member) - expected_excluded)
        ranked = [d.objectives[m] for m in d.compared]
        assert ranked == sorted(ranked, reverse=True)

    # 3. The donor is a live, compatible, better peer with a checkpoint; never me.
    if d.outcome is Outcome.EXPLOIT:
        donor = by_member[d.donor]
        assert d.donor != me.member
        assert d.donor in d.compared and d.donor not in d.excluded
        assert peer_exclusion(me, donor, cfg, NOW) is None
        assert d.donor_entry is not None and d.donor_entry.checkpoint and d.donor_entry.checkpoint_sha256
        assert d.donor_entry in donor.history and d.donor_entry.frame <= me.frame  # compared at my progress
        assert d.objectives[d.donor] == d.donor_entry.mean
        assert d.objectives[d.donor] > d.objectives[me.member]
        if cfg.rule == "isaaclab":
            assert d.objectives[d.donor] > d.thresholds["upper"]
            assert d.objectives[me.member] < d.thresholds["lower"]
        if cfg.rule == "dexpbt":
            assert d.thresholds["gap"] > d.thresholds["required_gap"]
        if cfg.rule == "welch":
            assert d.thresholds["p_value"] < cfg.welch_alpha
    else:
        assert d.donor is None


@SETTINGS
@given(
    means=st.lists(st.floats(-1000, 1000), min_size=2, max_size=12), k=st.floats(0.0, 3.0), abs_=st.floats(0.0, 50.0)
)
def test_property_isaaclab_band_formula(make_record, means, k, abs_):
    recs = [make_record(i, [m] * 8, now=NOW, frame=FRAME) for i, m in enumerate(means)]
    cfg = cfg_(rule="isaaclab", threshold_std=k, threshold_abs=abs_)
    d = decide(recs[0], recs, cfg, MemberRng(0), NOW)
    lower, upper = _band(means, k, abs_)
    assert d.thresholds["lower"] == pytest.approx(lower, rel=1e-9, abs=1e-9)
    assert d.thresholds["upper"] == pytest.approx(upper, rel=1e-9, abs=1e-9)
    assume(abs(means[0] - lower) > 1e-6)
    assert (d.outcome is Outcome.KEEP) == (means[0] >= lower)


# ------------------------------------------------------------------ test fixture rules


def test_fixture_exploit_every_decision_exploits_the_best_peer_at_every_decision(make_record, monkeypatch):
    monkeypatch.setenv("ASYNC_PBT_TEST_FIXTURE", "fixture_exploit_every_decision")
    cfg = cfg_(rule="fixture_exploit_every_decision")
    best_no_ckpt = make_record(0, const(30.0), now=NOW, frame=FRAME, checkpoint=False)
    best = make_record(1, const(20.0), now=NOW, frame=FRAME)
    worse = make_record(2, const(10.0), now=NOW, frame=FRAME, generation=5, evidence_generation=5)
    recs = [best_no_ckpt, best, worse]
    # Whatever the gap, the generation or the rank: every member exploits the best peer with a checkpoint.
    for me, donor in ((best_no_ckpt, 1), (best, 2), (worse, 1)):
        d = decide(me, recs, cfg, MemberRng(0), NOW)
        assert d.outcome is Outcome.EXPLOIT and d.donor == donor, (me.member, d)
        assert d.rule == "fixture_exploit_every_decision"
    # The general guards still apply: no exploit inside the start grace, none without a donor checkpoint.
    early = replace(worse, frame=10)
    assert decide(early, [early, best], cfg, MemberRng(0), NOW).outcome is Outcome.KEEP
    d = decide(best, [best, best_no_ckpt], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "no peer with a checkpoint" in d.reasons[-1]


# ------------------------------------------------------------------ decisions do not depend on the objective's offset
@SETTINGS
@given(
    windows=st.lists(
        st.lists(st.integers(-200, 200).map(lambda q: q / 4), min_size=8, max_size=8), min_size=2, max_size=8
    ),
    rule=st.sampled_from(["dexpbt", "isaaclab", "welch"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_rule_decides_alike_whatever_constant_is_added_to_every_objective(make_record, windows, rule, seed):
    """Returns near -1000, near 0 and near +5000 give the same decision: the same outcome, donor, compared members
    and RNG draws. Values are multiples of 1/4 over windows of 8, so the shifted means and spreads are exact and a
    tie cannot fall differently by rounding."""
    cfg = cfg_(rule=rule)  # the package's defaults for every threshold
    outcomes = []
    for offset in (-1000.0, 0.0, 5000.0):
        recs = [make_record(i, [v + offset for v in w], now=NOW, frame=FRAME) for i, w in enumerate(windows)]
        rng = MemberRng(seed)
        d = decide(recs[-1], recs, cfg, rng, NOW)
        outcomes.append((d.outcome, d.donor, d.compared, sorted(d.excluded), rng.get_state()))
        event(f"{rule}:{d.outcome.value}")
    assert outcomes[0] == outcomes[1] == outcomes[2]
