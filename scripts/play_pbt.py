#!/usr/bin/env python
# Portions derived from Isaac Lab (scripts/reinforcement_learning/rl_games/), Copyright (c) 2022-2025,
# The Isaac Lab Project Developers, SPDX-License-Identifier: BSD-3-Clause; license in THIRD_PARTY_NOTICES.md.
"""Play a population member's checkpoint, or the population's best, on an Isaac Lab task.

Isaac Lab's ``scripts/reinforcement_learning/rl_games/play.py`` with the checkpoint chosen from a PBT workspace::

    ./isaaclab.sh -p scripts/play_pbt.py --task AsyncPbt-Repose-Cube-Allegro-Direct-v0 --num_envs 64 \\
        --pbt-workspace /shared/pbt/allegro --best
    ./isaaclab.sh -p scripts/play_pbt.py --task ... --pbt-workspace /shared/pbt/allegro --member 3
    ./isaaclab.sh -p scripts/play_pbt.py --task ... --checkpoint /path/to/any_rl_games_checkpoint.pth

Which checkpoint:

* ``--member N``: member N's newest published checkpoint (``members/NNN/state.json``), which after an exploit is
  the recipient checkpoint the exploit wrote (donor weights, this member's counters and hyperparameters);
* ``--best``: the best checkpoint any member recorded in its ``best.json`` (by window mean of the objective);
* ``--checkpoint PATH``: any rl_games checkpoint, with or without PBT metadata.

Checkpoints from a workspace are checked against the sha256 the member published and loaded with
:func:`async_pbt_isaaclab.rl_games.checkpoint.load_checkpoint` (``weights_only``, an explicit allowlist; full pickle
only with ``--trusted-workspace``), never with rl_games' full-pickle ``restore``. The network keys the member mutated
(``network.*``, e.g. bounded log-std) are applied to the agent config so the policy is rebuilt as it was trained, and
its searched env values (``env.<path>``) to the env config before the env is built, so it plays in the env its member
trained in (printed as read back from the built env); a value typed as a Hydra override (``env.<path>=...``) is kept.

The played episodes are summarised like PBT evidence (completed episodes: return, length, objective) and printed at
the end, so ``--num_steps`` doubles as a quick evaluation. The simulator-facing calls go through
:class:`~async_pbt_isaaclab.envs.isaaclab.ScriptHooks` (the tests run them against the real Isaac Lab packages).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from async_pbt_isaaclab.envs.isaaclab import (
    IsaacLabHooks,
    ScriptHooks,
    UnsupportedIsaacLab,
    parse_script_args,
    plain_config,
)
from async_pbt_isaaclab.envs.isaaclab.api import Session

LAUNCHER_NOTE = (
    "Simulator flags (--headless, --device, --enable_cameras, ...) are added by Isaac Lab's AppLauncher and appear "
    "here when Isaac Lab is installed. Remaining KEY=VALUE arguments are Hydra overrides (env.*, agent.*)."
)


class PlayError(RuntimeError):
    """The checkpoint to play cannot be found or verified (the message says which file and why)."""


@dataclass
class PlayResult:
    """What a play run did (returned by :func:`run`, printed by :func:`main`)."""

    checkpoint: str
    """The checkpoint played."""
    source: str
    """How it was chosen (``member 3``, ``best (member 1, objective 0.8)``, ``--checkpoint``)."""
    steps: int = 0
    """Env steps played (each advances every env)."""
    episodes: int = 0
    """Episodes completed."""
    mean_return: float = math.nan
    """Mean undiscounted return of the completed episodes."""
    objective: str = ""
    """Objective reported."""
    mean_objective: float = math.nan
    """Mean objective of the completed episodes."""
    pbt: dict[str, Any] = field(default_factory=dict)
    """The checkpoint's PBT metadata (member, generation, frame, hyperparameters, ...); empty for a raw one."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Play a checkpoint of a PBT population member with RL-Games.", epilog=LAUNCHER_NOTE
    )
    parser.add_argument("--video", action="store_true", default=False, help="Record a video of the play.")
    parser.add_argument("--video_length", type=int, default=200, help="Length of the recorded video (in steps).")
    parser.add_argument("--num_envs", "--num-envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument(
        "--agent", type=str, default="rl_games_cfg_entry_point", help="Name of the RL agent configuration entry point."
    )
    parser.add_argument("--real-time", action="store_true", default=False, help="Run in real-time, if possible.")
    parser.add_argument(
        "--num_steps",
        "--num-steps",
        type=int,
        default=0,
        help="Stop after this many env steps (0: until the simulator is closed).",
    )
    which = parser.add_argument_group("checkpoint (one of)")
    which.add_argument("--checkpoint", type=str, default=None, help="Path to an rl_games checkpoint.")
    which.add_argument(
        "--pbt-workspace",
        dest="pbt_workspace",
        default=None,
        metavar="DIR",
        help="Population workspace to take the checkpoint from (with --member or --best).",
    )
    which.add_argument("--member", type=int, default=None, metavar="N", help="Play member N's newest checkpoint.")
    which.add_argument(
        "--best", action="store_true", default=False, help="Play the best checkpoint recorded by any member."
    )
    parser.add_argument(
        "--trusted-workspace",
        action="store_true",
        default=False,
        help="Load with full pickle (only for checkpoints whose writers you trust).",
    )
    return parser


