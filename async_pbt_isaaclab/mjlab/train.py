"""Train one member of an asynchronous PBT population on an mjlab task, with mjlab's own runner class.

mjlab's ``train`` command (``python -m mjlab.scripts.train TASK [flags]``) with the population flags of
:func:`async_pbt_isaaclab.pbt_flags.add_population_args`, the same flags and workspace as the other members::

    CUDA_VISIBLE_DEVICES="" python -m async_pbt.mjlab.train Mjlab-Cartpole-Balance --env.scene.num-envs 32 \\
        --agent.logger tensorboard --pbt-workspace runs/mjlab --pbt-members 2 --pbt-index 0 \\
        agent.pbt.mutation.desired_kl=mutate_float agent.pbt.mutation.entropy_coef=mutate_float

The task comes first, as for mjlab's command. mjlab's own flags (``--env.*``, ``--agent.*``, ``--gpu-ids``,
``--log-root``) go to mjlab's ``TrainConfig`` parser (tyro) unchanged. ``KEY=VALUE`` overrides name the member
config's keys, the runner config under ``agent.runner.`` (``agent.runner.algorithm.gamma=0.98``) and the population
section under ``agent.pbt.``; they are applied after mjlab's flags, and a restart exploit re-runs this command with
``--checkpoint=`` and its new values written that way. The member's seed is ``agent.seed + pbt index`` (the env's
too). The device is mjlab's: CPU where ``CUDA_VISIBLE_DEVICES`` is empty or ``--gpu-ids None``, else the one selected
GPU (a member is one process: more GPUs are refused). rsl_rl's run folder (TensorBoard, ``model_<it>.pt``, which
mjlab's ``play --checkpoint-file`` loads) is ``<log-root>/<experiment>/<experiment>_pbt_<NNN>/summaries``; the
workspace defaults to ``<log-root>/<experiment>/<pbt.workspace>``. Without the population flags this refuses to
run: plain training is mjlab's own command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.exit_codes import EXIT_USAGE
from async_pbt_isaaclab.member.restart import capture_argv
from async_pbt_isaaclab.pbt_flags import add_population_args, population_flag_origins, population_overrides

PROG = "python -m async_pbt.mjlab.train"

OVERRIDE = re.compile(r"^\+*agent\.[\w.]+=")
"""A member config override (``agent.runner...=``, ``agent.pbt...=``); mjlab's own flags start with ``--``."""


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog=f"{PROG} TASK",
        description=__doc__.split("\n\n")[0],
        epilog="mjlab's flags: python -m mjlab.scripts.train TASK --help",
        allow_abbrev=False,
    )
    parser.add_argument("--checkpoint", default=None, help="warm-start checkpoint (ignored once the member has state)")
    add_population_args(parser)
    return parser


def split_args(argv: Sequence[str]) -> tuple[str, argparse.Namespace, list[str], list[str]]:
    """(task, population flags, member config overrides, mjlab's own flags) of ``argv``; ``ValueError`` without a
    task first."""
    if not argv or argv[0].startswith("-"):
        if any(a in ("-h", "--help") for a in argv):
            build_parser().print_help()
            raise SystemExit(0)
        raise ValueError("give the mjlab task first (e.g. Mjlab-Cartpole-Balance; python -m mjlab.scripts.list_envs)")
    args, rest = build_parser().parse_known_args(argv[1:])
    overrides = [a for a in rest if OVERRIDE.match(a)]
    return argv[0], args, overrides, [a for a in rest if not OVERRIDE.match(a)]


def mjlab_flag(key: str) -> str | None:
    """Searched key ``key``'s flag in mjlab's own parser (``--agent.algorithm.learning-rate``; ``None`` for an env
    key): a value typed that way stays out of the diverse start, and a warm start keeps a rate typed so."""
    from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
    from async_pbt_isaaclab.rsl_rl.member_config import rsl_rl_key

    return None if is_env_key(key) else rsl_rl_key(key, "agent.")  # mjlab's TrainConfig holds the runner as agent


