"""Reward term weights per env, for members on slices of one manager-based Isaac Lab env (``--pbt-slices``).

Isaac Lab's ``RewardManager`` keeps one weight per term for all envs, so members that share an env cannot differ in
one through it. :class:`PerEnvRewardWeights` is a wrapper, not a fork: it sets the manager's weight of every searched
term to 1, so the manager's per-term step value (``reward_manager._step_reward[:, term]``, 2.3 and 3.0 alike) is the
term's raw value, and it adds ``step_dt * (w_env - 1) * raw`` per env and term to the reward the manager computed
(the manager's reward is ``step_dt * sum over terms of weight * raw``). Each slice's weights are its member's: the
slice's :class:`SliceRewardWeights` (a ``member.env_values.EnvValues``) sets them live.

What the manager logs itself is at weight 1 for the searched terms (``Episode_Reward/<term>`` in ``extras["log"]``,
``reward:<term>`` summary sources): judge such a population by an objective apart from the reward.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import gymnasium

from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key
from async_pbt_isaaclab.member.env_values import SLICE_ENV_VALUES_ATTR


def weight_term(key: str) -> str | None:
    """The reward term whose weight ``key`` searches (``env.rewards.<term>.weight``), else ``None``."""
    parts = env_parameter(key).split(".") if is_env_key(key) else []
    return parts[1] if len(parts) == 3 and parts[0] == "rewards" and parts[2] == "weight" else None


class PerEnvRewardWeights(gymnasium.Wrapper):
    """The env's reward recomputed with a weight per env for each searched reward term (see the module docstring)."""

    def __init__(self, env: gymnasium.Env, terms: Sequence[str]):
        super().__init__(env)
        import torch

        base: Any = env.unwrapped
        self.manager: Any = base.reward_manager
        self.terms = list(terms)
        self.columns = [list(self.manager.active_terms).index(t) for t in self.terms]
        weights = [float(self.manager.get_term_cfg(t).weight) for t in self.terms]
        self.weights = torch.tensor(weights, device=base.device).repeat(base.num_envs, 1)
        """``(num_envs, terms)``: each env's weight of each searched term."""
        for term in self.terms:
            cfg = self.manager.get_term_cfg(term)
            cfg.weight = 1.0  # the manager's step value of the term is then its raw value
            self.manager.set_term_cfg(term, cfg)
        setattr(self, SLICE_ENV_VALUES_ATTR, self.for_slice)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, extras = self.env.step(action)
        raw = self.manager._step_reward[:, self.columns]
        base: Any = self.env.unwrapped
        step_dt = float(base.step_dt)
        reward = reward + step_dt * ((self.weights - 1.0) * raw).sum(dim=1)
        return obs, reward, terminated, truncated, extras

    def for_slice(self, start: int, stop: int, keys: Iterable[str]) -> SliceRewardWeights:
        """Envs ``[start, stop)``'s searched values (one member's slice)."""
        return SliceRewardWeights(self, start, stop, keys)


class SliceRewardWeights:
    """One slice's searched reward term weights in a :class:`PerEnvRewardWeights` (a ``member.env_values.EnvValues``):
    every one set live; a key that is not a searched term's weight is a problem (slices cannot restart)."""

    def __init__(self, weights: PerEnvRewardWeights, start: int, stop: int, keys: Iterable[str]):
        self.owner, self.start, self.stop = weights, start, stop
        self.keys = tuple(sorted(k for k in keys if is_env_key(k)))
        self.problems = [
            f"pbt.mutation.{key}: members on slices of one Isaac Lab env can differ in reward term weights "
            f"(env.rewards.<term>.weight) only: the env's other values are one for all its envs"
            for key in self.keys
            if weight_term(key) not in weights.terms
        ]

    def _column(self, key: str) -> int:
        return self.owner.terms.index(str(weight_term(key)))

    def live_keys(self) -> frozenset[str]:
        return frozenset(self.keys)

    def key_reasons(self) -> Mapping[str, str]:
        return {}

    def read(self, key: str) -> Any:
        return float(self.owner.weights[self.start, self._column(key)].item())

    def held(self, key: str) -> list[float]:
        """The weight each env of the slice holds."""
        return [float(v) for v in self.owner.weights[self.start : self.stop, self._column(key)].tolist()]

    def set_live(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self.owner.weights[self.start : self.stop, self._column(key)] = float(value)

    def overrides(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return dict(values)


def per_env_reward_weights(env: gymnasium.Env, keys: Iterable[str]) -> gymnasium.Env:
    """``env`` wrapped in :class:`PerEnvRewardWeights` for the searched reward term weights among ``keys`` (``env``
    itself when none is searched, or the task has no reward manager: the slices then refuse the keys)."""
    terms = sorted({t for t in (weight_term(k) for k in keys) if t is not None})
    manager = getattr(env.unwrapped, "reward_manager", None)
    if not terms or manager is None or not all(t in manager.active_terms for t in terms):
        return env
    return PerEnvRewardWeights(env, terms)


__all__ = ["PerEnvRewardWeights", "SliceRewardWeights", "per_env_reward_weights", "weight_term"]
