#!/usr/bin/env python
"""Members as slices of one process against members as processes, and against one member alone (the ceiling).

::

    nice python scripts/benchmarks/slices_vs_processes.py                      # 3 rounds, n=16, 10 epochs
    nice python scripts/benchmarks/slices_vs_processes.py --rounds 2 --epochs 6  # quick look

``M`` members (default 4) with the same total envs, every variant a real run of the CPU member
(``async_pbt_isaaclab.examples.cpu_member``, Pendulum-v1 PPO, one torch thread per process, the population observer
publishing and deciding as in a population):

* **slices**: one process, ``--pbt-slices M``, ``--num_envs n`` each (one gymnasium vec-env of ``M x n`` envs),
  the members' rollouts played together (``rl_games/slice_rollout.py``);
* **slices-steps**: the same, one env step at a time (``ASYNC_PBT_SLICES_STEP_BY_STEP=1``: the path agents the
  rollout cannot play take, and what slices did before the rollout);
* **processes**: ``M`` processes, one member each, ``--num_envs n``;
* **ceiling**: one member alone (a population of 1) on all ``M x n`` envs.

The variants run interleaved (``slices, ceiling, slices-steps, processes``, then the next round in the reverse
order), so drift of a shared machine hits each alike and slices and the ceiling always run next to each other;
medians and spreads (min-max) over the rounds are printed for:

* **frames/s** (total over the members): frames trained / the training span, from the first member's ``start``
  audit entry to the last member's final record (process start and imports excluded, which favours processes:
  each of them boots alone);
* **wall frames/s**: frames / wall time of the whole variant, process starts and imports included;
* **peak RSS**: the sum of every process's peak resident memory (``ru_maxrss`` from ``os.wait4``); on a GPU the
  script would add ``torch.cuda.max_memory_allocated`` per process, which it does not measure on CPU.

Then one pass of **exploit latency** with the test fixture rule ``fixture_exploit_every_decision`` (every decision
exploits the best peer): from each ``decision`` audit entry that exploits to its ``exploit_applied`` entry, for
slices (a memory copy) and for processes (a copy of the donor's file, loaded in process).

Goal: slices reach at least 0.9x the ceiling's frames/s with at most 1.2x its peak RSS. The script prints
both ratios with PASS/FAIL; it is a measurement on a shared machine, not a test.
The members here train on the CPU (the packaged CPU yamls); the GPU comparison is Isaac Lab's
``scripts/train_pbt.py --pbt-slices`` against ``async-pbt launch`` (docs/validation.md, "GPU: not measured yet").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_SPEED = 0.9
"""slices frames/s / ceiling frames/s, at least."""
GOAL_MEMORY = 1.2
"""slices peak RSS / ceiling peak RSS, at most."""
VARIANTS = ("slices", "ceiling", "slices-steps", "processes")
"""In this order, then reversed: slices and the ceiling run next to each other in every round (the ratio the goal
is about), so the drift of a shared machine within a round touches that pair least."""
STEP_BY_STEP_ENV = "ASYNC_PBT_SLICES_STEP_BY_STEP"
"""rl_games/slices.py: set, the slices variant steps one env step at a time (``slices-steps``)."""


def horizon_length(task: str) -> int:
    """Env steps per epoch of ``task``'s packaged agent yaml."""
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.examples.agents import packaged_agent_yaml

    return int(load_yaml(packaged_agent_yaml(task))["params"]["config"]["horizon_length"])


def member_cmd(ws: Path, members: int, index: int, num_envs: int, epochs: int, extra: list[str]) -> list[str]:
    """One member process of the CPU member; ``extra``: more flags (the task, the interval, ...)."""
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        str(members),
        "--pbt-index",
        str(index),
        "--num_envs",
        str(num_envs),
        "--max_iterations",
        str(epochs),
        "--pbt-max-heartbeat-age-s",
        "100000000",
        "agent.params.torch_threads=1",
        "agent.params.config.print_stats=False",
        "agent.pbt.mutation.learning_rate=mutate_float",
        *extra,
    ]


def commands(variant: str, ws: Path, m: int, n: int, epochs: int, extra: list[str]) -> list[list[str]]:
    if variant.startswith("slices"):
        return [[*member_cmd(ws, m, 0, n, epochs, extra), "--pbt-slices", str(m)]]
    if variant == "processes":
        return [member_cmd(ws, m, i, n, epochs, extra) for i in range(m)]
    return [member_cmd(ws, 1, 0, m * n, epochs, extra)]


