"""TorchReachEnv follows Isaac Lab's ManagerBasedRLEnv step contract; the emitter fed from it is exact."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter
from async_pbt_isaaclab.testing.torch_reach_task import (
    PER_ENV_TERM_MODES,
    REWARD_TERMS,
    TASK_ID,
    TERMINATION_TERMS,
    TorchReachEnv,
    TorchReachEnvCfg,
    register_torch_envs,
)


def ungated_emitter(*args, **kwargs) -> EpisodeSummaryEmitter:
    """An emitter whose settling gate is open from the first step: these tests check the episode records
    themselves against a reference; the gate has tests of its own (test_settling_*)."""
    kwargs.setdefault("settle_max_steps", 0)
    return EpisodeSummaryEmitter(*args, **kwargs)


# The brute-force reference lives next door; load it by path so any pytest import mode works.
_spec = importlib.util.spec_from_file_location(
    "_summary_reference", Path(__file__).with_name("test_summary_emitter.py")
)
_reference = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_reference)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _pd_actions(obs, gen, noise=0.3):
    """A decent controller plus noise; every 8th env flees outwards, so episodes end in all three ways."""
    p = obs["policy"]
    act = 2.0 * p[:, :2] - 1.0 * p[:, 2:4]
    act = act + noise * 3 * torch.randn(act.shape, generator=gen).to(p.device)
    flee = torch.zeros(p.shape[0], 1, dtype=torch.bool, device=p.device)
    flee[::8] = True
    return torch.where(flee, torch.sign(p[:, 4:6]) + 0.1, act)


def test_registration_is_idempotent_and_make_works():
    register_torch_envs()
    register_torch_envs()
    assert TASK_ID in gym.registry
    spec = gym.registry[TASK_ID]
    assert spec.kwargs["env_cfg_entry_point"].endswith(":TorchReachEnvCfg")
    env = gym.make(TASK_ID, num_envs=5)
    assert isinstance(env.unwrapped, TorchReachEnv) and env.unwrapped.num_envs == 5
    cfg = TorchReachEnvCfg()
    cfg.scene.num_envs = 3
    assert gym.make(TASK_ID, cfg=cfg).unwrapped.num_envs == 3
    with pytest.raises(TypeError):
        TorchReachEnv(num_env=3)


@pytest.mark.parametrize("device", DEVICES)
def test_step_contract_shapes_dtypes_devices(device):
    n = 7
    env = TorchReachEnv(num_envs=n, device=device)
    assert env.max_episode_length == 100 and env.max_episode_length_s == 5.0
    assert env.single_observation_space["policy"].shape == (6,)
    assert env.single_action_space.shape == (2,)
    assert env.observation_space["policy"].shape == (n, 6)
    assert env.action_space.shape == (n, 2)
    assert env.cfg.is_finite_horizon is False
    assert env.episode_length_buf.dtype == torch.long

    obs, extras = env.reset()
    assert set(obs) == {"policy"}
    assert obs["policy"].shape == (n, 6) and obs["policy"].dtype == torch.float32
    assert obs["policy"].device.type == torch.device(device).type
    assert "log" in extras  # reset() logs the envs it resets, as Isaac Lab does
    out = env.step(torch.zeros(n, 2, device=device))
    assert len(out) == 5
    obs, rew, terminated, truncated, extras2 = out
    assert extras2 is extras  # one persistent dict
    assert rew.shape == (n,) and rew.dtype == torch.float32
    assert terminated.shape == (n,) and terminated.dtype == torch.bool
    assert truncated.shape == (n,) and truncated.dtype == torch.bool
    for t in (obs["policy"], rew, terminated, truncated):
        assert t.device.type == torch.device(device).type
    assert extras["time_outs"] is truncated
    # Isaac Lab returns its managers' buffers: the next step overwrites them in place
    assert rew is env.reward_buf and terminated is env.reset_terminated and truncated is env.reset_time_outs
    terms = env.get_per_env_terms()
    assert set(terms) == set(PER_ENV_TERM_MODES)
    assert all(v.shape == (n,) for v in terms.values())
    assert torch.allclose(sum(terms[k] for k in REWARD_TERMS), rew)


def test_time_out_auto_reset_and_stale_log():
    cfg = TorchReachEnvCfg(success_radius=0.0, arena_half_size=1e9)  # only time-outs can end an episode
    cfg.scene.num_envs = 4
    env = TorchReachEnv(cfg)
    obs, extras = env.reset()
    log_after_reset = extras["log"]
    actions = torch.full((4, 2), 0.3)
    for t in range(1, env.max_episode_length):
        obs, _rew, term, trunc, extras = env.step(actions)
        assert not (term | trunc).any()
        assert extras["log"] is log_after_reset  # stale: rebuilt only when some env resets
        assert (env.episode_length_buf == t).all()
    obs, _rew, term, trunc, extras = env.step(actions)
    assert trunc.all() and not term.any()
    assert extras["log"] is not log_after_reset
    assert extras["log"]["Episode_Termination/time_out"] == 4
    assert extras["log"]["Episode_Termination/success"] == 0
    assert (env.episode_length_buf == 0).all()
    # auto-reset: the returned observation is the first one of the next episode (zero velocity)
    assert torch.equal(obs["policy"][:, 2:4], torch.zeros(4, 2))
    obs, _rew, term, trunc, extras = env.step(actions)
    assert not trunc.any() and (env.episode_length_buf == 1).all()


def test_log_values_follow_isaac_lab_reward_manager():
    n = 32
    env = TorchReachEnv(num_envs=n, seed=3)
    gen = torch.Generator().manual_seed(0)
    obs, _ = env.reset()
    sums = torch.zeros(len(REWARD_TERMS), n, dtype=torch.float64)
    resets_checked = 0
    for _ in range(400):
        obs, _rew, term, trunc, extras = env.step(_pd_actions(obs, gen))
        terms = env.get_per_env_terms()
        sums += torch.stack([terms[k] for k in REWARD_TERMS]).double()
        done = term | trunc
        if done.any():
            ids = done.nonzero().squeeze(-1)
            log = extras["log"]
            for i, name in enumerate(REWARD_TERMS):
                want = sums[i, ids].mean().item() / env.max_episode_length_s
                assert log["Episode_Reward/" + name].item() == pytest.approx(want, rel=1e-4, abs=1e-6)
            assert log["Metrics/success"].item() == pytest.approx(terms["success"][ids].mean().item())
            assert log["Episode_Termination/success"] == int(terms["success"][ids].sum().item())
            assert sum(log["Episode_Termination/" + k] for k in TERMINATION_TERMS) >= len(ids)
            assert log["Curriculum/stage"] == float(env.curriculum_stage)
            sums[:, ids] = 0.0
            resets_checked += 1
    assert resets_checked > 20


def test_curriculum_stage_sets_goal_radius():
    env = TorchReachEnv(num_envs=256)
    assert env.curriculum_stage == 0 and env.num_curriculum_stages == 4
    with pytest.raises(ValueError):
        env.curriculum_stage = 4
    for stage, radius in enumerate(env.cfg.goal_radius_by_stage):
        env.curriculum_stage = stage
        obs, extras = env.reset()
        goal = obs["policy"][:, :2] + obs["policy"][:, 4:6]
        assert torch.linalg.vector_norm(goal, dim=-1).max() <= radius + 1e-6
        assert extras["log"]["Curriculum/stage"] == float(stage)


def test_seeded_runs_are_reproducible():
    def run(seed):
        env = TorchReachEnv(num_envs=16, seed=seed)
        obs, _ = env.reset()
        out = []
        for _ in range(150):
            obs, rew, *_ = env.step(torch.sin(obs["policy"][:, :2] * 3.0))
            out.append(rew.clone())
        return torch.stack(out)

    assert torch.equal(run(5), run(5))
    assert not torch.equal(run(5), run(6))


def test_pd_controller_solves_the_task():
    """The task is solvable by a simple controller, so a learner has something to find."""
    env = TorchReachEnv(num_envs=64)
    env.curriculum_stage = 3
    obs, _ = env.reset()
    successes = episodes = 0
    for _ in range(300):
        p = obs["policy"]
        obs, _rew, term, trunc, _extras = env.step(2.0 * p[:, :2] - 1.0 * p[:, 2:4])
        episodes += int((term | trunc).sum())
        successes += int(env.get_per_env_terms()["success"].sum())
    assert episodes > 100 and successes == episodes


@pytest.mark.parametrize("seed", range(6))
def test_emitter_fed_from_env_matches_reference(seed):
    n = 24
    env = TorchReachEnv(num_envs=n, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    names = [*PER_ENV_TERM_MODES, "Episode_Reward/progress", "Metrics/success", "Curriculum/stage"]
    modes = {
        **PER_ENV_TERM_MODES,
        "Episode_Reward/progress": "log",
        "Metrics/success": "log",
        "Curriculum/stage": "log",
    }

    def label():
        return ConditionLabel(task=TASK_ID, objective="success", curriculum_stage=str(env.curriculum_stage))

    emitter = ungated_emitter(n, env.device, names, label, term_modes=PER_ENV_TERM_MODES, capacity=4 * n)
    ref = _reference.ReferenceEmitter(n, names, modes, 4 * n, label)
    obs, _ = env.reset()
    emitted = 0
    endings = dict.fromkeys([*TERMINATION_TERMS, "simultaneous"], 0)
    for step in range(1, 601):
        obs, rew, term, trunc, extras = env.step(_pd_actions(obs, gen))
        terms = env.get_per_env_terms()
        emitter.step(rew, term, trunc, terms, extras.get("log"))
        for i, name in enumerate(TERMINATION_TERMS):
            endings[name] += int(env._term_dones[i].sum())
        endings["simultaneous"] += int((term | trunc).sum() > 1)
        ref.step(rew, term, trunc, terms, extras.get("log"))
        if step == 300:
            env.curriculum_stage = 1
        if step % 50 == 0:
            got, (want, stats) = emitter.drain(), ref.drain()
            _reference.assert_batches_equal(got, want)
            assert emitter.last_drain == stats
            emitted += len(got)
            for i in range(len(got)):
                # the reward terms add up to the return (float32 rewards vs float64 sums of float32 terms)
                parts = sum(got.terms[k][i] for k in REWARD_TERMS)
                assert parts == pytest.approx(got.returns[i], rel=1e-4, abs=1e-4)
                assert got.lengths[i] <= env.max_episode_length
                assert got.truncated[i] == (got.lengths[i] == env.max_episode_length)
    assert emitted > 200
    assert endings["success"] > 50 and endings["time_out"] > 5 and endings["out_of_bounds"] > 5
    assert endings["simultaneous"] > 10
    assert got.condition.curriculum_stage == "1"
    assert emitter.dropped_stale > 0  # episodes straddling the curriculum change were dropped
