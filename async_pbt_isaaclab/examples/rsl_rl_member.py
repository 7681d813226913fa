"""One CPU population member that trains rsl_rl PPO on a gymnasium task (the rsl_rl twin of ``cpu_member``).

    python -m async_pbt.examples.rsl_rl_member --pbt-workspace runs/ws --pbt-members 2 --pbt-index 0
    python -m async_pbt.examples.rsl_rl_member --task HalfCheetah-v5 --pbt-workspace runs/hc --pbt-members 4 \
        --pbt-index 0

``--task`` trains that task's packaged rsl_rl config (``examples/rsl_rl_*.yaml``; Pendulum-v1 by default);
``--config YAML`` trains your own config of the same form (``env``, ``runner``, ``pbt``). The ``--pbt-*`` flags and
the workspace are the rl_games members'; overrides name the config's own keys
(``agent.runner.algorithm.gamma=0.98``, ``agent.pbt.mutation.desired_kl=mutate_float``). A restart exploit re-runs
this command with ``--checkpoint`` and the new values written the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.agent_config import load_yaml
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.examples.agents import DEFAULT_TASK, PACKAGED_RSL_RL_CONFIGS
from async_pbt_isaaclab.exit_codes import EXIT_USAGE
from async_pbt_isaaclab.member.restart import capture_argv
from async_pbt_isaaclab.pbt_flags import (
    add_population_args,
    add_slices_arg,
    population_flag_origins,
    population_overrides,
)

PROG = "python -m async_pbt.examples.rsl_rl_member"

POPULATION_OVERRIDES = (
    "agent.pbt.mutation.desired_kl=mutate_float",
    "agent.pbt.mutation.entropy_coef=mutate_float",
    "agent.pbt.mutation.gamma=mutate_discount",
    "agent.pbt.mutation.clip_param=mutate_float",
)
"""What ``cpu_population --trainer rsl_rl`` members search: under rsl_rl's adaptive schedule ``desired_kl`` sets the
learning rate's level (``learning_rate`` itself is refused there: docs/rsl_rl.md)."""


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task", default=None, help=f"gymnasium task with a packaged config ({', '.join(PACKAGED_RSL_RL_CONFIGS)})"
    )
    parser.add_argument("--config", default=None, metavar="YAML", help="your rsl_rl config (env, runner, pbt)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: runner.seed + pbt index)")
    parser.add_argument("--max_iterations", "--max-iterations", type=int, default=None, help="runner.max_iterations")
    parser.add_argument("--num_envs", "--num-envs", type=int, default=None, help="parallel gymnasium envs")
    parser.add_argument("--checkpoint", default=None, help="warm-start checkpoint (ignored once the member has state)")
    parser.add_argument("--train-dir", default=None, help="rsl_rl's run folders (default: WORKSPACE/runs)")
    add_slices_arg(add_population_args(parser))
    return parser


def config_path(config: str | None, task: str | None) -> str:
    """``--config``, else ``--task``'s packaged config (``ValueError`` naming the packaged tasks)."""
    if config is not None:
        return str(config)
    task = task or DEFAULT_TASK
    if task not in PACKAGED_RSL_RL_CONFIGS:
        raise ValueError(
            f"--task {task}: no packaged rsl_rl config (packaged: {', '.join(PACKAGED_RSL_RL_CONFIGS)}); "
            f"pass --config YOUR.yaml"
        )
    return str(PACKAGED_RSL_RL_CONFIGS[task])


def load(args: argparse.Namespace, overrides: list[str]) -> tuple[dict[str, Any], dict[str, Any], PopulationConfig]:
    """The rsl_rl config with the run flags and overrides applied, its core view and population config."""
    from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

    path = config_path(args.config, args.task)
    raw = load_yaml(path)
    if args.task and args.config:
        raw["env"]["id"] = args.task
    rsl_cfg, view, cfg = load_member_config(
        raw, [*population_overrides(args), *overrides], source=path, origins=population_flag_origins(args)
    )
    runner = rsl_cfg["runner"]
    if args.max_iterations is not None:
        runner["max_iterations"] = args.max_iterations
    if args.num_envs is not None:
        rsl_cfg["env"]["num_envs"] = args.num_envs
    # Members must not share a seed, or the population starts as N copies of one run.
    runner["seed"] = args.seed if args.seed is not None else int(runner.get("seed", 0) or 0) + cfg.policy_idx
    return rsl_cfg, view, cfg


