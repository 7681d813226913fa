"""EpisodeSummaryEmitter against a brute-force per-environment Python reference, plus no-sync checks."""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import pytest
import torch

from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE, ConditionLabel, EpisodeBatch, EvidenceWindow
from async_pbt_isaaclab.envs.episode_layout import default_term_mode
from async_pbt_isaaclab.envs.summary_emitter import DrainStats, EpisodeSummaryEmitter


def ungated_emitter(*args, **kwargs) -> EpisodeSummaryEmitter:
    """An emitter whose settling gate is open from the first step: these tests check the episode records
    themselves against a reference; the gate has tests of its own (test_settling_*)."""
    kwargs.setdefault("settle_max_steps", 0)
    return EpisodeSummaryEmitter(*args, **kwargs)


# ---------------------------------------------------------------------------------------------- reference


@dataclass
class _Episode:
    ret: float = 0.0
    length: float = 0.0
    terms: dict = field(default_factory=dict)
    segment: int = 0


class ReferenceEmitter:
    """Per-env Python loops over Python floats: the obviously-correct version of the emitter's contract."""

    def __init__(self, num_envs, term_names, modes, capacity, condition_fn=None, generation=0, fresh_start=True):
        self.n = num_envs
        self.term_names = list(term_names)
        self.modes = modes
        self.capacity = capacity
        self.condition_fn = condition_fn
        self.condition = condition_fn() if condition_fn else ConditionLabel()
        self.generation = generation
        self.segment = 0
        self.envs = [self._fresh() for _ in range(num_envs)]
        if not fresh_start:
            for ep in self.envs:
                ep.segment = -1
                ep.length = math.nan
        self.records = []  # every completed episode, in completion order
        self.drained = 0

    def _fresh(self):
        terms = {name: (-math.inf if self.modes[name] == "max" else 0.0) for name in self.term_names}
        return _Episode(terms=terms, segment=self.segment)

    def step(self, rew, term, trunc, terms, log):
        rew = rew.reshape(-1).tolist()
        term, trunc = term.tolist(), trunc.tolist()
        terms = {k: v.tolist() for k, v in (terms or {}).items()}
        for e in range(self.n):
            ep = self.envs[e]
            ep.ret += float(rew[e])
            ep.length += 1
            for name in self.term_names:
                mode = self.modes[name]
                if mode == "sum":
                    ep.terms[name] += float(terms[name][e])
                elif mode == "max":
                    ep.terms[name] = max(ep.terms[name], float(terms[name][e]))
                elif mode == "last":
                    ep.terms[name] = float(terms[name][e])
                else:
                    value = None if log is None else log.get(name)
                    ep.terms[name] = math.nan if value is None else float(value)
            if term[e] or trunc[e]:
                self.records.append((ep.ret, ep.length, dict(ep.terms), bool(trunc[e]), ep.segment))
                self.envs[e] = self._fresh()
        if self.condition_fn is not None:
            label = self.condition_fn()
            if label != self.condition:
                self.condition = label
                self._new_segment()

    def _new_segment(self):
        self.segment += 1
        for ep in self.envs:
            if ep.length == 0:
                ep.segment = self.segment

    def start_generation(self, g):
        self.generation = g
        self._new_segment()

    def drain(self):
        new = self.records[self.drained :]
        self.drained = len(self.records)
        kept = new[-self.capacity :] if new else []
        overflow = len(new) - len(kept)
        good = [r for r in kept if r[4] == self.segment]
        batch = EpisodeBatch(
            returns=[r[0] for r in good],
            lengths=[int(r[1]) for r in good],
            terms={name: [r[2][name] for r in good] for name in self.term_names},
            truncated=[r[3] for r in good],
            generation=self.generation,
            condition=self.condition,
        )
        return batch, DrainStats(len(good), overflow, len(kept) - len(good))


def _same_floats(a, b):
    return len(a) == len(b) and all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def assert_batches_equal(got: EpisodeBatch, want: EpisodeBatch):
    got.validate()
    assert got.returns == want.returns
    assert got.lengths == want.lengths
    assert all(type(v) is int for v in got.lengths)
    assert got.truncated == want.truncated
    assert all(type(v) is bool for v in got.truncated)
    assert list(got.terms) == list(want.terms)
    for name in want.terms:
        assert _same_floats(got.terms[name], want.terms[name]), name
    assert got.generation == want.generation
    assert got.condition == want.condition


