"""A CPU population: N rl_games PPO members on Pendulum-v1, as separate processes, under the launcher.

    python -m async_pbt.examples.cpu_population --members 2 --smoke --workspace ./runs/cpu-smoke
    python -m async_pbt.examples.cpu_population --task HalfCheetah-v5 --members 4 --workspace ./runs/hc

``--task`` trains another task with a packaged agent yaml (HalfCheetah-v5 and Hopper-v5 need the ``[mujoco]``
extra); the presets are frames per member, rounded up to whole epochs of that task's yaml. HalfCheetah's episodes
last 1,000 steps, so its ``--smoke`` (3 epochs of 256 steps) ends before any episode does: pass ``--iterations 8``
or more to see evidence and exploits.

Each member is ``python -m async_pbt.examples.cpu_member`` with the population flags added by
the local launcher. With ``--slices M`` each process hosts M members on slices of one vectorized env
(``--members 4 --slices 4``: the whole population in one process; docs/slices.md). Members publish
evidence, select, copy donors' checkpoints and restart themselves with ``os.execv`` (slices copy in memory);
the launcher restarts a crashed process from its members' own last checkpoints.

``--smoke`` is a short run (about a minute on 2 cores) that exercises every step; without it the run is
long enough for the population to learn Pendulum (returns rise from about -1200 towards -200).
A new ``--workspace`` is a new experiment; an existing one is resumed (each member continues from its
own last checkpoint) and the example says which it did.

Usage errors (a population of fewer than 2 members, ``--iterations 0``, a workspace path that is a file
or not writable, a workspace made for another population size) are one line on stderr and exit code 2,
before anything is written. The exit code is the launcher's: 0 when every member finished, 1 when one
was given up, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.core.config import ConfigError
from async_pbt_isaaclab.core.flags import add_population_args, population_overrides
from async_pbt_isaaclab.core.fsio import folder_problem
from async_pbt_isaaclab.core.member_progress import generation_changes
from async_pbt_isaaclab.core.member_state import load_state
from async_pbt_isaaclab.core.pbt_section import SELECTION_RULES
from async_pbt_isaaclab.core.retention import population_best
from async_pbt_isaaclab.core.slices import SLICES_FLAG, slice_problems
from async_pbt_isaaclab.core.workspace import Workspace, WorkspaceError
from async_pbt_isaaclab.examples.agents import DEFAULT_TASK, PACKAGED_AGENTS, packaged_agent_yaml
from async_pbt_isaaclab.exit_codes import EXIT_USAGE
from async_pbt_isaaclab.rl_games.live import LIVE_SETTERS  # plain data: no torch, no rl_games

PROG = "python -m async_pbt.examples.cpu_population"
"""How users run the example (the name in its messages)."""
AGENT_YAML = PACKAGED_AGENTS[DEFAULT_TASK]
"""The members' agent yaml without ``--task`` (cpu_member's default)."""

SMOKE = {"iterations": 24, "interval": 8192, "start_grace": 8192, "min_episodes": 16}
"""Short run: 24 epochs x 2048 frames per member, a decision every 4 epochs after the first 4."""
FULL = {"iterations": 200, "interval": 32768, "start_grace": 65536, "min_episodes": 32}
"""Learning run: 200 epochs (about 410k frames) per member."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=2, help="population size (at least 2)")
    p.add_argument(
        "--slices",
        type=int,
        default=1,
        help="members per process, each on its own slice of one vectorized env (1: one process per member; "
        "--members must be a multiple; docs/slices.md)",
    )
    p.add_argument("--workspace", default="runs/cpu-population", help="shared workspace folder")
    p.add_argument(
        "--task",
        default=DEFAULT_TASK,
        choices=sorted(PACKAGED_AGENTS),
        help=f"gymnasium task, trained with its packaged agent yaml (default {DEFAULT_TASK})",
    )
    p.add_argument("--smoke", action="store_true", help="short run that exercises every step")
    p.add_argument("--iterations", type=int, default=None, help="rl_games epochs per member (overrides the preset)")
    p.add_argument("--rule", default="dexpbt", choices=SELECTION_RULES, help="selection rule")
    p.add_argument("--progress-interval", type=float, default=15.0, help="seconds between progress tables")
    p.add_argument(
        "--vec-env",
        default="gymnasium",
        choices=("gymnasium", "envpool"),
        help="every member's env backend (cpu_member --vec-env; envpool: the envpool extra, about 2x faster on MuJoCo)",
    )
    return p


