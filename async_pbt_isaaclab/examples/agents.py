"""The packaged CPU agent yamls and the gymnasium task each one trains.

A CPU member (``cpu_member --task ID``), the population example, ``async-pbt evaluate`` and the validation study
pick an agent yaml by task id from here when none is given. The MuJoCo yamls are adapted from rl_games' own
tuned configs (each file's header names its source and what changed for CPU) and need the ``[mujoco]`` extra.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGED_AGENTS = {
    "Pendulum-v1": HERE / "pendulum_ppo.yaml",
    "HalfCheetah-v5": HERE / "halfcheetah_ppo.yaml",
    "Hopper-v5": HERE / "hopper_ppo.yaml",
    "Walker2d-v5": HERE / "walker2d_ppo.yaml",
}
"""Gymnasium task id -> its packaged rl_games agent yaml."""
PACKAGED_RSL_RL_CONFIGS = {
    "Pendulum-v1": HERE / "rsl_rl_pendulum.yaml",
    "HalfCheetah-v5": HERE / "rsl_rl_halfcheetah.yaml",
    "Hopper-v5": HERE / "rsl_rl_hopper.yaml",
}
"""Gymnasium task id -> its packaged rsl_rl config (``env``, ``runner`` in rsl-rl-lib 5's form, ``pbt``)."""
PACKAGED_SEARCHES = {"hopper_reward_search": HERE / "hopper_reward_search.yaml"}
"""Packaged agent yamls that search more than PPO's values, by the name ``--agent`` takes instead of a path
(``hopper_reward_search``: Hopper-v5's reward weights, judged by the distance travelled)."""
DEFAULT_TASK = "Pendulum-v1"
"""The task of the examples when none is named."""


def packaged_agent_yaml(task: str) -> Path:
    """The packaged agent yaml for ``task``; ``ValueError`` naming the packaged tasks for any other id."""
    try:
        return PACKAGED_AGENTS[task]
    except KeyError:
        raise ValueError(
            f"no packaged agent yaml for task {task!r} (packaged: {', '.join(PACKAGED_AGENTS)}); "
            f"pass --agent YOUR.yaml with params.config.env_name: {task}"
        ) from None


def agent_file(agent: str) -> Path:
    """``--agent``'s yaml: a packaged search's name (:data:`PACKAGED_SEARCHES`), else the path given."""
    return PACKAGED_SEARCHES.get(agent) or Path(agent).expanduser().absolute()


__all__ = [
    "DEFAULT_TASK",
    "PACKAGED_AGENTS",
    "PACKAGED_RSL_RL_CONFIGS",
    "PACKAGED_SEARCHES",
    "agent_file",
    "packaged_agent_yaml",
]
