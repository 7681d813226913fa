"""Held-out episodes of a policy on a gymnasium task: what ``async-pbt evaluate`` plays for every trainer.

The rl_games player (:class:`~async_pbt_isaaclab.commands.evaluate.Evaluator`) and rsl_rl's
(:class:`~async_pbt_isaaclab.commands.evaluate_rsl_rl.RslRlEvaluator`) hand their policy's deterministic action to
:func:`play_episodes`, so both are judged on the same episodes, seeds and objective. numpy and torch are imported
inside, so ``async-pbt --help`` stays light.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping


def play_episodes(
    make_env: Callable[[Mapping[str, Any]], Any],
    act: Callable[[Any], Any],
    episodes: int,
    seed: int,
    env_values: Mapping[str, Any],
    objective: str,
) -> tuple[list[float], list[int], list[float]]:
    """Each episode's return, length and ``objective`` value: one env per episode (``make_env(env_values)``), env ``i``
    reset with ``seed + i``, the envs still running stepped together with ``act`` (a float32 observation batch to a
    batch of deterministic actions). The rl_games and rsl_rl players share it, so both are judged on the same
    episodes."""
    import numpy as np
    import torch

    from async_pbt_isaaclab.envs.env_parameters import episode_objective

    envs = [make_env(env_values) for _ in range(episodes)]
    firsts = [env.reset(seed=seed + i) for i, env in enumerate(envs)]
    obs = np.stack([first[0] for first in firsts]).astype(np.float32)
    values = [math.nan] * episodes
    returns = np.zeros(episodes, dtype=np.float64)
    lengths = np.zeros(episodes, dtype=np.int64)
    active = np.ones(episodes, dtype=bool)
    with torch.inference_mode():
        while active.any():
            idx = np.flatnonzero(active)
            actions = act(torch.from_numpy(obs[idx])).cpu().numpy()
            for j, i in enumerate(idx):
                action = actions[j] if actions.ndim > 1 else actions[j].item()
                o, r, terminated, truncated, info = envs[i].step(action)
                returns[i] += float(r)
                lengths[i] += 1
                obs[i] = o
                if terminated or truncated:
                    active[i] = False
                    values[i] = episode_objective(objective, returns[i], lengths[i], firsts[i][1], info)
    for env in envs:
        env.close()
    return [float(r) for r in returns], [int(n) for n in lengths], values
