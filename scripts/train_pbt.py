#!/usr/bin/env python
# Portions derived from Isaac Lab (scripts/reinforcement_learning/rl_games/), Copyright (c) 2022-2025,
# The Isaac Lab Project Developers, SPDX-License-Identifier: BSD-3-Clause; license in THIRD_PARTY_NOTICES.md.
"""Train one member of an asynchronous PBT population with RL-Games on an Isaac Lab task.

Isaac Lab's ``scripts/reinforcement_learning/rl_games/train.py`` (same flags, same Hydra overrides, same log
folders) plus the population flags of :func:`async_pbt_isaaclab.pbt_flags.add_population_args`::

    ./isaaclab.sh -p scripts/train_pbt.py --task AsyncPbt-Repose-Cube-Allegro-Direct-v0 --headless \\
        --pbt-workspace /shared/pbt/allegro --pbt-members 8 --pbt-index 3

Isaac Lab's own PBT overrides work unchanged (``agent.pbt.enabled=True agent.pbt.num_policies=8
agent.pbt.policy_idx=3 agent.pbt.workspace=...``); a ``--pbt-*`` flag and the matching ``agent.pbt.*`` override
mean the same thing. Without ``--pbt-workspace``/``--pbt-members``/``agent.pbt.enabled=true`` this is plain Isaac Lab
training.

What differs from Isaac Lab's script, and why:

* the command line is captured before ``AppLauncher`` or Hydra rewrite ``sys.argv``, so an exploit restart
  (``os.execv`` of this same command with a new ``--checkpoint`` and the mutated ``agent.params.config.*``
  overrides appended) keeps every flag;
* with the population enabled the env is wrapped in
  :class:`~async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv` inside
  ``RlGamesVecEnvWrapper`` (per-episode evidence), the member's seed is ``seed + pbt_index`` (members must not be N
  copies of one run), and the run's log folder is the member's own, kept across restarts
  (``logs/rl_games/<name>/<name>_pbt_<NNN>``);
* ``--checkpoint`` warm-starts a member that never ran; afterwards the member resumes from its own checkpoints,
  loaded through the safe (``weights_only``) loader rather than rl_games' full-pickle ``restore``;
* ``--pbt-replay SCHEDULE`` trains one plain run (no population) that follows a member's hyperparameter schedule
  (``async-pbt replay WS --member K --out SCHEDULE``), in ``logs/rl_games/<name>/<name>_replay_<K>``, as the CPU
  member's flag of the same name does;
* ``--distributed`` with the population enabled makes the member a group of ranks under ``torchrun``
  (docs/distributed.md): each rank is placed, seeded (``seed + pbt_index + rank``) and set to ``multi_gpu`` as
  Isaac Lab's script places it; rank 0 is the member (it publishes, decides and writes), the others follow it
  (``rl_games/group.py``) and write their params in ``<run>/rank_<r>/``. What a group cannot do is refused in one
  line: exploits by restart, searched env keys, ``--pbt-slices``.

The simulator-facing calls go through :class:`~async_pbt_isaaclab.envs.isaaclab.ScriptHooks`; what differs between
Isaac Lab 2.x and 3.0 (flags, launch order, config resolution) is in :mod:`async_pbt_isaaclab.envs.isaaclab.api`.
On 3.0 there is no ``--headless`` (it runs headless by default): drop the flag there.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import datetime
from typing import Any, Sequence

from async_pbt_isaaclab.member.restart import capture_argv

# First thing, before anything can rewrite sys.argv (sys.orig_argv is read; the call only pins it).
capture_argv()

from async_pbt_isaaclab.core.slices import SLICES_FLAG  # noqa: E402

# torch-free; Isaac Lab is imported lazily inside the hooks
from async_pbt_isaaclab.envs.isaaclab import (  # noqa: E402
    IsaacLabHooks,
    ScriptHooks,
    UnsupportedIsaacLab,
    parse_script_args,
    plain_config,
)
from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api  # noqa: E402
from async_pbt_isaaclab.envs.isaaclab.api import Session  # noqa: E402
from async_pbt_isaaclab.pbt_flags import (  # noqa: E402
    add_population_args,
    add_slices_arg,
    population_flag_origins,
    population_overrides,
)

LAUNCHER_NOTE = (
    "Simulator flags (--headless, --device, --enable_cameras, --livestream, ...) are added by Isaac Lab's "
    "AppLauncher and appear here when Isaac Lab is installed. Remaining KEY=VALUE arguments are Hydra overrides "
    "(env.*, agent.*, e.g. agent.params.config.learning_rate=3e-4 or agent.pbt.num_policies=8)."
)


def _str2bool(text: str) -> bool:
    lowered = str(text).lower()
    if lowered in ("1", "true", "t", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """Isaac Lab's RL-Games training flags plus the population flags (without the AppLauncher ones)."""
    parser = argparse.ArgumentParser(
        description="Train an RL agent with RL-Games as a member of an asynchronous PBT population.",
        epilog=LAUNCHER_NOTE,
    )
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=200, help="Length of the recorded video (in steps).")
    parser.add_argument(
        "--video_interval", type=int, default=2000, help="Interval between video recordings (in steps)."
    )
    parser.add_argument("--num_envs", "--num-envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument(
        "--agent", type=str, default="rl_games_cfg_entry_point", help="Name of the RL agent configuration entry point."
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="Seed used for the environment (-1: random); members add their --pbt-index.",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        default=False,
        help="Run training with multiple GPUs or nodes (under torchrun; a member is then a group of ranks, rank 0 "
        "the member: docs/distributed.md).",
    )
    parser.add_argument(
        "--checkpoint",
        type=str,
        default=None,
        help="Path to model checkpoint (a member that already ran resumes from its own instead).",
    )
    parser.add_argument("--sigma", type=str, default=None, help="The policy's initial standard deviation.")
    parser.add_argument(
        "--max_iterations", "--max-iterations", type=int, default=None, help="RL Policy training iterations."
    )
    parser.add_argument("--wandb-project-name", type=str, default=None, help="the wandb's project name")
    parser.add_argument("--wandb-entity", type=str, default=None, help="the entity (team) of wandb's project")
    parser.add_argument("--wandb-name", type=str, default=None, help="the name of wandb's run")
    parser.add_argument(
        "--track",
        type=_str2bool,
        default=False,
        nargs="?",
        const=True,
        help="if toggled, this experiment will be tracked with Weights and Biases",
    )
    parser.add_argument(
        "--export_io_descriptors",
        action="store_true",
        default=False,
        help="Export the IO descriptors of a manager-based task.",
    )
    parser.add_argument(
        "--ray-proc-id",
        "-rid",
        type=int,
        default=None,
        help="Automatically configured by Isaac Lab's Ray integration, otherwise None.",
    )
    parser.add_argument(
        "--pbt-replay",
        type=str,
        default=None,
        metavar="SCHEDULE",
        help="Train one run (no population) that follows a hyperparameter schedule written by "
        "`async-pbt replay WORKSPACE --member K --out SCHEDULE`.",
    )
    add_slices_arg(add_population_args(parser))
    return parser


