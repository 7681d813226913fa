#!/usr/bin/env python
"""How long does one decision point take as the population grows?

For populations of 8, 64, 256 and 1024 members this writes a synthetic workspace with the real layout
(``Workspace.ensure``, ``members/NNN/record.json`` written through ``fsio.atomic_write_json``) and real
``MemberRecord`` JSON: a window of 64 per-episode values, six hyperparameters, a checkpoint path and its
sha256, and a few stale (old heartbeat, old-generation evidence, lagging) and incompatible (other
curriculum stage) members. It then times, over repeats:

* ``read``: ``Workspace.read_records()`` (list the members, read and strictly parse every record);
* ``decide``: ``step.decide`` for the worst member with the ``dexpbt``, ``isaaclab`` and ``welch`` rules.

Targets (checked at 1024 members): decide <= 50 ms for every rule, read + decide <= 250 ms.
Exit status 0 when every target passes, 1 otherwise.

    python scripts/benchmarks/selection_scale.py [--sizes 8 64 256 1024] [--repeats 15] [--keep DIR]

The page cache is warm after the first read (members poll the workspace every interval, so this is the
steady state); a cold read over NFS is slower and depends on the server.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from async_pbt_isaaclab.core.decision.step import decide
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_name

TASK = "Isaac-Repose-Cube-Allegro-Direct-v0"
INTERVAL = 1_000_000
WINDOW = 64
DECIDE_TARGET_MS = 50.0
TOTAL_TARGET_MS = 250.0


def write_population(root: Path, n: int, now: float, seed: int = 0) -> Workspace:
    rnd = random.Random(seed)
    ws = Workspace(root)
    ws.ensure(num_policies=n, objective="episode_return", task=TASK)
    for i in range(n):
        skill = rnd.gauss(100.0, 30.0)
        values = tuple(round(rnd.gauss(skill, 15.0), 6) for _ in range(WINDOW))
        generation = rnd.randint(0, 6)
        frame = 50 * INTERVAL + rnd.randint(-INTERVAL // 2, INTERVAL // 2)
        heartbeat = now - rnd.uniform(0.0, 30.0)
        evidence_generation = generation
        stage = "3"
        kind = i % 16  # about 1 in 16 each: stale heartbeat, old-generation evidence, lagging, incompatible
        if kind == 5:
            heartbeat = now - 3600.0
        elif kind == 9:
            evidence_generation = max(0, generation - 1)
            generation = evidence_generation + 1
        elif kind == 11:
            frame -= 20 * INTERVAL
        elif kind == 13:
            stage = "2"
        evidence = EvidenceSummary("episode_return", evidence_generation, values, 500 + i, i % 3)
        condition = ConditionLabel(
            task=TASK, objective="episode_return", curriculum_stage=stage, reward_config="c0ffee"
        )
        checkpoint = f"members/{i:03d}/checkpoints/{checkpoint_name(evidence_generation, frame)}"
        sha256 = "%064x" % rnd.getrandbits(256)
        hyperparameters = {
            "learning_rate": 10 ** rnd.uniform(-4.5, -3),
            "gamma": 1 - 10 ** rnd.uniform(-3, -1.5),
            "tau": 1 - 10 ** rnd.uniform(-2, -1),
            "entropy_coef": 10 ** rnd.uniform(-5, -2),
            "e_clip": rnd.uniform(0.1, 0.3),
            "mini_epochs": rnd.randint(2, 8),
        }
        # The entry peers compare, as a member publishes it at an interval (of the previous generation for the
        # members that just changed generation: the unsettled peers selection counts in the worst group).
        entry = HistoryEntry(
            frame,
            evidence_generation,
            evidence.mean,
            evidence.std,
            len(values),
            condition,
            checkpoint,
            sha256,
            hyperparameters,
        )
        rec = MemberRecord(
            member=i,
            generation=generation,
            frame=frame,
            generation_start_frame=frame - 5 * INTERVAL,
            restarts=generation,
            heartbeat=heartbeat,
            evidence=evidence,
            condition=condition,
            hyperparameters=hyperparameters,
            checkpoint=checkpoint,
            checkpoint_sha256=sha256,
            history=(entry,),
            interval_best=max(values) if i % 4 == 0 else None,
            epoch=frame // 16384,
            last_decision="keep: not in the worst 2 of 8",
            host=f"node{i % 32:02d}",
            pid=10_000 + i,
        )
        folder = ws.member_dir(i)
        folder.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write_json(folder / "record.json", rec.to_dict())
    return ws


def timed(fn, repeats: int) -> tuple[list[float], list[float], object]:
    """Wall-clock and CPU milliseconds of each call (CPU time tells a loaded machine from slow code)."""
    wall, cpu, out = [], [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        wall.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    return wall, cpu, out


def spread(times: list[float]) -> str:
    if len(times) < 4:
        return f"{min(times):.2f}-{max(times):.2f}"
    q = statistics.quantiles(times, n=4)
    return f"{q[0]:.2f}-{q[2]:.2f}"


def run(sizes: list[int], repeats: int, keep: Path | None) -> int:
    now = time.time()
    base = Path(tempfile.mkdtemp(prefix="pbt-selection-scale-")) if keep is None else keep
    rows = []
    at_largest: dict[str, float] = {}
    try:
        for n in sizes:
            ws = write_population(base / f"ws{n}", n, now)
            ws.read_records()  # warm the page cache: members read every interval
            read_times, read_cpu, (records, errors) = timed(ws.read_records, repeats)
            assert not errors, errors
            me = min(
                records.values(),
                key=lambda r: (
                    (r.evidence.mean, r.member)
                    if r.heartbeat > now - 60 and r.evidence.generation == r.generation
                    else (math.inf, 0)
                ),
            )
            peers = list(records.values())
            read_med = statistics.median(read_times)
            row = {"n": n, "read": (read_med, spread(read_times), statistics.median(read_cpu))}
            for rule in ("dexpbt", "isaaclab", "welch"):
                cfg = population_config_from_dict(
                    {
                        "rule": rule,
                        "num_policies": n,
                        "policy_idx": me.member,
                        "interval_steps": INTERVAL,
                        "window": WINDOW,
                        "min_episodes": 32,
                        "top_fraction": 0.25,
                        "worst_fraction": 0.25,
                    }
                )
                state = MemberRng(7).get_state()
                decide_times, decide_cpu, d = timed(
                    lambda me=me, peers=peers, cfg=cfg, state=state: decide(
                        me, peers, cfg, MemberRng.from_state(state), now
                    ),
                    repeats * 2,
                )
                row[rule] = (
                    statistics.median(decide_times),
                    spread(decide_times),
                    d.outcome.value,
                    len(d.compared),
                    len(d.excluded),
                    statistics.median(decide_cpu),
                )
                if n == max(sizes):
                    at_largest[rule] = statistics.median(decide_times)
            if n == max(sizes):
                at_largest["read"] = read_med
            rows.append(row)
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"selection_scale: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f}; "
        f"{repeats} repeats (decide: {2 * repeats}); window {WINDOW}"
    )
    print("times in ms: wall-clock median [interquartile range] (CPU-time median)")
    rules = ("dexpbt", "isaaclab", "welch")
    header = f"{'members':>7} | {'read_records':^30} | " + " | ".join(f"{r:^42}" for r in rules)
    print(header)
    print("-" * len(header))
    for row in rows:
        med, spr, cpu = row["read"]
        cells = [f"{med:7.2f} [{spr:>13}] ({cpu:6.2f})"]
        for rule in rules:
            med, spr, outcome, compared, excluded, cpu = row[rule]
            cells.append(f"{med:6.2f} [{spr:>11}] ({cpu:5.2f}) {outcome[:4]} {compared:4d}c {excluded:3d}x")
        print(f"{row['n']:>7} | " + " | ".join(cells))
    print("(c = members compared, x = peers excluded as stale or incompatible, each with a reason)")

    n = max(sizes)
    ok = True
    note = "" if n >= 1024 else " (the targets are set for 1024 members; run with the default sizes)"
    print(f"\ntargets at {n} members{note}:")
    for rule in ("dexpbt", "isaaclab", "welch"):
        passed = at_largest[rule] <= DECIDE_TARGET_MS
        ok &= passed
        print(
            f"  decide ({rule:8s}) {at_largest[rule]:8.2f} ms <= {DECIDE_TARGET_MS:.0f} ms   "
            f"{'PASS' if passed else 'FAIL'}"
        )
    for rule in ("dexpbt", "isaaclab", "welch"):
        total = at_largest["read"] + at_largest[rule]
        passed = total <= TOTAL_TARGET_MS
        ok &= passed
        print(
            f"  read + decide ({rule:8s}) {total:8.2f} ms <= {TOTAL_TARGET_MS:.0f} ms   {'PASS' if passed else 'FAIL'}"
        )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--keep", type=Path, default=None, help="write the workspaces here and keep them")
    args = parser.parse_args(argv)
    return run(sorted(args.sizes), args.repeats, args.keep)


if __name__ == "__main__":
    sys.exit(main())
