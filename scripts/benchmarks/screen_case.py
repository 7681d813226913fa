#!/usr/bin/env python
"""Screen a study case before any population runs on it: one plain run per configuration the case names.

    python scripts/benchmarks/screen_case.py --case hopper_many --out runs/screen-many
    python scripts/benchmarks/screen_case.py --case hopper_decay --out runs/screen-decay --seeds 1 2 --vec-env envpool

Each configuration of the case's ``screen`` list (``study_cases.Case.screen``: a label and its ``KEY=VALUE`` values
on top of the packaged yaml) trains one real CPU member alone per agent seed of ``--seeds``, as a user's single run
would: ``cpu_member --task`` in a 2-member workspace with ``--pbt-max-restarts 0`` (it publishes evidence and a
checkpoint every interval and never exploits), ``--frames`` frames. Two figures per published interval:

- training: the mean of the member's evidence window (the last 64 completed episodes of the stochastic policy: the
  return, or what the configuration names as ``pbt.objective``, such as ``distance_travelled``), from ``record.json``;
- held out (``--held-out`` episodes, 16 unless 0): the checkpoint of that interval played by ``async-pbt evaluate``'s
  code, deterministic policy, gymnasium envs seeded from 100000 on, as the study judges every arm. A start is called
  mis-set by this figure: the training figure once called a good start mis-set (its entropy bonus made the stochastic
  policy look worse than the policy it had learned).

``--case`` also takes a screen of ``study_screens.SCREENS`` (``hopper_standing``), which decides whether a case exists.
A screen with branches (``study_screens.Branches``: ``hopper_rate_falls``) trains its own runs to the branch frame
only; then, per seed, each branch is a warm start (``--checkpoint``) from the source run's checkpoint at that frame
with its own values, on to ``--frames``: the same weights going on under other values.
Prints one row per configuration and seed and writes ``screen.json``. Screening says whether a start is mis-set and
whether the best value moves, not how a population does.
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
import study_screens


def command(
    case: study_cases.Case | study_screens.Screen,
    values: tuple[str, ...],
    seed: int,
    workspace: Path,
    args: argparse.Namespace,
    frames: int,
    checkpoint: Path | None = None,
) -> list[str]:
    from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml

    trainer = getattr(case, "trainer", "rl_games")
    overrides = study_cases.value_overrides(values, trainer)
    config = study_cases.case_config(case)
    per_epoch = study_cases.config_epoch_frames(apply_overrides(load_yaml(config), overrides), trainer)
    return study_cases.solo_run_command(
        case.task,
        workspace,
        args.interval,
        study_cases.TRAINERS[trainer].config_flag,
        str(config),
        "--max_iterations",
        str(-(-frames // per_epoch)),  # epochs in all: a warm start goes on counting from its checkpoint's
        *(["--vec-env", args.vec_env] if args.vec_env else []),
        *(["--checkpoint", str(checkpoint)] if checkpoint else []),
        # Retention off: the held-out figure plays every interval's checkpoint.
        "--pbt-keep-last-checkpoints",
        "1000000",
        f"{study_cases.TRAINERS[trainer].threads_key}=1",  # as the study's members: one core each
        f"{study_cases.TRAINERS[trainer].seed_key}={seed}",
        *overrides,
        trainer=trainer,
    )


def curve(workspace: Path) -> list[tuple[int, float]]:
    from async_pbt_isaaclab.core.workspace.state_files import read_record

    record = read_record(workspace / "members" / "000" / "record.json")
    return [(h.frame, h.mean) for h in record.history]


def held_out(workspace: Path, episodes: int) -> list[tuple[int, float]]:
    """Every checkpoint of the run, by frame, played on ``episodes`` held-out episodes (the member's own yaml)."""
    from async_pbt_isaaclab.commands.evaluate import DEFAULT_EVAL_SEED, evaluate_checkpoints
    from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

    checkpoints = list_checkpoints(workspace / "members" / "000" / "checkpoints")
    results = evaluate_checkpoints([path for _, _, path in checkpoints], episodes=episodes, seed=DEFAULT_EVAL_SEED)
    means = [statistics.fmean(result.objective_values) for result in results]
    return [(frame, mean) for (_, frame, _), mean in zip(checkpoints, means, strict=True)]


def planned_runs(case: study_cases.Case | study_screens.Screen, args: argparse.Namespace) -> list[tuple]:
    """Every run of the screen, seed by seed (a screen stopped early still has every configuration of its first
    seeds): its label, values, agent seed, frames, and the label of the run it branches from ("" for none)."""
    branches = getattr(case, "branches", None)
    own_frames = branches.frame if branches else args.frames
    runs = []
    for seed in args.seeds:
        runs += [(f"{label}-seed{seed}", values, seed, own_frames, "") for label, values in case.screen]
        if branches:
            source = f"{branches.source}-seed{seed}"
            runs += [(f"{label}-seed{seed}", values, seed, args.frames, source) for label, values in branches.runs]
    return runs


def branch_checkpoint(workspace: Path, frame: int) -> Path | None:
    """The source run's checkpoint at ``frame`` (None if it has none there)."""
    from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

    found = [path for _, at, path in list_checkpoints(workspace / "members" / "000" / "checkpoints") if at == frame]
    return found[0] if found else None


def shown(rows: list[tuple[int, float]]) -> str:
    return " ".join(f"{f // 1000}k:{m:.0f}" if abs(m) >= 100 else f"{f // 1000}k:{m:.2f}" for f, m in rows)


def finished_run(label: str, exit_code: int, workspace: Path, wall_s: float, episodes: int) -> dict:
    """What one finished run measured: its training curve and, with ``episodes``, its held-out curve."""
    rows = curve(workspace) if exit_code == 0 else []
    run = {"exit": exit_code, "curve": rows, "wall_s": wall_s}
    print(f"[screen] {label} (exit {exit_code}) training: {shown(rows)}", flush=True)
    if exit_code == 0 and episodes:
        run["held_out"] = held_out(workspace, episodes)
        print(f"[screen] {label} held out: {shown(run['held_out'])}", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    screened = {**{k: c for k, c in study_cases.CASES.items() if c.screen}, **study_screens.SCREENS}
    p.add_argument("--case", required=True, choices=sorted(screened))
    p.add_argument("--out", required=True, help="new folder for the runs and screen.json")
    p.add_argument("--frames", type=int, default=524_288, help="frames per run (default 524288)")
    p.add_argument("--interval", type=int, default=65_536, help="frames between published entries (default 65536)")
    p.add_argument(
        "--seeds", "--seed", type=int, nargs="+", default=[1], help="agent seeds, a run each, not 0 (default 1)"
    )
    p.add_argument("--held-out", type=int, default=16, help="held-out episodes per checkpoint, 0: none (default 16)")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")
    p.add_argument("--vec-env", default=None, help="the member's vec-env (gymnasium, envpool; default its own)")
    args = p.parse_args(argv)
    if 0 in args.seeds:  # rl_games reads 0 as unset and seeds nothing: the run could not be repeated
        p.error("--seeds 0: rl_games reads a seed of 0 as unset and seeds nothing; give another seed")
    for flag, value in (("--frames", args.frames), ("--interval", args.interval), ("--parallel", args.parallel)):
        if value < 1:
            p.error(f"{flag} {value}: must be at least 1")
    if args.held_out < 0:
        p.error(f"--held-out {args.held_out}: episodes per checkpoint, 0 for none")
    case = screened[args.case]
    branches = getattr(case, "branches", None)
    if branches and args.frames <= branches.frame:
        p.error(f"--frames {args.frames}: {args.case}'s branches start at frame {branches.frame}; give more frames")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=False)
    pending = planned_runs(case, args)
    running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    summary = {"case": args.case, "task": case.task, "seeds": args.seeds, "frames": args.frames, "runs": {}}
    summary["configurations"] = {label: list(values) for label, values in case.screen}
    if branches:
        summary["branches"] = {"source": branches.source, "frame": branches.frame, "runs": dict(branches.runs)}
    summary["held_out_episodes"] = args.held_out
    load = [os.getloadavg()[0]]
    while pending or running:
        # A branch waits for its source run to end.
        while (ready := [run for run in pending if run[4] in ("", *summary["runs"])]) and len(running) < args.parallel:
            label, values, seed, frames, source = ready[0]
            pending.remove(ready[0])
            checkpoint = branch_checkpoint(out / source, branches.frame) if source else None
            if source and checkpoint is None:
                summary["runs"][label] = {"exit": None, "not_run": f"{source} has no checkpoint at {branches.frame}"}
                print(f"[screen] {label}: not run, {summary['runs'][label]['not_run']}", flush=True)
                continue
            ws = out / label
            cmd = command(case, values, seed, ws, args, frames, checkpoint)
            log = open(out / f"{label}.log", "w")
            print(f"[screen] {label}: {' '.join(cmd)}", flush=True)
            running[label] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), ws, time.time())
        time.sleep(5)
        load.append(os.getloadavg()[0])
        for label, (proc, ws, started) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[label]
            summary["runs"][label] = finished_run(label, proc.returncode, ws, time.time() - started, args.held_out)
            summary["load_average"] = [min(load), max(load)]
            (out / "screen.json").write_text(json.dumps(summary, indent=1))  # after every run: kept if stopped
    print(f"load average {min(load):.1f}-{max(load):.1f}; {out / 'screen.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
