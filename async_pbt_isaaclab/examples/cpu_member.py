"""One CPU population member: rl_games PPO on a gymnasium task through the in-process vec-env.

    python -m async_pbt.examples.cpu_member --pbt-workspace runs/ws --pbt-members 2 --pbt-index 0
    python -m async_pbt.examples.cpu_member --task HalfCheetah-v5 --pbt-workspace runs/hc --pbt-members 4 --pbt-index 0

The command line mirrors ``scripts/train_pbt.py`` (``--task``, ``--seed``, ``--max_iterations``, ``--checkpoint``,
``--pbt-*`` flags, Hydra-style ``agent.*`` overrides), minus the simulator. ``--task`` names the gymnasium task;
without ``--agent`` the member trains that task's packaged agent yaml (Pendulum-v1, and the MuJoCo tasks
HalfCheetah-v5 and Hopper-v5 with the ``[mujoco]`` extra: :mod:`async_pbt_isaaclab.examples.agents`); with
``--agent`` it trains that yaml on ``--task``. Without either, the packaged Pendulum-v1 PPO config.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig, with_task_start_grace
from async_pbt_isaaclab.core.slices import SLICES_FLAG
from async_pbt_isaaclab.examples.agents import DEFAULT_TASK, PACKAGED_AGENTS, packaged_agent_yaml
from async_pbt_isaaclab.member.restart import capture_argv
from async_pbt_isaaclab.pbt_flags import (
    add_population_args,
    add_slices_arg,
    population_flag_origins,
    population_overrides,
)

VEC_ENV_CHOICES = ("gymnasium", "envpool")
"""``--vec-env``: the backends of ``envs.vec_env_registry.VEC_ENV_BACKENDS``."""

DEFAULT_AGENT = PACKAGED_AGENTS[DEFAULT_TASK]
"""The packaged agent yaml (Pendulum-v1, CPU)."""


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="python -m async_pbt.examples.cpu_member",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--task",
        default=None,
        help=f"gymnasium task id (default: the agent yaml's params.config.env_name); without --agent, the task's "
        f"packaged yaml ({', '.join(PACKAGED_AGENTS)})",
    )
    parser.add_argument(
        "--agent",
        default=None,
        help=f"rl_games agent yaml with a pbt: section (default: --task's packaged yaml, else {DEFAULT_AGENT.name})",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the yaml's params.seed + pbt index)")
    parser.add_argument("--max_iterations", "--max-iterations", type=int, default=None, help="rl_games max_epochs")
    parser.add_argument("--num_envs", "--num-envs", type=int, default=None, help="parallel gymnasium envs")
    parser.add_argument("--checkpoint", default=None, help="warm-start checkpoint (ignored once the member has state)")
    parser.add_argument(
        "--vec-env",
        default="gymnasium",
        choices=VEC_ENV_CHOICES,
        help="env backend: gymnasium's vector env, or envpool's C++ pool (the envpool extra; about 2x faster on MuJoCo "
        "here, same episodes and evidence)",
    )
    parser.add_argument(
        "--train-dir",
        default=None,
        help="rl_games train_dir (logs, nn/, TensorBoard summaries); default: WORKSPACE/runs for a "
        "population member, so each experiment's logs stay with its workspace, else ./runs",
    )
    parser.add_argument(
        "--pbt-replay",
        default=None,
        metavar="SCHEDULE",
        help="train one run (no population) that follows a hyperparameter schedule written by "
        "`async-pbt replay WORKSPACE --member K --out SCHEDULE`",
    )
    add_slices_arg(add_population_args(parser))
    return parser


class _Refused(Exception):
    """A problem the user must fix before the member can start: printed as ``error: <message>``, exit code 2."""


def main(argv: list[str] | None = None) -> int:
    capture_argv()
    parser = build_parser()
    args, overrides = parser.parse_with_overrides(argv)
    try:
        args.agent, task_overrides = _agent_for(args)
    except ValueError as exc:
        print(f"error: --task: {exc}", file=sys.stderr)
        return 2
    loaded = _load_config(args, task_overrides, overrides)
    if loaded is None:
        return 2
    agent_cfg, cfg = loaded
    _apply_run_flags(agent_cfg, cfg, args)

    from async_pbt_isaaclab.member.run_to_end import member_exit_code
    from async_pbt_isaaclab.rl_games.runner import train_member

    try:
        task = _checked_task(agent_cfg, args.agent)
        _check_env_keys(task, cfg)
        _check_vec_env(args.vec_env)
        cfg = with_task_start_grace(cfg, *_task_shape(agent_cfg, task))
        train_dir, cfg = _train_dir(args, cfg)
        extra, cfg = _replay_observers(args, agent_cfg, cfg, train_dir)
    except _Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.pbt_slices != 1:
        return _train_slices(args, agent_cfg, cfg, task, train_dir)

    def register_env() -> None:
        # Imports rl_games' env registry (seconds): train_member calls this once the member is claimed.
        from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv

        register_gym_vecenv(task, args.vec_env)

    return member_exit_code(
        cfg.policy_idx,
        lambda: train_member(
            agent_cfg,
            cfg,
            train_dir=train_dir,
            task=task,
            checkpoint=args.checkpoint,
            extra_observers=extra,
            register_env=register_env,
        ),
    )


def _rollout_problems(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """A searched key that shapes the shared rollout, refused in the words of slices (see core/slices.py)."""
    from async_pbt_isaaclab.core.agent_config import apply_overrides
    from async_pbt_isaaclab.core.slices import rollout_key_problems

    try:
        merged = apply_overrides(load_yaml(args.agent), [*population_overrides(args), *overrides])
    except ConfigError:
        return []  # the config reading below says what is wrong
    return rollout_key_problems(merged, args.pbt_slices)


def _train_slices(
    args: argparse.Namespace, agent_cfg: dict[str, Any], cfg: PopulationConfig, task: str, train_dir: str
) -> int:
    """``--pbt-slices M``: members ``--pbt-index .. +M-1`` in this process, on one gymnasium vec-env of M x num_envs."""
    from async_pbt_isaaclab.core.slices import slice_layout
    from async_pbt_isaaclab.envs.slice_threads import slices_exit_code
    from async_pbt_isaaclab.rl_games.slices import check_slices, train_slices

    rl_cfg = agent_cfg["params"]["config"]
    try:
        if not cfg.enabled:
            raise ValueError(f"{SLICES_FLAG} {args.pbt_slices}: slices are population members; give --pbt-workspace")
        layout = slice_layout(cfg.policy_idx, args.pbt_slices, cfg.num_policies, int(rl_cfg["num_actors"]))
        problems = check_slices(cfg, layout.count, agent_cfg)
        if problems:
            raise ValueError("; ".join(problems))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env_config = dict(rl_cfg.get("env_config") or {})
    # The process's seed (the first member's, see _apply_run_flags): each slice's agent adds its slot to it.
    env_config.setdefault("seed", int(agent_cfg["params"].get("seed", 0) or 0))

    def make_env(num_envs: int) -> Any:
        from async_pbt_isaaclab.envs.vec_env_registry import vec_env_class

        return vec_env_class(args.vec_env)(task, num_envs, **env_config)

    return slices_exit_code(
        layout,
        lambda: train_slices(
            agent_cfg, cfg, layout, make_env, train_dir=train_dir, task=task, checkpoint=args.checkpoint
        ),
    )


def _agent_for(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The agent yaml to load and the overrides ``--task`` adds (``ValueError`` for a task with no packaged yaml
    when ``--agent`` is not given)."""
    if args.agent is not None:
        return args.agent, ([f"agent.params.config.env_name={args.task}"] if args.task else [])
    return str(packaged_agent_yaml(args.task or DEFAULT_TASK)), []