def preset_iterations(args: argparse.Namespace) -> int:
    """Epochs per member: ``--iterations``, else the preset's frames (in Pendulum epochs of 2,048) in the task's
    epochs, rounded up."""
    if args.iterations:
        return int(args.iterations)
    preset = SMOKE if args.smoke else FULL
    config = load_yaml(packaged_agent_yaml(args.task))["params"]["config"]
    per_epoch = int(config["num_actors"]) * int(config["horizon_length"])
    return max(1, -(-preset["iterations"] * 2048 // per_epoch))


def member_command(args: argparse.Namespace, workspace: Path) -> list[str]:
    preset = SMOKE if args.smoke else FULL
    return [
        sys.executable,
        "-m",
        "async_pbt.examples.cpu_member",
        "--task",
        args.task,
        "--max_iterations",
        str(preset_iterations(args)),
        "--train-dir",
        str(workspace / "runs"),
        "--pbt-rule",
        args.rule,
        "--pbt-interval-steps",
        str(preset["interval"]),
        "--pbt-start-grace-frames",
        str(preset["start_grace"]),
        "--pbt-restart-grace-frames",
        str(preset["interval"]),
        "--pbt-min-episodes",
        str(preset["min_episodes"]),
        "--pbt-window",
        str(max(64, preset["min_episodes"])),
        "--pbt-heartbeat-interval-s",
        "5",
        # One torch thread per member: N members share the machine's cores.
        "agent.params.torch_threads=1",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
        "agent.pbt.mutation.e_clip=mutate_float",
        *([SLICES_FLAG, str(args.slices)] if args.slices != 1 else []),
        *(["--vec-env", args.vec_env] if args.vec_env != "gymnasium" else []),
    ]


def summarize(workspace: Path) -> list[str]:
    """What the user wants to see at the end: per member frames, objective, exploits; the best overall."""
    ws = Workspace(workspace)
    records, errors = ws.read_records()
    lines = [f"population in {workspace}: {len(records)} members"]
    total_exploits = total_explores = 0
    for index in sorted(set(records) | set(errors)):
        if index in errors:
            lines.append(f"  member {index}: unreadable record: {errors[index]}")
            continue
        r = records[index]
        state = load_state(ws.member_dir(index) / "state.json")
        lineage = state.lineage if state else []
        total_exploits += sum(1 for e in lineage if e.outcome == "exploit")
        total_explores += sum(1 for e in lineage if e.outcome == "explore")
        changes = ", ".join(
            f"gen {e.generation} <- "
            + (f"member {e.source.member}" if e.outcome == "exploit" else "explore")
            + f" applied at frame {e.frame}"
            for e in lineage
        )
        ev = r.evidence
        objective = f"{ev.mean:9.1f} over {ev.count} episodes" if ev.count else "no evidence yet"
        lines.append(
            f"  member {index}: {r.frame:>8} frames, generation {r.generation}, objective {objective}, "
            f"status {r.status}; {generation_changes(index, ws.member_dir(index) / 'audit.jsonl').words()}"
            + (f": {changes}" if changes else "")
        )
    best = population_best(ws, top=1)
    if best:
        b = best[0]
        lines.append(
            f"best checkpoint: member {b['member']} objective {b['objective']:.1f} -> {workspace / b['checkpoint']}"
        )
    lines.append(
        f"generation changes: {total_exploits} exploit{'' if total_exploits == 1 else 's'}, "
        f"{total_explores} explore{'' if total_explores == 1 else 's'}"
    )
    lines.append(f"inspect: async-pbt status {workspace} | async-pbt lineage {workspace} | async-pbt audit {workspace}")
    return lines


class UsageError(Exception):
    """A bad argument or workspace: one line on stderr, exit code 2, nothing written."""


def check_arguments(args: argparse.Namespace) -> None:
    if args.members < 2:
        raise UsageError(
            f"--members {args.members}: a population needs at least 2 members (a member exploits and explores "
            f"only after comparing itself with a peer); to train one policy alone run "
            f"python -m async_pbt.examples.cpu_member"
        )
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(
            f"--iterations {args.iterations}: must be at least 1 (omit it for the preset: "
            f"{SMOKE['iterations']} with --smoke, {FULL['iterations']} without)"
        )
    if args.slices < 1 or args.members % args.slices:
        raise UsageError(
            f"--slices {args.slices}: must divide --members {args.members} (each process hosts --slices members)"
        )
    if not args.progress_interval > 0:
        raise UsageError(f"--progress-interval {args.progress_interval:g}: must be a positive number of seconds")


def check_workspace(workspace: Path, members: int) -> dict | None:
    """Refuse a workspace the members could not use; returns its ``population.json`` when it exists."""
    problem = folder_problem(workspace)
    if problem:
        raise UsageError(f"--workspace {workspace}: {problem}")
    if not (workspace / "population.json").exists():
        return None
    try:
        meta = Workspace(workspace).population_meta()
    except WorkspaceError as exc:
        raise UsageError(f"--workspace {workspace}: {exc}") from None
    if meta.get("num_policies") != members:
        raise UsageError(
            f"--workspace {workspace}: was created for {meta.get('num_policies')} members, not "
            f"--members {members}; pass --members {meta.get('num_policies')} to resume it, "
            f"or use a new --workspace"
        )
    return meta


def check_member_config(args: argparse.Namespace, workspace: Path) -> None:
    """Validate the members' config exactly as a member will, before any process starts."""
    parser = argparse.ArgumentParser(add_help=False)
    add_population_args(parser)
    flags = [
        *member_command(args, workspace)[3:],
        "--pbt-workspace",
        str(workspace),
        "--pbt-members",
        str(args.members),
        "--pbt-index",
        "0",
    ]
    member_args, rest = parser.parse_known_args(flags)
    overrides = [o for o in rest if "=" in o]
    try:
        agent_yaml = packaged_agent_yaml(args.task)
        _, cfg = load_population_config(
            load_yaml(agent_yaml), [*population_overrides(member_args), *overrides], source=str(agent_yaml)
        )
    except ConfigError as exc:
        raise UsageError("; ".join(exc.problems)) from None
    problems = slice_problems(cfg.mutation, cfg.exploit_mode, LIVE_SETTERS, args.slices)
    if problems:
        raise UsageError("; ".join(problems))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workspace = Path(args.workspace).expanduser().absolute()
    try:
        check_arguments(args)
        meta = check_workspace(workspace, args.members)
        check_member_config(args, workspace)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from async_pbt_isaaclab.launch.arguments import LaunchError
    from async_pbt_isaaclab.launch.local_backend import launch_population

    resumed = meta is not None
    if meta is not None:
        print(
            f"[cpu-population] resuming the existing workspace {workspace} "
            f"(created {time.ctime(meta.get('created', 0))}): each member continues from its own last checkpoint. "
            f"Use a new --workspace for an independent experiment.",
            flush=True,
        )
    else:
        print(f"[cpu-population] new experiment in {workspace}", flush=True)
    started = time.time()
    try:
        result = launch_population(
            member_command(args, workspace),
            args.members,
            workspace,
            gpus=[],
            progress_interval_s=args.progress_interval,
            # With slices, one process per --slices members: the launcher starts each at its first member's index.
            indices=list(range(0, args.members, args.slices)),
        )
    except LaunchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    how = f"stopped by {result.stopped_by}" if result.stopped_by else "done"
    print(
        f"\n[cpu-population] {how} after {time.time() - started:.0f}s "
        f"({'resumed' if resumed else 'new'} workspace); exit code {result.exit_code}"
    )
    for line in summarize(workspace):
        print(line)
    if result.stopped_by:
        print("resume: run the same command again (same --workspace and --members)")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