def main(argv: Sequence[str] | None = None, hooks: ScriptHooks | None = None) -> int:
    """Parse the command line and train. Returns the process exit code (2: usage or configuration error)."""
    capture_argv()
    hooks = hooks or IsaacLabHooks()
    try:
        args, hydra_args = parse_script_args(build_parser(), hooks, argv, script="train")  # --help: no Isaac Lab
    except ImportError as exc:
        print(
            f"error: scripts/train_pbt.py runs Isaac Lab tasks: {exc}\n"
            f"  (a CPU population without a simulator: python -m async_pbt_isaaclab.examples.cpu_member --help)",
            file=sys.stderr,
        )
        return 2
    except UnsupportedIsaacLab as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run(args, hydra_args, hooks)


def run(args: argparse.Namespace, hydra_args: Sequence[str], hooks: ScriptHooks | None = None) -> int:
    """Launch the simulator, build the env and train (one member, or a plain run with the population disabled)."""
    hooks = hooks or IsaacLabHooks()
    if not args.task:
        print("error: --task is required (e.g. --task AsyncPbt-Cartpole-Direct-v0)", file=sys.stderr)
        return 2
    refused = isaaclab_api.distributed_device_problem(args)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    if getattr(args, "pbt_replay", None):
        from async_pbt_isaaclab.core.state.schedule import ScheduleError
        from async_pbt_isaaclab.core.workspace.state_files import load_replay_schedule

        try:  # a bad schedule is refused in a second, before the simulator starts
            args.pbt_replay_schedule = load_replay_schedule(args.pbt_replay)
        except ScheduleError as exc:
            print(f"error: --pbt-replay: {exc}", file=sys.stderr)
            return 2
    if args.video or getattr(args, "capture_env_sensors", 0):
        args.enable_cameras = True  # always enable cameras to record video (AppLauncher flag)
    with hooks.open_session(args, args.task, args.agent, list(hydra_args)) as session:
        return _train(args, session, hooks)


