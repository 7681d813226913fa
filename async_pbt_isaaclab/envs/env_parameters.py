"""Searched env values (``pbt.mutation`` keys ``env.<name>``) on the CPU fallback, and the distance travelled term.

A gymnasium task takes its reward weights as constructor arguments (MuJoCo v5: ``forward_reward_weight``,
``ctrl_cost_weight``, ``healthy_reward``, ...). A member's env is built with its generation's values: they live in
``params.config.env_config`` (``core.decision.mutation.agent_path``), which the vec-env passes to
``gymnasium.make``; an exploit or explore that changes one restarts the member, whose env is rebuilt with the new
value (``core.decision.exploit_plan.keys_to_apply``). :func:`env_key_problems` refuses, at the member's start, a key
the task's constructor does not take, read from the installed gymnasium's signature of it.

``distance_travelled`` is a completed-episode term a population can be judged by apart from the reward its search
reshapes: the env's ``x_position`` at the episode's last step minus at its first observation (MuJoCo's locomotion
tasks report it in ``info``; :class:`EpisodeDistance` keeps the start of each env's episode).
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Mapping

import gymnasium
import numpy as np

from async_pbt_isaaclab.core.decision.mutation import agent_path
from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key
from async_pbt_isaaclab.core.state.evidence import LENGTH_OBJECTIVE, RETURN_OBJECTIVE

DISTANCE_TERM = "distance_travelled"
"""The term name (``pbt_terms`` entry and ``pbt.objective``): x position at the episode's end minus at its start."""
POSITION_KEY = "x_position"
"""The info key gymnasium's MuJoCo locomotion tasks report the torso's x position in (reset and step)."""


def constructor_parameters(env_id: str) -> frozenset[str]:
    """The keyword arguments a registered gymnasium task's constructor names (its ``**kwargs`` aside: a MuJoCo task
    passes those to ``MujocoEnv``, which takes no reward weight)."""
    from gymnasium.envs.registration import load_env_creator

    entry_point = gymnasium.spec(env_id).entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if not callable(creator):
        return frozenset()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(n for n, p in inspect.signature(creator).parameters.items() if p.kind in named and n != "self")


def env_key_problems(env_id: str, keys: Iterable[str]) -> list[str]:
    """One line for each searched env key (``env.<name>``) the task's constructor does not take (empty: all fit)."""
    env_keys = sorted(k for k in keys if is_env_key(k))
    if not env_keys:
        return []
    if env_id not in gymnasium.registry:
        return [f"pbt.mutation.{env_keys[0]}: {env_id!r} is not a registered gymnasium task to build with it"]
    taken = constructor_parameters(env_id)
    return [
        f"pbt.mutation.{key}: {env_id} is not built with {env_parameter(key)!r}; its constructor takes "
        f"{', '.join(sorted(taken)) or 'no named argument'}"
        for key in env_keys
        if env_parameter(key) not in taken
    ]


def built_value(env: Any, name: str) -> Any:
    """The value of constructor argument ``name`` as the built env holds it (``_name`` as gymnasium's MuJoCo tasks
    store their weights, else ``name``), read from the env itself; ``None`` when it keeps no such attribute."""
    unwrapped = getattr(env, "unwrapped", env)
    for attribute in (f"_{name}", name):
        value = getattr(unwrapped, attribute, None)
        if isinstance(value, (bool, int, float, np.number)):
            return value.item() if isinstance(value, np.number) else value
    return None