def run_variant(variant: str, root: Path, m: int, n: int, epochs: int, extra: list[str], env: dict) -> dict[str, Any]:
    ws = root / f"{variant}-{time.monotonic_ns()}"
    cmds = commands(variant, ws, m, n, epochs, extra)
    env = dict(env, **{STEP_BY_STEP_ENV: "1" if variant == "slices-steps" else "0"})
    t0 = time.perf_counter()
    procs = []
    for i, cmd in enumerate(cmds):
        log = open(ws.parent / f"{ws.name}-{i}.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    rss_kib = 0
    for proc, log in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.close()
        rss_kib += usage.ru_maxrss
        if proc.returncode != 0:
            tail = Path(log.name).read_text()[-3000:]
            raise RuntimeError(f"{variant}: a process exited {proc.returncode}:\n{tail}")
    wall = time.perf_counter() - t0
    frames, starts, ends = 0, [], []
    for member_dir in sorted((ws / "members").iterdir()):
        record = json.loads((member_dir / "record.json").read_text())
        frames += int(record["frame"])
        ends.append(float(record["heartbeat"]))
        entries = [json.loads(line) for line in (member_dir / "audit.jsonl").read_text().splitlines()]
        starts.append(min(e["time"] for e in entries if e["kind"] == "start"))
    span = max(ends) - min(starts)
    result = {"fps": frames / span, "wall_fps": frames / wall, "rss_mib": rss_kib / 1024, "frames": frames, "ws": ws}
    return result


def exploit_latencies(ws: Path) -> list[float]:
    out = []
    for member_dir in sorted((ws / "members").iterdir()):
        decided = None
        for line in (member_dir / "audit.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["kind"] == "decision" and e.get("decision", {}).get("outcome") == "exploit":
                decided = e["time"]
            elif e["kind"] == "exploit_applied" and decided is not None:
                out.append(e["time"] - decided)
                decided = None
    return out


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=4, help="M: members (slices of one process, or processes)")
    p.add_argument("--num-envs", type=int, default=16, help="n: envs per member (the ceiling gets M x n)")
    p.add_argument("--epochs", type=int, default=10, help="rl_games epochs per member (horizon_length steps each)")
    p.add_argument(
        "--task",
        default="Pendulum-v1",
        help="task with a packaged agent yaml (default Pendulum-v1, whose env step costs microseconds; "
        "HalfCheetah-v5 needs the [mujoco] extra and costs what a simulator step costs per env)",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three variants")
    p.add_argument("--keep", action="store_true", help="keep the workspaces (printed)")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="slices-bench-"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    m, n = args.members, args.num_envs
    horizon = horizon_length(args.task)
    common = ["--task", args.task, "--pbt-interval-steps", str(4 * n * horizon)]
    print(
        f"{args.task}: M={m} members, n={n} envs each ({m * n} in all), {args.epochs} epochs x {horizon} steps, "
        f"{args.rounds} rounds; load average {os.getloadavg()[0]:.1f}"
    )
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        for r in range(args.rounds):
            order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                res = run_variant(variant, root, m, n, args.epochs, common, env)
                results[variant].append(res)
                print(
                    f"round {r + 1} {variant:9s} frames/s {res['fps']:7.0f}  wall frames/s {res['wall_fps']:7.0f}  "
                    f"peak RSS {res['rss_mib']:7.0f} MiB  ({res['frames']} frames)",
                    flush=True,
                )
        print("\nvariant    frames/s median [min-max]   wall frames/s          peak RSS MiB (sum of processes)")
        for v in VARIANTS:
            rs = results[v]
            print(
                f"{v:9s}  {spread([x['fps'] for x in rs]):24s}  {spread([x['wall_fps'] for x in rs]):20s}  "
                f"{spread([x['rss_mib'] for x in rs])}"
            )
        speed = [s["fps"] / c["fps"] for s, c in zip(results["slices"], results["ceiling"], strict=True)]
        memory = [s["rss_mib"] / c["rss_mib"] for s, c in zip(results["slices"], results["ceiling"], strict=True)]
        procs = [s["fps"] / c["fps"] for s, c in zip(results["slices"], results["processes"], strict=True)]
        print(
            f"\nslices / ceiling frames/s  {spread(speed, '{:.2f}')}  goal >= {GOAL_SPEED}: "
            f"{'PASS' if statistics.median(speed) >= GOAL_SPEED else 'FAIL'}"
        )
        print(
            f"slices / ceiling peak RSS  {spread(memory, '{:.2f}')}  goal <= {GOAL_MEMORY}: "
            f"{'PASS' if statistics.median(memory) <= GOAL_MEMORY else 'FAIL'}"
        )
        print(f"slices / processes frames/s {spread(procs, '{:.2f}')}")
        steps = [s["fps"] / c["fps"] for s, c in zip(results["slices-steps"], results["ceiling"], strict=True)]
        print(f"slices-steps / ceiling frames/s {spread(steps, '{:.2f}')}  (one env step at a time, the fallback)")
        # Exploit latency: one pass with every decision exploiting.
        fixture = "fixture_exploit_every_decision"
        latency_env = dict(env, ASYNC_PBT_TEST_FIXTURE=fixture)
        latency_args = [
            *common,
            "--pbt-rule",
            fixture,
            "--pbt-start-grace-frames",
            "0",
            "--pbt-restart-grace-frames",
            "0",
            "--pbt-min-episodes",
            "8",
        ]
        print()
        for variant in ("slices", "processes"):
            res = run_variant(variant, root, m, n, args.epochs, latency_args, latency_env)
            lat = exploit_latencies(res["ws"])
            if lat:
                print(
                    f"exploit latency {variant:9s} decision -> applied: median {statistics.median(lat) * 1000:.0f} ms "
                    f"[{min(lat) * 1000:.0f}-{max(lat) * 1000:.0f}] over {len(lat)} exploits"
                )
            else:
                print(f"exploit latency {variant:9s}: no exploit happened (more --epochs)")
    finally:
        if args.keep:
            print(f"workspaces kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