# ---------------------------------------------------------------------------------------------- random runs


def _random_step_inputs(rng: random.Random, gen: torch.Generator, n, term_names, modes):
    p = rng.choice([0.0, 0.02, 0.2, 0.7, 1.0])
    done = torch.rand(n, generator=gen) < p
    both = torch.rand(n, generator=gen)
    terminated = done & (both < 0.6)
    truncated = done & (both >= 0.4)  # some envs get both flags, as Isaac Lab allows
    rewards = torch.randn(n, generator=gen)
    if rng.random() < 0.3:
        rewards = rewards.reshape(n, 1)
    terms = {}
    for name in term_names:
        mode = modes[name]
        if mode == "log":
            continue
        if rng.random() < 0.3:
            terms[name] = torch.rand(n, generator=gen) < 0.5  # bool flags are accepted
        else:
            terms[name] = torch.randn(n, generator=gen) * 3
    log = None
    if rng.random() < 0.9:
        log = {"Unrelated/key": 1.0}
        for name in term_names:
            if modes[name] != "log":
                continue
            kind = rng.random()
            if kind < 0.4:
                log[name] = torch.randn((), generator=gen)
            elif kind < 0.7:
                log[name] = rng.uniform(-5, 5)
            elif kind < 0.9:
                log[name] = rng.randint(0, 9)
            # else: key missing -> NaN
    return rewards, terminated, truncated, terms, log


@pytest.mark.parametrize("seed", range(40))
def test_matches_reference_on_random_patterns(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    n = rng.randint(1, 19)
    pool = ["rew_a", "rew_b", "success", "peak", "Episode_Reward/x", "Curriculum/stage"]
    term_names = rng.sample(pool, rng.randint(0, len(pool)))
    explicit = {}
    for name in term_names:
        if "/" not in name and rng.random() < 0.7:
            explicit[name] = rng.choice(["sum", "last", "max"])
    modes = {name: explicit.get(name, default_term_mode(name)) for name in term_names}
    capacity = rng.randint(n, 3 * n + 2)
    stage = {"value": 0}
    use_callable = rng.random() < 0.5

    def label():
        return ConditionLabel(task="T", curriculum_stage=str(stage["value"]))

    fresh = rng.random() < 0.8
    emitter = ungated_emitter(
        n,
        "cpu",
        term_names,
        label if use_callable else ConditionLabel(task="T", curriculum_stage="0"),
        generation=3,
        term_modes=explicit,
        capacity=capacity,
        fresh_start=fresh,
    )
    ref = ReferenceEmitter(n, term_names, modes, capacity, label, generation=3, fresh_start=fresh)
    generation = 3
    for _ in range(rng.randint(30, 160)):
        inputs = _random_step_inputs(rng, gen, n, term_names, modes)
        emitter.step(*inputs)
        ref.step(*inputs)
        r = rng.random()
        if r < 0.15:
            got, want = emitter.drain(), ref.drain()
            assert_batches_equal(got, want[0])
            assert emitter.last_drain == want[1]
        elif r < 0.2:
            generation += 1
            emitter.start_generation(generation)
            ref.start_generation(generation)
        elif r < 0.24 and use_callable:
            stage["value"] += 1
    got, want = emitter.drain(), ref.drain()
    assert_batches_equal(got, want[0])
    assert emitter.last_drain == want[1]
    # the second drain in a row is empty
    assert len(emitter.drain()) == 0 and emitter.last_drain == DrainStats(0, 0, 0)


def test_several_finishes_and_repeat_finishes_between_drains():
    n = 3
    em = ungated_emitter(n, "cpu", ["succ"], term_modes={"succ": "last"}, capacity=12)
    f, t = False, True
    steps = [
        # rewards,        terminated,  truncated,   success flag
        ([1.0, 2.0, 3.0], [f, t, f], [f, f, f], [0.0, 1.0, 0.0]),
        ([1.0, 2.0, 3.0], [t, t, f], [f, f, t], [1.0, 0.0, 0.0]),  # three finish at once, env 1 again
        ([0.5, 0.5, 0.5], [f, t, f], [f, f, f], [0.0, 1.0, 0.0]),  # env 1 a third time
    ]
    for rew, term, trunc, succ in steps:
        em.step(torch.tensor(rew), torch.tensor(term), torch.tensor(trunc), {"succ": torch.tensor(succ)})
    batch = em.drain()
    # completion order: by step, then by env index
    assert batch.returns == [2.0, 2.0, 2.0, 6.0, 0.5]
    assert batch.lengths == [1, 2, 1, 2, 1]
    assert batch.truncated == [False, False, False, True, False]
    assert batch.terms == {"succ": [1.0, 1.0, 0.0, 0.0, 1.0]}
    assert batch.generation == 0 and batch.condition == ConditionLabel()


def test_overflow_keeps_newest_and_counts_dropped():
    n = 2
    em = ungated_emitter(n, "cpu", capacity=3)
    done = torch.tensor([True, True])
    no = torch.tensor([False, False])
    for i in range(4):  # 8 one-step episodes, returns 0..7 in completion order
        em.step(torch.tensor([2.0 * i, 2.0 * i + 1]), done, no)
    assert em.num_pending() == 3
    batch = em.drain()
    assert batch.returns == [5.0, 6.0, 7.0]
    assert em.last_drain == DrainStats(episodes=3, dropped_overflow=5, dropped_stale=0)
    assert em.dropped_overflow == 5
    em.step(torch.tensor([1.0, 1.0]), torch.tensor([False, True]), no)
    assert em.drain().returns == [1.0] and em.last_drain.dropped_overflow == 0
    assert em.dropped_overflow == 5


def test_generation_change_drops_straddling_episodes():
    n = 2
    em = ungated_emitter(n, "cpu", generation=0)
    no = torch.tensor([False, False])
    em.step(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), no)  # env 0 done (gen 0), env 1 running
    em.start_generation(1)  # env 0 has not acted in its new episode: it counts for gen 1
    em.step(torch.tensor([2.0, 2.0]), torch.tensor([True, True]), no)
    em.step(torch.tensor([3.0, 3.0]), torch.tensor([False, True]), no)
    batch = em.drain()
    assert batch.generation == 1
    # dropped: env 0's gen-0 episode (completed before the change), env 1's straddling episode
    assert batch.returns == [2.0, 3.0]
    assert em.last_drain == DrainStats(episodes=2, dropped_overflow=0, dropped_stale=2)


