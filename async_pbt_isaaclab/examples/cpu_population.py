"""A CPU population: N rl_games PPO members on Pendulum-v1, as separate processes, under the launcher.

    python -m async_pbt_isaaclab.examples.cpu_population --members 2 --smoke --workspace ./runs/cpu-smoke

Each member is ``python -m async_pbt_isaaclab.examples.cpu_member`` with the population flags added by
the local launcher. Members publish evidence, select, copy donors' checkpoints and restart themselves
with ``os.execv``; the launcher restarts a crashed member from its own last checkpoint.

``--smoke`` is a short run (about a minute on 2 cores) that exercises every step; without it the run is
long enough for the population to learn Pendulum (returns rise from about -1200 towards -200).
A new ``--workspace`` is a new experiment; an existing one is resumed (each member continues from its
own last checkpoint) and the example says which it did.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from async_pbt_isaaclab.core.member_state import load_state
from async_pbt_isaaclab.core.workspace import Workspace, population_best

SMOKE = {"iterations": 24, "interval": 8192, "start_grace": 8192, "min_episodes": 16}
"""Short run: 24 epochs x 2048 frames per member, a decision every 4 epochs after the first 4."""
FULL = {"iterations": 200, "interval": 32768, "start_grace": 65536, "min_episodes": 32}
"""Learning run: 200 epochs (about 410k frames) per member."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=2, help="population size")
    p.add_argument("--workspace", default="runs/cpu-population", help="shared workspace folder")
    p.add_argument("--smoke", action="store_true", help="short run that exercises every step")
    p.add_argument("--iterations", type=int, default=None, help="rl_games epochs per member (overrides the preset)")
    p.add_argument("--rule", default="dexpbt", help="selection rule: dexpbt, isaaclab or welch")
    p.add_argument("--progress-interval", type=float, default=15.0, help="seconds between progress tables")
    return p


def member_command(args: argparse.Namespace, workspace: Path) -> list[str]:
    preset = SMOKE if args.smoke else FULL
    return [
        sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations", str(args.iterations or preset["iterations"]),
        "--train-dir", str(workspace / "runs"),
        "--pbt-rule", args.rule,
        "--pbt-interval-steps", str(preset["interval"]),
        "--pbt-start-grace-frames", str(preset["start_grace"]),
        "--pbt-restart-grace-frames", str(preset["interval"]),
        "--pbt-min-episodes", str(preset["min_episodes"]),
        "--pbt-window", str(max(64, preset["min_episodes"])),
        "--pbt-heartbeat-interval-s", "5",
        # One torch thread per member: N members share the machine's cores.
        "agent.params.torch_threads=1",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
        "agent.pbt.mutation.e_clip=mutate_float",
    ]


def summarize(workspace: Path) -> list[str]:
    """What the user wants to see at the end: per member frames, objective, exploits; the best overall."""
    ws = Workspace(workspace)
    records, errors = ws.read_records()
    lines = [f"population in {workspace}: {len(records)} members"]
    total_exploits = 0
    for index in sorted(set(records) | set(errors)):
        if index in errors:
            lines.append(f"  member {index}: unreadable record: {errors[index]}")
            continue
        r = records[index]
        state = load_state(ws.member_dir(index) / "state.json")
        exploits = [e for e in (state.lineage if state else []) if e.get("outcome") == "exploit"]
        total_exploits += len(exploits)
        donors = ", ".join(f"gen {e['generation']} <- member {e['donor']}" for e in exploits) or "none"
        ev = r.evidence
        objective = f"{ev.mean:9.1f} over {ev.count} episodes" if ev.count else "no evidence yet"
        lines.append(f"  member {index}: {r.frame:>8} frames, generation {r.generation}, objective {objective}, "
                     f"status {r.status}; exploits: {donors}")
    best = population_best(ws, top=1)
    if best:
        b = best[0]
        lines.append(f"best checkpoint: member {b['member']} objective {b['objective']:.1f} -> "
                     f"{workspace / b['checkpoint']}")
    lines.append(f"exploits completed: {total_exploits}")
    lines.append(f"inspect: async-pbt status {workspace} | async-pbt lineage {workspace} | async-pbt audit {workspace}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from async_pbt_isaaclab.launch.local import launch_population

    workspace = Path(args.workspace).absolute()
    resumed = (workspace / "population.json").exists()
    if resumed:
        meta = json.loads((workspace / "population.json").read_text())
        print(f"[cpu-population] resuming the existing workspace {workspace} "
              f"(created {time.ctime(meta.get('created', 0))}): each member continues from its own last checkpoint. "
              f"Use a new --workspace for an independent experiment.", flush=True)
    else:
        print(f"[cpu-population] new experiment in {workspace}", flush=True)
    started = time.time()
    result = launch_population(member_command(args, workspace), args.members, workspace, gpus=[],
                               progress_interval_s=args.progress_interval)
    print(f"\n[cpu-population] done in {time.time() - started:.0f}s "
          f"({'resumed' if resumed else 'new'} workspace)")
    for line in summarize(workspace):
        print(line)
    return 0 if not result.given_up else 1


if __name__ == "__main__":
    sys.exit(main())
