"""A pure-torch vectorized task that follows Isaac Lab's ``ManagerBasedRLEnv`` step contract.

It lets the Isaac Lab layer (the rl_games wrapper, the episode-summary emitter, the PBT observer) be tested,
benchmarked and trained on any machine, CPU or GPU, without Isaac Sim. The task is a planar point mass
(double integrator with viscous damping) that must come to rest on a goal:

* observation ``"policy"`` (6): goal minus position (2), velocity (2), position (2);
* action (2): acceleration command, clipped to [-1, 1] and scaled by ``max_accel``;
* terminations: ``success`` (within ``success_radius`` of the goal and slower than ``success_max_speed``),
  ``out_of_bounds`` (outside the arena), and the time-out ``time_out`` (truncation);
* reward terms (Isaac Lab style: ``value = func(env) * weight * step_dt``): ``progress`` (distance gained
  towards the goal, potential-based so it cannot be farmed), ``effort`` (squared action), ``success_bonus``
  and ``out_of_bounds`` (one-shot at the terminating step);
* curriculum: :attr:`TorchReachEnv.curriculum_stage` selects how far goals are sampled; a curriculum advances
  it by assignment, and it applies to goals sampled at later resets.

What is mimicked from Isaac Lab (``ManagerBasedRLEnv.step``/``_reset_idx``, reward and termination managers):

* ``reset()`` returns ``(obs_dict, extras)``; ``step(actions)`` returns
  ``(obs_dict, rew, terminated, truncated, extras)`` with ``obs_dict = {"policy": (num_envs, 6) float32}``,
  ``rew`` float32 ``(num_envs,)``, ``terminated``/``truncated`` bool ``(num_envs,)``, all on :attr:`device`.
* Order inside ``step``: physics (``decimation`` substeps), ``episode_length_buf += 1``, terminations,
  rewards, reset of finished envs (automatic), observations. So the returned reward and flags belong to the
  finished episode while the returned observation of a finished env is the first one of its next episode.
* ``rew``, ``terminated`` and ``truncated`` are the env's internal buffers, overwritten in place by the next
  step, exactly as Isaac Lab returns its managers' buffers: copy them if you keep them across steps.
* ``extras`` is one persistent dict. ``extras["log"]`` is replaced by a new dict only on steps where some env
  resets (and by ``reset()``), so between resets it holds stale values. It contains
  ``"Episode_Reward/<term>"`` (0-d tensor: mean over the reset envs of the episodic sum of that term, divided
  by ``max_episode_length_s``), ``"Curriculum/stage"`` (float), ``"Metrics/success"`` (0-d tensor: fraction of
  the reset envs that ended in success) and ``"Episode_Termination/<term>"`` (Python int: *count* of reset
  envs that term ended, as Isaac Lab's termination manager reports it, not a mean).
* ``extras["time_outs"]`` is the truncation buffer (the rl_games wrapper also sets it when
  ``cfg.is_finite_horizon`` is False).
* Attributes ``num_envs``, ``device``, ``cfg``, ``step_dt``, ``physics_dt``, ``max_episode_length``,
  ``max_episode_length_s``, ``episode_length_buf`` (int64), ``common_step_counter``, ``reset_buf``,
  ``reset_terminated``, ``reset_time_outs``, ``reward_buf``, ``single_observation_space`` (a ``Dict`` with
  ``"policy"``), ``single_action_space``, the batched ``observation_space``/``action_space``, ``render_mode``,
  ``seed(seed)``, ``close()``.

Not Isaac Lab: :meth:`TorchReachEnv.get_per_env_terms` exposes the per-env, per-step term values, which an
:class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` turns into exact per-episode terms
(:data:`PER_ENV_TERM_MODES` says how). The env is not an ``isaaclab.envs.ManagerBasedRLEnv`` instance, so
``isaaclab_rl``'s type check would reject it; our own Isaac Lab layer accepts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import gymnasium as gym
import numpy as np
import torch

TASK_ID = "AsyncPbt-TorchReach-v0"
"""Gymnasium id under which :func:`register_torch_envs` registers :class:`TorchReachEnv`."""

REWARD_TERMS: tuple[str, ...] = ("progress", "effort", "success_bonus", "out_of_bounds")
"""Reward terms, in the order they are computed and stored."""

TERMINATION_TERMS: tuple[str, ...] = ("time_out", "success", "out_of_bounds")
"""Termination terms; ``time_out`` is the only truncation (Isaac Lab ``time_out=True``)."""

PER_ENV_TERM_MODES: dict[str, str] = {**{name: "sum" for name in REWARD_TERMS}, "success": "last"}
"""Emitter mode of each entry of :meth:`TorchReachEnv.get_per_env_terms`: reward terms sum over the episode,
``success`` is the flag at the final step."""


@dataclass
class SceneCfg:
    """Scene settings (Isaac Lab keeps ``num_envs`` under ``cfg.scene``)."""

    num_envs: int = 64
    """Number of parallel environments."""


@dataclass
class SimCfg:
    """Simulation settings (Isaac Lab keeps ``dt`` and ``device`` under ``cfg.sim``)."""

    dt: float = 0.025
    """Physics step in seconds."""
    device: str = "cpu"
    """Torch device of every buffer (``"cpu"``, ``"cuda:0"``...)."""


@dataclass
class TorchReachEnvCfg:
    """Configuration of :class:`TorchReachEnv`, laid out like an Isaac Lab ``ManagerBasedRLEnvCfg``."""

    scene: SceneCfg = field(default_factory=SceneCfg)
    """Scene settings (number of envs)."""
    sim: SimCfg = field(default_factory=SimCfg)
    """Simulation settings (physics dt, device)."""
    decimation: int = 2
    """Physics steps per env step; ``step_dt = decimation * sim.dt``."""
    episode_length_s: float = 5.0
    """Episode length in seconds before a time-out (100 env steps by default)."""
    is_finite_horizon: bool = False
    """Isaac Lab's flag: False means time-outs are truncations that the learner should bootstrap."""
    seed: int | None = 42
    """Seed of the env's random generator; None draws one."""
    max_accel: float = 4.0
    """Acceleration (m/s^2) of a unit action."""
    damping: float = 1.0
    """Viscous damping (1/s)."""
    arena_half_size: float = 2.5
    """Leaving the square ``[-a, a]^2`` terminates the episode (failure)."""
    start_half_size: float = 1.0
    """Start positions are uniform in ``[-s, s]^2`` with zero velocity."""
    goal_radius_by_stage: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)
    """Curriculum: goals are uniform in the disc of this radius around the origin, per stage."""
    curriculum_stage: int = 0
    """Initial curriculum stage (index into ``goal_radius_by_stage``)."""
    success_radius: float = 0.1
    """Distance to the goal under which the mass may count as arrived."""
    success_max_speed: float = 0.25
    """Speed under which the mass counts as at rest."""
    reward_weights: dict[str, float] = field(
        default_factory=lambda: {"progress": 1.0, "effort": -0.01, "success_bonus": 20.0, "out_of_bounds": -40.0}
    )
    """Weight of each reward term (see :data:`REWARD_TERMS`); values are also multiplied by ``step_dt``."""


