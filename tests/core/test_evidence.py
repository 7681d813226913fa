"""Completed-episode evidence (async_pbt_isaaclab.core.state.evidence) and how selection uses it.

What is shown here:
1. the window keeps the last K finite values of the current generation, oldest dropped first;
2. batches of an older (or other) generation are ignored, and a new generation forgets everything;
3. NaN / inf values are counted, never stored, so the mean stays finite;
4. objectives: return, length or a named term; a missing one raises naming it;
5. summaries survive JSON, and malformed summaries are refused naming the key;
6. selection excludes peers whose evidence is stale (old generation, too few episodes) or collected
   under another condition, and says why.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from async_pbt_isaaclab.core.decision.selection import peer_exclusion
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import (
    ConditionLabel,
    EpisodeBatch,
    EvidenceError,
    EvidenceSummary,
    EvidenceWindow,
)


def batch(returns, generation=0, lengths=None, terms=None):
    n = len(returns)
    return EpisodeBatch(
        returns=list(returns),
        lengths=list(lengths or [10] * n),
        terms=dict(terms or {}),
        truncated=[False] * n,
        generation=generation,
    )


def test_window_keeps_last_k_of_current_generation():
    w = EvidenceWindow("episode_return", window=5)
    assert w.add(batch([1, 2, 3])) == 3
    assert w.add(batch([4, 5, 6, 7])) == 4
    s = w.summary()
    assert s.values == (3.0, 4.0, 5.0, 6.0, 7.0)
    assert s.episodes_seen == 7 and s.count == 5
    assert s.mean == pytest.approx(5.0)
    assert s.best == 7.0


def test_older_generation_batches_are_ignored():
    w = EvidenceWindow("episode_return", window=8, generation=2)
    assert w.add(batch([100.0, 100.0], generation=1)) == 0  # episodes that straddled the exploit
    assert w.add(batch([1.0], generation=2)) == 1
    assert w.add(batch([100.0], generation=3)) == 0  # not ours either
    s = w.summary()
    assert s.values == (1.0,) and s.episodes_seen == 1 and s.generation == 2


def test_new_generation_forgets_evidence():
    w = EvidenceWindow("episode_return", window=8)
    w.add(batch([5.0, 6.0, float("nan")]))
    w.start_generation(1)
    s = w.summary()
    assert s.values == () and s.episodes_seen == 0 and s.rejected_non_finite == 0 and s.generation == 1
    assert w.add(batch([1.0], generation=0)) == 0
    assert w.add(batch([2.0], generation=1)) == 1


def test_non_finite_values_are_counted_not_stored():
    w = EvidenceWindow("episode_return", window=4)
    added = w.add(batch([1.0, float("nan"), 2.0, float("inf"), -float("inf"), 3.0]))
    assert added == 3
    s = w.summary()
    assert s.values == (1.0, 2.0, 3.0)
    assert s.rejected_non_finite == 3 and s.episodes_seen == 6
    assert math.isfinite(s.mean) and math.isfinite(s.std)


def test_objectives_length_and_terms():
    b = batch([1.0, 2.0], lengths=[100, 200], terms={"success": [1.0, 0.0]})
    w_len = EvidenceWindow("episode_length", window=4)
    w_len.add(b)
    assert w_len.summary().values == (100.0, 200.0)
    w_succ = EvidenceWindow("success", window=4)
    w_succ.add(b)
    assert w_succ.summary().mean == 0.5
    with pytest.raises(KeyError, match="reach"):
        EvidenceWindow("reach", window=4).add(b)


def test_batch_validation_and_concat():
    bad = EpisodeBatch(returns=[1.0, 2.0], lengths=[1], truncated=[False, False])
    with pytest.raises(EvidenceError, match="lengths=1"):
        bad.validate()
    with pytest.raises(EvidenceError, match="success"):
        EpisodeBatch(returns=[1.0], lengths=[1], truncated=[False], terms={"success": []}).validate()
    joined = EpisodeBatch.concat([batch([1.0], terms={"success": [1.0]}), batch([2.0])])
    joined.validate()
    assert joined.returns == [1.0, 2.0]
    assert joined.terms["success"][0] == 1.0 and math.isnan(joined.terms["success"][1])
    with pytest.raises(EvidenceError):
        EpisodeBatch.concat([batch([1.0], generation=0), batch([2.0], generation=1)])


def test_summary_statistics():
    s = EvidenceSummary("episode_return", 0, (1.0, 2.0, 3.0, 4.0), 4, 0)
    assert s.mean == 2.5
    assert s.std == pytest.approx(math.sqrt(5 / 3))  # sample std (ddof=1)
    assert EvidenceSummary("x", 0, (7.0,), 1, 0).std == 0.0
    assert math.isnan(EvidenceSummary("x", 0, (), 0, 0).mean)


def test_summary_round_trips_through_json_and_refuses_malformed():
    s = EvidenceSummary("success", 3, (0.0, 1.0, 0.25), 10, 2)
    assert EvidenceSummary.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    good = s.to_dict()
    for key in ("objective", "generation", "values", "episodes_seen"):
        broken = {k: v for k, v in good.items() if k != key}
        with pytest.raises(EvidenceError, match=key):
            EvidenceSummary.from_dict(broken)
    with pytest.raises(EvidenceError, match="values"):
        EvidenceSummary.from_dict(dict(good, values="0.5"))  # a string is not a list of numbers
    with pytest.raises(EvidenceError, match="values"):
        EvidenceSummary.from_dict(dict(good, values=[1.0, float("nan")]))
    with pytest.raises(EvidenceError, match="generation"):
        EvidenceSummary.from_dict(dict(good, generation="3"))


def test_condition_label_differences_and_parsing():
    a = ConditionLabel(task="Isaac-Repose-Cube-Allegro-Direct-v0", curriculum_stage="2")
    b = ConditionLabel(task="Isaac-Repose-Cube-Allegro-Direct-v0", curriculum_stage="3")
    assert a.differences(a) == []
    diffs = b.differences(a)
    assert len(diffs) == 1 and "curriculum_stage" in diffs[0]
    assert ConditionLabel.from_dict(a.to_dict()) == a
    with pytest.raises(EvidenceError, match="unknown keys"):
        ConditionLabel.from_dict(dict(a.to_dict(), stage="x"))


# ------------------------------------------------------------------ how selection uses evidence


@pytest.fixture
def cfg():
    return population_config_from_dict({"interval_steps": 1000, "min_episodes": 8, "window": 16})


NOW = 1_700_000_000.0


def test_peer_that_just_started_a_generation_is_excluded_until_it_settles(cfg, make_record):
    """It decided to exploit (or just restarted): its old generation must not be compared or copied."""
    me = make_record(0, [1.0] * 16, now=NOW)
    old = make_record(1, [9.0] * 16, now=NOW, generation=1)
    peer = dataclasses.replace(
        old,
        generation=2,
        generation_start_frame=old.frame,
        evidence=dataclasses.replace(old.evidence, generation=2, values=(), settled=False),
    )
    why = peer_exclusion(me, peer, cfg, NOW)
    assert why is not None and "new generation 2" in why and "not settled" in why
    fresh = make_record(2, [], now=NOW, generation=3)
    assert "no settled evidence yet" in peer_exclusion(me, fresh, cfg, NOW)


def test_peer_with_too_few_episodes_is_excluded(cfg, make_record):
    me = make_record(0, [1.0] * 16, now=NOW)
    peer = make_record(1, [9.0] * 7, now=NOW)
    why = peer_exclusion(me, peer, cfg, NOW)
    assert why is not None and "7 episodes" in why and "min_episodes=8" in why
    assert peer_exclusion(me, make_record(1, [9.0] * 8, now=NOW), cfg, NOW) is None


@pytest.mark.parametrize("field", ["task", "curriculum_stage", "reward_config"])
def test_peer_under_another_condition_is_excluded(cfg, make_record, field):
    me = make_record(0, [1.0] * 16, now=NOW)
    peer = make_record(1, [9.0] * 16, now=NOW)
    other = ConditionLabel(**dict(me.condition.to_dict(), **{field: "other"}))
    # The entry carries the condition its evidence was collected under (a curriculum may have moved since).
    peer = dataclasses.replace(
        peer, condition=other, history=tuple(dataclasses.replace(e, condition=other) for e in peer.history)
    )
    why = peer_exclusion(me, peer, cfg, NOW)
    assert why is not None and "incompatible condition" in why and field in why


def test_peer_with_other_objective_is_excluded(cfg, make_record):
    me = make_record(0, [1.0] * 16, now=NOW)
    peer = make_record(1, [9.0] * 16, now=NOW, objective="success")
    why = peer_exclusion(me, peer, cfg, NOW)
    assert why is not None and "objective" in why
