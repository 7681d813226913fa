"""Checks run inside a process where a real Isaac Lab release is importable (``run_isaaclab.py REL -m NAME ...``).

Each probe prints one JSON line prefixed ``PROBE:`` with what it observed; the tests in ``test_real_isaaclab.py``
assert on it. Nothing here is a stand-in: these are Isaac Lab's own functions and classes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

TRAIN_PY_2_3_2 = {
    # The flags of Isaac Lab v2.3.2 scripts/reinforcement_learning/rl_games/train.py besides AppLauncher's (the 2.x
    # wheel ships no scripts/, so they are recorded here from the v2.3.2 release sources).
    "-h",
    "--help",
    "--video",
    "--video_length",
    "--video_interval",
    "--num_envs",
    "--task",
    "--agent",
    "--seed",
    "--distributed",
    "--checkpoint",
    "--sigma",
    "--max_iterations",
    "--wandb-project-name",
    "--wandb-entity",
    "--wandb-name",
    "--track",
    "--export_io_descriptors",
    "--ray-proc-id",
    "-rid",
}
"""Option strings of Isaac Lab 2.3.2's RL-Games train.py, without the AppLauncher flags."""


_RUNNING: list[str] = []
"""The probe :func:`batch` is running (its name tags the line :func:`_emit` prints)."""


def _emit(data: Any) -> None:
    tag = f"[{_RUNNING[-1]}]" if _RUNNING else ""
    print(f"PROBE{tag}:" + json.dumps(data, default=str), flush=True)


def batch(calls: str) -> None:
    """Run several probes in this one process (one Isaac Lab start-up for all): ``calls`` is a JSON list of
    ``[name, *args]``. Each prints ``PROBE[name]:{...}``; one that raises prints its traceback as ``{"error": ...}``
    and the others still run."""
    import traceback

    for name, *args in json.loads(calls):
        _RUNNING.append(name)
        try:
            globals()[name](*args)
        except BaseException:  # noqa: BLE001 - reported to the test that reads this probe
            _emit({"error": traceback.format_exc()})
        finally:
            _RUNNING.pop()


def release() -> None:
    from async_pbt_isaaclab.envs.isaaclab.release import detect

    found = detect()
    _emit(
        {"series": found.series, "version": found.version, "source_install": found.source_install, "label": found.label}
    )


def configs(task: str, *hydra_args: str) -> None:
    """Load ``task``'s configs through the release's own path (launch + Hydra), as train_pbt.py does."""
    from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api

    parser = argparse.ArgumentParser()
    isaaclab_api.add_launcher_args(parser)
    args = parser.parse_args(["--device", "cpu"])
    with isaaclab_api.open_session(args, task, "rl_games_cfg_entry_point", list(hydra_args)) as session:
        env_cfg, agent_cfg = session.env_cfg, session.agent_cfg
        _emit(
            {
                "env_cfg_type": type(env_cfg).__name__,
                "env_cfg_module": type(env_cfg).__module__,
                "num_envs": env_cfg.scene.num_envs,
                "config": dict(agent_cfg["params"]["config"]),
                "has_to_dict": hasattr(env_cfg, "to_dict"),
            }
        )


