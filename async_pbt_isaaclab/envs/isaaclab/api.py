"""The calls that differ between Isaac Lab 2.x and 3.0, behind one interface for the scripts.

==========================  ===========================================  ============================================
what                        Isaac Lab 2.0-2.3                            Isaac Lab 3.0
==========================  ===========================================  ============================================
simulator flags             ``AppLauncher.add_app_launcher_args``        ``isaaclab.app.add_launcher_args``
                            (``--headless`` exists)                      (no ``--headless``: headless is the default)
order                       launch the app, then load the configs        resolve the configs, then launch for them
configs + Hydra overrides   ``isaaclab_tasks.utils.hydra``               ``isaaclab_tasks.utils.resolve_task_config``
                            ``.hydra_task_config`` (reads ``sys.argv``)  (``overrides=``)
launch                      ``AppLauncher(args)``; ``app.close()``       ``with launch_simulation(env_cfg, args)``
==========================  ===========================================  ============================================

A ``--distributed`` run's placement is here too (each rank's device and run folder, and what a member of several
ranks cannot do). Every import of Isaac Lab here is lazy (inside the functions), so importing this module is free.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.slices import SLICES_FLAG
from async_pbt_isaaclab.envs.isaaclab.release import SERIES_2, IsaacLabRelease, require


@dataclass
class Session:
    """A running simulator with the task's configuration loaded."""

    release: IsaacLabRelease
    """The Isaac Lab release in use."""
    env_cfg: Any
    """The task's env config (a ``configclass``), Hydra overrides applied."""
    agent_cfg: Any
    """The task's agent config (for rl_games a dict), Hydra overrides applied."""
    launcher: Any = None
    """2.x: the ``AppLauncher`` (``.app``, ``.local_rank``, ``.global_rank``); 3.0: None."""

    def app_running(self) -> bool:
        """Whether the simulator app still runs (2.x: the window was not closed; 3.0: always)."""
        app = getattr(self.launcher, "app", None)
        return bool(app.is_running()) if app is not None else True


def add_launcher_args(parser: argparse.ArgumentParser, script: str = "train") -> None:
    """Add the installed release's simulator flags to an argparse parser (ImportError without Isaac Lab).

    On 3.0 also the flags its own RL-Games ``script`` (``"train"`` or ``"play"``) has and ``parser`` lacks, taken from
    ``isaaclab_rl.entrypoints.common`` so that they are exactly the installed ones (their meaning is applied by
    :func:`apply_cli_overrides` and :func:`make_env`, which call the same module).
    """
    release = require()
    if release.series == SERIES_2:
        # `from isaaclab.app import AppLauncher`: the form every 2.x layout supports.
        from isaaclab.app import AppLauncher

        AppLauncher.add_app_launcher_args(parser)
        return
    from isaaclab.app import add_launcher_args as add
    from isaaclab_rl.entrypoints import common

    upstream = argparse.ArgumentParser(add_help=False)
    if script == "train":
        common.add_common_train_args(upstream, agent_default="rl_games_cfg_entry_point", agent_help="agent")
    else:
        common.add_common_play_args(upstream, agent_default="rl_games_cfg_entry_point", agent_help="agent")
    known = parser._option_string_actions
    for action in upstream._actions:
        shared = [known[o] for o in action.option_strings if o in known]
        if not action.option_strings:
            continue
        if not shared:
            parser._add_action(action)
        elif shared[0].dest == action.dest and action.dest not in ("help", "agent"):
            # same flag, the installed release's default (e.g. --video_length); --agent keeps the script's own
            # (rl_games or rsl_rl entry point)
            shared[0].default = action.default
    add(parser)


def apply_cli_overrides(session: Session, args: argparse.Namespace, env_cfg: Any) -> None:
    """The command-line overrides of the env config that the release's own script applies."""
    if session.release.series == SERIES_2:
        if args.num_envs is not None:
            env_cfg.scene.num_envs = args.num_envs
        if getattr(args, "device", None) is not None:
            env_cfg.sim.device = args.device
        if getattr(args, "export_io_descriptors", False):
            from isaaclab.envs import ManagerBasedRLEnvCfg

            if isinstance(env_cfg, ManagerBasedRLEnvCfg):
                env_cfg.export_io_descriptors = True
            else:
                print("[WARN] IO descriptors are exported for manager-based tasks only", file=sys.stderr)
        return
    from isaaclab_rl.entrypoints import common

    common.apply_env_overrides(args, env_cfg)
    common.validate_distributed_device(args)


