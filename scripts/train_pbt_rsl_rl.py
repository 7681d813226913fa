#!/usr/bin/env python
"""Train one member of an asynchronous PBT population with rsl_rl on an Isaac Lab task.

Isaac Lab's rsl_rl training entry (2.3: ``scripts/reinforcement_learning/rsl_rl/train.py``; 3.0: the ``rsl_rl``
backend of its train entry point, ``isaaclab_rl/entrypoints/backends/train_rsl_rl.py``) with the population flags
of :func:`async_pbt_isaaclab.pbt_flags.add_population_args`, the same flags and workspace as ``train_pbt.py``'s
rl_games members::

    ./isaaclab.sh -p scripts/train_pbt_rsl_rl.py --task Isaac-Velocity-Flat-Anymal-D-v0 --headless \\
        --pbt-workspace /shared/pbt/anymal --pbt-members 8 --pbt-index 3 \\
        agent.pbt.mutation.desired_kl=mutate_float agent.pbt.mutation.entropy_coef=mutate_float

The task's ``rsl_rl_cfg_entry_point`` (``RslRlOnPolicyRunnerCfg``) is loaded with Isaac Lab's Hydra overrides
(``agent.algorithm.gamma=0.98``); ``agent.pbt.*`` overrides make the population section, which an rsl_rl runner
config does not have. What the member searches and how (``desired_kl`` under the adaptive schedule,
``learning_rate`` refused there) is in docs/rsl_rl.md. The env is wrapped in
:class:`~async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv` (per-episode evidence) inside Isaac Lab's
``RslRlVecEnvWrapper``; the runner is rsl_rl's ``OnPolicyRunner`` built from the config's ``to_dict()``, as the
release builds it, and its checkpoints (``model_<it>.pt`` under ``logs/rsl_rl/<experiment>/<experiment>_pbt_<NNN>``)
play with Isaac Lab's own rsl_rl play script. The member's seed is ``seed + pbt_index``. An exploit restart re-runs
this command (captured before ``AppLauncher`` or Hydra rewrite ``sys.argv``) with ``--checkpoint`` and the new
values as ``agent.algorithm.*`` overrides. Without the population flags this script refuses to run: plain training
is Isaac Lab's own script. On 3.0 there is no ``--headless``: drop the flag there.

``--distributed`` makes the member a group of ranks under ``torchrun`` (docs/distributed.md), as
``train_pbt.py --distributed`` does: each rank placed and seeded as the release's own rsl_rl script places it (2.x
``cuda:<local rank>`` and ``seed + local rank``, 3.0 the device ``launch_simulation`` resolved and ``seed + rank``,
after the member's ``seed + pbt_index``); rank 0 is the member, the others follow it (``rsl_rl/group.py``) with their
env's folder ``<run>/rank_<r>``. What a group cannot do is refused in one line each: exploits by restart, searched env
keys, ``--pbt-slices``.

``--pbt-slices M`` trains members ``--pbt-index .. +M-1`` in this process, each its own runner on ``--num_envs`` envs
of one simulator of ``M x --num_envs`` (``rsl_rl/slices.py``, docs/rsl_rl.md); exploits between them are memory
copies, and only searched reward term weights may differ between them among the env's values.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import Any, Sequence

from async_pbt_isaaclab.member.restart import capture_argv

# First thing, before anything can rewrite sys.argv (sys.orig_argv is read; the call only pins it).
capture_argv()

from async_pbt_isaaclab.envs.isaaclab import (  # noqa: E402 - torch-free; Isaac Lab is imported lazily
    IsaacLabHooks,
    ScriptHooks,
    UnsupportedIsaacLab,
    parse_script_args,
)
from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api  # noqa: E402
from async_pbt_isaaclab.envs.isaaclab.api import Session  # noqa: E402
from async_pbt_isaaclab.exit_codes import EXIT_USAGE  # noqa: E402
from async_pbt_isaaclab.pbt_flags import (  # noqa: E402
    add_population_args,
    add_slices_arg,
    population_flag_origins,
    population_overrides,
)

PROG = "scripts/train_pbt_rsl_rl.py"


def build_parser() -> argparse.ArgumentParser:
    """Isaac Lab's rsl_rl training flags plus the population flags (without the AppLauncher ones)."""
    parser = argparse.ArgumentParser(
        description="Train an RL agent with rsl_rl as a member of an asynchronous PBT population.",
        epilog="Remaining KEY=VALUE arguments are Hydra overrides (env.*, agent.*, agent.pbt.*).",
    )
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=200, help="Length of the recorded video (in steps).")
    parser.add_argument("--video_interval", type=int, default=2000, help="Interval between video recordings.")
    parser.add_argument("--num_envs", "--num-envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument(
        "--agent", type=str, default="rsl_rl_cfg_entry_point", help="Name of the RL agent configuration entry point."
    )
    parser.add_argument("--seed", type=int, default=None, help="Seed (-1: random); members add their --pbt-index.")
    parser.add_argument("--max_iterations", "--max-iterations", type=int, default=None, help="Training iterations.")
    parser.add_argument(
        "--distributed",
        action="store_true",
        default=False,
        help="Run training with multiple GPUs or nodes (under torchrun; the member is a group of ranks, rank 0 the "
        "member: docs/distributed.md).",
    )
    parser.add_argument(
        "--checkpoint", type=str, default=None, help="Warm-start checkpoint (a member that ran resumes its own)."
    )
    parser.add_argument("--experiment_name", type=str, default=None, help="Experiment folder under logs/rsl_rl.")
    parser.add_argument("--export_io_descriptors", action="store_true", default=False, help=argparse.SUPPRESS)
    add_slices_arg(add_population_args(parser))
    return parser


