"""Which members a slice process hosts, and the settings it refuses before anything is claimed."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.core.slices import ROLLOUT_KEYS, slice_layout, slice_problems

LIVE = ("learning_rate", "entropy_coef", "gamma")


def test_layout_is_contiguous_and_named():
    layout = slice_layout(4, 4, 8, 16)
    assert layout.members == (4, 5, 6, 7)
    assert layout.num_envs == 64
    assert [layout.bounds(s) for s in range(4)] == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert layout.to_dict() == {"first": 4, "count": 4, "members": [4, 5, 6, 7], "envs_per_slice": 16, "num_envs": 64}
    with pytest.raises(IndexError):
        layout.bounds(4)


@pytest.mark.parametrize(
    ("first", "count", "members", "needle"),
    [(6, 4, 8, "members 6..9 are not all in the population of 8"), (0, 0, 8, "--pbt-slices 0: must be at least 1")],
)
def test_layout_outside_the_population_is_refused(first, count, members, needle):
    with pytest.raises(ValueError, match=needle):
        slice_layout(first, count, members, 16)


@pytest.mark.parametrize("key", ROLLOUT_KEYS)
def test_rollout_keys_are_refused_naming_the_key(key):
    problems = slice_problems(["learning_rate", key], "auto", LIVE, 4)
    assert len(problems) == 1
    assert problems[0].startswith(f"pbt.mutation.{key}: {key} shapes the rollout the 4 slices")


def test_non_live_keys_and_restart_mode_are_refused():
    problems = slice_problems(["network.log_std_bounds.low"], "restart", LIVE, 2)
    assert "pbt.mutation.network.log_std_bounds.low: cannot be set on a running agent" in problems[0]
    assert problems[1].startswith("pbt.exploit_mode: restart would restart all 2 slices")
    assert slice_problems(["learning_rate"], "auto", LIVE, 2) == []
    # One slice is a process member: nothing to refuse.
    assert slice_problems(["horizon_length"], "restart", LIVE, 1) == []


def test_rollout_keys_of_a_raw_agent_config_are_refused_in_slice_words():
    from async_pbt_isaaclab.core.slices import rollout_key_problems

    raw = {"pbt": {"mutation": {"horizon_length": "mutate_int", "learning_rate": "mutate_float"}}}
    assert rollout_key_problems(raw, 2) == [slice_problems(["horizon_length"], "auto", (), 2)[0]]
    assert rollout_key_problems(raw, 1) == []
    assert rollout_key_problems({"pbt": {}}, 4) == []


def test_the_members_a_command_hosts_are_named_from_its_slices_flag():
    from async_pbt_isaaclab.core.slices import process_members

    assert process_members(["python", "-m", "x", "--num_envs", "8"], 3) == [3]
    assert process_members(["x", "--pbt-slices", "4"], 4) == [4, 5, 6, 7]
    assert process_members(["x", "--pbt-slices=2", "--pbt-slices", "3"], 0) == [0, 1, 2]
    assert process_members(["x", "--pbt-slices", "no"], 2) == [2]


@pytest.mark.parametrize(
    ("torch_threads", "count", "cores", "expected"),
    [
        ("auto", 2, 2, 1),  # two updates at once on two cores: one thread each
        ("auto", 2, 16, 4),  # rl_games' own cap for auto
        (None, 4, 64, 4),
        (8, 2, 16, 8),  # a number the user gave caps it instead
        (8, 4, 16, 4),  # ... but never past the member's share of the cores
        (0, 2, 16, 8),  # 0 (torch's default, every core): the share alone
        (1, 8, 2, 1),  # more members than cores: still one each
    ],
)
def test_each_member_gets_its_share_of_the_cores_as_torch_threads(torch_threads, count, cores, expected):
    from async_pbt_isaaclab.core.slices import member_threads

    assert member_threads(torch_threads, count, cores) == expected


def test_agent_options_are_refused_with_the_pbt_keys_in_one_call():
    from async_pbt_isaaclab.core.slices import agent_problems

    agent = {"params": {"network": {"rnn": {"name": "lstm"}}, "config": {"epochs_between_resets": 0}}}
    problems = slice_problems(["horizon_length"], "restart", ["learning_rate"], 2, agent)
    assert [p.split(":")[0] for p in problems] == [
        "pbt.mutation.horizon_length",
        "pbt.exploit_mode",
        "params.network.rnn",
    ]
    assert agent_problems({"params": "not a mapping"}, 2) == []  # the config reader names a malformed yaml