def mjlab_config(task: str, flags: list[str]) -> tuple[Any, str]:
    """mjlab's ``TrainConfig`` of ``task`` with ``flags`` (parsed by mjlab's own tyro parser) and the device it
    selects; ``ValueError`` for what a member cannot do."""
    import mjlab
    import mjlab.tasks  # registers the tasks
    import tyro
    from mjlab.scripts.train import TrainConfig
    from mjlab.tasks.registry import list_tasks
    from mjlab.utils.gpu import select_gpus

    if task not in list_tasks():
        raise ValueError(f"{task}: not an mjlab task (python -m mjlab.scripts.list_envs lists them)")
    cfg = tyro.cli(
        TrainConfig,
        args=flags,
        default=TrainConfig.from_task(task),
        prog=f"{PROG} {task}",
        config=mjlab.TYRO_FLAGS,
    )
    if cfg.video:
        raise ValueError("--video: a member records no videos (mjlab's play command does)")
    selected, count = select_gpus(cfg.gpu_ids)
    if count > 1:
        raise ValueError(f"--gpu-ids {cfg.gpu_ids}: a member is one process on one device; async-pbt launch --gpus")
    # As mjlab's train command: the selected GPU is the only one the process sees.
    os.environ["CUDA_VISIBLE_DEVICES"] = "" if selected is None else str(selected[0])
    return cfg, "cpu" if selected is None else "cuda:0"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and train one member. Returns the exit code (2: usage or configuration error)."""
    capture_argv()
    from async_pbt_isaaclab.core.config import ConfigError

    try:
        task, args, overrides, flags = split_args(list(sys.argv[1:] if argv is None else argv))
        cfg, device = mjlab_config(task, flags)
        from async_pbt_isaaclab.rsl_rl.member_config import load_member_config
        from async_pbt_isaaclab.rsl_rl.release import installed_line

        installed_line()
        rsl_cfg = {"env": {"id": task, "num_envs": cfg.env.scene.num_envs}, "runner": dataclasses.asdict(cfg.agent)}
        rsl_cfg, _, pop_cfg = load_member_config(
            rsl_cfg,
            [*population_overrides(args), *overrides],
            source=f"{task} (mjlab)",
            origins=population_flag_origins(args),
        )
    except ImportError as exc:
        from async_pbt_isaaclab.mjlab.glue import INSTALL_HINT

        print(f"error: {PROG}: mjlab members need mjlab ({exc}): {INSTALL_HINT}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, RuntimeError) as exc:  # ConfigError is a ValueError, UnsupportedRslRl a RuntimeError
        lines = exc.problems if isinstance(exc, ConfigError) else [str(exc)]
        where = getattr(exc, "source", "") or PROG  # a config problem names the task's config
        print("\n".join(f"error: {where}: {line}" for line in lines), file=sys.stderr)
        return EXIT_USAGE
    if not pop_cfg.enabled:
        print(f"error: {PROG} trains population members: give --pbt-workspace and --pbt-members", file=sys.stderr)
        return EXIT_USAGE
    # Members must not share a seed, or the population starts as N copies of one run.
    rsl_cfg["runner"]["seed"] = cfg.env.seed = int(cfg.agent.seed) + pop_cfg.policy_idx
    return _train(task, cfg, device, rsl_cfg, pop_cfg, args.checkpoint)


def _train(task: str, cfg: Any, device: str, rsl_cfg: dict[str, Any], pop_cfg: Any, checkpoint: str | None) -> int:
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.utils.torch import configure_torch_backends

    from async_pbt_isaaclab.core.config import objective_term
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.member.run_to_end import member_exit_code
    from async_pbt_isaaclab.mjlab import glue
    from async_pbt_isaaclab.rsl_rl.member import train_member

    log_root = Path(cfg.log_root, cfg.agent.experiment_name).absolute()
    workspace = pop_cfg.workspace_path(log_root)
    print(f"[INFO] PBT member {pop_cfg.policy_idx}/{pop_cfg.num_policies}, workspace {workspace}")
    configure_torch_backends()
    reward_config = glue.reward_fingerprint(cfg.env)
    env = attach_summary_source(
        glue.GymView(ManagerBasedRlEnv(cfg=cfg.env, device=device)),
        SummaryCfg(),
        objective=objective_term(pop_cfg.objective),
        task=task,
        reward_config=reward_config,
    )
    vec_env = RslRlVecEnvWrapper(env, clip_actions=cfg.agent.clip_actions)
    member_cfg, build = (
        dataclasses.replace(pop_cfg, workspace=str(workspace)),
        glue.runner_factory(vec_env, task, device),
    )
    return member_exit_code(
        member_cfg.policy_idx,
        lambda: train_member(
            rsl_cfg,
            member_cfg,
            build,
            train_dir=str(log_root),
            checkpoint=checkpoint,
            reward_config=reward_config,
            runner_infos=glue.EnvState(),
            flag_name=mjlab_flag,
        ),
        vec_env.close,
    )


if __name__ == "__main__":
    sys.exit(main())