def main(argv: Sequence[str] | None = None, hooks: ScriptHooks | None = None) -> int:
    """Parse the command line and train one member. Returns the exit code (2: usage or configuration error)."""
    capture_argv()
    hooks = hooks or IsaacLabHooks()
    try:
        args, hydra_args = parse_script_args(build_parser(), hooks, argv, script="train")
        from async_pbt_isaaclab.rsl_rl.release import installed_version, line_of

        line_of(installed_version())
    except (ImportError, UnsupportedIsaacLab, RuntimeError) as exc:  # UnsupportedRslRl is a RuntimeError
        print(f"error: {PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    population = [a for a in hydra_args if a.split("=", 1)[0].lstrip("+").startswith("agent.pbt.")]
    if not args.task:
        print("error: --task is required (e.g. --task Isaac-Cartpole-v0)", file=sys.stderr)
        return EXIT_USAGE
    if args.pbt_workspace is None and args.pbt_num_policies is None and not population:
        print(f"error: {PROG} trains population members: give --pbt-workspace and --pbt-members", file=sys.stderr)
        return EXIT_USAGE
    refused = isaaclab_api.distributed_device_problem(args)
    if refused:  # before the simulator starts (3.0 binds the rank's GPU at launch)
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    hydra = [a for a in hydra_args if a not in population]  # an rsl_rl runner config has no pbt section
    with hooks.open_session(args, args.task, args.agent, hydra) as session:
        return _train(args, session, hooks, population)


def _member_settings(args: argparse.Namespace, session: Session, population: list[str]) -> tuple[Any, dict, Any]:
    """The runner config with the command line applied, as the release's script applies it, then the member's
    rsl_rl config and population config (``ConfigError``/``ValueError``: one line each). ``--distributed`` places
    this rank and adds its offset to the seed (:func:`_group_placement`)."""
    from async_pbt_isaaclab.core.config import ConfigError
    from async_pbt_isaaclab.envs.isaaclab import rsl_rl as glue
    from async_pbt_isaaclab.envs.isaaclab.env_values import searched_start_values
    from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

    agent_cfg = glue.release_form(session.agent_cfg)
    isaaclab_api.apply_cli_overrides(session, args, session.env_cfg)
    if getattr(args, "device", None) is not None:
        agent_cfg.device = args.device
    if args.max_iterations is not None:
        agent_cfg.max_iterations = args.max_iterations
    if args.experiment_name is not None:
        agent_cfg.experiment_name = args.experiment_name
    if args.seed is not None:
        agent_cfg.seed = random.randint(0, 10000) if args.seed == -1 else args.seed
    rank_seed = _group_placement(args, session, agent_cfg)
    rsl_cfg = glue.member_config(agent_cfg, args.task, session.env_cfg.scene.num_envs)
    rsl_cfg, _, cfg = load_member_config(
        rsl_cfg,
        [*population_overrides(args), *population],
        source=f"{args.task} ({args.agent})",
        origins=population_flag_origins(args),
        env_values=lambda keys: searched_start_values(session.env_cfg, keys),
    )
    problems = isaaclab_api.group_problems(args, cfg) if args.distributed else []
    if problems:
        raise ConfigError([f"--distributed: {p}" for p in problems])
    # Members must not share a seed, or the population starts as N copies of one run (nor a group's ranks).
    rsl_cfg["runner"]["seed"] = session.env_cfg.seed = int(agent_cfg.seed) + cfg.policy_idx + rank_seed
    return agent_cfg, rsl_cfg, cfg


def _group_placement(args: argparse.Namespace, session: Session, agent_cfg: Any) -> int:
    """``--distributed``: this rank's device on the runner and the sim, as the release's rsl_rl script sets them;
    returns the rank's seed offset (0 without ``--distributed``)."""
    if not args.distributed:
        return 0
    offset, device = isaaclab_api.distributed_placement(session, "rsl_rl")
    agent_cfg.device = session.env_cfg.sim.device = device
    return offset


def _train(args: argparse.Namespace, session: Session, hooks: ScriptHooks, population: list[str]) -> int:
    # Everything heavy is imported after the simulator started, as Isaac Lab's scripts do.
    from async_pbt_isaaclab.core.config import ConfigError, objective_term
    from async_pbt_isaaclab.envs.isaaclab import rsl_rl as glue
    from async_pbt_isaaclab.envs.isaaclab.condition import reward_fingerprint
    from async_pbt_isaaclab.envs.isaaclab.env_values import attach_env_values, restart_refused
    from async_pbt_isaaclab.envs.isaaclab.slice_rewards import per_env_reward_weights
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.member.run_to_end import member_exit_code
    from async_pbt_isaaclab.rsl_rl.member import train_member

    try:
        agent_cfg, rsl_cfg, cfg = _member_settings(args, session, population)
    except (ConfigError, ValueError) as exc:
        lines = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
        print("\n".join(f"error: {line}" for line in lines), file=sys.stderr)
        return EXIT_USAGE
    log_root = os.path.abspath(os.path.join("logs", "rsl_rl", agent_cfg.experiment_name))
    print(
        f"[INFO] PBT member {cfg.policy_idx}/{cfg.num_policies}, workspace {cfg.workspace_path(log_root)}, "
        f"seed {rsl_cfg['runner']['seed']}"
    )
    env_cfg = session.env_cfg
    layout = _slices(args, env_cfg, cfg)
    if isinstance(layout, str):
        print(layout, file=sys.stderr)
        return EXIT_USAGE
    run_dir = os.path.join(log_root, f"{agent_cfg.experiment_name}_pbt_{cfg.policy_idx:03d}")
    env_cfg.log_dir = isaaclab_api.rank_folder(args, run_dir)  # a group's other ranks: <run>/rank_<r>
    trigger = lambda step: step % args.video_interval == 0  # noqa: E731
    env = hooks.make_env(session, args.task, env_cfg, args, env_cfg.log_dir, trigger)
    reward_config = reward_fingerprint(env_cfg, searched=cfg.mutation)
    if layout is not None:  # reward term weights per slice; the slices refuse any other env key
        env = per_env_reward_weights(env, cfg.mutation)
    problems = [] if layout is not None else attach_env_values(env, cfg.mutation, restart_refused(cfg))
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        env.close()
        return EXIT_USAGE
    env = attach_summary_source(
        env, SummaryCfg(), objective=objective_term(cfg.objective), task=args.task, reward_config=reward_config
    )
    vec_env = glue.vec_env(env, agent_cfg.clip_actions)
    resume = hooks.resolve_checkpoint(args.checkpoint) if args.checkpoint else None
    if layout is not None:
        return _train_slices(
            layout, rsl_cfg, cfg, vec_env, train_dir=log_root, checkpoint=resume, reward_config=reward_config
        )
    build = glue.runner_factory(vec_env)
    return member_exit_code(
        cfg.policy_idx,
        lambda: train_member(
            rsl_cfg,
            cfg,
            build,
            train_dir=log_root,
            checkpoint=resume,
            override_prefix=glue.HYDRA_PREFIX,
            reward_config=reward_config,
        ),
        vec_env.close,
    )


def _slices(args: argparse.Namespace, env_cfg: Any, cfg: Any) -> Any:
    """``--pbt-slices M``: the members' layout, the env made M times as large (each member keeps ``--num_envs``
    envs); ``None`` without slices; the refusal's lines (a string) when they cannot run."""
    count = int(args.pbt_slices or 1)
    if count == 1:
        return None
    from async_pbt_isaaclab.core.slices import SLICES_FLAG, slice_layout
    from async_pbt_isaaclab.rsl_rl.slices import check_slices

    try:
        layout = slice_layout(cfg.policy_idx, count, cfg.num_policies, int(env_cfg.scene.num_envs))
    except ValueError as exc:
        return f"error: {exc}"
    problems = check_slices(cfg, count)
    if getattr(args, "video", False):
        problems.append(f"--video: {SLICES_FLAG} {count} records one video of the simulator all slices share")
    if problems:
        return "\n".join(f"error: {p}" for p in problems)
    env_cfg.scene.num_envs = layout.num_envs
    return layout


def _train_slices(layout: Any, rsl_cfg: dict, cfg: Any, vec_env: Any, **options: Any) -> int:
    """Members ``layout.members`` in this process, each on its slice of ``vec_env`` (one simulator), each runner
    built as the release builds it; ``options``: ``train_slices``' keywords (which closes the env after them)."""
    from async_pbt_isaaclab.envs.isaaclab import rsl_rl as glue
    from async_pbt_isaaclab.envs.slice_threads import slices_exit_code
    from async_pbt_isaaclab.rsl_rl.slices import train_slices

    print(
        f"[INFO] {layout.count} members ({layout.first}..{layout.first + layout.count - 1}) on one simulator of "
        f"{layout.num_envs} envs, {layout.envs_per_slice} each"
    )

    def build(config: dict, log_dir: str, env: Any) -> Any:
        return glue.runner_factory(env)(config, log_dir)

    options["override_prefix"] = glue.HYDRA_PREFIX  # Hydra's names of the runner's keys, as for a process member
    return slices_exit_code(layout, lambda: train_slices(rsl_cfg, cfg, layout, lambda n: vec_env, build, **options))


if __name__ == "__main__":
    sys.exit(main())