class _Refused(Exception):
    """A setting the member cannot run with, found after the simulator started: printed as it is, exit code 2."""


def _train(args: argparse.Namespace, session: Session, hooks: ScriptHooks) -> int:
    # Everything heavy is imported after the simulator started, as Isaac Lab's scripts do.
    from async_pbt_isaaclab.core.config import ConfigError, objective_term, with_task_start_grace
    from async_pbt_isaaclab.envs.isaaclab import register_rl_games_env, rl_games_wrapper_options
    from async_pbt_isaaclab.envs.isaaclab.condition import reward_fingerprint
    from async_pbt_isaaclab.envs.isaaclab.env_values import attach_env_values, restart_refused
    from async_pbt_isaaclab.envs.isaaclab.slice_rewards import per_env_reward_weights
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.rl_games.runner import train_member

    env_cfg = session.env_cfg
    try:
        agent_cfg, cfg, replay, summary = _population_config(args, plain_config(session.agent_cfg), env_cfg)
    except (ConfigError, ValueError) as exc:  # ScheduleError is a ValueError naming the schedule file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        seed, resume_path, sigma = _run_settings(args, session, hooks, agent_cfg, cfg)
        slices = _slices(args, env_cfg, agent_cfg, cfg)
    except _Refused as exc:
        print(exc, file=sys.stderr)
        return 2
    log_root, log_dir = _log_folders(args, agent_cfg, cfg, seed)
    log_dir = isaaclab_api.rank_folder(args, log_dir)
    _dump_configs(hooks, log_dir, env_cfg, agent_cfg)
    if hasattr(env_cfg, "log_dir"):
        env_cfg.log_dir = log_dir  # where the env writes its own files (Isaac Lab sets it too)

    # -- the env: Isaac Lab env [-> RecordVideo] [-> PbtIsaacLabEnv] -> RlGamesVecEnvWrapper
    env = hooks.make_env(session, args.task, env_cfg, args, log_dir, lambda step: step % args.video_interval == 0)
    reward_config = reward_fingerprint(env_cfg, searched=cfg.mutation if cfg.enabled else ())
    if cfg.enabled and slices > 1:  # reward term weights per slice; the slices refuse any other env key
        env = per_env_reward_weights(env, cfg.mutation)
    if cfg.enabled:
        problems = [] if slices > 1 else attach_env_values(env, cfg.mutation, restart_refused(cfg))
        if problems:
            print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
            env.close()
            return 2
        try:
            env = attach_summary_source(
                env, summary, objective=objective_term(cfg.objective), task=args.task, reward_config=reward_config
            )
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            env.close()
            return 2
    rl_device, clip_obs, clip_actions, extra = rl_games_wrapper_options(agent_cfg)
    vec_env = hooks.vec_env_wrapper(env, rl_device, clip_obs, clip_actions, **extra)
    # start_grace_frames: -1 from the task: envs per member and the episode length (core.config.task_start_grace).
    cfg = with_task_start_grace(
        cfg, int(vec_env.unwrapped.num_envs) // slices, getattr(vec_env.unwrapped, "max_episode_length", None)
    )
    if slices > 1:
        return _train_slices(
            args, slices, vec_env, env_cfg, agent_cfg, cfg, log_root, resume_path, sigma, reward_config
        )
    register_rl_games_env(vec_env, hooks)
    agent_cfg["params"]["config"]["num_actors"] = vec_env.unwrapped.num_envs

    observers = _observers(args, env_cfg, agent_cfg, cfg, log_root, replay)
    if getattr(args, "deterministic", False):  # Isaac Lab 3.0's flag: deterministic torch kernels too
        from isaaclab.utils.seed import configure_seed

        configure_seed(seed, torch_deterministic=True)
    start = time.time()
    train_member(
        agent_cfg,
        cfg,
        train_dir=log_root,
        task=args.task,
        checkpoint=resume_path,
        sigma=sigma,
        extra_observers=observers,
        reward_config=reward_config,
    )
    print(f"Training time: {round(time.time() - start, 2)} seconds")
    vec_env.close()
    return 0