def select_checkpoint(args: argparse.Namespace) -> tuple[Path, str, str | None]:
    """``(path, how it was chosen, expected sha256 or None)`` from the command line. Raises :class:`PlayError`."""
    chosen = sum([args.checkpoint is not None, args.member is not None, bool(args.best)])
    if chosen != 1:
        raise PlayError(
            "choose exactly one of --checkpoint PATH, --pbt-workspace W --member N, --pbt-workspace W --best"
        )
    if args.checkpoint is not None:
        return Path(args.checkpoint), "--checkpoint", None
    if not args.pbt_workspace:
        raise PlayError("--member and --best need --pbt-workspace DIR")
    from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError
    from async_pbt_isaaclab.core.workspace.retention import population_best
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    ws = Workspace(args.pbt_workspace)
    try:
        ws.population_meta()
    except WorkspaceError as exc:
        raise PlayError(str(exc)) from None
    if args.best:
        best = population_best(ws, top=1)
        if not best:
            raise PlayError(
                f"{ws.root}: no member has recorded a best checkpoint yet (best.json needs at least "
                f"min_episodes of evidence at a publish)"
            )
        entry = best[0]
        return (
            ws.checkpoint_path(entry["checkpoint"]),
            f"best (member {entry.get('member')}, objective {float(entry['objective']):.6g}, "
            f"frame {entry.get('frame')})",
            entry.get("sha256"),
        )
    member_dir = ws.member_dir(args.member)
    state = load_state(member_dir / "state.json")
    if state is None or not state.last_checkpoint:
        raise PlayError(f"{member_dir}: member {args.member} has not published a checkpoint yet")
    return (
        ws.checkpoint_path(state.last_checkpoint),
        f"member {args.member} (generation {state.generation})",
        state.last_checkpoint_sha256 or None,
    )


def load_verified(path: Path, sha256: str | None, trusted: bool) -> dict[str, Any]:
    """Check the published sha256 (when known) and load the checkpoint safely. Raises :class:`PlayError`."""
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.rl_games.checkpoint import CheckpointError, load_checkpoint

    if sha256:
        try:
            actual = fsio.sha256_file(path)
        except FileNotFoundError:
            raise PlayError(f"{path}: missing (removed by retention? play --best or a newer --member)") from None
        if actual != sha256:
            raise PlayError(f"{path}: sha256 {actual} differs from the published {sha256}; the file is damaged")
    try:
        return load_checkpoint(path, trusted=trusted, map_location="cpu")
    except CheckpointError as exc:
        raise PlayError(str(exc)) from None


def restore_player(player: Any, state: dict[str, Any]) -> None:
    """Load a checkpoint dict into an rl_games player (what ``PpoPlayerContinuous.restore`` does after its load)."""
    model_state = {(k[len("_orig_mod.") :] if k.startswith("_orig_mod.") else k): v for k, v in state["model"].items()}
    player.model.load_state_dict(model_state)
    if getattr(player, "normalize_input", False) and "running_mean_std" in state:
        player.model.running_mean_std.load_state_dict(state["running_mean_std"])
    env_state = state.get("env_state")
    if env_state is not None and getattr(player, "env", None) is not None:
        player.env.set_env_state(env_state)


