"""The in-process gymnasium vec-env: rl_games step contract, episode summaries, registration, training."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
import yaml

import async_pbt_isaaclab.examples as examples
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EpisodeBatch
from async_pbt_isaaclab.envs.gym_vec_env import (
    SUMMARY_SOURCE_ATTR,
    VECENV_TYPE,
    GymVecEnv,
    find_summary_source,
)
from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv, register_gym_vecenv_for

PENDULUM = "Pendulum-v1"
YAML = Path(examples.__file__).parent / "pendulum_ppo.yaml"


def pendulum_cfg(tmp_path: Path, max_epochs: int) -> dict:
    cfg = yaml.safe_load(YAML.read_text())
    config = cfg["params"]["config"]
    config["max_epochs"] = max_epochs
    config["train_dir"] = str(tmp_path / "runs")
    config["full_experiment_name"] = "pendulum_test"
    config["save_best_after"] = 10**6  # no "best" checkpoints during tests
    return cfg


# ------------------------------------------------------------------ a tiny env with info terms
class CountEnv(gymnasium.Env):
    """Episode of ``length`` steps ending by *termination*; reward 1 per step, info["score"] = step index."""

    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, 0.0])
        return obs, 1.0, self.t >= self.length, False, {"score": float(self.t)}


if "AsyncPbtTestCount-v0" not in gymnasium.registry:
    gymnasium.register("AsyncPbtTestCount-v0", entry_point=CountEnv, disable_env_checker=True)


# ------------------------------------------------------------------------------ step contract
def test_step_contract_and_same_step_autoreset():
    env = GymVecEnv(PENDULUM, 4, seed=0)
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (4, 3)
    info = env.get_env_info()
    assert info["agents"] == 1 and info["value_size"] == 1
    assert info["observation_space"].shape == (3,) and info["action_space"].shape == (1,)

    done_steps = []
    for t in range(1, 401):
        obs, rew, dones, infos = env.step(np.zeros((4, 1), dtype=np.float32))
        assert obs.dtype == np.float32 and obs.shape == (4, 3)
        assert rew.dtype == np.float32 and rew.shape == (4,)
        assert dones.dtype == np.uint8 and dones.shape == (4,)
        assert infos["time_outs"].dtype == np.uint8
        # rl_games casts infos through cast_obs: no torch tensors (they would flip it to tensor mode)
        assert not any(isinstance(v, torch.Tensor) for v in infos.values())
        if dones.any():
            done_steps.append(t)
            assert dones.all() and infos["time_outs"].all()  # Pendulum only truncates
            assert infos["episode"]["episode_length"] == 200.0
        else:
            assert "episode" not in infos and not infos["time_outs"].any()
    # SAME_STEP: no extra reset step between episodes (NEXT_STEP would give 200, 401).
    assert done_steps == [200, 400]
    assert env.total_env_steps == 1600 and env.episodes_completed == 8
    env.close()


def test_summaries_match_manual_accumulation():
    env = GymVecEnv(PENDULUM, 3, seed=1)
    env.reset()
    rng = np.random.default_rng(0)
    acc = np.zeros(3)
    expected = []
    raw_rewards = []
    # Record the float64 rewards gymnasium produced, before the env rounds them for rl_games.
    orig_step = env.envs.step

    def recording_step(actions):
        out = orig_step(actions)
        raw_rewards.append(np.asarray(out[1], dtype=np.float64).copy())
        return out

    env.envs.step = recording_step
    for _ in range(450):
        _, _, dones, _ = env.step(rng.uniform(-2, 2, size=(3, 1)).astype(np.float32))
        acc += raw_rewards[-1]
        for i in np.flatnonzero(dones):
            expected.append(acc[i])
            acc[i] = 0.0
    batch = env.pbt_summary_source.drain()
    assert isinstance(batch, EpisodeBatch)
    batch.validate()
    assert len(batch) == 6
    assert batch.lengths == [200] * 6
    assert batch.truncated == [True] * 6
    assert batch.returns == pytest.approx(expected, rel=1e-12, abs=1e-9)
    assert batch.condition == ConditionLabel(task=PENDULUM)
    assert batch.generation == 0
    assert len(env.pbt_summary_source.drain()) == 0  # drained means gone


def test_reset_abandons_episodes_in_flight():
    env = GymVecEnv(PENDULUM, 2, seed=2)
    env.reset()
    for _ in range(150):
        env.step(np.zeros((2, 1), np.float32))
    env.reset()  # the 150-step partial episodes must never be reported
    for _ in range(200):
        env.step(np.zeros((2, 1), np.float32))
    batch = env.pbt_summary_source.drain()
    assert batch.lengths == [200, 200]


def test_seeding_is_reproducible():
    def rollout(seed):
        env = GymVecEnv(PENDULUM, 2, seed=seed)
        first = env.reset()
        obs = [first]
        for _ in range(5):
            obs.append(env.step(np.ones((2, 1), np.float32))[0])
        return np.stack(obs)

    assert np.array_equal(rollout(5), rollout(5))
    assert not np.array_equal(rollout(5), rollout(6))

    env = GymVecEnv(PENDULUM, 2)
    env.seed(5)
    assert np.array_equal(env.reset(), rollout(5)[0])


def test_terms_termination_and_condition():
    env = GymVecEnv(
        "AsyncPbtTestCount-v0",
        2,
        length=5,
        pbt_terms={"score": "last", "score_sum": "sum"},
        pbt_condition={"curriculum_stage": "2"},
    )
    # "score_sum" is not in info: NaN (the evidence window rejects non-finite values).
    obs = env.reset()
    assert obs.dtype == np.float32  # float64 observations are cast for rl_games
    assert env.get_env_info()["observation_space"].dtype == np.float32
    for _ in range(5):
        _, _, dones, infos = env.step(np.zeros(2, dtype=np.int64))
    assert dones.tolist() == [1, 1]
    assert infos["time_outs"].tolist() == [0, 0]  # terminated, not timed out
    batch = env.pbt_summary_source.drain()
    assert batch.lengths == [5, 5] and batch.returns == [5.0, 5.0]
    assert batch.truncated == [False, False]
    assert batch.terms["score"] == [5.0, 5.0]
    assert all(np.isnan(batch.terms["score_sum"]))
    assert batch.condition == ConditionLabel(task="AsyncPbtTestCount-v0", curriculum_stage="2")

    env2 = GymVecEnv("AsyncPbtTestCount-v0", 1, length=3, pbt_terms={"score": "sum"})
    env2.reset()
    for _ in range(3):
        env2.step(np.zeros(1, dtype=np.int64))
    assert env2.pbt_summary_source.drain().terms["score"] == [6.0]  # 1 + 2 + 3

    with pytest.raises(ValueError, match="log"):
        GymVecEnv("AsyncPbtTestCount-v0", 1, pbt_terms={"Episode_Reward/x": "log"})


def test_generation_contract():
    env = GymVecEnv(PENDULUM, 2, seed=3)
    source = getattr(env, SUMMARY_SOURCE_ATTR)
    env.reset()
    for _ in range(200):
        env.step(np.zeros((2, 1), np.float32))
    assert source.drain().generation == 0
    source.start_generation(4)
    for _ in range(200):
        env.step(np.zeros((2, 1), np.float32))
    batch = source.drain()
    assert batch.generation == 4 and len(batch) == 2


def test_env_state_is_plain_data_and_tolerant():
    env = GymVecEnv(PENDULUM, 2)
    state = env.get_env_state()
    assert state == {"kind": VECENV_TYPE, "env_id": PENDULUM, "num_envs": 2}
    env.set_env_state(None)
    env.set_env_state(state)
    with pytest.warns(UserWarning, match="CartPole"):
        env.set_env_state({"env_id": "CartPole-v1"})


def test_find_summary_source():
    env = GymVecEnv(PENDULUM, 1)

    class Algo:
        vec_env = env

    class Wrapper:
        def __init__(self, inner):
            self.env = inner

    assert find_summary_source(Algo()) is env.pbt_summary_source
    assert find_summary_source(Wrapper(Wrapper(env))) is env.pbt_summary_source
    assert find_summary_source(object()) is None
    assert find_summary_source(None) is None


def test_registration_is_idempotent():
    from rl_games.common import env_configurations, vecenv

    assert register_gym_vecenv(PENDULUM) == [PENDULUM]
    assert register_gym_vecenv([PENDULUM]) == [PENDULUM]
    assert vecenv.vecenv_config[VECENV_TYPE] is not None
    entry = env_configurations.configurations[PENDULUM]
    assert entry["vecenv_type"] == VECENV_TYPE
    venv = vecenv.create_vec_env(PENDULUM, 3, seed=1)
    assert isinstance(venv, GymVecEnv) and venv.num_envs == 3
    # The rl_games player builds a single env through env_creator (old gym API, seed popped by it).
    single = entry["env_creator"]()
    assert single.reset().shape == (3,)
    assert len(single.step(np.zeros(1, np.float32))) == 4
    with pytest.raises(gymnasium.error.Error):
        register_gym_vecenv("NoSuchEnvAnywhere-v9")
    assert register_gym_vecenv_for({"params": {"config": {"env_name": PENDULUM}}}) == PENDULUM
    with pytest.raises(KeyError, match="env_name"):
        register_gym_vecenv_for({"params": {}})


def test_example_yaml_shape():
    cfg = yaml.safe_load(YAML.read_text())
    config = cfg["params"]["config"]
    assert cfg["pbt"] == {}
    assert cfg["params"]["algo"]["name"] == "a2c_continuous"
    assert cfg["params"]["model"]["name"] == "continuous_a2c_logstd"
    assert config["device"] == "cpu" and config["torch_compile"] is False
    assert config["num_actors"] == 16 and config["env_name"] == PENDULUM
    assert cfg["params"]["torch_threads"] == 1


# --------------------------------------------------------------------- real rl_games training
def run_runner(cfg: dict, observer):
    from rl_games.torch_runner import Runner

    register_gym_vecenv_for(cfg)
    threads = torch.get_num_threads()  # the Runner sets torch_threads process-wide; restore it
    try:
        runner = Runner(observer)
        runner.load(copy.deepcopy(cfg))
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        torch.set_num_threads(threads)


def make_observer():
    from rl_games.common.algo_observer import AlgoObserver

    class RecordingObserver(AlgoObserver):
        """Reaches the emitter through the documented contract and records rewards independently."""

        def after_init(self, algo):
            self.algo = algo
            self.source = getattr(algo.vec_env, SUMMARY_SOURCE_ATTR)
            self.batches: list[EpisodeBatch] = []
            self.manual: list[tuple[float, int]] = []
            env = algo.vec_env
            self._acc = np.zeros(env.num_envs)
            self._len = np.zeros(env.num_envs, dtype=np.int64)
            orig = env.envs.step

            def recording_step(actions):
                out = orig(actions)
                self._acc += np.asarray(out[1], dtype=np.float64)
                self._len += 1
                for i in np.flatnonzero(np.asarray(out[2]) | np.asarray(out[3])):
                    self.manual.append((self._acc[i], int(self._len[i])))
                    self._acc[i] = 0.0
                    self._len[i] = 0
                return out

            env.envs.step = recording_step
            self.epochs = 0

        def after_steps(self):
            self.epochs += 1
            self.batches.append(self.source.drain())
            if self.epochs == 4:
                self.source.start_generation(1)

        def after_clear_stats(self):
            pass

    return RecordingObserver()


def test_rl_games_runner_trains_in_process(tmp_path):
    epochs = 8
    cfg = pendulum_cfg(tmp_path, max_epochs=epochs)
    obs = make_observer()
    run_runner(cfg, obs)
    algo = obs.algo
    frames = algo.frame
    assert frames == epochs * 16 * 128
    # In this process, on our vec-env (not rl_games' Ray default): the step hook recording_step put on these very env
    # objects saw every episode rl_games finished (checked below). Speed is scripts/benchmarks' business.
    assert isinstance(algo.vec_env, GymVecEnv)

    episodes = EpisodeBatch.concat([b for b in obs.batches if b.generation == 0])
    later = [b for b in obs.batches if b.generation == 1]
    assert all(b.generation == 0 for b in obs.batches[:4])
    assert later and all(b.generation == 1 for b in later)
    drained = [(r, n) for b in obs.batches for r, n in zip(b.returns, b.lengths, strict=True)]
    assert all(n == 200 for _, n in drained)
    # Every episode rl_games finished was emitted, in order, with the exactly accumulated return —
    # except those straddling start_generation(1) (dropped by design) and the few still in flight.
    manual = {(round(r, 6), n) for r, n in obs.manual}
    assert len(drained) >= 16 * 4
    for r, n in drained:
        assert (round(r, 6), n) in manual
    assert len(episodes) == 16 * 2  # epochs 1-4 = 512 steps per env: episodes end at 200 and 400
    assert episodes.returns == pytest.approx([r for r, _ in obs.manual[:32]], rel=1e-12)
    # rl_games' own bookkeeping saw the same episodes (float32 accumulation).
    assert float(algo.game_lengths.get_mean()) == pytest.approx(200.0)
    # Checkpoints carry the env's plain-data state.
    assert algo.get_full_state_weights()["env_state"]["env_id"] == PENDULUM


@pytest.mark.slow
def test_example_yaml_learns_pendulum(tmp_path, capsys):
    """The example config improves a random policy (about -1200) to better than -400 in 40 epochs (82k frames).

    Mean return over epochs 20-40, measured: about -190 with the example's seed (42), -270 with seed 7, -385 with
    seed 3. Seed 3 falls back to about -460 over epochs 40-60: this small PPO config is not stable on every seed,
    so the test keeps the example's own."""
    cfg = pendulum_cfg(tmp_path, max_epochs=40)
    obs = make_observer()
    run_runner(cfg, obs)
    late = EpisodeBatch.concat([b for b in obs.batches[-20:] if b.generation == 1])
    mean = float(np.mean(late.returns))
    with capsys.disabled():
        print(f"\n[gym_vec_env] {obs.algo.frame} frames; mean return of the last {len(late)} episodes: {mean:.1f}")
    assert mean > -400


