#!/usr/bin/env python
"""Judge a finished study's final hand-over again, on more held-out episodes than the study's own.

    python scripts/benchmarks/study_handover.py runs4/halfcheetah_lr-random --episodes 64
    python scripts/benchmarks/study_handover.py runs3/halfcheetah_lr-pb2 --episodes 64 --seeds 0

A study run with ``--final-episodes N`` (64 on the MuJoCo cases) plays this hand-over itself and takes its final
figures from it; this script judges a study run without it (8 + 8 episodes at the last point, where the return of a
HalfCheetah policy varies too much from start to start to pick the best of four), or with another N. Every member's
final checkpoint of the population and sweep arms (the sweep's from ``--baselines-from``'s folder where it was
reused) is played by the study's own hand-over (``study_analysis.final_handover``: 2 x ``--episodes`` episodes, env
seeds from 105000 on, the first half selects, the second half reports). Prints per seed both arms' figure and
whether the population ends no worse than the best sweep run, and writes ``handover_<episodes>.json`` in the study's
folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_analysis as analysis  # next to this script

from async_pbt_isaaclab.commands.evaluate import make_evaluator


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="a finished study's --out folder (its results.json)")
    p.add_argument("--episodes", type=int, default=64, help="picking episodes, and as many reporting (default 64)")
    p.add_argument("--seeds", nargs="+", default=None, help="study seeds (default: every seed of the study)")
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes {args.episodes}: must be at least 1")
    study = Path(args.study)
    try:
        results = json.loads((study / "results.json").read_text())
    except (OSError, ValueError) as exc:
        p.error(f"{study / 'results.json'}: a finished study's results are needed ({exc})")
    seeds = args.seeds or list(results["seeds"])
    unknown = [s for s in seeds if s not in results["seeds"]]
    if unknown:
        p.error(f"--seeds {' '.join(unknown)}: not in {study / 'results.json'} ({', '.join(results['seeds'])})")
    settings = results["settings"]
    evaluator = make_evaluator(settings["task"], settings["agent_yaml"])
    members, final_frame = int(settings["members"]), int(results["frames_per_member"])
    out = {"episodes": args.episodes, "seed_offset": analysis.HANDOVER_SEED_OFFSET, "seeds": {}}
    for seed in seeds:
        arms = {
            arm: analysis.final_handover(
                evaluator,
                analysis.arm_folder(study, results["seeds"][seed], seed, arm),
                members,
                final_frame,
                args.episodes,
            )
            for arm in ("population", "sweep")
        }
        met = analysis.no_worse_than_sweep(arms["population"]["report"], arms["sweep"]["report"])
        out["seeds"][seed] = {**arms, "no_worse_than_sweep": met}
        print(
            f"seed {seed}: population member {arms['population']['picked']} {arms['population']['report']:.1f}, "
            f"best sweep run member {arms['sweep']['picked']} {arms['sweep']['report']:.1f}: "
            f"{'no worse' if met else 'worse'} ({args.episodes} + {args.episodes} episodes)",
            flush=True,
        )
    (study / f"handover_{args.episodes}.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