def test_condition_callable_change_starts_new_segment():
    stage = {"v": "0"}
    em = ungated_emitter(1, "cpu", condition=lambda: ConditionLabel(task="t", curriculum_stage=stage["v"]))
    assert em.condition.curriculum_stage == "0"
    em.step(torch.tensor([1.0]), torch.tensor([True]), torch.tensor([False]))
    stage["v"] = "1"  # the curriculum advanced inside the next env step
    em.step(torch.tensor([1.0]), torch.tensor([False]), torch.tensor([False]))
    em.step(torch.tensor([1.0]), torch.tensor([True]), torch.tensor([False]))
    em.step(torch.tensor([4.0]), torch.tensor([True]), torch.tensor([False]))
    batch = em.drain()
    assert batch.condition.curriculum_stage == "1"
    assert batch.returns == [4.0]
    assert em.last_drain.dropped_stale == 2


def test_attach_mid_episode_and_reset():
    em = ungated_emitter(2, "cpu", fresh_start=False)
    no = torch.tensor([False, False])
    em.step(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), no)
    em.step(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), no)
    assert em.drain().returns == [1.0]  # env 0's partial first episode is dropped
    assert em.last_drain.dropped_stale == 1
    em.reset()  # env.reset() outside step: env 1 starts afresh
    em.step(torch.tensor([1.0, 5.0]), torch.tensor([False, True]), no)
    assert em.drain().returns == [5.0]


def test_max_mode_with_negative_values_and_nan_log():
    em = ungated_emitter(1, "cpu", ["m", "Metrics/x"], term_modes={"m": "max"})
    em.step(torch.tensor([0.0]), torch.tensor([False]), torch.tensor([False]), {"m": torch.tensor([-3.0])}, {})
    em.step(torch.tensor([0.0]), torch.tensor([True]), torch.tensor([False]), {"m": torch.tensor([-5.0])}, None)
    batch = em.drain()
    assert batch.terms["m"] == [-3.0]
    assert math.isnan(batch.terms["Metrics/x"][0])


