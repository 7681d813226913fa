"""In-process vectorized gymnasium env for rl_games: the CPU fallback of the Isaac Lab env.

Why not rl_games' own gym support: its default ``RAY`` vec-env runs every env in a Ray actor, which is
slow for cheap envs, and the actors do not see envs registered in the driver process. This module runs
``gymnasium.vector.SyncVectorEnv`` in the training process instead (Pendulum-v1 with 16 envs steps at
several thousand frames/s on 2 CPU cores, the PPO update included).

Usage with a plain rl_games ``Runner``::

    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv
    register_gym_vecenv("Pendulum-v1")          # idempotent; or register_gym_vecenv_for(agent_cfg)
    runner = Runner(observer); runner.load(agent_cfg); runner.run({"train": True, ...})

with ``params.config.env_name: Pendulum-v1`` in the agent yaml. ``params.config.env_config`` is passed
to :class:`GymVecEnv` as keyword arguments: ``seed`` (the rl_games ``Runner`` fills it from
``params.seed``), ``pbt_condition`` (a :class:`~async_pbt_isaaclab.core.state.evidence.ConditionLabel`
dict; ``task`` defaults to the gymnasium id), ``pbt_terms`` (info keys to record as per-episode terms:
a list, each read at the episode's final step, or ``{key: "sum" | "last" | "max"}``; a key missing from
an env's info makes that episode's term NaN, which the evidence window counts and drops); every other
key goes to ``gymnasium.make``.

**The summary-source contract** (:mod:`async_pbt_isaaclab.member.summary_source`, shared with the Isaac
Lab wrapper): the vec-env carries ``pbt_summary_source`` with ``drain()`` and ``start_generation(g)``.
The per-step ``infos`` stay what rl_games and its observers expect (``time_outs``; ``episode`` on
steps where episodes ended), and carry no emitter.

**Done semantics.** The vector env uses gymnasium's ``AutoresetMode.SAME_STEP``: an env that ends an
episode is reset inside the same ``step`` call, the returned observation is the first observation of
the next episode and ``done`` is 1 on that step. That is what rl_games assumes (its ``Ray`` worker and
Isaac Lab behave the same). gymnasium 1.x's default ``NEXT_STEP`` would instead spend one extra step
after every episode on a reset whose action is ignored and whose reward is 0, which rl_games would
train on as a real transition.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, Mapping

import gymnasium
import numpy as np
import torch
from gymnasium.vector import SyncVectorEnv

from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.envs.env_parameters import DISTANCE_TERM, EpisodeDistance, built_value
from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter
from async_pbt_isaaclab.member.summary_source import SUMMARY_SOURCE_ATTR, find_summary_source

try:  # rl_games is needed only by rl_games members; rsl_rl members step this env through envs/rsl_rl_vec_env.py
    from rl_games.common.ivecenv import IVecEnv
except ImportError:  # pragma: no cover - an install without the rl-games extra
    IVecEnv = object

#: rl_games vec-env type name under which :class:`GymVecEnv` is registered.
VECENV_TYPE = "ASYNC_PBT_GYM"
#: Keys of ``env_config`` consumed here; every other key is a ``gymnasium.make`` keyword.
RESERVED_ENV_CONFIG_KEYS = ("seed", "pbt_condition", "pbt_terms")


def task_kwargs(env_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``gymnasium.make`` keywords in an ``env_config``: every key but :data:`RESERVED_ENV_CONFIG_KEYS` (for the
    players, which make a task's env without this vec-env)."""
    return {k: v for k, v in (env_config or {}).items() if k not in RESERVED_ENV_CONFIG_KEYS}


try:  # gymnasium >= 1.0
    from gymnasium.vector import AutoresetMode

    _SAME_STEP: Any = AutoresetMode.SAME_STEP
except ImportError:  # pragma: no cover - gymnasium 0.29 resets in the same step and has no option
    _SAME_STEP = None


def rl_games_space(space: Any) -> Any:
    """``space`` as the ``gym`` space rl_games checks for: rl-games 1.6.1 (Isaac Lab 2.x's line) tests
    ``type(space) is gym.spaces.Box`` with the old ``gym`` package and sizes no buffer for a gymnasium space."""
    try:
        from rl_games.common import experience
    except ImportError:
        return space
    gym_module = getattr(experience, "gym", None)
    if gym_module is None or gym_module.__name__ == "gymnasium" or isinstance(space, gym_module.spaces.Space):
        return space
    if isinstance(space, gymnasium.spaces.Box):
        return gym_module.spaces.Box(space.low, space.high, space.shape, space.dtype)
    if isinstance(space, gymnasium.spaces.Discrete):
        return gym_module.spaces.Discrete(int(space.n))
    return space