def _checked_cfg(
    cfg: TorchReachEnvCfg | None,
    render_mode: str | None,
    num_envs: int | None,
    device: str | torch.device | None,
    seed: int | None,
    kwargs: dict[str, Any],
) -> TorchReachEnvCfg:
    """The configuration :class:`TorchReachEnv` runs with: ``cfg`` (or the default) with the shortcuts applied."""
    unknown = [k for k in kwargs if not k.endswith("_entry_point")]
    if unknown:
        raise TypeError(f"TorchReachEnv got unexpected keyword arguments {unknown}")
    if render_mode is not None:
        raise ValueError(f"TorchReachEnv does not render (render_mode={render_mode!r})")
    cfg = cfg if cfg is not None else TorchReachEnvCfg()
    if num_envs is not None:
        cfg.scene.num_envs = int(num_envs)
    if device is not None:
        cfg.sim.device = str(device)
    if seed is not None:
        cfg.seed = int(seed)
    if set(cfg.reward_weights) != set(REWARD_TERMS):
        raise ValueError(f"reward_weights must name exactly {REWARD_TERMS}, got {sorted(cfg.reward_weights)}")
    return cfg


class TorchReachEnv(gym.Env):
    """Vectorized point-mass reach task in pure torch with Isaac Lab's ``ManagerBasedRLEnv`` contract.

    See the module docstring for the task and for the exact contract mimicked. Attributes are documented where
    :meth:`__init__` and its setup steps define them.
    """

    is_vector_env: ClassVar[bool] = True
    """Whether the environment is vectorized (as in Isaac Lab)."""
    metadata: dict[str, Any] = {"render_modes": [None]}  # noqa: RUF012 - gymnasium.Env declares it without ClassVar
    """Gymnasium metadata (no rendering)."""

    def __init__(
        self,
        cfg: TorchReachEnvCfg | None = None,
        render_mode: str | None = None,
        *,
        num_envs: int | None = None,
        device: str | torch.device | None = None,
        seed: int | None = None,
        **kwargs: Any,
    ):
        """Build the buffers and sample initial states (call :meth:`reset` before stepping, as with Isaac Lab).

        Args:
            cfg: Configuration; a default one when None.
            render_mode: Accepted for the gymnasium signature; only None is supported.
            num_envs: Shortcut overriding ``cfg.scene.num_envs``.
            device: Shortcut overriding ``cfg.sim.device``.
            seed: Shortcut overriding ``cfg.seed`` (when not None).
            kwargs: Registry entry points (``*_entry_point``) that ``gym.make`` forwards, ignored as Isaac Lab does.
        """
        cfg = _checked_cfg(cfg, render_mode, num_envs, device, seed, kwargs)
        self.cfg = cfg
        """The configuration (``cfg.is_finite_horizon`` is read by the rl_games wrapper)."""
        self.render_mode = render_mode
        """Always None: the task does not render."""
        self.num_envs = int(cfg.scene.num_envs)
        """Number of parallel environments."""
        self.device = str(torch.device(cfg.sim.device))
        """Device of every tensor the env returns (a string, as Isaac Lab's ``env.device``)."""
        self.physics_dt = float(cfg.sim.dt)
        """Physics step in seconds."""
        self.step_dt = float(cfg.sim.dt * cfg.decimation)
        """Env step (control period) in seconds."""
        self._generator = torch.Generator(device=self.device)
        self.seed(-1 if cfg.seed is None else cfg.seed)

        self._curriculum_stage = 0
        self.curriculum_stage = cfg.curriculum_stage

        self._allocate_step_buffers()
        self._allocate_state()
        self._set_up_spaces()
        # Initial states so that a step before reset() is well defined; reset() resamples them.
        self._sample_states(torch.arange(self.num_envs, device=self.device))

    def _allocate_step_buffers(self) -> None:
        """The buffers and counters of Isaac Lab's step contract, under its attribute names."""
        n, dev = self.num_envs, self.device
        self.common_step_counter = 0
        """Env steps taken since construction (common to all envs)."""
        self._sim_step_counter = 0
        self.episode_length_buf = torch.zeros(n, dtype=torch.long, device=dev)
        """Steps taken in the current episode, per env (int64, reset to 0 when the env resets)."""
        self.reset_terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        """Termination flags of the last step (buffer reused every step)."""
        self.reset_time_outs = torch.zeros(n, dtype=torch.bool, device=dev)
        """Time-out (truncation) flags of the last step (buffer reused every step)."""
        self.reset_buf = torch.zeros(n, dtype=torch.bool, device=dev)
        """``reset_terminated | reset_time_outs`` of the last step."""
        self.reward_buf = torch.zeros(n, dtype=torch.float32, device=dev)
        """Total reward of the last step (buffer reused every step)."""
        self.obs_buf: dict[str, torch.Tensor] = {}
        """The observations of the last step or reset (Isaac Lab's attribute)."""
        self.extras: dict[str, Any] = {}
        """Persistent extras dict returned by :meth:`reset` and :meth:`step` (``"log"``, ``"time_outs"``)."""

    def _set_up_spaces(self) -> None:
        """Observation and action spaces, of one env and batched."""
        n = self.num_envs
        self.single_observation_space = gym.spaces.Dict(
            {"policy": gym.spaces.Box(low=-np.inf, high=np.inf, shape=(6,), dtype=np.float32)}
        )
        """Observation space of one env: ``Dict(policy=Box(6))``."""
        self.single_action_space = gym.spaces.Box(low=-np.inf, high=np.inf, shape=(2,), dtype=np.float32)
        """Action space of one env (unbounded like Isaac Lab's; the task clips to [-1, 1])."""
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        """Batched observation space."""
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, n)
        """Batched action space."""

    def _allocate_state(self) -> None:
        """The task's own buffers: point masses, goals, per-term rewards and episode sums."""
        n, dev = self.num_envs, self.device
        self._pos = torch.zeros(n, 2, device=dev)
        self._vel = torch.zeros(n, 2, device=dev)
        self._goal = torch.zeros(n, 2, device=dev)
        self._prev_dist = torch.zeros(n, device=dev)
        self._actions = torch.zeros(n, 2, device=dev)
        self._term_dones = torch.zeros(len(TERMINATION_TERMS), n, dtype=torch.bool, device=dev)
        self._step_terms = torch.zeros(len(REWARD_TERMS), n, device=dev)
        self._episode_sums = torch.zeros(len(REWARD_TERMS), n, device=dev)
        self._success = torch.zeros(n, device=dev)
        self._weights = torch.tensor([self.cfg.reward_weights[k] for k in REWARD_TERMS], device=dev).unsqueeze(1)

    # ------------------------------------------------------------------ properties

    @property
    def max_episode_length_s(self) -> float:
        """Maximum episode length in seconds."""
        return self.cfg.episode_length_s

    @property
    def max_episode_length(self) -> int:
        """Maximum episode length in env steps (``ceil(max_episode_length_s / step_dt)``, as Isaac Lab)."""
        return math.ceil(self.max_episode_length_s / self.step_dt)

    @property
    def curriculum_stage(self) -> int:
        """Current curriculum stage; assigning it changes the goal radius of goals sampled at later resets."""
        return self._curriculum_stage

    @curriculum_stage.setter
    def curriculum_stage(self, stage: int) -> None:
        stage = int(stage)
        if not 0 <= stage < len(self.cfg.goal_radius_by_stage):
            raise ValueError(f"curriculum stage {stage} outside [0, {len(self.cfg.goal_radius_by_stage) - 1}]")
        self._curriculum_stage = stage

    @property
    def num_curriculum_stages(self) -> int:
        """Number of curriculum stages."""
        return len(self.cfg.goal_radius_by_stage)

    # ------------------------------------------------------------------ gymnasium / Isaac Lab API

    def seed(self, seed: int = -1) -> int:
        """Seed the env's random generator (``-1`` draws a seed) and return the seed used."""
        if seed == -1:
            seed = int(np.random.default_rng().integers(0, 2**31 - 1))
        self._generator.manual_seed(int(seed))
        return int(seed)

    def reset(
        self, seed: int | None = None, env_ids: Sequence[int] | torch.Tensor | None = None, options: dict | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Reset the given envs (all by default) and return ``(obs_dict, extras)``.

        Like Isaac Lab, this rebuilds ``extras["log"]`` from the envs being reset, and it is meant to be called
        once before the first :meth:`step`; afterwards :meth:`step` resets finished envs itself.
        """
        if seed is not None:
            self.seed(seed)
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, device=self.device)
        env_ids = torch.as_tensor(env_ids, dtype=torch.long, device=self.device)
        self._reset_idx(env_ids)
        self.obs_buf = self._compute_obs()
        return self.obs_buf, self.extras

    def step(self, action: torch.Tensor):
        """Advance all envs one control step, reset the finished ones, return Isaac Lab's 5-tuple."""
        self._actions = torch.clamp(action.to(self.device, dtype=torch.float32), -1.0, 1.0)
        accel = self._actions * self.cfg.max_accel
        for _ in range(self.cfg.decimation):
            self._sim_step_counter += 1
            # semi-implicit Euler: velocity first, then position with the new velocity
            self._vel += (accel - self.cfg.damping * self._vel) * self.physics_dt
            self._pos += self._vel * self.physics_dt
        self.episode_length_buf += 1
        self.common_step_counter += 1

        # -- terminations (into the persistent buffers, as Isaac Lab's termination manager does)
        dist = torch.linalg.vector_norm(self._goal - self._pos, dim=-1)
        speed = torch.linalg.vector_norm(self._vel, dim=-1)
        success = (dist < self.cfg.success_radius) & (speed < self.cfg.success_max_speed)
        out_of_bounds = (self._pos.abs() > self.cfg.arena_half_size).any(dim=-1)
        time_out = self.episode_length_buf >= self.max_episode_length
        self._term_dones[0] = time_out
        self._term_dones[1] = success
        self._term_dones[2] = out_of_bounds
        torch.logical_or(success, out_of_bounds, out=self.reset_terminated)
        self.reset_time_outs.copy_(time_out)
        torch.logical_or(self.reset_terminated, self.reset_time_outs, out=self.reset_buf)

        # -- rewards: value = func * weight * dt per term; summed into reward_buf and the episodic sums
        funcs = torch.stack(
            [
                (self._prev_dist - dist) / self.step_dt,
                torch.sum(self._actions.square(), dim=-1),
                success.float(),
                out_of_bounds.float(),
            ]
        )
        torch.mul(funcs, self._weights * self.step_dt, out=self._step_terms)
        torch.sum(self._step_terms, dim=0, out=self.reward_buf)
        self._episode_sums += self._step_terms
        self._success.copy_(success)
        self._prev_dist.copy_(dist)

        # -- automatic reset of finished envs (Isaac Lab syncs here too: it needs the ids on the host)
        reset_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(reset_env_ids) > 0:
            self._reset_idx(reset_env_ids)
        self.extras["time_outs"] = self.reset_time_outs
        # Kept as Isaac Lab's envs keep it: the observations of the last step or reset, which Isaac Lab's
        # RslRlVecEnvWrapper.get_observations reads.
        self.obs_buf = obs = self._compute_obs()
        return obs, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def get_per_env_terms(self) -> dict[str, torch.Tensor]:
        """Per-env values of the last step, computed before its resets: one ``(num_envs,)`` tensor per term.

        Reward terms (``value = func * weight * step_dt``, so their episode sums are the episodic sums behind
        ``Episode_Reward/<term>``) and ``success`` (1.0 where the step ended the episode in success). Feed this
        to the emitter with :data:`PER_ENV_TERM_MODES`. The tensors are views of buffers the next step overwrites.
        """
        terms = {name: self._step_terms[i] for i, name in enumerate(REWARD_TERMS)}
        terms["success"] = self._success
        return terms

    def render(self, recompute: bool = False) -> None:
        """Nothing to render."""
        return None

    def close(self) -> None:
        """Nothing to release (buffers are freed with the object)."""

    # ------------------------------------------------------------------ internals

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        """Log the finished episodes of ``env_ids`` into a new ``extras["log"]`` and start new ones."""
        log: dict[str, Any] = {}
        for i, name in enumerate(REWARD_TERMS):
            log["Episode_Reward/" + name] = torch.mean(self._episode_sums[i, env_ids]) / self.max_episode_length_s
        log["Curriculum/stage"] = float(self.curriculum_stage)
        log["Metrics/success"] = torch.mean(self._term_dones[1, env_ids].float())
        for i, name in enumerate(TERMINATION_TERMS):
            log["Episode_Termination/" + name] = torch.count_nonzero(self._term_dones[i, env_ids]).item()
        self.extras["log"] = log
        self._episode_sums[:, env_ids] = 0.0
        self._sample_states(env_ids)
        self.episode_length_buf[env_ids] = 0

    def _sample_states(self, env_ids: torch.Tensor) -> None:
        k = env_ids.numel()
        u = torch.rand(k, 4, generator=self._generator, device=self.device)
        self._pos[env_ids] = (2.0 * u[:, :2] - 1.0) * self.cfg.start_half_size
        self._vel[env_ids] = 0.0
        radius = self.cfg.goal_radius_by_stage[self.curriculum_stage] * torch.sqrt(u[:, 2])
        angle = 2.0 * math.pi * u[:, 3]
        self._goal[env_ids] = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
        self._prev_dist[env_ids] = torch.linalg.vector_norm(self._goal[env_ids] - self._pos[env_ids], dim=-1)

    def _compute_obs(self) -> dict[str, torch.Tensor]:
        return {"policy": torch.cat([self._goal - self._pos, self._vel, self._pos], dim=-1)}


def register_torch_envs() -> None:
    """Register :data:`TASK_ID` with gymnasium (idempotent; never done on import).

    As Isaac Lab does, the registration carries an ``env_cfg_entry_point`` and disables gymnasium's env
    checker (it expects numpy arrays): ``gym.make(TASK_ID, cfg=TorchReachEnvCfg(...))`` or
    ``gym.make(TASK_ID, num_envs=..., device=...)``.
    """
    if TASK_ID in gym.registry:
        return
    gym.register(
        id=TASK_ID,
        entry_point=f"{__name__}:TorchReachEnv",
        disable_env_checker=True,
        kwargs={"env_cfg_entry_point": f"{__name__}:TorchReachEnvCfg"},
    )
