#!/usr/bin/env python
"""Screen a study case before any population runs on it: one plain run per configuration the case names.

    python scripts/benchmarks/screen_case.py --case hopper_many --out runs/screen-many
    python scripts/benchmarks/screen_case.py --case hopper_moving --out runs/screen-moving --parallel 3

Each configuration of the case's ``screen`` list (``study_cases.Case.screen``: a label and its ``KEY=VALUE`` values
on top of the packaged yaml) trains one real CPU member alone, as a user's single run would: ``cpu_member --task``
in a 2-member workspace with ``--pbt-max-restarts 0`` (it publishes evidence every interval and never exploits),
``--frames`` frames, agent seed ``--seed``. The figure read is the training objective (the mean of the member's
evidence window, the last 64 completed episodes of the stochastic policy: the return, or what the configuration names
as ``pbt.objective``, such as ``distance_travelled``) at every published interval, from its ``record.json``.
``--case`` also takes a screen of ``study_cases.SCREENS`` (``hopper_standing``), which decides whether a case exists.
Prints one row per configuration and writes ``screen.json``. No held-out evaluation: screening says whether a start
is mis-set and whether the best value moves, not how a population does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_cases


def command(
    case: study_cases.Case | study_cases.Screen, values: tuple[str, ...], workspace: Path, args: argparse.Namespace
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
        str(-(-args.frames // per_epoch)),
        *(["--vec-env", args.vec_env] if args.vec_env else []),
        f"{study_cases.TRAINERS[trainer].seed_key}={args.seed}",
        *overrides,
        trainer=trainer,
    )


def curve(workspace: Path) -> list[tuple[int, float]]:
    from async_pbt_isaaclab.core.workspace.state_files import read_record

    record = read_record(workspace / "members" / "000" / "record.json")
    return [(h.frame, h.mean) for h in record.history]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    screened = {**{k: c for k, c in study_cases.CASES.items() if c.screen}, **study_cases.SCREENS}
    p.add_argument("--case", required=True, choices=sorted(screened))
    p.add_argument("--out", required=True, help="new folder for the runs and screen.json")
    p.add_argument("--frames", type=int, default=524_288, help="frames per run (default 524288)")
    p.add_argument("--interval", type=int, default=65_536, help="frames between published entries (default 65536)")
    p.add_argument("--seed", type=int, default=1, help="agent seed of every run, not 0 (default 1)")
    p.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")
    p.add_argument("--vec-env", default=None, help="the member's vec-env (gymnasium, envpool; default its own)")
    args = p.parse_args(argv)
    if args.seed == 0:  # rl_games reads 0 as unset and seeds nothing: the run could not be repeated
        p.error("--seed 0: rl_games reads a seed of 0 as unset and seeds nothing; give another seed")
    case = screened[args.case]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=False)
    pending = list(case.screen)
    running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    results: dict[str, dict] = {}
    load = [os.getloadavg()[0]]
    while pending or running:
        while pending and len(running) < args.parallel:
            label, values = pending.pop(0)
            ws = out / label
            cmd = command(case, values, ws, args)
            log = open(out / f"{label}.log", "w")
            print(f"[screen] {label}: {' '.join(cmd)}", flush=True)
            running[label] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), ws, time.time())
        time.sleep(5)
        load.append(os.getloadavg()[0])
        for label, (proc, ws, started) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[label]
            rows = curve(ws) if proc.returncode == 0 else []
            results[label] = {"values": list(dict(case.screen)[label]), "exit": proc.returncode, "curve": rows}
            results[label]["wall_s"] = time.time() - started
            shown = " ".join(f"{f // 1000}k:{m:.0f}" if abs(m) >= 100 else f"{f // 1000}k:{m:.2f}" for f, m in rows)
            print(f"[screen] {label} (exit {proc.returncode}): {shown}", flush=True)
    summary = {"case": args.case, "task": case.task, "seed": args.seed, "frames": args.frames, "runs": results}
    summary["load_average"] = [min(load), max(load)]
    (out / "screen.json").write_text(json.dumps(summary, indent=1))
    print(f"load average {min(load):.1f}-{max(load):.1f}; {out / 'screen.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