def test_argument_validation():
    with pytest.raises(ValueError, match="capacity"):
        ungated_emitter(8, "cpu", capacity=4)
    with pytest.raises(ValueError, match="unknown mode"):
        ungated_emitter(2, "cpu", ["a"], term_modes={"a": "mean"})
    with pytest.raises(ValueError, match="not in term_names"):
        ungated_emitter(2, "cpu", ["a"], term_modes={"b": "sum"})
    with pytest.raises(ValueError, match="duplicate"):
        ungated_emitter(2, "cpu", ["a", "a"])
    em = ungated_emitter(2, "cpu", ["a"])
    with pytest.raises(KeyError):
        em.step(torch.zeros(2), torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    with pytest.raises(TypeError):
        ungated_emitter(2, "cpu", condition=lambda: "stage-1")


# ---------------------------------------------------------------------------------------------- no host syncs


def _sync_free_inputs(n, device):
    rew = torch.zeros(n, 1, device=device)
    term = torch.zeros(n, dtype=torch.bool, device=device)
    trunc = torch.zeros(n, dtype=torch.bool, device=device)
    terms = {
        "a": torch.zeros(n, device=device),
        "b": torch.zeros(n, dtype=torch.bool, device=device),
        "c": torch.zeros(n, device=device),
    }
    log = {"Episode_Reward/a": torch.zeros((), device=device), "Curriculum/x": 2.0, "Episode_Termination/t": 3}
    return rew, term, trunc, terms, log


def _emitter_for_sync_checks(device):
    names = ["a", "b", "c", "Episode_Reward/a", "Curriculum/x", "Episode_Termination/t"]
    return ungated_emitter(
        8,
        device,
        names,
        condition=lambda: ConditionLabel(task="t"),
        term_modes={"b": "last", "c": "max"},
    )


def test_step_runs_on_meta_device():
    """Meta tensors carry no data: any .item(), nonzero(), boolean-mask index or host copy would raise."""
    em = _emitter_for_sync_checks("meta")
    inputs = _sync_free_inputs(8, "meta")
    for _ in range(3):
        em.step(*inputs)
    em.start_generation(1)
    em.step(*inputs)
    with pytest.raises((RuntimeError, NotImplementedError)):
        em.drain()  # drain reads data back, so meta refuses it: the check has teeth


def test_step_calls_no_host_transfer_api(monkeypatch):
    """Every tensor-to-host API raises while step() runs on CPU."""
    em = _emitter_for_sync_checks("cpu")
    inputs = _sync_free_inputs(8, "cpu")
    em.step(*inputs)  # warm-up outside the patch

    def forbid(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"step() called {name}")

        return raiser

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero", "masked_select"):
        monkeypatch.setattr(torch.Tensor, name, forbid(f"Tensor.{name}"))
    monkeypatch.setattr(torch, "nonzero", forbid("torch.nonzero"))
    monkeypatch.setattr(torch, "masked_select", forbid("torch.masked_select"))
    original_getitem = torch.Tensor.__getitem__
    original_to = torch.Tensor.to

    def getitem(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
            raise AssertionError("step() used boolean-mask indexing")
        return original_getitem(self, index)

    def to(self, *args, **kwargs):
        if "device" in kwargs or any(isinstance(a, (str, torch.device)) for a in args):
            raise AssertionError("step() moved a tensor between devices")
        return original_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "__getitem__", getitem)
    monkeypatch.setattr(torch.Tensor, "to", to)
    for i in range(5):
        inputs[1][i % 8] = True  # (setitem is not patched) vary the done pattern
        em.step(*inputs)
    monkeypatch.undo()
    assert len(em.drain()) > 0


@pytest.mark.skipif(
    not os.environ.get("ASYNC_PBT_TEST_COMPILE"),
    reason="torch.compile takes tens of seconds; set ASYNC_PBT_TEST_COMPILE=1 to run",
)
def test_compiled_path_matches_reference():
    rng = random.Random(7)
    gen = torch.Generator().manual_seed(7)
    names = ["a", "b", "Episode_Reward/x"]
    modes = {"a": "sum", "b": "last", "Episode_Reward/x": "log"}
    em = ungated_emitter(6, "cpu", names, term_modes={"b": "last"}, capacity=9, compile=True)
    ref = ReferenceEmitter(6, names, modes, 9)
    for _ in range(60):
        inputs = _random_step_inputs(rng, gen, 6, names, modes)
        em.step(*inputs)
        ref.step(*inputs)
    got, want = em.drain(), ref.drain()
    assert_batches_equal(got, want[0])


# ---------------------------------------------------------------------------------------- settling gate


def _geometric_episodes(
    em: EpisodeSummaryEmitter, gen: torch.Generator, steps: int, p_fail: float = 0.01, cap: int = 400
) -> None:
    """Drive ``em`` with a toy task: reward 1 per step, each step ends the episode with probability
    ``p_fail`` (a failure), and the time-out ends it at ``cap`` steps. Steady-state return ~ 98."""
    n = em.num_envs
    length = getattr(em, "_toy_length", torch.zeros(n, dtype=torch.int64))
    for _ in range(steps):
        length += 1
        terminated = torch.rand(n, generator=gen) < p_fail
        truncated = (length >= cap) & ~terminated
        em.step(torch.ones(n), terminated, truncated)
        length[terminated | truncated] = 0
    em._toy_length = length


def _first_published_mean(em: EpisodeSummaryEmitter, gen: torch.Generator, min_episodes: int = 16) -> float:
    """Run until an evidence window of the current generation would first be published: settled, with at
    least ``min_episodes`` episodes (the observer's rule). Drains every 8 steps, as a member drains often."""
    window = EvidenceWindow(RETURN_OBJECTIVE, max(64, min_episodes), em.generation)
    for _ in range(10_000):
        _geometric_episodes(em, gen, 8)
        window.add(em.drain())
        if window.settled and len(window) >= min_episodes:
            return window.summary().mean
    raise AssertionError("the window never became publishable")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_settling_gate_makes_the_first_published_mean_representative(seed):
    """After a restart every env is at step 0: the first finished episodes are the early failures. With the
    gate the first published window is within 10 % of steady state; without it, far below. A large window
    (512 episodes of 1024 envs) keeps sampling noise (~4 %) well inside the 10 % under test."""
    gen = torch.Generator().manual_seed(seed)
    em = EpisodeSummaryEmitter(1024, "cpu")
    _geometric_episodes(em, gen, 1500)
    em.drain()
    _geometric_episodes(em, gen, 2000)
    steady = em.drain()
    steady_mean = sum(steady.returns) / len(steady)
    assert 90 < steady_mean < 105, steady_mean  # the toy task's own figure, checked

    em.reset()  # a (re)start: every env back at step 0
    gated = _first_published_mean(em, gen, min_episodes=512)
    assert abs(gated - steady_mean) / steady_mean < 0.10, (gated, steady_mean)
    assert em.dropped_unsettled > 0

    ungated = EpisodeSummaryEmitter(1024, "cpu", settle_max_steps=0)
    ungated_first = _first_published_mean(ungated, torch.Generator().manual_seed(seed), min_episodes=512)
    assert ungated_first < 0.6 * steady_mean, (ungated_first, steady_mean)


def test_settling_gate_restarts_with_every_generation_and_honours_the_cap():
    em = EpisodeSummaryEmitter(2, "cpu", settle_max_steps=5)
    never = torch.zeros(2, dtype=torch.bool)
    one_done = torch.tensor([True, False])
    em.step(torch.ones(2), one_done, never)  # env 0 finished its first episode; env 1 never finishes
    assert not em.settled() and em.settle_progress() == (1, 2)
    for _ in range(4):
        em.step(torch.ones(2), never, never)
    assert em.settled()  # 5 steps into the segment: the cap opens the gate
    em.step(torch.ones(2), one_done, never)
    batch = em.drain()
    assert batch.settled and batch.returns == [5.0] and em.last_drain.dropped_unsettled == 1

    em.start_generation(1)
    assert not em.settled() and em.settle_progress() == (0, 2)
    em.set_settle_max_steps(None)
    for _ in range(50):
        em.step(torch.ones(2), one_done, never)
    assert not em.settled()  # env 1 has not finished an episode begun in generation 1, and no cap
    both = torch.tensor([True, True])
    em.step(torch.ones(2), both, never)  # env 1's episode began in generation 0: it does not settle env 1
    assert not em.settled() and em.settle_progress() == (1, 2)
    em.step(torch.ones(2), both, never)  # env 1's first episode of generation 1 (one step long)
    assert em.settled()
    batch = em.drain()
    # Only the episodes of the settling step count: env 0's 51 earlier ones finished before it, and env 1's
    # first one straddled the change.
    assert batch.returns == [1.0, 1.0] and batch.settled and batch.generation == 1
    assert em.last_drain.dropped_stale == 1 and em.last_drain.dropped_unsettled == 51
    em.step(torch.ones(2), both, never)
    assert em.drain().returns == [1.0, 1.0]