def main(argv: Sequence[str] | None = None, hooks: ScriptHooks | None = None) -> int:
    hooks = hooks or IsaacLabHooks()
    try:
        args, hydra_args = parse_script_args(build_parser(), hooks, argv, script="play")  # --help: no Isaac Lab
    except ImportError as exc:
        print(f"error: scripts/play_pbt.py plays Isaac Lab tasks: {exc}", file=sys.stderr)
        return 2
    except UnsupportedIsaacLab as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = run(args, hydra_args, hooks)
    except PlayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"[INFO] played {result.checkpoint} ({result.source}): {result.steps} steps, {result.episodes} episodes, "
        f"mean return {result.mean_return:.6g}, mean {result.objective} {result.mean_objective:.6g}"
    )
    return 0


def run(args: argparse.Namespace, hydra_args: Sequence[str], hooks: ScriptHooks | None = None) -> PlayResult:
    """Choose and load the checkpoint (before starting the simulator: fail fast), then play it."""
    hooks = hooks or IsaacLabHooks()
    if not args.task:
        raise PlayError("--task is required")
    path, source, sha256 = select_checkpoint(args)
    state = load_verified(path, sha256, args.trusted_workspace)
    print(f"[INFO]: Loading model checkpoint from: {path} ({source})")
    if args.video:
        args.enable_cameras = True
    args.video_kind = "play"
    with hooks.open_session(args, args.task, args.agent, list(hydra_args)) as session:
        return _play(args, session, hooks, path, source, state, hydra_args)


def set_env_values(
    env_cfg: Any, meta: dict[str, Any], typed: Sequence[str], path: Path
) -> tuple[dict[str, Any], list[str]]:
    """The checkpoint's searched env values (``env.<path>``: the env its member trained in) set on the task's env
    config before the env is built, except a key typed as a Hydra override (kept as typed): ``(the values set, the
    keys kept)``."""
    from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key
    from async_pbt_isaaclab.core.decision.start import command_line_keys
    from async_pbt_isaaclab.envs.isaaclab.env_values import searched_start_values, set_cfg_value

    searched = {k: v for k, v in (meta.get("hyperparameters") or {}).items() if is_env_key(k)}
    kept = list(command_line_keys(typed, searched))  # as a member's diverse start finds a typed value
    values = {k: v for k, v in searched.items() if k not in kept}
    _, problems = searched_start_values(env_cfg, values)
    if problems:
        raise PlayError(f"{path}: its member trained with env values this task does not have ({'; '.join(problems)})")
    for key, value in values.items():
        set_cfg_value(env_cfg, env_parameter(key), value)
    return values, kept