def _slices(args: argparse.Namespace, env_cfg: Any, agent_cfg: dict[str, Any], cfg: Any) -> int:
    """``--pbt-slices M``: checked, and the env made M times as large (each member keeps ``--num_envs`` envs)."""
    count = int(getattr(args, "pbt_slices", 1) or 1)
    if count == 1:
        return 1
    from async_pbt_isaaclab.core.slices import slice_layout
    from async_pbt_isaaclab.rl_games.slices import check_slices

    if not cfg.enabled:
        raise _Refused(f"error: {SLICES_FLAG} {count}: slices are population members; give --pbt-workspace")
    if getattr(args, "pbt_replay", None) or args.track:
        raise _Refused(f"error: {SLICES_FLAG} {count} cannot be combined with --pbt-replay or --track")
    scene = getattr(env_cfg, "scene", None)
    if scene is None or not isinstance(getattr(scene, "num_envs", None), int):
        raise _Refused(f"error: {SLICES_FLAG} {count}: the task's env config has no scene.num_envs to enlarge")
    try:
        slice_layout(cfg.policy_idx, count, cfg.num_policies, scene.num_envs)
    except ValueError as exc:
        raise _Refused(f"error: {exc}") from None
    problems = check_slices(cfg, count, agent_cfg)
    if problems:
        raise _Refused("\n".join(f"error: {p}" for p in problems))
    scene.num_envs *= count
    return count