def _apply_run_flags(agent_cfg: dict[str, Any], cfg: PopulationConfig, args: argparse.Namespace) -> None:
    """``--seed``, ``--max_iterations`` and ``--num_envs`` into the agent config; members get distinct seeds."""
    rl_cfg = agent_cfg["params"]["config"]
    if args.seed is not None:
        agent_cfg["params"]["seed"] = args.seed
    elif cfg.enabled:
        # Members must not share a seed, or the population starts as N copies of one run.
        agent_cfg["params"]["seed"] = int(agent_cfg["params"].get("seed", 0)) + cfg.policy_idx
    if args.max_iterations is not None:
        rl_cfg["max_epochs"] = args.max_iterations
    if args.num_envs is not None:
        rl_cfg["num_actors"] = args.num_envs


def _checked_task(agent_cfg: dict[str, Any], source: str) -> str:
    """The gymnasium task the agent trains on, once its exploration network settings are checked."""
    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
    from async_pbt_isaaclab.rl_games.exploration_config import validate_exploration_config

    register_bounded_exploration()
    try:
        validate_exploration_config(agent_cfg)
    except ValueError as exc:
        raise _Refused(f"{source}: {exc}") from None
    import gymnasium

    from async_pbt_isaaclab.envs.gym_vec_env import gym_id_for, missing_task_module

    try:
        task = gym_id_for(agent_cfg)
    except (KeyError, gymnasium.error.UnregisteredEnv) as exc:
        why = "is missing" if isinstance(exc, KeyError) else str(exc)
        raise _Refused(f"{source}: params.config.env_name {why} (the gymnasium task to train on)") from None
    missing = missing_task_module(task)
    if missing:
        hint = " (pip install 'async-pbt-isaaclab[mujoco]')" if missing == "mujoco" else ""
        raise _Refused(f"task {task} needs the Python package {missing!r}, which is not installed{hint}")
    return task


