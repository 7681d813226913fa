"""The rl_games agent options users set, as cases for slices: the agent overrides and the vec-envs they need.

Every case is the packaged Pendulum agent (``examples/pendulum_ppo.yaml``) with a few overrides a user writes, on a
gymnasium vec-env whose observations, actions or extra outputs the option needs: uint8 images, observations of more
than one dimension, discrete actions with action masks (CartPole), a central value network's states. The slices
tests (``tests/rl_games/test_slice_configs.py``, ``tests/integration/test_slice_options.py``) run each case on the
path slices choose for it: the rollout played together with each member's lean action step, the rollout with
rl_games' own ``get_action_values``, one env step at a time, or a refusal at start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

import gymnasium
import numpy as np

from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv, rl_games_space


class ImageObsVecEnv(GymVecEnv):
    """Pendulum whose observation is an ``(H, W, 3)`` picture: channel ``c`` holds observation ``c``, scaled, plus
    a ramp over the pixels (so that no picture is flat). ``dtype`` uint8 is an image as cameras give it (rl_games
    divides it by 255 before its normaliser); float32 is an observation of several dimensions."""

    def __init__(self, num_envs: int, *, shape: tuple[int, int] = (4, 5), dtype: Any = np.uint8, **kwargs: Any):
        super().__init__("Pendulum-v1", num_envs, **kwargs)
        self.dtype = np.dtype(dtype)
        high = 255 if self.dtype == np.uint8 else np.inf
        self.observation_space = gymnasium.spaces.Box(0 if high == 255 else -high, high, (*shape, 3), self.dtype)
        self._ramp = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(1, *shape, 1)

    def _picture(self, obs: np.ndarray) -> np.ndarray:
        picture = obs[:, None, None, :] * 40.0 + self._ramp
        if self.dtype == np.uint8:
            return np.clip(picture + 100.0, 0, 255).astype(np.uint8)
        return picture.astype(self.dtype)

    def step(self, actions):
        obs, rewards, dones, infos = super().step(actions)
        return self._picture(obs), rewards, dones, infos

    def reset(self):
        return self._picture(super().reset())


class MaskedCartPoleVecEnv(GymVecEnv):
    """CartPole with action masks: where the pole leans right beyond 0.05 rad pushing left is masked out, and the
    other way round; elsewhere both actions are allowed (``get_action_masks``: bool ``(num_envs, 2)``)."""

    def __init__(self, num_envs: int, **kwargs: Any):
        super().__init__("CartPole-v1", num_envs, **kwargs)
        self._angle = np.zeros(num_envs, dtype=np.float32)

    def step(self, actions):
        obs, rewards, dones, infos = super().step(actions)
        self._angle = obs[:, 2].copy()
        return obs, rewards, dones, infos

    def reset(self):
        obs = super().reset()
        self._angle = obs[:, 2].copy()
        return obs

    def has_action_masks(self) -> bool:
        return True

    def get_action_masks(self) -> np.ndarray:
        masks = np.ones((self.num_envs, 2), dtype=bool)
        masks[self._angle > 0.05, 0] = False
        masks[self._angle < -0.05, 1] = False
        return masks


class StatesVecEnv(GymVecEnv):
    """Pendulum with the privileged states a central value network reads: ``{"obs": obs, "states": [obs, obs**2]}``
    and ``state_space`` in the env info."""

    def __init__(self, num_envs: int, **kwargs: Any):
        super().__init__("Pendulum-v1", num_envs, **kwargs)
        self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, (6,), np.float32)

    @staticmethod
    def _with_states(obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"obs": obs, "states": np.concatenate([obs, obs * obs], axis=1)}

    def step(self, actions):
        obs, rewards, dones, infos = super().step(actions)
        return self._with_states(obs), rewards, dones, infos

    def reset(self):
        return self._with_states(super().reset())

    def get_env_info(self) -> dict[str, Any]:
        return {**super().get_env_info(), "state_space": rl_games_space(self.state_space)}


def _version(package: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", metadata.version(package))[:3])


ACTION_MASKS_DO_NOT_BUILD = _version("rl-games") < (1, 6, 5) and (1, 24) <= _version("numpy")[:2] < (2, 0)
"""rl-games 1.6.1 sizes its action-mask buffer with ``np.bool``, which numpy 1.24 removed and 2.0 brought back: with
the numpy 1 Isaac Lab 2.x pins, no agent with ``use_action_masks`` builds on that line, a slice or a process member."""


def masks_build_error(build: Callable[[], Any]) -> BaseException | None:
    """The error ``build()`` (an agent with action masks) raises, ``None`` when it builds. Where
    :data:`ACTION_MASKS_DO_NOT_BUILD`, the action-mask cases assert that this upstream fact still holds (rl-games 1.6.1
    reaching for ``np.bool``) instead of skipping: a run that must not skip shows why there is nothing to compare."""
    try:
        build()
    except AttributeError as exc:
        return exc
    return None


def _pendulum(num_envs: int, seed: int) -> GymVecEnv:
    # Short episodes: time-outs (the value bootstrap) and finished episodes (the statistics) within a rollout.
    return GymVecEnv("Pendulum-v1", num_envs, seed=seed, max_episode_steps=10)


CENTRAL_VALUE = (
    "params.config.central_value_config={minibatch_size: 16, mini_epochs: 2, learning_rate: 5.0e-4, "
    "clip_value: False, normalize_input: True, truncate_grads: True, grad_norm: 1.0, network: {name: actor_critic, "
    "central_value: True, mlp: {units: [32], activation: elu, initializer: {name: default}, "
    "regularizer: {name: None}}}}"
)
"""A central value network on the env's states (rl_games' asymmetric actor-critic)."""

DISCRETE = (
    "params.algo.name=a2c_discrete",
    "params.model.name=discrete_a2c",
    "params.network.space={discrete: {}}",
)
"""rl_games' discrete PPO agent (CartPole's two actions)."""


@dataclass(frozen=True)
class AgentOption:
    """One option users set in an rl_games agent yaml, and how slices run it."""

    name: str
    overrides: tuple[str, ...]
    """Overrides of the packaged Pendulum agent, as a user writes them."""
    make_env: Callable[[int, int], GymVecEnv] = _pendulum
    """``make_env(num_envs, seed)``: the vec-env the option needs."""
    path: str = "lean"
    """``lean`` (rollout together, each member's lean action step), ``own`` (rollout together, rl_games' own
    ``get_action_values``) or ``steps`` (one env step at a time)."""


OPTIONS = (
    AgentOption("default", ()),
    AgentOption("normalize_input-off", ("params.config.normalize_input=False",)),
    AgentOption("normalize_value-off", ("params.config.normalize_value=False",)),
    AgentOption("no-normalizers", ("params.config.normalize_input=False", "params.config.normalize_value=False")),
    AgentOption(
        "learned-sigma-tanh",
        (
            "params.network.space.continuous.fixed_sigma=False",
            "params.network.mlp.activation=tanh",
            "params.network.mlp.units=[16, 8]",
        ),
    ),
    AgentOption("d2rl", ("params.network.mlp.d2rl=True", "params.network.mlp.units=[16, 16, 8]")),
    AgentOption("separate-critic", ("params.network.separate=True",)),
    AgentOption(
        "bounded-exploration",
        ("params.network.name=pbt_bounded_actor_critic", "params.network.log_std_bounds={low: -5.0, high: 0.5}"),
    ),
    AgentOption("uint8-image", (), lambda n, seed: ImageObsVecEnv(n, seed=seed, max_episode_steps=10)),
    AgentOption(
        "uint8-image-cnn",
        (
            "params.network.cnn={type: conv2d, activation: elu, initializer: {name: default}, "
            "regularizer: {name: None}, convs: [{filters: 4, kernel_size: 2, strides: 1, padding: 0}]}",
        ),
        lambda n, seed: ImageObsVecEnv(n, seed=seed, max_episode_steps=10),
    ),
    AgentOption(
        "multi-dim-float",
        (),
        lambda n, seed: ImageObsVecEnv(n, seed=seed, max_episode_steps=10, shape=(2, 1), dtype=np.float32),
    ),
    AgentOption(
        "discrete",
        (*DISCRETE, "params.config.env_name=CartPole-v1"),
        lambda n, seed: GymVecEnv("CartPole-v1", n, seed=seed, max_episode_steps=10),
        path="own",
    ),
    AgentOption(
        "action-masks",
        (*DISCRETE, "params.config.env_name=CartPole-v1", "params.config.use_action_masks=True"),
        lambda n, seed: MaskedCartPoleVecEnv(n, seed=seed, max_episode_steps=10),
        path="steps",
    ),
    AgentOption(
        "central-value",
        (CENTRAL_VALUE,),
        lambda n, seed: StatesVecEnv(n, seed=seed, max_episode_steps=10),
        path="steps",
    ),
)
"""The options slices run, each on its path (the refused ones: :data:`REFUSED`)."""

REFUSED = {
    "params.network.rnn": "params.network.rnn={name: lstm, units: 16, layers: 1}",
    "params.config.epochs_between_resets": "params.config.epochs_between_resets=2",
    "params.config.multi_gpu": "params.config.multi_gpu=True",
}
"""Options slices refuse at start, by the key the one-line refusal names, with an override that sets it."""


def train_two_slices(
    root: Path,
    overrides: Sequence[str],
    make_env: Callable[[int], Any],
    *,
    envs_per_slice: int,
    observers: Callable[[int], Sequence[Any]] | None = None,
    task: str = "Pendulum-v1",
) -> Any:
    """Members 0 and 1 of a population of 2 (workspace ``root/ws``, the learning rate searched, no heartbeat
    ageing) as two slices of this process on ``make_env(2 x envs_per_slice)``: the packaged Pendulum agent with
    ``overrides`` (agent and ``pbt.`` keys). Returns ``train_slices``' host; its errors are raised."""
    from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
    from async_pbt_isaaclab.core.slices import slice_layout
    from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
    from async_pbt_isaaclab.rl_games.slices import train_slices

    population = [
        f"pbt.workspace={root / 'ws'}",
        "pbt.enabled=true",
        "pbt.num_policies=2",
        "pbt.heartbeat_interval_s=3600",
        "pbt.max_heartbeat_age_s=100000000",
        "pbt.mutation.learning_rate=mutate_float",
        f"params.config.num_actors={envs_per_slice}",
        "params.config.print_stats=False",
    ]
    agent_cfg, cfg = load_population_config(
        load_yaml(DEFAULT_AGENT), [*population, *overrides], source=str(DEFAULT_AGENT)
    )
    return train_slices(
        agent_cfg,
        cfg,
        slice_layout(0, 2, 2, envs_per_slice),
        make_env,
        train_dir=str(root / "runs"),
        task=task,
        extra_observers=observers,
    )