def variants() -> None:
    """Every PBT variant's env and agent config, loaded through Isaac Lab's registry loader."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401 - Isaac Lab's tasks
    from isaaclab_tasks.utils.parse_cfg import load_cfg_from_registry

    from async_pbt_isaaclab.tasks import TASK_IDS
    from async_pbt_isaaclab.tasks.registry import TASKS, installed_series

    series = installed_series()
    out = {}
    for task in TASKS:
        task_id = task.id_for(series)
        env_cfg = load_cfg_from_registry(task_id, "env_cfg_entry_point")
        agent_cfg = load_cfg_from_registry(task_id, "rl_games_cfg_entry_point")
        base_env_cfg = load_cfg_from_registry(task.base_for(series), "env_cfg_entry_point")
        base_agent_cfg = load_cfg_from_registry(task.base_for(series), "rl_games_cfg_entry_point")
        out[task_id] = {
            "agent_params": agent_cfg["params"],
            "base_agent_params": base_agent_cfg["params"],
            "env_cfg": type(env_cfg).__name__,
            "same_as_base": type(env_cfg) is type(base_env_cfg),
            "base": gym.spec(task_id).kwargs["base_task"],
            "agent_name": agent_cfg["params"]["config"]["name"],
            "has_pbt": "pbt" in agent_cfg,
        }
    _emit({"series": series, "ids": list(TASK_IDS), "variants": out})


def restart_keeps_hydra_keys() -> None:
    """A user's ``+agent...`` key, mutated by an exploit, loads through real Hydra after the restart rewrite."""
    from async_pbt_isaaclab.member.restart import restart_argv

    typed = [
        "python",
        "train_pbt.py",
        "--task",
        "AsyncPbtTest-Reach-Direct-v0",
        "+agent.params.config.pbt_probe_coef=0.5",
        "agent.params.config.learning_rate=0.001",
    ]
    after = restart_argv(
        typed, "/ws/c.pth", {"agent.params.config.pbt_probe_coef": 0.25, "agent.params.config.learning_rate": 0.0005}
    )
    hydra_args = [a for a in after[2:] if not a.startswith("--") and "=" in a]
    from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api

    parser = argparse.ArgumentParser()
    isaaclab_api.add_launcher_args(parser)
    args = parser.parse_args(["--device", "cpu"])
    with isaaclab_api.open_session(
        args, "AsyncPbtTest-Reach-Direct-v0", "rl_games_cfg_entry_point", hydra_args
    ) as session:
        config = session.agent_cfg["params"]["config"]
        _emit({"argv": after, "pbt_probe_coef": config["pbt_probe_coef"], "learning_rate": config["learning_rate"]})


def wrapper_chain() -> None:
    """Our evidence wrapper inside the real ``RlGamesVecEnvWrapper`` and ``RlGamesGpuEnv``."""
    import gymnasium as gym
    import reach_task
    import torch
    from rl_games.common import env_configurations

    from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks, register_rl_games_env
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.member.summary_source import find_summary_source

    cfg = reach_task.ReachDirectEnvCfg()
    cfg.scene.num_envs = 16
    env = gym.make(reach_task.TASK_ID, cfg=cfg)
    from pathlib import Path

    import yaml

    agent = yaml.safe_load((Path(__file__).resolve().parents[2] / "tasks/agents/torch_reach_pbt.yaml").read_text())
    summary = SummaryCfg.from_agent_cfg(agent)
    wrapped = attach_summary_source(env, summary, objective="success", task=reach_task.TASK_ID)
    hooks = IsaacLabHooks()
    vec_env = hooks.vec_env_wrapper(wrapped, "cpu", 10.0, 1.0)
    register_rl_games_env(vec_env, hooks)
    gpu_env = hooks.gpu_env("rlgpu", 16)
    source = find_summary_source(gpu_env)
    obs = gpu_env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(250):
        obs, _rew, _dones, extras = gpu_env.step(torch.rand(16, 2, generator=gen) * 2 - 1)
    batch = source.drain()
    info = gpu_env.get_env_info()
    _emit(
        {
            "wrapper": type(vec_env).__module__ + "." + type(vec_env).__name__,
            "gpu_env": type(gpu_env).__module__ + "." + type(gpu_env).__name__,
            "source_is_ours": source is wrapped.pbt_summary_source,
            "episodes": len(batch),
            "obs_space_module": type(info["observation_space"]).__module__,
            "obs_shape": list(obs["obs"].shape),
            "extras": sorted(extras),
            "registered": sorted(env_configurations.configurations),
        }
    )


