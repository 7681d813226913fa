#!/usr/bin/env python
"""The tuned reference of a task: one independent run of its packaged agent yaml, with training and held-out returns.

    python scripts/benchmarks/tuned_reference.py --task HalfCheetah-v5 --workspace runs/ref-halfcheetah
    python scripts/benchmarks/tuned_reference.py --task Hopper-v5 --workspace runs/ref-hopper
    python scripts/benchmarks/tuned_reference.py --task Walker2d-v5 --workspace runs/ref-walker2d
    python scripts/benchmarks/tuned_reference.py --case rsl_rl_hopper_tuned --workspace runs/ref-rsl-rl-hopper

Trains (unless ``--workspace`` already holds the run) the real CPU member alone, as a user would: ``cpu_member
--task TASK`` with the yaml's own epochs and seed, in a 2-member workspace with ``--pbt-max-restarts 0`` (it publishes
a record and a checkpoint every ``--interval`` frames and never exploits or explores), retention off. Then it plays
every checkpoint's deterministic policy on ``--episodes`` held-out episodes (``async-pbt evaluate``'s code, env seeds
from 100000) and prints, per checkpoint, the frame, the training return (mean of the member's evidence window: the
last completed episodes of the stochastic policy, as CleanRL and rl_games report) and the held-out return. Writes
``reference.json`` into the workspace. The study's targets for the task's cases are read from this table.
``--case`` trains a study case's start instead (its trainer, config and start values: ``rsl_rl_hopper_tuned`` is
rsl_rl's member on its Hopper start), for ``--iterations`` of its trainer (default: the config's own).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_cases


def train(task: str, workspace: Path, interval: int, case: study_cases.Case | None, iterations: int | None) -> float:
    # Retention off: every interval's checkpoint is played afterwards.
    extra = ["--pbt-keep-last-checkpoints", "1000000"]
    extra += ["--max_iterations", str(iterations)] if iterations else []
    trainer = case.trainer if case else "rl_games"
    if case is not None:
        extra += [study_cases.TRAINERS[trainer].config_flag, str(study_cases.case_config(case))]
        extra += study_cases.value_overrides(case.set_values, trainer)
    cmd = study_cases.solo_run_command(task, workspace, interval, *extra, trainer=trainer)
    print("[reference] " + " ".join(cmd), flush=True)
    started = time.time()
    subprocess.run(cmd, check=True)
    return time.time() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--task", default=None, help="a task with a packaged agent yaml (HalfCheetah-v5, Hopper-v5, Walker2d-v5)"
    )
    p.add_argument("--case", default=None, choices=sorted(study_cases.CASES), help="a study case's start instead")
    p.add_argument("--iterations", type=int, default=None, help="epochs or iterations (default: the config's)")
    p.add_argument("--workspace", required=True, help="the run's workspace (trained when it holds no run yet)")
    p.add_argument("--interval", type=int, default=65_536, help="frames between checkpoints (default 65536)")
    p.add_argument("--episodes", type=int, default=16, help="held-out episodes per checkpoint (default 16)")
    args = p.parse_args(argv)
    case = study_cases.CASES[args.case] if args.case else None
    if case is None and args.task is None:
        p.error("give --task or --case")
    task = args.task or case.task

    from async_pbt_isaaclab.commands.evaluate import DEFAULT_EVAL_SEED, make_evaluator
    from async_pbt_isaaclab.core.workspace.retention import list_checkpoints
    from async_pbt_isaaclab.core.workspace.state_files import read_record

    workspace = Path(args.workspace).absolute()
    member = workspace / "members" / "000"
    load = [os.getloadavg()[0]]
    wall = None if (member / "record.json").exists() else train(task, workspace, args.interval, case, args.iterations)
    load.append(os.getloadavg()[0])
    history = {h.frame: h for h in read_record(member / "record.json").history}
    # The member's own config (its agent.yaml): the packaged yaml of the task, or the case's start for its trainer.
    evaluator = make_evaluator(task, member / "agent.yaml")
    rows = []
    for _generation, _frame, path in list_checkpoints(member / "checkpoints"):
        ev = evaluator.evaluate(path, args.episodes, DEFAULT_EVAL_SEED)
        frame = int(ev.pbt.get("frame", 0))
        entry = history.get(frame)
        rows.append(
            {
                "frame": frame,
                "training_return": entry.mean if entry else None,
                "training_episodes": entry.count if entry else None,
                "held_out_mean": ev.mean,
                "held_out_std": ev.std,
                "held_out_median": statistics.median(ev.returns),
            }
        )
        train_txt = f"{entry.mean:8.1f} ({entry.count} episodes)" if entry else "       -"
        print(f"{frame:>9,} frames  training {train_txt}  held-out {ev.mean:8.1f} ± {ev.std:6.1f}", flush=True)
    load.append(os.getloadavg()[0])
    result = {"task": task, "case": args.case, "train_wall_s": wall, "load_average": [min(load), max(load)]}
    result["rows"] = rows
    (workspace / "reference.json").write_text(json.dumps(result, indent=1))
    print(f"load average {min(load):.1f}-{max(load):.1f}; {workspace / 'reference.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