def distributed_placement(session: Session, library: str = "rl_games") -> tuple[int, str]:
    """``(seed offset, device)`` of this process in a ``--distributed`` run, as the release's own ``library``
    script (``rl_games`` or ``rsl_rl``) places it: 2.x ``cuda:<AppLauncher local_rank>``, 3.0 the device
    ``launch_simulation`` resolved for the rank. The seed offset is the global rank, except for 2.x's rsl_rl script,
    which adds the local rank. On the test-only CPU ranks (:func:`cpu_ranks`) every rank is on the CPU."""
    if session.release.series == SERIES_2:
        launcher = session.launcher
        local_rank = int(getattr(launcher, "local_rank", 0))
        device = "cpu" if cpu_ranks() else f"cuda:{local_rank}"
        return (local_rank if library == "rsl_rl" else int(getattr(launcher, "global_rank", 0))), device
    # 3.0's launch_simulation already placed the sim on this rank's GPU.
    return int(os.getenv("RANK", "0")), str(session.env_cfg.sim.device)


def distributed_device_problem(args: argparse.Namespace) -> str | None:
    """The refusal of ``--distributed`` on a CPU ``--device`` (checked before the simulator starts), or ``None``;
    the test-only CPU ranks (:func:`cpu_ranks`) are let through."""
    device = getattr(args, "device", None)
    if getattr(args, "distributed", False) and device is not None and "cpu" in str(device) and not cpu_ranks():
        return f"error: --distributed needs GPUs, but --device is {device!r}; use --device cuda"
    return None


def group_problems(args: argparse.Namespace, cfg: Any) -> list[str]:
    """What a member of several ranks cannot do, one line each (docs/distributed.md): its ranks follow rank 0 in
    the running processes, so nothing may replace rank 0's process alone."""
    problems = []
    if cfg.exploit_mode == "restart":
        problems.append(
            "a member of several ranks exploits in its running processes (an exec restart of rank 0 would leave "
            "the other ranks behind); exploit_mode is 'restart' (--pbt-exploit-mode, agent.pbt.exploit_mode): "
            "use auto or inprocess"
        )
    env_keys = sorted(k for k in cfg.mutation if is_env_key(k))
    if env_keys:
        problems.append(
            f"searched env keys ({', '.join(env_keys)}) would be set on rank 0's env only; a member of several "
            f"ranks searches agent keys (agent.pbt.mutation.*)"
        )
    if int(getattr(args, "pbt_slices", 1) or 1) > 1:
        problems.append(f"{SLICES_FLAG} {args.pbt_slices}: a process of several slice members is one rank")
    return problems


def rank_folder(args: argparse.Namespace, log_dir: str) -> str:
    """Where this rank writes its params and videos: the run folder for rank 0 (or without ``--distributed``),
    ``<run>/rank_<r>`` for another rank, as Isaac Lab 3.0's script does (the ranks never write one file)."""
    rank = int(os.getenv("RANK", "0")) if args.distributed else 0
    return log_dir if rank == 0 else os.path.join(log_dir, f"rank_{rank}")


def cpu_ranks() -> bool:
    """Whether this process's ranks run on the CPU over gloo: only under the test-only
    :mod:`async_pbt_isaaclab.testing.gloo_ranks`, which replaced rl_games' nccl and ``cuda:LOCAL_RANK`` in this
    process (it is looked up, never imported, here)."""
    gloo = sys.modules.get("async_pbt_isaaclab.testing.gloo_ranks")
    return bool(getattr(gloo, "ON_CPU", False))


def _import_task_packages() -> None:
    importlib.import_module("isaaclab_tasks")
    importlib.import_module("async_pbt_isaaclab.tasks")