def multi_agent() -> None:
    """A ``DirectMARLEnv`` task through our env builder and evidence wrapper, inside the real rl_games wrappers."""
    import gymnasium as gym
    import reach_marl_task
    import reach_task
    import torch
    from isaaclab.envs import DirectMARLEnv, DirectRLEnv

    from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks
    from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.member.summary_source import find_summary_source

    single = gym.make(reach_task.TASK_ID, cfg=reach_task.ReachDirectEnvCfg())
    untouched = isaaclab_api.convert_multi_agent(single) is single
    cfg = reach_marl_task.ReachTwoAgentEnvCfg()
    cfg.scene.num_envs = 16
    marl = gym.make(reach_marl_task.TASK_ID, cfg=cfg)
    converted = isaaclab_api.convert_multi_agent(marl)
    from pathlib import Path

    import yaml

    agent = yaml.safe_load((Path(__file__).resolve().parents[2] / "tasks/agents/torch_reach_pbt.yaml").read_text())
    wrapped = attach_summary_source(
        converted, SummaryCfg.from_agent_cfg(agent), objective="success", task=reach_marl_task.TASK_ID
    )
    hooks = IsaacLabHooks()
    vec_env = hooks.vec_env_wrapper(wrapped, "cpu", 10.0, 1.0)
    info = vec_env.get_env_info()
    source = find_summary_source(vec_env)
    obs = vec_env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(250):
        # Drive towards the goal (the observation is (dx, vx, px, dy, vy, py)): episodes end in success too.
        o = obs["obs"] if isinstance(obs, dict) else obs
        act = torch.stack([2.0 * o[:, 0] - o[:, 1], 2.0 * o[:, 3] - o[:, 4]], dim=-1)
        obs, _reward, _dones, extras = vec_env.step(act + 0.3 * torch.randn(16, 2, generator=gen))
    batch = source.drain()
    _emit(
        {
            "untouched_single_agent": untouched,
            "marl_type_is_upstream": isinstance(marl.unwrapped, DirectMARLEnv),
            "converted_is_direct_rl_env": isinstance(converted, DirectRLEnv),
            "converted_wraps_task": converted.env is marl.unwrapped,
            "hook_on_task_env": "_reset_idx" in vars(marl.unwrapped),
            "obs_space_shape": list(info["observation_space"].shape),
            "action_space_shape": list(info["action_space"].shape),
            "obs_shape": list((obs["obs"] if isinstance(obs, dict) else obs).shape),
            "episodes": len(batch),
            "terms": sorted(batch.terms),
            "successes": sum(batch.terms["success"]),
            "extras": sorted(extras),
        }
    )


def contracts() -> None:
    """What our evidence wrapper relies on in Isaac Lab's own classes (read from their source)."""
    import inspect

    from isaaclab.envs import DirectRLEnv, ManagerBasedRLEnv
    from isaaclab.managers import RewardManager
    from isaaclab_rl.rl_games import RlGamesGpuEnv, RlGamesVecEnvWrapper

    init_src = inspect.getsource(RlGamesVecEnvWrapper.__init__)
    step_src = inspect.getsource(RlGamesVecEnvWrapper.step)
    out = {
        "type_check_through_wrappers": "env.unwrapped" in init_src,
        "keeps_env": "self.env = env" in init_src,
        "steps_env": "self.env.step(" in step_src,
        "renames_log": '"log"' in step_src,
        "gpu_env_keeps_env": "self.env" in inspect.getsource(RlGamesGpuEnv.__init__),
        "episode_sums": "self._episode_sums" in inspect.getsource(RewardManager),
    }
    for cls, rewards in ((ManagerBasedRLEnv, "reward_manager.compute("), (DirectRLEnv, "_get_rewards(")):
        src = inspect.getsource(cls.step)
        out[f"{cls.__name__}_rewards_before_reset"] = 0 <= src.find(rewards) < src.find("self._reset_idx(")
    _emit(out)


def train_flags() -> None:
    """Option strings of our train parser and of the installed release's own RL-Games train script."""
    import importlib.util
    from pathlib import Path

    from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks, parse_script_args
    from async_pbt_isaaclab.envs.isaaclab.release import SERIES_2, require

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("_train_pbt_probe", repo / "scripts" / "train_pbt.py")
    train_pbt = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = train_pbt
    spec.loader.exec_module(train_pbt)
    ours = train_pbt.build_parser()
    parse_script_args(ours, IsaacLabHooks(), ["--task", "x"])
    if require().series == SERIES_2:
        from isaaclab.app import AppLauncher

        upstream = argparse.ArgumentParser()
        for flag in sorted(TRAIN_PY_2_3_2 - {"-h", "--help"}):
            upstream.add_argument(flag, dest=flag.strip("-").replace("-", "_") + "_")
        AppLauncher.add_app_launcher_args(upstream)
        origin = "recorded v2.3.2 train.py flags + the wheel's AppLauncher"
    else:
        # The wheel's own parser: train_rl_games._parse_args builds it and hands it to setup_preset_cli.
        from isaaclab_rl.entrypoints.backends import train_rl_games

        captured = {}

        def capture(parser, argv=None):
            captured["parser"] = parser
            raise SystemExit(0)

        train_rl_games.setup_preset_cli = capture
        try:
            train_rl_games._parse_args([])
        except SystemExit:
            pass
        upstream = captured["parser"]
        origin = "isaaclab_rl.entrypoints.backends.train_rl_games of the wheel"
    dests = {}
    for action in upstream._actions:
        for option in action.option_strings:
            dests[option] = action.dest
    ours_dests = {o: a.dest for a in ours._actions for o in a.option_strings}
    _emit(
        {
            "upstream": sorted(dests),
            "ours": sorted(ours_dests),
            "origin": origin,
            "ours_dest": ours_dests,
            "upstream_dest": dests,
        }
    )


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])