# ------------------------------------------------------------------ the envpool backend (--vec-env envpool)


def test_the_envpool_backend_gives_the_gymnasium_backends_steps_and_episodes():
    """One fixed action sequence through both backends, on Hopper-v5 with a deterministic start
    (``reset_noise_scale=0``) so the two simulators begin alike: every step's done and time-out flags are the same,
    rewards and observations agree to float32 precision (envpool computes in float32), an env whose episode ended
    starts the next one within the same step (its observation is the first of the next episode), and the
    per-episode evidence (returns, lengths, truncation, terms) is the same. One tie is resolved differently: an episode
    that terminates on its last allowed step is terminated for gymnasium (no bootstrap) and timed out for envpool,
    which reports ``terminated`` False there; it happens here once in about 60 episodes."""
    pytest.importorskip("envpool", reason="envpool is not installed: pip install -e '.[envpool]'")
    pytest.importorskip("mujoco", reason="MuJoCo is not installed: pip install -e '.[mujoco]'")
    from async_pbt_isaaclab.envs.envpool_vec_env import EnvpoolVecEnv

    kwargs = dict(seed=0, reset_noise_scale=0.0, max_episode_steps=40, pbt_terms={"x_velocity": "sum"})
    gym_env, pool_env = GymVecEnv("Hopper-v5", 4, **kwargs), EnvpoolVecEnv("Hopper-v5", 4, **kwargs)
    first = gym_env.reset()
    assert np.allclose(pool_env.reset(), first, atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1.0, 1.0, size=(300, 4, 3)).astype(np.float32)
    ended, length, ties = 0, np.zeros(4, dtype=int), 0
    for a in actions:
        obs_g, rew_g, done_g, info_g = gym_env.step(a)
        obs_p, rew_p, done_p, info_p = pool_env.step(a)
        length += 1
        assert done_g.tolist() == done_p.tolist()
        tie = done_g.astype(bool) & (length == 40) & (info_g["time_outs"] == 0)
        assert info_g["time_outs"][~tie].tolist() == info_p["time_outs"][~tie].tolist()
        assert info_p["time_outs"][tie].all()
        ties += int(tie.sum())
        length[done_g.astype(bool)] = 0
        assert np.allclose(rew_g, rew_p, rtol=1e-4, atol=1e-4)
        assert np.allclose(obs_g, obs_p, rtol=1e-4, atol=1e-4)
        # Same-step reset: an env that ended already shows the next episode's first observation.
        assert np.allclose(obs_p[done_p.astype(bool)], first[done_p.astype(bool)], atol=1e-6)
        ended += int(done_g.sum())
    g, p = gym_env.pbt_summary_source.drain(), pool_env.pbt_summary_source.drain()
    # Both terminations and time-outs happened; the first episodes, before every env finished one, are not evidence.
    assert ended > 40 and len(g) == len(p) > 40
    assert any(g.truncated) and not all(g.truncated)
    assert g.lengths == p.lengths
    differ = [i for i, (a, b) in enumerate(zip(g.truncated, p.truncated, strict=True)) if a != b]
    assert ties >= 1 and len(differ) <= ties and all(p.truncated[i] and g.lengths[i] == 40 for i in differ)
    assert p.returns == pytest.approx(g.returns, rel=1e-4, abs=1e-3)
    assert p.terms["x_velocity"] == pytest.approx(g.terms["x_velocity"], rel=1e-4, abs=1e-3)
    assert pool_env.get_env_state()["backend"] == "envpool"
    gym_env.close()
    pool_env.close()