def main(argv: list[str] | None = None) -> int:
    capture_argv()
    parser = build_parser()
    args, overrides = parser.parse_with_overrides(argv)
    from async_pbt_isaaclab.rsl_rl.release import UnsupportedRslRl, installed_line

    try:
        installed_line()
        rsl_cfg, _, cfg = load(args, overrides)
    except (UnsupportedRslRl, ValueError) as exc:
        lines = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
        for line in lines:
            print(f"error: {getattr(exc, 'source', '') or PROG}: {line}", file=sys.stderr)
        return EXIT_USAGE
    if not cfg.enabled:
        print(f"error: {PROG} trains population members: give --pbt-workspace and --pbt-members", file=sys.stderr)
        return EXIT_USAGE
    return _train(args, rsl_cfg, cfg)


def _train(args: argparse.Namespace, rsl_cfg: dict[str, Any], cfg: PopulationConfig) -> int:
    import dataclasses

    from async_pbt_isaaclab.examples.rsl_rl_train import build_runner
    from async_pbt_isaaclab.member.run_to_end import member_exit_code
    from async_pbt_isaaclab.rsl_rl.member import train_member

    workspace = cfg.workspace_path(os.path.abspath("runs"))
    cfg = dataclasses.replace(cfg, workspace=str(workspace))
    train_dir = os.path.abspath(args.train_dir) if args.train_dir else str(workspace / "runs")
    seed = int(rsl_cfg["runner"]["seed"])
    if args.pbt_slices != 1:
        return _train_slices(args, rsl_cfg, cfg, train_dir)
    return member_exit_code(
        cfg.policy_idx,
        lambda: train_member(
            rsl_cfg,
            cfg,
            lambda config, log_dir: build_runner(config, seed, log_dir),
            train_dir=train_dir,
            checkpoint=args.checkpoint,
        ),
    )


def _train_slices(args: argparse.Namespace, rsl_cfg: dict[str, Any], cfg: PopulationConfig, train_dir: str) -> int:
    """``--pbt-slices M``: members ``--pbt-index .. +M-1`` in this process, on one gymnasium vec-env of M x num_envs
    (``rsl_rl/slices.py``); the process's seed is its first member's, each slice adds its slot."""
    from async_pbt_isaaclab.core.slices import slice_layout
    from async_pbt_isaaclab.envs.rsl_rl_vec_env import RslRlGymVecEnv
    from async_pbt_isaaclab.envs.slice_threads import slices_exit_code
    from async_pbt_isaaclab.examples.rsl_rl_train import build_runner
    from async_pbt_isaaclab.rsl_rl.slices import check_slices, train_slices

    env_cfg, seed = rsl_cfg["env"], int(rsl_cfg["runner"]["seed"])
    try:
        layout = slice_layout(cfg.policy_idx, args.pbt_slices, cfg.num_policies, int(env_cfg["num_envs"]))
        problems = check_slices(cfg, layout.count)
        if problems:
            raise ValueError("; ".join(problems))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def make_env(num_envs: int) -> Any:
        return RslRlGymVecEnv(env_cfg["id"], num_envs, seed=seed, **env_cfg.get("env_config", {}))

    def build(config: dict[str, Any], log_dir: str, env: Any) -> Any:
        return build_runner(config, int(config["runner"]["seed"]), log_dir, env)

    return slices_exit_code(
        layout,
        lambda: train_slices(rsl_cfg, cfg, layout, make_env, build, train_dir=train_dir, checkpoint=args.checkpoint),
    )


if __name__ == "__main__":
    sys.exit(main())