class SliceEnvValues:
    """A slice member's searched env values on the CPU fallback (``member.env_values.EnvValues``): set on the envs
    of its slice of the shared vec-env, each env its own object. A constructor argument the built env keeps as a float
    attribute (``_name`` or ``name``: MuJoCo v5's reward weights, Pendulum's ``g``) is read at every step, so it is
    set live; any other cannot be set per slice, and slices cannot restart: a problem."""

    def __init__(self, envs: Iterable[Any], keys: Iterable[str]):
        self.envs = [getattr(env, "unwrapped", env) for env in envs]
        self.keys = tuple(sorted(k for k in keys if is_env_key(k)))
        self.problems = [
            f"pbt.mutation.{key}: the built env keeps no float attribute {env_parameter(key)!r} to set on its slice "
            f"(members on slices of one process cannot restart to rebuild it)"
            for key in self.keys
            if not isinstance(self._read(self.envs[0], key), float)
        ]

    @staticmethod
    def _attribute(env: Any, key: str) -> str:
        name = env_parameter(key)
        return f"_{name}" if hasattr(env, f"_{name}") else name

    def _read(self, env: Any, key: str) -> Any:
        value = getattr(env, self._attribute(env, key), None)
        return value.item() if isinstance(value, np.floating) else value

    def live_keys(self) -> frozenset[str]:
        return frozenset(self.keys)

    def key_reasons(self) -> Mapping[str, str]:
        return {}

    def read(self, key: str) -> Any:
        return self._read(self.envs[0], key)

    def held(self, key: str) -> list[Any]:
        """The value each env of the slice holds."""
        return [self._read(env, key) for env in self.envs]

    def set_live(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            for env in self.envs:
                setattr(env, self._attribute(env, key), float(value))

    def overrides(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """A restart builds the env from ``params.config.env_config`` (unused by slices, which cannot restart)."""
        return {"agent." + ".".join(agent_path(k)): v for k, v in values.items()}


class EpisodeDistance:
    """Per env, the ``x_position`` its episode started at; :meth:`step` gives each env's distance so far (the
    finished ones': their whole episode's, from ``final_info``) and starts the new episodes of the finished envs."""

    def __init__(self, num_envs: int):
        self.start = np.full(num_envs, np.nan, dtype=np.float64)
        """x position at each env's episode start (NaN: unknown, the task reports none)."""

    def reset(self, info: Mapping[str, Any]) -> None:
        """Every env starts a new episode (``info``: the reset's)."""
        self.start = _positions(info, len(self.start))

    def step(self, info: Mapping[str, Any], done: np.ndarray) -> np.ndarray:
        """Distance travelled so far by each env (NaN where the task reports no position); the envs that just ended
        theirs (``done``) are given their whole episode's and start the next from their reset position in ``info``."""
        n = len(self.start)
        now = _positions(info, n)
        if done.any():
            now = np.where(done, _positions(info.get("final_info", {}), n), now)
        distance = now - self.start
        self.start = np.where(done, _positions(info, n), self.start)
        return distance


def episode_objective(
    objective: str, episode_return: float, length: int, first: Mapping[str, Any], last: Mapping[str, Any]
) -> float:
    """One played episode's value of a population objective, as members measure it: its return, its length,
    ``distance_travelled`` (``x_position`` of the last step's ``info`` minus the reset's), or a term read from the
    last step's ``info`` (NaN when the env reports none)."""
    if objective == RETURN_OBJECTIVE:
        return float(episode_return)
    if objective == LENGTH_OBJECTIVE:
        return float(length)
    if objective == DISTANCE_TERM:
        return _value(last, POSITION_KEY) - _value(first, POSITION_KEY)
    return _value(last, objective)


def _value(info: Mapping[str, Any], key: str) -> float:
    try:
        return float(info[key])
    except (KeyError, TypeError, ValueError):
        return float("nan")


def _positions(info: Mapping[str, Any], n: int) -> np.ndarray:
    """``info["x_position"]`` per env (NaN where an env reports none)."""
    out = np.full(n, np.nan, dtype=np.float64)
    if POSITION_KEY in info:
        values = np.asarray(info[POSITION_KEY], dtype=np.float64).reshape(n)
        present = np.asarray(info.get("_" + POSITION_KEY, np.ones(n, bool)), dtype=bool)
        out[present] = values[present]
    return out


__all__ = [
    "DISTANCE_TERM",
    "EpisodeDistance",
    "SliceEnvValues",
    "built_value",
    "constructor_parameters",
    "env_key_problems",
    "episode_objective",
]
