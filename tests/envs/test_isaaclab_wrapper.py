"""The Isaac Lab wrapper (PbtIsaacLabEnv) against the pure-torch env that follows Isaac Lab's step contract.

What is shown here, without Isaac Sim:

1. every completed episode the wrapper's emitter reports equals a brute-force reference built from the step outputs
   (return, length, truncation, per-step and final-step terms), and observations/rewards/flags pass through unchanged;
2. values the env clears when it resets a finished env are read *before* that reset (the ``_reset_idx`` hook), for
   attribute, callable and accessor sources; ``log:`` sources are Isaac Lab's batch means;
3. the curriculum stage from ``extras["log"]`` labels the evidence, episodes straddling a change are dropped, and an
   objective without a per-episode source is refused with the ways to provide one;
4. importing the module imports neither torch nor Isaac Lab; Isaac Lab hooks fail with an install hint.

The real RL-Games wrapper chain (RlGamesGpuEnv -> RlGamesVecEnvWrapper -> ours) and the Isaac Lab contracts this
wrapper relies on are checked against the real Isaac Lab releases in tests/upstream/test_real_isaaclab.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
import torch

from async_pbt_isaaclab.envs.isaaclab import ISAACLAB_INSTALL_HINT, IsaacLabHooks
from async_pbt_isaaclab.envs.isaaclab.condition import format_stage, reward_fingerprint
from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg, TermSpec, parse_term_spec
from async_pbt_isaaclab.envs.isaaclab.wrapper import PbtIsaacLabEnv, attach_summary_source
from async_pbt_isaaclab.testing.torch_reach_task import REWARD_TERMS, TorchReachEnvCfg, register_torch_envs

TASK = "AsyncPbt-TorchReach-v0"
register_torch_envs()


def _env(num_envs: int, **cfg_kwargs) -> gym.Env:
    cfg = TorchReachEnvCfg(**cfg_kwargs)
    cfg.scene.num_envs = num_envs
    return gym.make(TASK, cfg=cfg)


def _actions(obs, gen, n):
    """A noisy controller; every 4th env flees, so episodes end by success, out-of-bounds and time-out."""
    p = obs["policy"]
    act = 2.0 * p[:, :2] - 1.0 * p[:, 2:4] + 0.9 * torch.randn(n, 2, generator=gen)
    flee = torch.zeros(n, 1, dtype=torch.bool)
    flee[::4] = True
    return torch.where(flee, torch.sign(p[:, 4:6]) + 0.1, act)


def _rollout(wrapper: PbtIsaacLabEnv, steps: int, seed: int = 0):
    """Step ``wrapper`` and build the reference episodes from what each step returned (plain Python floats)."""
    n = wrapper.num_envs
    gen = torch.Generator().manual_seed(seed)
    obs, _ = wrapper.reset()
    base = wrapper.env.unwrapped
    ret = [0.0] * n
    length = [0] * n
    sums = {k: [0.0] * n for k in REWARD_TERMS}
    episodes = []
    for _ in range(steps):
        obs, rew, term, trunc, _extras = wrapper.step(_actions(obs, gen, n))
        terms = {k: v.tolist() for k, v in base.get_per_env_terms().items()}
        r, te, tr = rew.tolist(), term.tolist(), trunc.tolist()
        for i in range(n):
            ret[i] += r[i]
            length[i] += 1
            for k in REWARD_TERMS:
                sums[k][i] += terms[k][i]
            if te[i] or tr[i]:
                episodes.append(
                    {
                        "return": ret[i],
                        "length": length[i],
                        "truncated": bool(tr[i]),
                        "success": terms["success"][i],
                        **{k: sums[k][i] for k in REWARD_TERMS},
                    }
                )
                ret[i], length[i] = 0.0, 0
                for k in REWARD_TERMS:
                    sums[k][i] = 0.0
    return episodes


def test_episodes_are_exact_and_outputs_pass_through():
    terms = {"success": "accessor:success", **{k: {"source": f"accessor:{k}", "mode": "sum"} for k in REWARD_TERMS}}
    wrapper = PbtIsaacLabEnv(_env(8), terms=terms, objective="success", task=TASK)
    wrapper.pbt_summary_source.set_settle_max_steps(0)  # every episode, as the reference has them (gate: test_summary)
    reference = _rollout(wrapper, 260)
    batch = wrapper.pbt_summary_source.drain()
    assert wrapper.pbt_summary_source.last_drain.dropped_stale == 0
    assert len(batch) == len(reference) > 20
    # Completion order: steps in order, envs finishing at the same step by index: the reference's order too.
    assert batch.lengths == [e["length"] for e in reference]
    assert batch.truncated == [e["truncated"] for e in reference]
    assert batch.returns == pytest.approx([e["return"] for e in reference], rel=1e-9, abs=1e-9)
    assert batch.terms["success"] == [e["success"] for e in reference]
    for k in REWARD_TERMS:
        assert batch.terms[k] == pytest.approx([e[k] for e in reference], rel=1e-6, abs=1e-9)
    # All three ways to end occurred, so the check covered terminations, successes and time-outs.
    assert any(e["truncated"] for e in reference) and any(e["success"] for e in reference)
    assert any(not e["truncated"] and not e["success"] for e in reference)
    assert batch.condition.task == TASK and batch.condition.objective == "success"


def test_step_returns_the_envs_own_objects():
    env = _env(4)
    wrapper = PbtIsaacLabEnv(env)
    wrapper.reset()
    obs, rew, term, trunc, extras = wrapper.step(torch.zeros(4, 2))
    base = env.unwrapped
    assert rew is base.reward_buf and term is base.reset_terminated and trunc is base.reset_time_outs
    assert extras is base.extras and set(obs) == {"policy"}


def test_values_cleared_by_the_reset_are_read_before_it():
    # episode_length_buf is zeroed by _reset_idx: read after the step it would be 0 for every finished episode.
    env = _env(6)
    wrapper = PbtIsaacLabEnv(
        env,
        terms={"len_last": "attr:episode_length_buf", "len_max": {"source": "attr:episode_length_buf", "mode": "max"}},
    )
    _rollout(wrapper, 230, seed=3)
    batch = wrapper.pbt_summary_source.drain()
    assert len(batch) > 6
    assert batch.terms["len_last"] == [float(x) for x in batch.lengths]
    assert batch.terms["len_max"] == [float(x) for x in batch.lengths]
    # The hook is an instance attribute and is removed on close.
    assert "_reset_idx" in vars(env.unwrapped)
    wrapper.close()
    assert "_reset_idx" not in vars(env.unwrapped)


def test_callable_terms_and_module_function_sources():
    env = _env(5)
    wrapper = PbtIsaacLabEnv(
        env,
        terms=lambda e: {"steps": e.episode_length_buf, "ok": e.get_per_env_terms()["success"]},
        term_modes={"steps": "last", "ok": "last"},
    )
    wrapper.pbt_summary_source.set_settle_max_steps(0)  # every episode, as the reference has them
    ref = _rollout(wrapper, 210, seed=1)
    batch = wrapper.pbt_summary_source.drain()
    assert batch.terms["steps"] == [float(x) for x in batch.lengths]
    assert batch.terms["ok"] == [e["success"] for e in ref]
    spec = parse_term_spec("steps", {"source": f"{__name__}:episode_steps", "mode": "last"})
    wrapper2 = PbtIsaacLabEnv(_env(5), terms=[spec])
    _rollout(wrapper2, 120)
    b2 = wrapper2.pbt_summary_source.drain()
    assert b2.terms["steps"] == [float(x) for x in b2.lengths]


def episode_steps(env):
    """A module:function term source (used above)."""
    return env.episode_length_buf


def test_log_source_is_the_batch_mean_exact_for_one_env():
    # One env: the batch mean over the envs reset in a step is that env's own value.
    wrapper = PbtIsaacLabEnv(_env(1), terms={"succ_log": "log:Metrics/success", "succ": "accessor:success"})
    _rollout(wrapper, 400, seed=2)
    batch = wrapper.pbt_summary_source.drain()
    assert len(batch) >= 4
    assert batch.terms["succ_log"] == batch.terms["succ"]


def test_isaaclab_style_objective_reads_extras_log_with_a_warning():
    with pytest.warns(UserWarning, match="batch mean"):
        wrapper = PbtIsaacLabEnv(_env(2), objective="Episode_Reward/progress")
    assert [(s.name, s.source, s.mode) for s in wrapper.term_specs] == [
        ("Episode_Reward/progress", "log:Episode_Reward/progress", "log")
    ]


def test_objective_from_the_env_accessor_and_missing_objective():
    wrapper = PbtIsaacLabEnv(_env(2), objective="success")
    assert [(s.name, s.source) for s in wrapper.term_specs] == [("success", "accessor:success")]
    with pytest.raises(ValueError, match=r"no per-episode source.*pbt_summary"):
        PbtIsaacLabEnv(_env(2), objective="consecutive_successes")
    assert PbtIsaacLabEnv(_env(2), objective="episode_return").term_specs == ()


def test_curriculum_stage_labels_evidence_and_drops_straddlers():
    env = _env(8)
    wrapper = PbtIsaacLabEnv(env, curriculum="log:Curriculum/stage", task=TASK)
    _rollout(wrapper, 150, seed=4)
    first = wrapper.pbt_summary_source.drain()
    assert len(first) > 0 and first.condition.curriculum_stage == "0"
    assert wrapper.pbt_summary_source.last_drain.dropped_stale == 0, "episodes right after reset() must count"
    env.unwrapped.curriculum_stage = 2  # a curriculum advancing; logged at the next reset
    gen = torch.Generator().manual_seed(5)
    obs = {"policy": env.unwrapped._compute_obs()["policy"]}
    for _ in range(260):
        obs, *_ = wrapper.step(_actions(obs, gen, 8))
    second = wrapper.pbt_summary_source.drain()
    assert second.condition.curriculum_stage == "2"
    assert wrapper.pbt_summary_source.last_drain.dropped_stale > 0  # episodes begun under stage 0
    assert len(second) > 0


def test_format_stage_bins_numbers_and_reads_tensors():
    assert format_stage(2.7, 1.0) == "2"
    assert format_stage(torch.tensor(3.99), 1.0) == "3"
    assert format_stage(torch.tensor([1.0, 2.0]), None) == "1.5"
    assert format_stage(0.25, 0.5) == "0"
    assert format_stage("easy") == "easy" and format_stage(True) == "1"


def test_summary_cfg_parses_and_reports_every_problem():
    cfg = SummaryCfg.from_dict(
        {
            "terms": {"s": "attr:successes", "r": {"source": "reward:track", "mode": "last"}, "l": "log:Metrics/x"},
            "curriculum": "log:Curriculum/terrain_levels",
            "curriculum_bin": 1,
            "curriculum_poll_steps": 24,
        }
    )
    assert [(t.name, t.kind, t.mode) for t in cfg.terms] == [
        ("s", "attr", "last"),
        ("r", "reward", "last"),
        ("l", "log", "log"),
    ]
    assert cfg.curriculum_bin == 1.0 and cfg.curriculum_poll_steps == 24
    with pytest.raises(ValueError) as err:
        SummaryCfg.from_dict(
            {
                "terms": {
                    "a": "nocolon",
                    "b": {"source": "log:x", "mode": "sum"},
                    "c": {"source": "reward:x", "mode": "max"},
                    "d": {"source": "attr:x", "bad": 1},
                },
                "curriculum": "reward:x",
                "curriculum_bin": -1,
                "curriculum_poll_steps": 0,
                "extra": 1,
            }
        )
    text = str(err.value)
    for needle in (
        "unknown keys ['extra']",
        "terms.a.source",
        "terms.b",
        "terms.c",
        "terms.d: unknown keys",
        "curriculum:",
        "curriculum_bin",
        "curriculum_poll_steps",
    ):
        assert needle in text, needle
    assert SummaryCfg.from_agent_cfg({"params": {}}) == SummaryCfg()


def test_attach_summary_source_uses_the_yaml_section():
    summary = SummaryCfg.from_dict(
        {"terms": {"success": "accessor:success"}, "curriculum": "log:Curriculum/stage", "capacity": 64}
    )
    wrapper = attach_summary_source(_env(4), summary, objective="success", task=TASK)
    assert wrapper.pbt_summary_source.capacity == 64
    assert wrapper.curriculum_source == "log:Curriculum/stage"
    assert isinstance(wrapper.term_specs[0], TermSpec)


def test_reward_fingerprint_changes_with_reward_weights_only():
    base = TorchReachEnvCfg()
    same = TorchReachEnvCfg()
    same.scene.num_envs = 4096  # not a reward setting
    heavier = TorchReachEnvCfg()
    heavier.reward_weights = dict(heavier.reward_weights, success_bonus=40.0)
    assert reward_fingerprint(base) == reward_fingerprint(same) != ""
    assert reward_fingerprint(heavier) != reward_fingerprint(base)

    class Term:  # a ManagerBasedRLEnvCfg reward term: weight + func
        def __init__(self, weight):
            self.weight, self.func = weight, episode_steps

    class Rewards:
        def __init__(self, w):
            self.track = Term(w)
            self.penalty = Term(-0.1)

    class ManagerCfg:
        def __init__(self, w):
            self.rewards = Rewards(w)
            self.episode_length_s = 20.0

    assert reward_fingerprint(ManagerCfg(1.0)) != reward_fingerprint(ManagerCfg(2.0))
    assert reward_fingerprint(ManagerCfg(1.0)) == reward_fingerprint(ManagerCfg(1.0))
    assert reward_fingerprint(object()) == ""


def test_module_imports_neither_torch_nor_isaaclab():
    code = textwrap.dedent("""
        import importlib.abc, json, sys
        BLOCK = ("torch", "rl_games", "isaaclab", "isaaclab_rl", "isaaclab_tasks", "isaacsim", "omni", "pxr")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCK:
                    raise ImportError(f"{name} blocked")
        sys.meta_path.insert(0, Block())
        import async_pbt_isaaclab.envs.isaaclab as m
        import async_pbt_isaaclab.envs.isaaclab.condition, async_pbt_isaaclab.envs.isaaclab.terms
        import async_pbt_isaaclab.envs.isaaclab.wrapper
        import argparse
        hint = m.ISAACLAB_INSTALL_HINT
        try:
            m.IsaacLabHooks().add_launcher_args(argparse.ArgumentParser())
            err = ""
        except ImportError as exc:
            err = str(exc)
        print(json.dumps({"loaded": sorted(k for k in sys.modules if k.split(".")[0] in BLOCK), "err": err,
                          "hint": hint}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    assert out["hint"] in out["err"] and "simulator flags" in out["err"]
    assert "[isaaclab]" not in out["hint"], "the hint must not recommend an extra that reinstalls Isaac Lab"


def test_default_hooks_raise_the_install_hint_here():
    try:
        import isaaclab  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Isaac Lab is installed: the default hooks work here")
    hooks = IsaacLabHooks()
    for call in (
        lambda: hooks.add_launcher_args(argparse.ArgumentParser()),
        lambda: hooks.vec_env_wrapper(None, "cpu", 1.0, 1.0),
    ):
        with pytest.raises(ImportError) as err:
            call()
        assert ISAACLAB_INSTALL_HINT in str(err.value)
    with pytest.raises(ImportError):
        with hooks.open_session(argparse.Namespace(), TASK, "rl_games_cfg_entry_point", []):
            pass
