"""One vec-env shared by several members: actions joined, outputs and evidence split by slice, no host sync."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
import torch

from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.envs.slice_env import (
    SharedVecEnv,
    SlicesStopped,
    join_actions,
    split_infos,
    split_value,
)
from async_pbt_isaaclab.envs.slice_summary import SlicedSummarySource
from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter

BOUNDS = [(0, 3), (3, 6), (6, 9)]


def _emitter(n, device="cpu", **kw):
    return EpisodeSummaryEmitter(
        n, device, ["a", "b"], condition=ConditionLabel(task="t"), term_modes={"a": "sum", "b": "max"}, **kw
    )


def _batch_key(batch):
    return (batch.returns, batch.lengths, batch.terms, batch.truncated, batch.settled)


def test_each_slice_sees_only_its_envs_episodes():
    """Per-slice evidence equals an emitter fed that slice alone, generation changes included."""
    rng, gen = random.Random(3), torch.Generator().manual_seed(3)
    sliced = SlicedSummarySource(_emitter(9), BOUNDS)
    alone = [_emitter(stop - start) for start, stop in BOUNDS]
    for step in range(120):
        rew = torch.rand(9, generator=gen, dtype=torch.float64)
        term = torch.tensor([rng.random() < 0.1 for _ in range(9)])
        trunc = torch.tensor([rng.random() < 0.05 for _ in range(9)])
        terms = {"a": torch.rand(9, generator=gen), "b": torch.rand(9, generator=gen)}
        sliced.step(rew, term, trunc, terms=terms)
        for (start, stop), em in zip(BOUNDS, alone, strict=True):
            em.step(rew[start:stop], term[start:stop], trunc[start:stop], {k: v[start:stop] for k, v in terms.items()})
        if step == 60:  # only slice 1's member changes generation: the others' evidence goes on
            sliced.parts[1].start_generation(1)
            alone[1].start_generation(1)
    batches = [part.drain() for part in sliced.parts]
    assert [_batch_key(b) for b in batches] == [_batch_key(em.drain()) for em in alone]
    assert sum(len(b) for b in batches) > 10
    assert [b.generation for b in batches] == [0, 1, 0]


def test_log_terms_are_refused_with_slices():
    whole = EpisodeSummaryEmitter(4, "cpu", ["Episode_Reward/x"], term_modes={"Episode_Reward/x": "log"})
    with pytest.raises(ValueError, match=r"read extras\['log'\], a mean over every env reset"):
        SlicedSummarySource(whole, [(0, 2), (2, 4)])


def test_actions_joined_in_slice_order_and_sanitised():
    joined = join_actions([torch.tensor([[1.0], [float("nan")]]), torch.tensor([[float("inf")], [2.0]])])
    assert joined.tolist() == [[1.0], [0.0], [0.0], [2.0]]
    arr = join_actions([np.array([[np.nan]]), np.array([[3.0]])])
    assert arr.tolist() == [[0.0], [3.0]]


def test_infos_split_and_display_means_dropped():
    infos = {
        "time_outs": torch.arange(6),
        "episode": {"r": 1.0},
        "log": {"x": 2},
        "other": 5,
        "per": {"v": np.arange(6)},
    }
    part = split_infos(infos, 2, 4, 6)
    assert part["time_outs"].tolist() == [2, 3]
    assert part["per"]["v"].tolist() == [2, 3]
    assert part["other"] == 5 and "episode" not in part and "log" not in part
    assert split_value({"obs": torch.zeros(6, 3), "states": torch.zeros(6, 5)}, 4, 6, 6)["states"].shape == (2, 5)


# ---------------------------------------------------------------------------------------------- no host syncs


def _one_shared_step(device):
    """What the barrier does per env step on the device: join the slices' actions, split the outputs, feed the
    per-slice emitters."""
    sliced = SlicedSummarySource(_emitter(9, device), BOUNDS)
    actions = [torch.zeros(3, 2, device=device) for _ in BOUNDS]
    obs, rew = torch.zeros(9, 4, device=device), torch.zeros(9, device=device)
    done = torch.zeros(9, dtype=torch.bool, device=device)
    infos = {"time_outs": done, "episode": {"x": torch.zeros((), device=device)}}
    terms = {"a": torch.zeros(9, device=device), "b": torch.zeros(9, device=device)}

    def step():
        joined = join_actions(actions)
        assert joined.shape == (9, 2)
        sliced.step(rew, done, done, terms=terms)
        for start, stop in BOUNDS:
            split_value(obs, start, stop, 9), split_value(rew, start, stop, 9), split_infos(infos, start, stop, 9)

    return sliced, step, done


def test_shared_step_runs_on_meta_device():
    """Meta tensors carry no data: any .item(), nonzero(), boolean-mask index or host copy would raise."""
    sliced, step, _ = _one_shared_step("meta")
    for _ in range(3):
        step()
    with pytest.raises((RuntimeError, NotImplementedError)):
        sliced.parts[0].drain()  # drain reads data back, so meta refuses it: the check has teeth


def test_shared_step_calls_no_host_transfer_api(monkeypatch):
    sliced, step, done = _one_shared_step("cpu")
    step()

    def forbid(name):
        def raiser(*args, **kwargs):
            raise AssertionError(f"the shared step called {name}")

        return raiser

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero", "masked_select"):
        monkeypatch.setattr(torch.Tensor, name, forbid(f"Tensor.{name}"))
    monkeypatch.setattr(torch, "nonzero", forbid("torch.nonzero"))
    for i in range(4):
        done[(i * 4) % 9] = True
        step()
    monkeypatch.undo()
    assert sum(len(p.drain()) for p in sliced.parts) == 0  # nothing settled yet, but drain works after the patch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_shared_step_does_not_synchronise_on_cuda():
    """On a GPU, torch raises on any synchronising call while the sync debug mode is "error"."""
    _, step, done = _one_shared_step("cuda")
    patterns = [torch.arange(9, device="cuda") % (i + 2) == 0 for i in range(4)]  # made before the check
    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for pattern in patterns:
            done.copy_(pattern)  # device to device: no host involvement
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---------------------------------------------------------------------------------------------- the barrier


def test_slices_step_the_env_together_like_one_env():
    """Two member threads stepping their slices give what one env stepped with the joined actions gives."""
    shared = SharedVecEnv(GymVecEnv("Pendulum-v1", 4, seed=5), 4, [(0, 2), (2, 4)])
    reference = GymVecEnv("Pendulum-v1", 4, seed=5)
    shared.reset()
    ref_obs = [reference.reset()]
    actions = [np.full((4, 1), 0.1 * k, dtype=np.float32) for k in range(6)]
    seen: dict[int, list] = {0: [shared.slices[0].reset()], 1: [shared.slices[1].reset()]}

    def member(slot):
        env = shared.slices[slot]
        for a in actions:
            obs, rew, _done, infos = env.step(a[2 * slot : 2 * slot + 2])
            assert obs.shape == (2, 3) and rew.shape == (2,) and infos["time_outs"].shape == (2,)
            seen[slot].append(obs)
        shared.leave(slot)

    threads = [threading.Thread(target=member, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    shared.run()
    for t in threads:
        t.join()
    for a in actions:
        ref_obs.append(reference.step(a)[0])
    assert shared.steps == len(actions)
    for k, ref in enumerate(ref_obs):
        np.testing.assert_array_equal(np.concatenate([seen[0][k], seen[1][k]]), ref)


def test_a_left_slice_gets_zero_actions_and_a_stop_reaches_every_slice():
    shared = SharedVecEnv(GymVecEnv("Pendulum-v1", 4, seed=1), 4, [(0, 2), (2, 4)])
    shared.reset()
    shared.leave(1)
    sent = []
    original = shared.env.step
    shared.env.step = lambda a: (sent.append(np.array(a)), original(a))[1]
    errors = []

    def member():
        try:
            shared.slices[0].step(np.ones((2, 1), dtype=np.float32))
            shared.stop("stopped by the test")
            shared.slices[0].step(np.ones((2, 1), dtype=np.float32))
        except SlicesStopped as exc:
            errors.append(str(exc))
        finally:
            shared.leave(0)

    t = threading.Thread(target=member)
    t.start()
    shared.run()
    t.join()
    assert sent[0].tolist() == [[1.0], [1.0], [0.0], [0.0]]
    assert errors == ["stopped by the test"]