def _float32_space(space: gymnasium.Space) -> gymnasium.Space:
    """rl_games feeds observations as float32 tensors; report float64 Box spaces as float32."""
    if isinstance(space, gymnasium.spaces.Box) and space.dtype == np.float64:
        return gymnasium.spaces.Box(
            low=space.low.astype(np.float32), high=space.high.astype(np.float32), dtype=np.float32
        )
    return space


class GymVecEnv(IVecEnv):
    """rl_games ``IVecEnv`` over ``gymnasium.vector.SyncVectorEnv`` that emits completed-episode summaries.

    ``step`` returns numpy arrays, as rl_games' own vec-envs do on CPU: observations float32
    ``(num_envs, *obs_shape)``, rewards float32 ``(num_envs,)``, dones uint8 ``(num_envs,)`` (1 where an
    episode ended, by termination or truncation), and an infos dict with

    * ``time_outs``: uint8 ``(num_envs,)``, 1 where the episode was truncated and not terminated
      (rl_games bootstraps the value there when ``value_bootstrap`` is on);
    * ``episode``: only on steps where at least one episode ended: ``{"episode_return": mean,
      "episode_length": mean}`` over those episodes (floats), the shape Isaac Lab's ``extras["log"]``
      has, so ``IsaacAlgoObserver`` logs it. These are per-step display values, not PBT evidence.

    PBT evidence comes from :attr:`pbt_summary_source`, an
    :class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` fed with every step's rewards,
    terminations and truncations (float64 accumulation is the emitter's business).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        seed: int | None = None,
        pbt_condition: Mapping[str, Any] | ConditionLabel | None = None,
        pbt_terms: Iterable[str] | Mapping[str, str] = (),
        **make_kwargs: Any,
    ):
        if num_envs < 1:
            raise ValueError(f"{env_id}: num_envs must be >= 1, got {num_envs}")
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self._make_kwargs = dict(make_kwargs)
        self._seed = seed
        self.envs = self._make_envs()
        self._say_built_values()
        self.observation_space = _float32_space(self.envs.single_observation_space)
        self.action_space = self.envs.single_action_space
        # Seeds the first reset only: later resets continue each env's RNG instead of replaying it.
        self._seed_next_reset = seed is not None
        if seed is not None:
            self.envs.action_space.seed(seed)

        if isinstance(pbt_condition, ConditionLabel):
            condition = pbt_condition
        else:
            cond = dict(pbt_condition or {})
            cond.setdefault("task", env_id)
            condition = ConditionLabel.from_dict(cond, where=f"{env_id} env_config.pbt_condition")
        term_modes = _term_modes(env_id, pbt_terms)
        self.term_names = tuple(term_modes)
        self._distance = self._episode_distance(term_modes)
        self.pbt_summary_source = EpisodeSummaryEmitter(
            num_envs=self.num_envs,
            device="cpu",
            term_names=self.term_names,
            condition=condition,
            generation=0,
            term_modes=term_modes,
        )
        """Episode-summary source (the contract in the module docstring)."""
        self.total_env_steps = 0
        """Env steps taken by all envs together since construction (frames)."""
        self.episodes_completed = 0
        """Episodes completed since construction, all generations."""
        # Display-only accumulators behind infos["episode"] (the evidence lives in the emitter).
        self._disp_return = np.zeros(self.num_envs, dtype=np.float64)
        self._disp_length = np.zeros(self.num_envs, dtype=np.int64)

    # ----------------------------------------------------------------- the backend (a subclass swaps these)
    def _make_envs(self) -> Any:
        """The vector env: gymnasium's ``SyncVectorEnv`` with same-step resets."""
        kwargs: dict[str, Any] = {}
        if _SAME_STEP is not None:
            kwargs["autoreset_mode"] = _SAME_STEP
        return SyncVectorEnv(
            [lambda: gymnasium.make(self.env_id, **self._make_kwargs) for _ in range(self.num_envs)], **kwargs
        )

    def _env_step(self, actions: np.ndarray) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        """One step of every env, ``(obs, rewards, terminated, truncated, info)``; an env whose episode ended is
        reset within the step (its observation is the next episode's first)."""
        return self.envs.step(actions)

    def _env_reset(self, seed: int | None) -> tuple[Any, Mapping[str, Any]]:
        """Reset every env (seeded when ``seed`` is given); the observations and the reset's info."""
        return self.envs.reset(seed=seed) if seed is not None else self.envs.reset()

    def _say_built_values(self) -> None:
        """One line with the constructor arguments the envs were built with, read back from the env, not from the
        config: what a searched env value (``env.<name>``) really built. Nothing when none is readable."""
        built = self.built_values()
        if built:
            shown = ", ".join(f"{k}={v!r}" for k, v in sorted(built.items()))
            print(
                f"[async-pbt] {self.env_id}: {self.num_envs} envs built with {shown} (read back from the env)",
                flush=True,
            )

    def built_values(self) -> dict[str, Any]:
        """The constructor arguments given in ``env_config`` as the first built env holds them (those it keeps as a
        plain attribute, :func:`~.env_parameters.built_value`); empty for a backend without gymnasium env objects."""
        first = getattr(self.envs, "envs", [None])[0]
        if first is None:
            return {}
        values = {name: built_value(first, name) for name in self._make_kwargs}
        return {name: value for name, value in values.items() if value is not None}

    tracks_distance = True
    """The backend reports the reset's ``x_position`` and a finished episode's in ``final_info``, from which the
    ``distance_travelled`` term is computed (:class:`~.env_parameters.EpisodeDistance`)."""

    def _episode_distance(self, term_modes: Mapping[str, str]) -> EpisodeDistance | None:
        """The per-env start positions behind a ``distance_travelled`` term (``None`` without one); refused on a
        backend that cannot compute it, or in another mode than ``last`` (it gives the distance so far each step)."""
        if DISTANCE_TERM not in term_modes:
            return None
        if not self.tracks_distance or term_modes[DISTANCE_TERM] != "last":
            raise ValueError(
                f"{self.env_id}: pbt_terms {DISTANCE_TERM} is computed by the gymnasium backend in mode 'last' "
                f"(got mode {term_modes[DISTANCE_TERM]!r} on {type(self).__name__}); use --vec-env gymnasium"
            )
        return EpisodeDistance(self.num_envs)

    # ----------------------------------------------------------------- rl_games IVecEnv interface
    def step(self, actions):
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        obs, rewards, terminated, truncated, info = self._env_step(actions)
        self.total_env_steps += self.num_envs
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        rewards32 = np.asarray(rewards, dtype=np.float32)

        terms = self._step_terms(info, done) if self.term_names else None
        # Rewards go to the emitter in float64 (as gymnasium produced them), so episode returns
        # are not rounded to float32 per step before accumulation.
        self.pbt_summary_source.step(
            torch.from_numpy(np.asarray(rewards, dtype=np.float64)),
            torch.from_numpy(terminated),
            torch.from_numpy(truncated),
            terms=terms,
        )

        infos: dict[str, Any] = {"time_outs": (truncated & ~terminated).astype(np.uint8)}
        self._disp_return += rewards
        self._disp_length += 1
        if done.any():
            self.episodes_completed += int(done.sum())
            infos["episode"] = {
                "episode_return": float(self._disp_return[done].mean()),
                "episode_length": float(self._disp_length[done].mean()),
            }
            self._disp_return[done] = 0.0
            self._disp_length[done] = 0
        return self._obs32(obs), rewards32, done.astype(np.uint8), infos

    def reset(self):
        obs, info = self._env_reset(self._seed if self._seed_next_reset else None)
        if self._distance is not None:
            self._distance.reset(info)
        self._seed_next_reset = False
        # Episodes in flight were abandoned: they must not be reported as completed later.
        self.pbt_summary_source.reset()
        self._disp_return = np.zeros(self.num_envs, dtype=np.float64)
        self._disp_length = np.zeros(self.num_envs, dtype=np.int64)
        return self._obs32(obs)

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict[str, Any]:
        return {
            "observation_space": rl_games_space(self.observation_space),
            "action_space": rl_games_space(self.action_space),
            "agents": 1,
            "value_size": 1,
        }

    def seed(self, seed: int) -> None:
        """Seed the envs and the action space; takes effect at the next ``reset``."""
        self._seed = int(seed)
        self._seed_next_reset = True
        self.envs.action_space.seed(self._seed)

    def get_env_state(self) -> dict[str, Any]:
        """Provenance only, as plain data (a ``weights_only`` checkpoint load accepts it).

        Deliberately no generation or counters: on an exploit rl_games' ``set_full_state_weights``
        passes the *donor's* env_state to the recipient's env, and the generation belongs to the
        recipient (DESIGN: inheritance is explicit).
        """
        return {"kind": VECENV_TYPE, "env_id": self.env_id, "num_envs": self.num_envs}

    def set_env_state(self, env_state: Any) -> None:
        """Accept None (old checkpoints) or our dict; warn when it comes from another gymnasium task."""
        if env_state is None:
            return
        if not isinstance(env_state, Mapping):
            warnings.warn(f"{self.env_id}: ignoring env_state of type {type(env_state).__name__}", stacklevel=2)
            return
        other = env_state.get("env_id")
        if other is not None and other != self.env_id:
            warnings.warn(f"checkpoint env_state comes from {other!r}, this env is {self.env_id!r}", stacklevel=2)

    def close(self) -> None:
        self.envs.close()

    # ------------------------------------------------------------------------------ helpers
    @staticmethod
    def _obs32(obs):
        if isinstance(obs, dict):
            return {k: GymVecEnv._obs32(v) for k, v in obs.items()}
        obs = np.asarray(obs)
        if obs.dtype == np.float64:
            return obs.astype(np.float32)
        return obs

    def _step_terms(self, info: Mapping[str, Any], done: np.ndarray) -> dict[str, torch.Tensor]:
        """Per-env values of ``pbt_terms`` this step; for envs that just ended, from ``final_info``.

        Missing values are NaN (the evidence window counts and drops non-finite values).
        """
        out = {}
        final = info.get("final_info", {}) if done.any() else {}
        for name in self.term_names:
            if name == DISTANCE_TERM and self._distance is not None:
                out[name] = torch.from_numpy(self._distance.step(info, done))
                continue
            col = np.full(self.num_envs, np.nan, dtype=np.float64)
            for source, rows in ((info, ~done), (final, done)):
                if name in source:
                    vals = np.asarray(source[name], dtype=np.float64).reshape(self.num_envs)
                    present = np.asarray(source.get("_" + name, np.ones(self.num_envs, bool)), dtype=bool)
                    mask = rows & present
                    col[mask] = vals[mask]
            out[name] = torch.from_numpy(col)
        return out