def _play(
    args: argparse.Namespace,
    session: Session,
    hooks: ScriptHooks,
    path: Path,
    source: str,
    state: dict[str, Any],
    hydra_args: Sequence[str] = (),
) -> PlayResult:
    from async_pbt_isaaclab.core.agent_config import set_path
    from async_pbt_isaaclab.core.decision.mutation import agent_path
    from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api
    from async_pbt_isaaclab.envs.isaaclab import register_rl_games_env, rl_games_wrapper_options
    from async_pbt_isaaclab.envs.isaaclab.env_values import IsaacLabEnvValues
    from async_pbt_isaaclab.rl_games.checkpoint import read_pbt_metadata

    env_cfg, agent_cfg = session.env_cfg, session.agent_cfg
    agent_cfg = plain_config(agent_cfg)
    meta = read_pbt_metadata(state) or {}
    # Rebuild the network the member trained: mutated network.* keys (e.g. bounded log-std) change its shape/limits.
    for key, value in (meta.get("hyperparameters") or {}).items():
        if key.startswith("network."):
            set_path(agent_cfg, agent_path(key), value)
    params, rl_cfg = agent_cfg["params"], agent_cfg["params"]["config"]
    params["load_checkpoint"] = False  # restored below through the safe loader
    isaaclab_api.apply_cli_overrides(session, args, env_cfg)
    env_values, typed = set_env_values(env_cfg, meta, hydra_args, path)

    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    env = hooks.make_env(session, args.task, env_cfg, args, run_dir, lambda step: step == 0)
    if env_values or typed:  # what the built env holds, read back from it as a member reads its own
        held = IsaacLabEnvValues(env, [*env_values, *typed])
        shown = ", ".join(f"{k}={held.read(k)!r}" + (" (typed)" if k in typed else "") for k in sorted(held.keys))
        print(f"[INFO]: env values of the checkpoint's member: {shown}")
    env, objective = _with_evidence(env, args.task, agent_cfg, meta)
    rl_device, clip_obs, clip_actions, extra = rl_games_wrapper_options(agent_cfg)
    vec_env = hooks.vec_env_wrapper(env, rl_device, clip_obs, clip_actions, **extra)
    register_rl_games_env(vec_env, hooks)
    rl_cfg["num_actors"] = vec_env.unwrapped.num_envs

    steps = _run_player(args, session, vec_env, _restored_player(agent_cfg, state))
    batch = env.pbt_summary_source.drain()
    values = batch.objective_values(objective) if len(batch) else []
    result = PlayResult(
        checkpoint=str(path),
        source=source,
        steps=steps,
        episodes=len(batch),
        mean_return=math.fsum(batch.returns) / len(batch) if len(batch) else math.nan,
        objective=objective,
        mean_objective=math.fsum(values) / len(values) if values else math.nan,
        pbt=meta,
    )
    vec_env.close()
    return result


def _with_evidence(env: Any, task: str, agent_cfg: dict[str, Any], meta: dict[str, Any]) -> tuple[Any, str]:
    """``env`` with the evidence wrapper, and the objective it reports: the member's, else the return alone."""
    from async_pbt_isaaclab.core.config import objective_term
    from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source

    raw_objective = meta.get("objective") or (agent_cfg.get("pbt") or {}).get("objective") or RETURN_OBJECTIVE
    objective = objective_term(str(raw_objective))
    try:
        return attach_summary_source(
            env, SummaryCfg.from_agent_cfg(agent_cfg), objective=objective, task=task
        ), objective
    except ValueError as exc:
        print(f"[WARN] no per-episode {objective!r} while playing ({exc}); reporting the return only", file=sys.stderr)
        return attach_summary_source(env, SummaryCfg(), task=task), RETURN_OBJECTIVE


def _restored_player(agent_cfg: dict[str, Any], state: dict[str, Any]) -> Any:
    """The rl_games player of ``agent_cfg`` with the checkpoint's weights and statistics, reset."""
    from rl_games.torch_runner import Runner

    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration

    # A policy trained with the bounded exploration network is played with the same network.
    register_bounded_exploration()
    runner = Runner()
    runner.load(agent_cfg)
    player = runner.create_player()
    restore_player(player, state)
    player.reset()
    return player


def _run_player(args: argparse.Namespace, session: Session, vec_env: Any, player: Any) -> int:
    """Step the env with the player's actions until the app stops, ``--num_steps`` or the video ends; the steps."""
    import torch

    dt = float(getattr(vec_env.unwrapped, "step_dt", 0.0))
    obs = vec_env.reset()
    if isinstance(obs, dict):
        obs = obs["obs"]
    _ = player.get_batch_size(obs, 1)  # enables the flag for batched observations
    if player.is_rnn:
        player.init_rnn()
    steps = 0
    while session.app_running() and (args.num_steps <= 0 or steps < args.num_steps):
        started = time.time()
        with torch.inference_mode():
            obs = player.obs_to_torch(obs)
            actions = player.get_action(obs, is_deterministic=player.is_deterministic)
            obs, _, dones, _ = vec_env.step(actions)
            if len(dones) > 0 and player.is_rnn and player.states is not None:
                for s in player.states:
                    s[:, dones, :] = 0.0
        steps += 1
        if args.video and steps == args.video_length:
            break
        sleep = dt - (time.time() - started)
        if args.real_time and sleep > 0:
            time.sleep(sleep)
    return steps


if __name__ == "__main__":
    sys.exit(main())
