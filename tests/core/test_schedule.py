"""Hyperparameter schedules of a lineage (core.lineage and core.schedule): chaining exploits back through donors,
lookup, following, files."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.core.state.lineage import lineage_schedule, member_lineage
from async_pbt_isaaclab.core.state.schedule import (
    Schedule,
    ScheduleError,
    ScheduleFollower,
    ScheduleStep,
    dump_schedule,
    schedule_from_dict,
    values_at,
)
from async_pbt_isaaclab.core.workspace.state_files import load_schedule


def _entries(*entries):
    return [(i + 1, e, None) for i, e in enumerate(entries)]


def start(hp, frame=0):
    return {"kind": "start", "mode": "fresh", "generation": 0, "frame": frame, "hyperparameters": hp}


def applied(gen, frame, hp, donor=None, donor_gen=None, donor_frame=None, **extra):
    return {
        "kind": "exploit_applied",
        "generation": gen,
        "frame": frame,
        "hyperparameters": hp,
        "donor": donor,
        "donor_generation": donor_gen,
        "donor_frame": donor_frame,
        **extra,
    }


@pytest.fixture
def lineages():
    """Member 0 trains and explores at 300; member 1 copies 0's checkpoint at (gen 0, frame 200) when its own
    counter is 500, then explores at 800; member 2 copies 1's checkpoint at (gen 2, frame 900) at its 1000."""
    m0 = member_lineage(
        0, _entries(start({"lr": 1.0}), applied(1, 300, {"lr": 1.5}, donor=0, donor_gen=0, donor_frame=300))
    )
    m1 = member_lineage(
        1,
        _entries(
            start({"lr": 2.0}),
            {"kind": "decision"},  # other kinds are ignored
            applied(1, 500, {"lr": 1.2}, donor=0, donor_gen=0, donor_frame=200),
            applied(2, 800, {"lr": 0.6}, donor=None),
        ),
    )
    m2 = member_lineage(
        2,
        _entries(
            start({"lr": 9.0}),
            applied(1, 1000, {"lr": 0.5}, donor=1, donor_gen=2, donor_frame=900, donor_checkpoint="x"),
        ),
    )
    return {0: m0, 1: m1, 2: m2}


def test_member_lineage_reads_start_and_applied_changes(lineages):
    m1 = lineages[1]
    assert m1.start_hyperparameters == {"lr": 2.0}
    assert [(c.generation, c.frame, c.donor) for c in m1.changes] == [(1, 500, 0), (2, 800, None)]


def test_lineage_without_exploits_is_the_members_own_history(lineages):
    s = lineage_schedule(0, lineages, end_frame=1000)
    assert [(st.frame, st.values, st.source) for st in s.steps] == [
        (0, {"lr": 1.0}, "start"),
        (300, {"lr": 1.5}, "explore"),
    ]
    assert s.end_frame == 1000


def test_exploit_chain_is_followed_back_to_the_first_donor(lineages):
    s = lineage_schedule(2, lineages, end_frame=1500)
    # Member 2's weights: member 0 frames 0..200 (lr 1.0), then member 1 from its frame 500 (replay 200) with
    # lr 1.2, member 1's explore at its 800 (replay 500) with lr 0.6, member 1's checkpoint at 900 (replay 600),
    # then member 2's own values from replay 600 on; member 0's explore at 300 is after the copied checkpoint.
    got = [(st.frame, st.values["lr"], st.member, st.member_frame, st.source) for st in s.steps]
    assert got == [
        (0, 1.0, 0, 0, "start"),
        (200, 1.2, 1, 500, "exploit"),
        (500, 0.6, 1, 800, "explore"),
        (600, 0.5, 2, 1000, "exploit"),
    ]
    assert s.end_frame == 1500 - 1000 + 600


def test_values_at_and_follower_apply_each_change_at_its_frame(lineages):
    s = lineage_schedule(2, lineages)
    assert values_at(s, 0) == {"lr": 1.0}
    assert values_at(s, 199) == {"lr": 1.0}
    assert values_at(s, 200) == {"lr": 1.2}
    assert values_at(s, 10**9) == {"lr": 0.5}
    follower = ScheduleFollower(s)
    applied_at = []
    for frame in range(0, 800, 50):  # a run's frame counter, one epoch per 50 frames
        due = follower.due(frame)
        if due is not None:
            applied_at.append((frame, due["lr"]))
    assert applied_at == [(0, 1.0), (200, 1.2), (500, 0.6), (600, 0.5)]
    assert follower.due(10**9) is None


def test_follower_that_jumps_over_steps_applies_the_newest(lineages):
    follower = ScheduleFollower(lineage_schedule(2, lineages))
    assert follower.due(550) == {"lr": 0.6}
    assert follower.due(600) == {"lr": 0.5}


def test_missing_donor_log_and_cycles_are_errors(lineages):
    with pytest.raises(ScheduleError, match="member 0: no audit log"):
        lineage_schedule(2, {1: lineages[1], 2: lineages[2]})
    a = member_lineage(0, _entries(start({"lr": 1}), applied(1, 10, {"lr": 2}, donor=1, donor_gen=1, donor_frame=10)))
    b = member_lineage(1, _entries(start({"lr": 1}), applied(1, 10, {"lr": 3}, donor=0, donor_gen=1, donor_frame=10)))
    with pytest.raises(ScheduleError, match="cycle"):
        lineage_schedule(0, {0: a, 1: b})