def _term_modes(env_id: str, pbt_terms: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    """``pbt_terms`` as ``{name: mode}``. Terms are gymnasium info keys (and ``distance_travelled``). Default mode
    "last": gymnasium envs report episode outcomes (is_success, final distances) in the info of the final step.
    "log" needs Isaac Lab's extras["log"], which gymnasium has not: it would only ever yield NaN, so it is refused."""
    if isinstance(pbt_terms, Mapping):
        term_modes = {str(k): str(v) for k, v in pbt_terms.items()}
    else:
        term_modes = {str(k): "last" for k in pbt_terms}
    bad = sorted(k for k, m in term_modes.items() if m == "log")
    if bad:
        raise ValueError(
            f"{env_id}: pbt_terms {bad} use mode 'log' (Isaac Lab extras['log']); gymnasium envs "
            f"report terms through info, use 'sum', 'last' or 'max'"
        )
    return term_modes


def gym_id_for(agent_cfg: Mapping[str, Any]) -> str:
    """The gymnasium id an agent yaml names in ``params.config.env_name``, checked against gymnasium's registry
    without loading rl_games (``KeyError`` when the key is missing, ``UnregisteredEnv`` for an unknown id).

    Accepts the whole yaml dict (with ``params``) or its ``params`` mapping.
    """
    params = agent_cfg.get("params", agent_cfg)
    try:
        env_name = params["config"]["env_name"]
    except (KeyError, TypeError):
        raise KeyError("agent config has no params.config.env_name") from None
    if env_name not in gymnasium.registry:
        raise gymnasium.error.UnregisteredEnv(f"{env_name!r} is not a registered gymnasium id")
    return env_name


def missing_task_module(env_id: str) -> str | None:
    """The top-level module a registered gymnasium task cannot import (``"mujoco"`` for the MuJoCo tasks without
    the ``[mujoco]`` extra), or ``None`` when its env class loads. Checked before training, so a missing
    dependency is one clear line instead of a traceback from the first env construction."""
    from gymnasium.envs.registration import load_env_creator

    entry_point = gymnasium.spec(env_id).entry_point
    if not isinstance(entry_point, str):
        return None
    try:
        load_env_creator(entry_point)
    except (ModuleNotFoundError, gymnasium.error.DependencyNotInstalled) as exc:
        # gymnasium wraps a missing simulator in DependencyNotInstalled, raised from the ModuleNotFoundError.
        cause = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
        name = getattr(cause, "name", None) if isinstance(cause, ModuleNotFoundError) else None
        return (name or str(exc)).split(".")[0]
    return None


__all__ = [
    "GymVecEnv",
    "RESERVED_ENV_CONFIG_KEYS",
    "SUMMARY_SOURCE_ATTR",
    "VECENV_TYPE",
    "find_summary_source",
    "gym_id_for",
    "missing_task_module",
    "task_kwargs",
]
