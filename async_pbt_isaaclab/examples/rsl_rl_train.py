"""One rsl_rl member on a gymnasium task, without a population: real rsl_rl PPO on the CPU vec-env.

``python -m async_pbt_isaaclab.examples.rsl_rl_train --task Pendulum-v1 --iterations 300`` trains the task's
packaged config (``examples/agents.py``: ``PACKAGED_RSL_RL_CONFIGS``) with the installed rsl-rl-lib (3.1 or 5.x)
and prints, every ``--every`` iterations, the mean return of the episodes the member's own summary emitter saw
complete (its evidence, not rsl_rl's logged means). rsl_rl's own TensorBoard run and ``model_<it>.pt``
checkpoints go to ``--log-dir``.
"""

from __future__ import annotations

import math
import os
from typing import Any

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.agent_config import load_yaml
from async_pbt_isaaclab.examples.agents import DEFAULT_TASK, PACKAGED_RSL_RL_CONFIGS
from async_pbt_isaaclab.exit_codes import EXIT_USAGE


def packaged_config(task: str) -> dict[str, Any]:
    """The packaged rsl_rl config of gymnasium ``task`` as a dict."""
    return load_yaml(PACKAGED_RSL_RL_CONFIGS[task])


def build_runner(cfg: dict[str, Any], seed: int, log_dir: str | None = None, env: Any = None) -> Any:
    """An ``OnPolicyRunner`` of the installed line on ``cfg``'s gymnasium task (``env``: on that env instead, a
    member's slice of a shared one)."""
    import torch
    from rsl_rl.runners import OnPolicyRunner

    from async_pbt_isaaclab.envs.rsl_rl_vec_env import RslRlGymVecEnv
    from async_pbt_isaaclab.rsl_rl.config import runner_config
    from async_pbt_isaaclab.rsl_rl.group import group_rank
    from async_pbt_isaaclab.rsl_rl.release import installed_line

    torch.manual_seed(seed)
    # One intra-op thread: the networks are tiny, and members share a few cores (as the rl_games yamls' torch_threads).
    torch.set_num_threads(int(cfg.get("torch_threads", 1)))
    env_cfg = cfg["env"]
    if env is None:
        # A rank of a member's group (torchrun, rsl_rl/group.py) plays episodes of its own: its env is seeded apart.
        rank = group_rank()
        env = RslRlGymVecEnv(env_cfg["id"], int(env_cfg["num_envs"]), seed=seed + rank, **env_cfg.get("env_config", {}))
    train_cfg = runner_config(dict(cfg["runner"], seed=seed), installed_line())
    device = str(train_cfg.get("device", "cpu"))
    if device.startswith("cuda") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = f"cuda:{os.environ['LOCAL_RANK']}"  # what rsl_rl requires of each rank (as Isaac Lab's train.py)
    return OnPolicyRunner(env, train_cfg, log_dir=log_dir, device=device)


class _Report:
    """Prints the member's evidence every ``every`` iterations (an :class:`~.rsl_rl.trainer.IterationListener`)."""

    def __init__(self, trainer: Any, every: int):
        self.trainer, self.every = trainer, every
        self.returns: list[float] = []

    def rollout_done(self) -> None:
        self.returns += [float(r) for r in self.trainer.summary_source().drain().returns]

    def update_done(self) -> None:
        t = self.trainer
        if t.epoch % self.every == 0 or t.training_ends_now():
            mean = sum(self.returns) / len(self.returns) if self.returns else math.nan
            print(f"iteration {t.epoch} frame {t.frame}: {len(self.returns)} episodes, mean return {mean:.1f}")
            self.returns = []


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m async_pbt_isaaclab.examples.rsl_rl_train", description=__doc__)
    parser.add_argument("--task", choices=sorted(PACKAGED_RSL_RL_CONFIGS), default=DEFAULT_TASK)
    parser.add_argument("--iterations", type=int, default=None, help="default: the config's max_iterations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--log-dir", default=None, help="default: runs/rsl_rl_<task>")
    args = parser.parse_args(argv)
    from async_pbt_isaaclab.rsl_rl.release import UnsupportedRslRl, installed_line

    try:
        installed_line()
    except UnsupportedRslRl as exc:
        parser.exit(EXIT_USAGE, f"{parser.prog}: {exc}\n")
    from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer

    cfg = packaged_config(args.task)
    trainer = RslRlTrainer(build_runner(cfg, args.seed, args.log_dir or f"runs/rsl_rl_{args.task}"))
    trainer.attach(_Report(trainer, max(1, args.every)))
    trainer.train(args.iterations or int(cfg["runner"]["max_iterations"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
