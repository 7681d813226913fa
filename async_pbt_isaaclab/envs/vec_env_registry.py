"""The rl_games registration of this package's vec-envs: the gymnasium one (:mod:`.gym_vec_env`) and the envpool one
(:mod:`.envpool_vec_env`, a :class:`~async_pbt_isaaclab.envs.gym_vec_env.GymVecEnv` with another backend), chosen by
``--vec-env``. Apart from both, so that neither module imports the other's subclass."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import gymnasium

from async_pbt_isaaclab.envs.gym_vec_env import VECENV_TYPE, GymVecEnv, gym_id_for, task_kwargs


def _make_single_env(env_id: str, **env_config: Any):
    """rl_games ``env_creator``: one env with the old gym API (used by the rl_games player)."""
    from rl_games.common.gym_compat import make

    return make(env_id, **task_kwargs(env_config))


VEC_ENV_BACKENDS = {"gymnasium": VECENV_TYPE, "envpool": "ASYNC_PBT_ENVPOOL"}
"""``--vec-env`` choices and the rl_games vec-env type each registers (``envpool``: :mod:`.envpool_vec_env`)."""


def vec_env_class(backend: str) -> type[GymVecEnv]:
    if backend == "envpool":
        from async_pbt_isaaclab.envs.envpool_vec_env import EnvpoolVecEnv

        return EnvpoolVecEnv
    return GymVecEnv


def _create_vec_env(config_name: str, num_actors: int, backend: str = "gymnasium", **env_config: Any) -> GymVecEnv:
    from rl_games.common import env_configurations

    entry = env_configurations.configurations.get(config_name, {})
    env_id = entry.get("gym_id", config_name)
    return vec_env_class(backend)(env_id, num_actors, **env_config)


def register_gym_vecenv(env_ids: str | Iterable[str] = (), backend: str = "gymnasium") -> list[str]:
    """Register the vec-env type of ``backend`` (``ASYNC_PBT_GYM`` for gymnasium, ``ASYNC_PBT_ENVPOOL`` for envpool),
    and each gymnasium id as an rl_games env name trained through it.

    Idempotent: calling it again re-registers the same entries. A gymnasium id that rl_games already
    knows (for example one of its own RAY-based entries) is overridden on purpose, so that
    ``env_name: <gymnasium id>`` in an agent yaml trains in-process. Returns the registered names.
    """
    from rl_games.common import env_configurations, vecenv

    if backend not in VEC_ENV_BACKENDS:
        raise ValueError(f"vec-env backend {backend!r}: accepted {', '.join(VEC_ENV_BACKENDS)}")
    vec_type = VEC_ENV_BACKENDS[backend]
    vecenv.register(vec_type, lambda name, n, **kw: _create_vec_env(name, n, backend, **kw))
    if isinstance(env_ids, str):
        env_ids = [env_ids]
    names = []
    for env_id in env_ids:
        if env_id not in gymnasium.registry:
            raise gymnasium.error.UnregisteredEnv(f"{env_id!r} is not a registered gymnasium id")
        env_configurations.register(
            env_id,
            {
                "vecenv_type": vec_type,
                "env_creator": lambda _id=env_id, **kw: _make_single_env(_id, **kw),
                "gym_id": env_id,
            },
        )
        names.append(env_id)
    return names


def register_gym_vecenv_for(agent_cfg: Mapping[str, Any]) -> str:
    """Register the gymnasium id an agent yaml names in ``params.config.env_name`` (:func:`gym_id_for`); returns it."""
    env_name = gym_id_for(agent_cfg)
    register_gym_vecenv(env_name)
    return env_name


__all__ = ["VEC_ENV_BACKENDS", "register_gym_vecenv", "register_gym_vecenv_for", "vec_env_class"]