def _load_config(
    args: argparse.Namespace, task_overrides: list[str], overrides: list[str]
) -> tuple[dict[str, Any], PopulationConfig] | None:
    """The agent config with every override applied and its population config; ``None`` after printing why not."""
    problems = _rollout_problems(args, [*task_overrides, *overrides]) if args.pbt_slices != 1 else []
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return None
    try:
        return load_population_config(
            load_yaml(args.agent),
            [*task_overrides, *population_overrides(args), *overrides],
            source=args.agent,
            origins=population_flag_origins(args),
        )
    except ConfigError as exc:
        where = exc.source or args.agent
        for problem in exc.problems:
            print(f"error: {where}: {problem}", file=sys.stderr)
        return None


def _check_env_keys(task: str, cfg: PopulationConfig) -> None:
    """Searched env values (``env.<name>``) the task's constructor does not take: one line each, before training."""
    from async_pbt_isaaclab.envs.env_parameters import env_key_problems

    problems = env_key_problems(task, cfg.mutation)
    if problems:
        raise _Refused("; ".join(problems))


def _check_vec_env(backend: str) -> None:
    """``--vec-env envpool`` without envpool installed: one line naming the extra."""
    if backend == "envpool":
        from async_pbt_isaaclab.envs.envpool_vec_env import missing_envpool

        why = missing_envpool()
        if why:
            raise _Refused(why)


def _task_shape(agent_cfg: dict[str, Any], task: str) -> tuple[int | None, int | None]:
    """Envs per member and the task's episode length (``env_config.max_episode_steps``, else the gymnasium spec's),
    from which ``start_grace_frames: -1`` is resolved (``core.config.task_start_grace``)."""
    import gymnasium

    rl_cfg = agent_cfg["params"]["config"]
    steps = (rl_cfg.get("env_config") or {}).get("max_episode_steps") or gymnasium.spec(task).max_episode_steps
    envs = rl_cfg.get("num_actors")
    return (int(envs) if isinstance(envs, int) else None), (int(steps) if isinstance(steps, int) else None)


def _train_dir(args: argparse.Namespace, cfg: PopulationConfig) -> tuple[str, PopulationConfig]:
    """rl_games' train dir, and the config with its workspace made absolute where the logs go inside it."""
    if args.train_dir is not None:
        return os.path.abspath(args.train_dir), cfg
    if cfg.enabled:
        # The workspace resolves where it always did (relative to ./runs); the logs go inside it, whatever the
        # current folder, so two experiments never write into one TensorBoard run.
        workspace = cfg.workspace_path(os.path.abspath("runs"))
        return str(workspace / "runs"), dataclasses.replace(cfg, workspace=str(workspace))
    return os.path.abspath("runs"), cfg


def _replay_observers(
    args: argparse.Namespace, agent_cfg: dict[str, Any], cfg: PopulationConfig, train_dir: str
) -> tuple[list[Any], PopulationConfig]:
    """With ``--pbt-replay``: the observers that follow the schedule, and the config of one plain run."""
    if not args.pbt_replay:
        return [], cfg
    from rl_games.common.algo_observer import IsaacAlgoObserver

    from async_pbt_isaaclab.core.state.schedule import ScheduleError
    from async_pbt_isaaclab.core.workspace.state_files import load_replay_schedule
    from async_pbt_isaaclab.rl_games.schedule_replay import start_replay

    try:
        replay = start_replay(agent_cfg, load_replay_schedule(args.pbt_replay), args.pbt_replay)
    except ScheduleError as exc:
        raise _Refused(f"--pbt-replay: {exc}") from None
    # A replay is one plain run: no workspace, no selection; its own run folder beside the members'.
    agent_cfg["params"]["config"]["train_dir"] = train_dir
    return [IsaacAlgoObserver(), replay], dataclasses.replace(cfg, enabled=False)


if __name__ == "__main__":
    sys.exit(main())
