"""Comparison at matching progress (async_pbt_isaaclab.core.decision.selection and step.decide with record histories).

What is shown here, with records that go through the same JSON round trip as the workspace:
1. a peer ahead of me is compared at its newest entry at or before my frame, never excluded for being
   ahead; the donor checkpoint is the one of that entry;
2. a member five intervals behind is compared, can exploit, and can be exploited;
3. at Isaac Lab's default interval, once every member has exploited once (frames spread by restarts),
   every member still compares with every other: no freeze into independent runs;
4. a member never copies the checkpoint its generation was copied from; a member that has decided to
   exploit is not offered as a donor until its new generation has settled;
5. ``objective_direction: min`` ranks smaller objectives first.
"""

from __future__ import annotations

import dataclasses
import itertools

from async_pbt_isaaclab.core.decision.selection import Outcome, entry_at_or_before
from async_pbt_isaaclab.core.decision.step import decide
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord

NOW = 1_700_000_000.0
INTERVAL = 100_000  # Isaac Lab's PbtCfg default interval_steps
COND = ConditionLabel(task="Isaac-Task", objective="episode_return")


def cfg_(**kw):
    base = {
        "interval_steps": INTERVAL,
        "min_episodes": 8,
        "window": 16,
        "num_policies": 8,
        "start_grace_frames": 0,
        "restart_grace_frames": 0,
        "gap_std_fraction": 0.0,
        "gap_donor_fraction": 0.0,
    }
    base.update(kw)
    return population_config_from_dict(base)


def entry(member, frame, mean, generation=0):
    ckpt = f"members/{member:03d}/checkpoints/g{generation:04d}_f{frame:012d}.pth"
    return HistoryEntry(
        frame, generation, mean, 1.0, 16, COND, ckpt, f"{member:02x}{frame:062x}", {"learning_rate": 1e-3}
    )


def record(member, frame, curve, generation=0, since=0, **kw):
    """A member at ``frame`` whose evidence at each interval up to it was ``curve(frame)``; entries of the
    current generation from ``since``. Round-tripped through JSON as peers read it."""
    frames = [f for f in range(INTERVAL, frame + 1, INTERVAL)][-12:]
    history = tuple(entry(member, f, curve(f), generation if f >= since else 0) for f in frames)
    mean = curve(frame)
    rec = MemberRecord(
        member=member,
        generation=generation,
        frame=frame,
        generation_start_frame=since,
        restarts=generation,
        heartbeat=NOW - 1,
        evidence=EvidenceSummary("episode_return", generation, tuple([mean] * 16), 16, 0),
        condition=COND,
        hyperparameters={"learning_rate": 1e-3},
        history=history,
        **kw,
    )
    return MemberRecord.from_dict(rec.to_dict(), f"record {member}")


def learning(rate):
    return lambda f: rate * f / INTERVAL


def test_peer_ahead_is_compared_at_my_progress_and_its_entry_is_the_donor():
    me = record(0, 3 * INTERVAL, learning(1.0))  # 3.0 at my frame
    ahead = record(1, 8 * INTERVAL, learning(2.0))  # 16.0 now, 6.0 when it was where I am
    d = decide(me, [me, ahead], cfg_(), MemberRng(0), NOW)
    assert d.excluded == {} and d.compared_frames == {0: 3 * INTERVAL, 1: 3 * INTERVAL}
    assert d.objectives == {0: 3.0, 1: 6.0}  # not 16.0: progress is matched
    assert d.outcome is Outcome.EXPLOIT and d.donor == 1
    assert d.donor_entry.frame == 3 * INTERVAL and d.donor_entry.checkpoint.endswith("f000000300000.pth")