def _train_slices(
    args: argparse.Namespace,
    count: int,
    vec_env: Any,
    env_cfg: Any,
    agent_cfg: dict[str, Any],
    cfg: Any,
    log_root: str,
    resume_path: str | None,
    sigma: float | None,
    reward_config: str,
) -> int:
    """Members ``--pbt-index .. +count-1`` in this process, each on its slice of ``vec_env`` (one simulator)."""
    from dataclasses import replace

    from async_pbt_isaaclab.core.slices import slice_layout
    from async_pbt_isaaclab.envs.slice_threads import MembersStuck, MemberThreadError, end_process
    from async_pbt_isaaclab.rl_games.slices import train_slices

    num_envs = int(vec_env.unwrapped.num_envs)
    layout = slice_layout(cfg.policy_idx, count, cfg.num_policies, num_envs // count)
    agent_cfg["params"]["config"]["num_actors"] = layout.envs_per_slice
    print(
        f"[INFO] {count} members ({layout.first}..{layout.first + count - 1}) on one simulator of {num_envs} envs, "
        f"{layout.envs_per_slice} each"
    )
    start = time.time()
    try:
        train_slices(
            agent_cfg,
            cfg,
            layout,
            lambda n: vec_env,
            train_dir=log_root,
            task=args.task,
            checkpoint=resume_path,
            sigma=sigma,
            reward_config=reward_config,
            extra_observers=lambda m: _observers(args, env_cfg, agent_cfg, replace(cfg, policy_idx=m), log_root, None),
        )
    except MemberThreadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except MembersStuck as exc:
        end_process(exc)  # before the simulator closes: a stuck member thread could keep that waiting too
    print(f"Training time: {round(time.time() - start, 2)} seconds")
    return 0


def _population_config(
    args: argparse.Namespace, agent_cfg: dict[str, Any], env_cfg: Any
) -> tuple[dict[str, Any], Any, Any, Any]:
    """The agent config with the population flags applied, its population config, the ``--pbt-replay`` observer
    (or ``None``) and the ``pbt_summary:`` section (``None`` without the population). A bad setting raises
    ``ConfigError`` or ``ValueError``, one line for the user. Searched env keys start from ``env_cfg``'s values."""
    from async_pbt_isaaclab.core.agent_config import load_population_config
    from async_pbt_isaaclab.envs.isaaclab.env_values import searched_start_values
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
    from async_pbt_isaaclab.rl_games.exploration_config import validate_exploration_config

    if int(getattr(args, "pbt_slices", 1) or 1) != 1:
        from async_pbt_isaaclab.core.agent_config import apply_overrides
        from async_pbt_isaaclab.core.slices import rollout_key_problems

        # A searched key that shapes the shared rollout, refused in the words of slices before the config's own
        # (which does not know this process hosts several members).
        problems = rollout_key_problems(apply_overrides(agent_cfg, population_overrides(args)), args.pbt_slices)
        if problems:
            raise ValueError("; ".join(problems))
    agent_cfg, cfg = load_population_config(
        agent_cfg,
        population_overrides(args),
        source=f"{args.task} ({args.agent})",
        origins=population_flag_origins(args),
        env_values=lambda keys: searched_start_values(env_cfg, keys),
    )
    replay = None
    if getattr(args, "pbt_replay", None):
        from dataclasses import replace

        from async_pbt_isaaclab.rl_games.schedule_replay import start_replay

        # A replay is one plain run that follows the schedule (no workspace, no selection), in its own run
        # folder <name>_replay_<NNN>, as the CPU member's --pbt-replay.
        cfg = replace(cfg, enabled=False)
        replay = start_replay(agent_cfg, args.pbt_replay_schedule, args.pbt_replay)
    summary = SummaryCfg.from_agent_cfg(agent_cfg) if cfg.enabled else None
    register_bounded_exploration()
    validate_exploration_config(agent_cfg)  # a bad log_std_bounds is one line here, not a build traceback
    return agent_cfg, cfg, replay, summary


def _run_settings(
    args: argparse.Namespace, session: Session, hooks: ScriptHooks, agent_cfg: dict[str, Any], cfg: Any
) -> tuple[int, str | None, float | None]:
    """The CLI overrides the installed release's own script applies, then ``(seed, checkpoint to start from,
    initial sigma)``: a member adds its index to the seed; ``--distributed`` places the run on its rank's GPU and
    adds the rank to the seed (a member's group: :func:`~async_pbt_isaaclab.envs.isaaclab.api.group_problems` first)."""
    env_cfg, params = session.env_cfg, agent_cfg["params"]
    rl_cfg = params["config"]
    isaaclab_api.apply_cli_overrides(session, args, env_cfg)
    if args.seed == -1:
        args.seed = random.randint(0, 10000)
    seed = int(args.seed if args.seed is not None else params.get("seed", 42))
    if cfg.enabled:
        # Members must not share a seed, or the population starts as N copies of one run.
        seed += cfg.policy_idx
    if args.max_iterations is not None:
        rl_cfg["max_epochs"] = args.max_iterations
    resume_path = hooks.resolve_checkpoint(args.checkpoint) if args.checkpoint else None
    if resume_path and not cfg.enabled:
        params["load_checkpoint"] = True
        params["load_path"] = resume_path
        print(f"[INFO]: Loading model checkpoint from: {resume_path}")
    sigma = float(args.sigma) if args.sigma is not None else None
    if args.distributed:
        problems = isaaclab_api.group_problems(args, cfg) if cfg.enabled else []
        if problems:
            raise _Refused("\n".join(f"error: --distributed: {p}" for p in problems))
        rank, local = isaaclab_api.distributed_placement(session)
        seed += rank
        rl_cfg["device"] = rl_cfg["device_name"] = local
        rl_cfg["multi_gpu"] = True
        env_cfg.sim.device = local
    params["seed"] = seed
    # Certain randomisations happen when the env is built: seed the env config too.
    if hasattr(env_cfg, "seed"):
        env_cfg.seed = seed
    return seed, resume_path, sigma


def _log_folders(args: argparse.Namespace, agent_cfg: dict[str, Any], cfg: Any, seed: int) -> tuple[str, str]:
    """``(log root, run folder)``: logs/rl_games/<name>/<run>, the member's run kept across restarts."""
    rl_cfg = agent_cfg["params"]["config"]
    config_name = rl_cfg["name"]
    log_root = os.path.join("logs", "rl_games", config_name)
    pbt_directory = str((agent_cfg.get("pbt") or {}).get("directory", "."))
    # Isaac Lab's pbt.directory roots the log folders elsewhere (e.g. on a shared filesystem).
    log_root = os.path.abspath(log_root if pbt_directory == "." else os.path.join(pbt_directory, log_root))
    if cfg.enabled:
        run_name = member_experiment_name(rl_cfg, cfg, log_root)
    else:
        run_name = (
            rl_cfg.get("full_experiment_name")
            or getattr(args, "run_timestamp", None)
            or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        )
    rl_cfg["train_dir"] = log_root
    rl_cfg["full_experiment_name"] = run_name
    print(f"[INFO] Logging experiment in directory: {log_root}")
    if cfg.enabled:
        print(
            f"[INFO] PBT member {cfg.policy_idx}/{cfg.num_policies}, workspace {cfg.workspace_path(log_root)}, "
            f"objective {cfg.objective!r}, seed {seed}"
        )
    return log_root, os.path.join(log_root, run_name)


def _observers(
    args: argparse.Namespace, env_cfg: Any, agent_cfg: dict[str, Any], cfg: Any, log_root: str, replay: Any
) -> list[Any]:
    """The rl_games observers beside the member's own: Isaac Lab's, the replay's, W&B's with ``--track``."""
    from rl_games.common.algo_observer import IsaacAlgoObserver

    observers: list[Any] = [IsaacAlgoObserver()] + ([replay] if replay is not None else [])
    if args.track and int(os.getenv("RANK", "0")) == 0:
        if args.wandb_entity is None:
            raise ValueError("Weights and Biases entity must be specified for tracking.")
        observers.append(make_wandb_observer(args, env_cfg, agent_cfg, cfg, log_root))
    return observers


def member_experiment_name(rl_cfg: dict, cfg: Any, train_dir: str) -> str:
    """The member's run folder name: the one it started with (state.json), else ``<name>_pbt_<NNN>``.

    A ``full_experiment_name`` given for the whole population gets the member suffix too, so members never share
    a log folder.
    """
    from async_pbt_isaaclab.core.workspace.layout import Workspace
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    try:
        state = load_state(Workspace(cfg.workspace_path(train_dir)).member_dir(cfg.policy_idx) / "state.json")
    except Exception:  # noqa: BLE001 - a damaged state is reported by the member start itself
        state = None
    if state is not None and state.experiment_name:
        return state.experiment_name
    base = rl_cfg.get("full_experiment_name") or rl_cfg["name"]
    suffix = f"_pbt_{cfg.policy_idx:03d}"
    return base if base.endswith(suffix) else base + suffix


def make_wandb_observer(args: argparse.Namespace, env_cfg: Any, agent_cfg: dict, cfg: Any, train_dir: str) -> Any:
    """An rl_games observer that starts W&B before the agent creates its TensorBoard writer.

    A member keeps one W&B run across exploit restarts and resumes: the run id given at its first start is read from
    its ``state.json`` and resumed (``resume="allow"``), grouped by the workspace's folder name
    (:func:`~async_pbt_isaaclab.member.wandb_run.member_wandb_init_kwargs`). Without the population every start
    is a new run, as in Isaac Lab.
    """
    from rl_games.common.algo_observer import AlgoObserver

    workspace = str(cfg.workspace_path(train_dir)) if cfg.enabled else ""
    project = args.wandb_project_name or agent_cfg["params"]["config"]["name"]

    class WandbObserver(AlgoObserver):
        def before_init(self, base_name, config, experiment_name):
            import wandb

            from async_pbt_isaaclab.member.wandb_run import member_wandb_init_kwargs

            # A member: one run for the whole population run (the id kept in its state.json, resumed after every
            # restart, grouped by workspace). Without the population: a new run per start, as in Isaac Lab.
            run = (
                member_wandb_init_kwargs(workspace, cfg.policy_idx, name=args.wandb_name)
                if cfg.enabled
                else {"name": args.wandb_name or experiment_name}
            )
            wandb_run = wandb.init(
                project=project,
                entity=args.wandb_entity,
                sync_tensorboard=True,
                monitor_gym=True,
                save_code=True,
                **run,
            )
            print(f"[async-pbt] W&B run {wandb_run.id} (group {wandb_run.group or '-'}, project {project})", flush=True)
            if not wandb_run.resumed:
                if hasattr(env_cfg, "to_dict"):
                    wandb.config.update({"env_cfg": env_cfg.to_dict()})
                wandb.config.update({"agent_cfg": agent_cfg})

    return WandbObserver()


def _dump_configs(hooks: ScriptHooks, log_dir: str, env_cfg: Any, agent_cfg: dict) -> None:
    """params/agent.yaml and params/env.yaml in the run folder (never fatal: they are records, not inputs)."""
    import yaml

    params_dir = os.path.join(log_dir, "params")
    try:
        os.makedirs(params_dir, exist_ok=True)
        with open(os.path.join(params_dir, "agent.yaml"), "w") as fh:
            yaml.safe_dump(plain_config(agent_cfg), fh, sort_keys=False)
        hooks.dump_env_cfg(os.path.join(params_dir, "env.yaml"), env_cfg)
    except Exception as exc:  # noqa: BLE001 - a log dump must not stop training
        print(f"[WARN] could not write the configuration to {params_dir}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
