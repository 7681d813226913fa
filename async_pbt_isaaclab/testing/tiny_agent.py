"""Train a small real rl_games PPO agent in this process and hand back the live agent.

Tests and scripts that need a real agent (its checkpoint, its optimizer state, its observer hooks) train one
here for the agent yaml's ``max_epochs`` on the gymnasium CPU vec-env. Imports torch and rl_games when called.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, Sequence


def train_agent(agent_cfg: Mapping[str, Any], observers: Sequence[Any] = (), *, isaac_stats: bool = False) -> Any:
    """Train rl_games on ``agent_cfg`` (a whole agent yaml as a dict, copied, not changed) and return the agent.

    ``observers`` receive every rl_games hook, in order; ``isaac_stats`` adds rl_games' ``IsaacAlgoObserver``
    after them (the ``info/*`` scalars a real run writes). The env named in ``params.config.env_name`` is
    registered first. rl_games sets the process-wide torch thread count from the yaml; it is put back.
    """
    import torch
    from rl_games.common.algo_observer import IsaacAlgoObserver
    from rl_games.torch_runner import Runner

    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv_for
    from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver

    class Capture:
        algo: Any = None

        def after_init(self, algo: Any) -> None:
            self.algo = algo

    capture = Capture()
    register_gym_vecenv_for(agent_cfg)
    threads = torch.get_num_threads()
    try:
        runner = Runner(MultiObserver([*observers, *([IsaacAlgoObserver()] if isaac_stats else []), capture]))
        runner.load(copy.deepcopy(dict(agent_cfg)))
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        torch.set_num_threads(threads)
    return capture.algo


def small_pendulum_agent_cfg(train_dir: Path, experiment: str, **config: Any) -> dict[str, Any]:
    """The CPU example's Pendulum-v1 agent yaml (``examples/pendulum_ppo.yaml``) writing under ``train_dir``,
    with ``params.config`` values replaced by ``config`` (e.g. ``max_epochs=2``)."""
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT

    cfg = load_yaml(Path(DEFAULT_AGENT))
    # save_best_after: rl_games writes no "best" checkpoints of its own unless asked.
    cfg["params"]["config"].update(
        {"train_dir": str(train_dir), "full_experiment_name": experiment, "save_best_after": 1000, **config}
    )
    return cfg