def test_a_member_five_intervals_behind_is_compared_and_exploits_and_is_exploited():
    cfg = cfg_()
    laggard = record(0, 2 * INTERVAL, lambda f: 0.1 * f / INTERVAL)  # 0.2 at frame 2: bad at its progress
    leaders = [record(m, 7 * INTERVAL, learning(1.0 + m)) for m in (1, 2, 3)]
    pop = [laggard, *leaders]
    d = decide(laggard, pop, cfg, MemberRng(0), NOW)
    assert d.excluded == {} and d.outcome is Outcome.EXPLOIT and d.donor == 3
    assert d.donor_entry.frame == 2 * INTERVAL
    # The leaders compare with the laggard's newest entry (5 intervals behind, within max_frame_lag).
    for me in leaders:
        d = decide(me, pop, cfg, MemberRng(0), NOW)
        assert 0 in d.compared and d.compared_frames[0] == 2 * INTERVAL
    # A strong laggard is copied by a weak leader: being behind does not stop it being a donor.
    strong_laggard = record(0, 2 * INTERVAL, lambda f: 50.0 * f / INTERVAL)
    weak = record(1, 7 * INTERVAL, lambda f: 0.5 * f / INTERVAL)
    d = decide(weak, [weak, strong_laggard], cfg, MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 0 and d.donor_entry.frame == 2 * INTERVAL


def test_no_freeze_after_every_member_exploited_once_at_isaaclab_default_interval():
    """Restarts spread members' frames over several intervals; each has a generation-1 history since."""
    cfg = cfg_()
    frames = [12 * INTERVAL, 9 * INTERVAL + 40_000, 7 * INTERVAL + 5_000, 10 * INTERVAL + 70_000]
    since = [6 * INTERVAL, 5 * INTERVAL, 4 * INTERVAL, 8 * INTERVAL]
    pop = [
        record(m, f, learning(1.0 + 0.3 * m), generation=1, since=s)
        for m, (f, s) in enumerate(zip(frames, since, strict=True))
    ]
    for me in pop:
        d = decide(me, pop, cfg, MemberRng(0), NOW)
        assert d.excluded == {}, (me.member, d.excluded)
        assert len(d.compared) == 4
        assert all(d.compared_frames[m] <= me.frame for m in d.compared)


def test_never_copies_the_checkpoint_it_already_holds():
    donor = record(1, 3 * INTERVAL, learning(5.0), status="finished")
    held = donor.history[-1].checkpoint_sha256
    me = record(0, 3 * INTERVAL, learning(1.0), generation=1, since=INTERVAL, origin_sha256=held)
    d = decide(me, [me, donor], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.EXPLORE and d.donor is None and "already hold" in d.reasons[-1]
    me_elsewhere = dataclasses.replace(me, origin_sha256="f" * 64)
    assert decide(me_elsewhere, [me_elsewhere, donor], cfg_(), MemberRng(0), NOW).donor == 1


def test_a_member_that_decided_to_exploit_is_not_a_donor_until_its_new_generation_settles():
    me = record(0, 3 * INTERVAL, learning(1.0))
    best = record(1, 3 * INTERVAL, learning(9.0))
    # What the observer publishes right after deciding an exploit: the next generation, no evidence yet.
    leaving = dataclasses.replace(
        best,
        generation=1,
        generation_start_frame=best.frame,
        evidence=EvidenceSummary("episode_return", 1, (), 0, 0, settled=False),
    )
    d = decide(me, [me, leaving], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "not settled" in d.excluded[1]
    settled = dataclasses.replace(leaving, history=leaving.history + (entry(1, 3 * INTERVAL + 1, 9.0, 1),))
    assert decide(me, [me, settled], cfg_(), MemberRng(0), NOW).donor == 1


def test_my_unsettled_generation_does_not_decide():
    me = record(0, 3 * INTERVAL, learning(1.0))
    me = dataclasses.replace(me, evidence=dataclasses.replace(me.evidence, settled=False))
    d = decide(me, [me, record(1, 3 * INTERVAL, learning(9.0))], cfg_(), MemberRng(0), NOW)
    assert d.outcome is Outcome.KEEP and "has not settled" in d.reasons[-1]


def test_objective_direction_min_ranks_smaller_first():
    me = record(0, 3 * INTERVAL, lambda f: 5.0)  # e.g. a tracking error
    better = record(1, 3 * INTERVAL, lambda f: 1.0)
    cfg = cfg_(objective_direction="min")
    d = decide(me, [me, better], cfg, MemberRng(0), NOW)
    assert d.compared == (1, 0) and d.outcome is Outcome.EXPLOIT and d.donor == 1
    assert decide(better, [me, better], cfg, MemberRng(0), NOW).outcome is Outcome.KEEP
    assert decide(me, [me, better], cfg_(), MemberRng(0), NOW).outcome is Outcome.KEEP  # under max, 5 > 1


def test_the_thinned_history_reaches_back_to_the_first_entry_evenly():
    """A record keeps its newest ``history_length`` entries and as many older ones spread over the run, so a member
    that starts 30 intervals late finds an entry at or before its frame, less than one bucket earlier."""
    from async_pbt_isaaclab.core.state.member_state import MemberState

    interval, limit = 2048, 12
    state = MemberState(member=0)
    entries = []
    for i in range(1, 101):
        entry = HistoryEntry(i * interval, 0, float(i), 1.0, 16, ConditionLabel(task="t"), f"c{i}", "%064x" % i)
        entries.append(entry)
        state.add_history(entry, limit)
        kept = [e.frame for e in state.history]
        assert kept == sorted(kept) and len(kept) <= 2 * limit
        assert state.history[-limit:] == entries[-limit:]  # the newest at full resolution
        assert state.history[0] == entries[0]  # the oldest always stays
    frames = [e.frame for e in state.history]
    gaps = [b - a for a, b in itertools.pairwise(frames)]
    assert max(gaps) <= 8 * interval  # evenly spread: 88 older intervals over 12 entries
    late_frame = 30 * interval + 100
    entry = entry_at_or_before(tuple(state.history), late_frame)
    assert entry is not None and late_frame - entry.frame < 8 * interval
    # Entries once dropped never come back (retention may have deleted their checkpoints).
    again = MemberState(member=0, history=list(state.history))
    again.add_history(HistoryEntry(101 * interval, 0, 1.0, 1.0, 16, ConditionLabel(task="t")), limit)
    assert {e.frame for e in again.history} - {e.frame for e in state.history} == {101 * interval}