def test_donor_frame_falls_back_to_the_checkpoint_name():
    m = member_lineage(
        1,
        _entries(
            start({"lr": 1}),
            applied(
                1,
                50,
                {"lr": 2},
                donor=0,
                donor_gen=0,
                donor_frame=None,
                donor_checkpoint="members/000/checkpoints/g0000_f000000000040.pth",
            ),
        ),
    )
    assert m.changes[0].donor_frame == 40


def test_yaml_round_trip_and_bad_files(tmp_path, lineages):
    s = lineage_schedule(2, lineages, end_frame=1500, workspace="/ws")
    path = tmp_path / "s.yaml"
    path.write_text(dump_schedule(s))
    back = load_schedule(path)
    assert back == s
    bad = {"format": "async-pbt-schedule/1", "member": 0, "steps": [{"frame": 5, "values": {"lr": 1}}]}
    with pytest.raises(ScheduleError, match=r"steps\[0\]\.frame: the first step must be at frame 0"):
        schedule_from_dict(bad, "f.yaml")
    bad["steps"] = [{"frame": 0, "values": {"lr": 1}}, {"frame": -1, "values": {}}]
    with pytest.raises(ScheduleError, match=r"f.yaml.steps\[1\].frame"):
        schedule_from_dict(bad, "f.yaml")
    with pytest.raises(ScheduleError, match="format"):
        schedule_from_dict({"format": "other"}, "f.yaml")
    path.write_text("steps: [")
    with pytest.raises(ScheduleError, match="not valid yaml"):
        load_schedule(path)
    with pytest.raises(ScheduleError, match="cannot read"):
        load_schedule(tmp_path / "missing.yaml")


def test_values_at_empty_schedule_is_an_error():
    with pytest.raises(ScheduleError):
        values_at(Schedule(0, ()), 0)
    assert values_at(Schedule(0, (ScheduleStep(0, {"a": 1}, 0, 0, 0, "start"),)), 5) == {"a": 1}


def test_a_long_lineage_is_followed_without_recursion_limits():
    # 3000 exploits, each member copying the previous one's checkpoint at the donor's frame 10 when its own
    # counter is 5: every hop adds 5 replay frames. Deeper than Python's stack.
    n = 3000
    lineages = {0: member_lineage(0, _entries(start({"lr": 0})))}
    for m in range(1, n):
        lineages[m] = member_lineage(
            m,
            _entries(
                start({"lr": -1}), applied(1, 5, {"lr": m}, donor=m - 1, donor_gen=1 if m > 1 else 0, donor_frame=10)
            ),
        )
    s = lineage_schedule(n - 1, lineages)
    assert len(s.steps) == n
    assert values_at(s, 10 + 5 * (n - 2)) == {"lr": n - 1} and values_at(s, 10 + 5 * (n - 2) - 1) == {"lr": n - 2}
    assert values_at(s, 9) == {"lr": 0} and values_at(s, 14) == {"lr": 1}


def test_replay_needs_live_keys_and_starts_from_the_first_step():
    from async_pbt_isaaclab.core.state.schedule import initial_overrides, replay_problems

    steps = (
        ScheduleStep(0, {"learning_rate": 1e-3, "gamma": 0.95, "network.log_std_bounds.low": -5.0}, 0, 0, 0, "start"),
        ScheduleStep(
            100, {"learning_rate": 2e-3, "gamma": 0.96, "network.log_std_bounds.low": -5.0}, 1, 300, 1, "exploit"
        ),
    )
    s = Schedule(1, steps)
    assert replay_problems(s) == []
    assert initial_overrides(s) == {
        ("params", "config", "learning_rate"): 1e-3,
        ("params", "config", "gamma"): 0.95,
        ("params", "network", "log_std_bounds", "low"): -5.0,
    }
    bad = Schedule(
        1, steps + (ScheduleStep(200, {"network.log_std_bounds.low": -4.0, "nonsense": 1}, 1, 400, 2, "explore"),)
    )
    problems = replay_problems(bad)
    assert any("steps[2].values.network.log_std_bounds.low: changes at frame 200" in p for p in problems)
    assert any("steps[2].values.nonsense: not a hyperparameter" in p for p in problems)


def test_load_replay_schedule_checks_the_file_before_any_run_starts(tmp_path):
    from async_pbt_isaaclab.core.state.schedule import ScheduleError, dump_schedule, replay_experiment_name
    from async_pbt_isaaclab.core.workspace.state_files import load_replay_schedule

    good = Schedule(
        7,
        (
            ScheduleStep(0, {"learning_rate": 1e-3}, 7, 0, 0, "start"),
            ScheduleStep(64, {"learning_rate": 5e-4}, 7, 64, 1, "explore"),
        ),
    )
    path = tmp_path / "schedule.yaml"
    path.write_text(dump_schedule(good))
    assert load_replay_schedule(path) == good
    assert replay_experiment_name("torch_reach_pbt", good) == "torch_reach_pbt_replay_007"
    bad = Schedule(7, good.steps + (ScheduleStep(128, {"warp_factor": 9}, 7, 128, 2, "explore"),))
    path.write_text(dump_schedule(bad))
    with pytest.raises(ScheduleError) as err:
        load_replay_schedule(path)
    assert str(err.value).startswith(f"{path}: cannot be replayed in one run: steps[2].values.warp_factor")
    with pytest.raises(ScheduleError, match="cannot read"):
        load_replay_schedule(tmp_path / "missing.yaml")