def _hydra_task_config_2x(task: str, agent_key: str, hydra_args: Sequence[str]) -> tuple[Any, Any]:
    from isaaclab_tasks.utils.hydra import hydra_task_config

    result: dict[str, Any] = {}

    @hydra_task_config(task, agent_key)
    def _capture(env_cfg, agent_cfg):
        result["env_cfg"], result["agent_cfg"] = env_cfg, agent_cfg

    # hydra_task_config reads its overrides from sys.argv, as Isaac Lab's scripts set it up. The full command line was
    # captured at start-up (async_pbt_isaaclab.member.restart.capture_argv) for exploit restarts.
    saved = list(sys.argv)
    sys.argv = [saved[0] if saved else "train_pbt.py", *hydra_args]
    try:
        _capture()
    finally:
        sys.argv = saved
    if "agent_cfg" not in result:
        raise RuntimeError(f"Hydra did not produce a configuration for task {task!r}")
    return result["env_cfg"], result["agent_cfg"]


@contextlib.contextmanager
def open_session(args: argparse.Namespace, task: str, agent_key: str, hydra_args: Sequence[str]) -> Iterator[Session]:
    """Start the simulator and load ``task``'s configs with ``hydra_args``, in the order the release needs.

    The app is closed when the block exits (also on errors).
    """
    release = require()
    if release.series == SERIES_2:
        from isaaclab.app import AppLauncher

        launcher = AppLauncher(args)
        try:
            _import_task_packages()  # 2.x task modules need the running app
            env_cfg, agent_cfg = _hydra_task_config_2x(task, agent_key, hydra_args)
            yield Session(release, env_cfg, agent_cfg, launcher)
        finally:
            app = getattr(launcher, "app", None)
            if app is not None:
                app.close()
        return
    from isaaclab.app import launch_simulation
    from isaaclab_tasks.utils import resolve_task_config

    _import_task_packages()
    env_cfg, agent_cfg = resolve_task_config(task, agent_key, overrides=list(hydra_args))
    with launch_simulation(env_cfg, args):
        yield Session(release, env_cfg, agent_cfg, None)


def make_env(
    session: Session,
    task: str,
    env_cfg: Any,
    args: argparse.Namespace,
    log_dir: str,
    video_trigger: Callable[[int], bool] | None = None,
) -> Any:
    """Build the task's env as the release's own RL-Games scripts do: ``gym.make``, a multi-agent task converted to
    one agent, videos (``--video``) under ``log_dir/videos/<train|play>``; on 3.0 also ``--frontend`` and
    ``--capture_env_sensors``. ``video_trigger`` (2.x) says at which steps a clip starts."""
    if session.release.series == SERIES_2:
        import gymnasium

        env = gymnasium.make(task, cfg=env_cfg, render_mode="rgb_array" if args.video else None)
        env = convert_multi_agent(env)
        if args.video:
            folder = os.path.join(log_dir, "videos", getattr(args, "video_kind", "train"))
            print(f"[INFO] Recording videos: {folder}")
            env = gymnasium.wrappers.RecordVideo(
                env,
                video_folder=folder,
                step_trigger=video_trigger,
                video_length=args.video_length,
                disable_logger=True,
            )
        return env
    from isaaclab_rl.entrypoints import common

    kind = getattr(args, "video_kind", "train")
    common.apply_video_recording(env_cfg, log_dir, args, **({} if kind == "train" else {"subdir": kind}))
    env = common.create_isaaclab_env(task, env_cfg, args, convert_marl_to_single_agent=True)
    return common.wrap_sensor_capture(env, log_dir, args) if hasattr(args, "capture_env_sensors") else env


def convert_multi_agent(env: Any) -> Any:
    """A ``DirectMARLEnv`` as one agent (``multi_agent_to_single_agent``), as Isaac Lab's RL-Games scripts do."""
    from isaaclab.envs import DirectMARLEnv, multi_agent_to_single_agent

    if isinstance(env.unwrapped, DirectMARLEnv):
        return multi_agent_to_single_agent(env)
    return env


__all__ = [
    "Session",
    "add_launcher_args",
    "apply_cli_overrides",
    "convert_multi_agent",
    "cpu_ranks",
    "distributed_device_problem",
    "distributed_placement",
    "make_env",
    "open_session",
]