def rsl_rl_member(log_dir: str) -> None:
    """An rsl_rl member where Isaac Lab users train: our evidence wrapper inside the real ``RslRlVecEnvWrapper``, the
    runner built from Isaac Lab's own cartpole ``RslRlOnPolicyRunnerCfg`` as the release's train script builds it,
    rsl_rl's own ``learn`` through the adapter, and the member's checkpoint read by ``runner.load``."""
    import contextlib
    import io
    from importlib import metadata
    from pathlib import Path

    import gymnasium as gym
    import reach_task
    import torch
    import yaml
    from isaaclab_rl.rsl_rl import RslRlVecEnvWrapper

    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer

    cfg = reach_task.ReachDirectEnvCfg()
    cfg.scene.num_envs = 16
    agent = yaml.safe_load((Path(__file__).resolve().parents[2] / "tasks/agents/torch_reach_pbt.yaml").read_text())
    wrapped = attach_summary_source(
        gym.make(reach_task.TASK_ID, cfg=cfg), SummaryCfg.from_agent_cfg(agent), objective="success", task="reach"
    )
    env = RslRlVecEnvWrapper(wrapped)
    runner_cfg, make_runner = _isaaclab_rsl_rl_runner(metadata.version("rsl-rl-lib"))
    runner_cfg.device = "cpu"
    with contextlib.redirect_stdout(io.StringIO()):
        member = RslRlTrainer(make_runner(env, runner_cfg, log_dir))
        episodes = []
        member.attach(_Drain(member, episodes))
        member.train(14)
        state = member.recipient_state(member.full_state(), member.counters(), {"member": 0}, member.learning_rate())
        path = Path(log_dir) / "member.pt"
        path.write_bytes(member.checkpoint_bytes(state))
        player = make_runner(env, runner_cfg, None)
        player.load(str(path), map_location="cpu")
    obs = env.get_observations()
    _emit(
        {
            "wrapper": type(env).__module__ + "." + type(env).__name__,
            "source_is_ours": member.summary_source() is wrapped.pbt_summary_source,
            "episodes": len(episodes),
            "frame": member.counters().frame,
            "epoch": member.counters().epoch,
            "frames_per_iteration": member.frames_per_iteration,
            "played_fingerprint_equal": RslRlTrainer(player).fingerprint() == member.fingerprint(),
            "same_actions": bool(
                torch.equal(player.get_inference_policy()(obs), member.runner.get_inference_policy()(obs))
            ),
        }
    )


class _Drain:
    """Drains the member's evidence at every rollout (the member loop's publish point)."""

    def __init__(self, trainer: Any, episodes: list):
        self.trainer, self.episodes = trainer, episodes

    def rollout_done(self) -> None:
        self.episodes += list(self.trainer.summary_source().drain().returns)

    def update_done(self) -> None:
        pass


def _isaaclab_rsl_rl_runner(rsl_rl_version: str) -> tuple[Any, Any]:
    """Isaac Lab's own cartpole runner config of the active release, and the runner its train script builds from it
    (2.3: ``OnPolicyRunner(env, cfg.to_dict(), ...)``; 3.0: ``handle_deprecated_rsl_rl_cfg``,
    ``create_rsl_rl_runner``)."""
    import isaaclab_rl.rsl_rl as rsl_rl_cfgs

    if hasattr(rsl_rl_cfgs, "create_rsl_rl_runner"):  # 3.0
        from isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg import CartpolePPORunnerCfg

        cfg = rsl_rl_cfgs.handle_deprecated_rsl_rl_cfg(CartpolePPORunnerCfg(), rsl_rl_version)
        return cfg, lambda env, c, log_dir: rsl_rl_cfgs.create_rsl_rl_runner(env, c, log_dir=log_dir)
    from isaaclab_tasks.manager_based.classic.cartpole.agents.rsl_rl_ppo_cfg import CartpolePPORunnerCfg
    from rsl_rl.runners import OnPolicyRunner

    return CartpolePPORunnerCfg(), lambda env, c, log_dir: OnPolicyRunner(env, c.to_dict(), log_dir, device=c.device)
