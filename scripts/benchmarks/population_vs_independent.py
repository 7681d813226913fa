#!/usr/bin/env python
"""Validation study: a population of 4 members against 4 independent runs from the same start, per named case.

    python scripts/benchmarks/population_vs_independent.py --out runs/study            # default study (gamma)
    python scripts/benchmarks/population_vs_independent.py --case no_learn --out runs/no-learn
    python scripts/benchmarks/population_vs_independent.py --smoke --out runs/smoke    # 1-2 minutes
    python scripts/benchmarks/population_vs_independent.py --task Pendulum-v1 \\
        --set gamma=0.8 --set learning_rate=3e-4 --seeds 0 1 2 3 --out runs/study-lr

**Arms.** Three arms, each the real CPU member (``python -m async_pbt_isaaclab.examples.cpu_member``, rl_games PPO;
``rsl_rl_member``, rsl_rl's PPO, for the ``rsl_rl_*`` cases) under the local launcher (``python -m
async_pbt_isaaclab.cli launch``), one N-member workspace per arm and seed, with the same command line: the study's
own copy of the agent yaml with the case's start values (``--set``), the same mutation specs, the same member seeds
(``agent.params.seed`` = 1000 x study seed + 1, plus the member index) and population seed (``agent.pbt.seed``), the
same frames per member. ``population`` runs the package's defaults (``--explore``); ``sweep`` adds
``--pbt-max-restarts 0``: the population's own generation-0 draw (the same diverse values per member, the same
weights), never exploiting: what a user who launches N runs over the bounds and keeps the best gets; ``independent``
adds ``--pbt-max-restarts 0 agent.pbt.start_spread=0``: N runs at the case's start. Every arm publishes and decides
the same way, so the only difference is selection and the start. The arms of a seed train at the same time
(``agent.params.torch_threads=1``), so they see the same machine load; the seeds run one after another.
``--baselines-from`` reuses a finished study's sweep and independent arms (no explore strategy changes them), so
``--explore pb2`` trains the population arm alone; so does a variant of the population's settings given with
``--population-flag`` (passed to the population arm's members only).

**Cases** (``--case``; each fixes its start, the keys the population searches, their tuned values and its
targets before any run of it). The population arm runs the package's defaults for a new population (rule, mutation
rate, diverse start, explore strategy); only the start values and the mutation specs are the case's. The study
seed goes to the population (``agent.pbt.seed``: every random stream of the search follows it) and to the members'
weights and envs (``agent.params.seed``). The independent arm starts every run from the case's values (no diverse
start) and never exploits or explores.

- ``gamma``: Pendulum-v1 with ``gamma=0.8`` instead of the tuned 0.95 of the packaged yaml. A discount that short
  sees about 5 steps ahead, too few for the swing-up, so an independent run improves slowly and stays clearly
  below a tuned one. Measured before choosing (one run each, seed 100, held-out return of the deterministic policy
  over 16 episodes at 32k / 98k / 196k / 294k frames): gamma 0.95: -244 / -311 / -284 / -214; gamma 0.9: -225 /
  -292 / -597 / -590; gamma 0.8: -771 / -637 / -536 / -473; gamma 0.7: -1197 / -1194 / -1026 / -1050 (barely
  learns: a degenerate comparison). Targets -400 (a tuned run reaches it within about 32k frames), -600, -300. The
  population searches ``gamma`` on ``1 - gamma`` inside [0.5, 0.995] (bounds that contain the mis-set value) with
  factors 1.2-2, and the learning rate with the default spec.
- ``no_learn``: the learning rate 100x too low (1e-5 instead of 1e-3) under ``lr_schedule: constant``, which cannot
  correct it (the yaml's adaptive schedule would, within a few epochs). Measured before choosing (one run each,
  seed 42, 16 envs, training return of the last 200-step episodes): learning rate 1e-5 constant: -1114 / -1168 /
  -1148 / -1172 / -1183 at 16k / 66k / 98k / 147k / 195k frames (it does not learn); 1e-3 constant: -1112 /
  -761 / -289 / -180 / -171. Targets -800, -600, -400. The population searches the learning rate with the default
  spec [1e-6, 1e-2].
- ``tuned``: the packaged yaml as it is: what searching costs. Targets -400, -300, -250. Goal: end no worse than
  the independent runs.
- MuJoCo (``pip install 'async-pbt-isaaclab[mujoco]'``), on tasks no one here wrote, with rl_games' own tuned
  configs (the packaged ``halfcheetah_ppo.yaml`` and ``hopper_ppo.yaml``): ``halfcheetah_lr`` / ``hopper_lr``
  (learning rate 5e-5 under the constant schedule, 10x below the tuned 5e-4), ``halfcheetah_no_learn`` /
  ``hopper_no_learn`` (5e-6 constant, 100x below), ``halfcheetah_tuned`` / ``hopper_tuned`` (the yaml as it is).
  The population searches the learning rate (default spec). 524,288 frames per member; targets fixed from each
  task's tuned reference (``scripts/benchmarks/tuned_reference.py``) before any population run: HalfCheetah -250,
  -600, -150; Hopper 1000, 700, 2000. ``--smoke`` shrinks the rollout (4 actors x 64 steps, 64-step episodes) in
  the study's own copy of the yaml.
- ``hopper_standing``: Hopper-v5 with ``healthy_reward`` 30 (default 1), where standing still pays best (screened:
  runs at 30 stand; docs/sweep-study.md). The population searches the weight itself (``env.healthy_reward``,
  log-uniform in [0.1, 30]); every arm's members and the held-out evaluation are judged by the distance travelled
  per episode (``pbt.objective: distance_travelled``), which the weight cannot inflate. Targets 5, 2 and 8 m.

**Held-out evaluation.** After training, every ``--eval-every`` intervals of frames per member (and at the
end), each member's newest checkpoint at or before that frame is played by the code of ``async-pbt
evaluate`` (deterministic policy, gymnasium envs seeded from 100000 on, away from every training seed):
``--eval-episodes`` *selection* episodes and as many *report* episodes on other seeds. Retention is off
(``--pbt-keep-last-checkpoints`` very large), so every interval's checkpoint is still there. The population's
return at a frame is the report return of its member with the best selection return (every member's latest
is evaluated; picking the best on separate episodes keeps the reported figure free of the max-of-4 bias).
Each independent run counts separately; the figures use the median run, and the best-of-4 independent runs
(picked the same way) is printed as the equal-total-compute baseline. Where the case's yaml names another objective
(``pbt.objective``; ``hopper_standing``: the distance travelled), every "return" below is that objective's value.

**Final hand-over.** With ``--final-episodes N`` (64 on the MuJoCo cases) the final returns, and every verdict on
them, come from a hand-over played once more at the end: every member's final checkpoint of every arm on N new
selection and N new report episodes (env seeds from 105000 on), the member leading on selection reported on the
others. Eight episodes per point suffice for the curves, but not to pick the best of four HalfCheetah policies whose
return varies much from start to start (docs/sweep-study.md). 0 (the default elsewhere): the last point's figures.

**Figures.** Frames to reach ``--target`` held-out return: per member (wall-clock equivalent when each member
has its own device) and total in the arm (members x per member; the same for both arms, which spend equal
total frames). The ratio population / median independent run is per member; where a run never reached the
target its frames count as infinite and a ratio is reported as a bound. Median and range over seeds; final
held-out return. Writes ``results.json`` (every raw number), ``population_vs_independent.png`` and prints a
table. Goals: for ``gamma`` and ``no_learn``, the population reaches every target with at most 0.5x the frames of the
best independent run (the honest baseline at equal total frames), in every seed; for ``tuned``, it ends no worse
than the independent runs. The older goal against the median run is printed too. Where the searched keys ended,
against their tuned values, is printed per seed.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_analysis as analysis  # noqa: E402  (next to this script)
import study_arms as arms  # noqa: E402
import study_report  # noqa: E402
import study_sweep  # noqa: E402
from study_cases import (  # noqa: E402,F401  (the cases live next to this script)
    CASES,
    TRAINERS,
    Case,
    case_config,
    config_epoch_frames,
    value_overrides,
)

FULL = {
    "seeds": [0, 1, 2],
    "members": 4,
    "frames_per_member": 196_608,
    "interval": 8192,
    "eval_every": 2,
    "eval_episodes": 16,
    "final_episodes": 64,
}
"""Defaults: 3 seeds x 3 arms x 4 members x 196,608 frames (96 epochs of 2,048). Every case (the MuJoCo ones set
only what differs, :data:`study_cases.MUJOCO_FULL`) is judged on the 64 + 64 hand-over: on HalfCheetah 8 + 8
picked the wrong member in two of three seeds where 64 + 64 did not (docs/sweep-study.md); the earlier Pendulum rounds
passed ``--final-episodes 64``."""
SMOKE = {
    "seeds": [0],
    "members": 2,
    "frames_per_member": 12_288,
    "interval": 4096,
    "eval_every": 1,
    "eval_episodes": 4,
    "final_episodes": 2,
}
"""``--smoke``: every step once, a minute or two."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="new folder for the workspaces, results.json and the plot")
    p.add_argument("--task", default=None, help="gymnasium task id (default: the case's)")
    p.add_argument(
        "--case",
        choices=sorted(CASES),
        default="gamma",
        help="named case: its start, searched keys, tuned values and targets (default gamma); "
        + "; ".join(f"{k}: {c.summary}" for k, c in sorted(CASES.items())),
    )
    p.add_argument("--agent-yaml", default=None, help="rl_games agent yaml (default: the task's packaged yaml)")
    p.add_argument(
        "--set",
        dest="set_values",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="starting value, repeatable (default: the case's); KEY without a dot is agent.params.config.KEY",
    )
    p.add_argument(
        "--mutate",
        action="append",
        default=None,
        metavar="KEY=SPEC",
        help="mutation spec, repeatable (default: the case's)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help=f"study seeds (default {FULL['seeds']})")
    p.add_argument("--members", type=int, default=None, help=f"members per arm (default {FULL['members']})")
    p.add_argument(
        "--frames-per-member",
        type=int,
        default=None,
        help=f"env frames each member trains (default {FULL['frames_per_member']})",
    )
    p.add_argument(
        "--interval",
        type=int,
        default=None,
        help=f"frames between publish-and-decide points (default {FULL['interval']})",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help=f"evaluate every N intervals of frames per member (default {FULL['eval_every']})",
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=None,
        help=f"held-out episodes per checkpoint, for selection and again for the report "
        f"(default {FULL['eval_episodes']})",
    )
    p.add_argument(
        "--final-episodes",
        type=int,
        default=None,
        help="the final hand-over's selection episodes, and as many reporting, per member of every arm; the final "
        f"returns come from it (0: from the last evaluation point; default {FULL['final_episodes']}, every case's)",
    )
    p.add_argument("--target", type=float, default=None, help="held-out return to reach (default: the case's first)")
    p.add_argument(
        "--sweep",
        type=float,
        nargs="*",
        default=None,
        metavar="RETURN",
        help="more targets to report from the same runs (default: the case's others)",
    )
    p.add_argument(
        "--reanalyze",
        action="store_true",
        help="no training: recompute figures, table and plot from --out/results.json (e.g. other targets)",
    )
    p.add_argument("--rule", default=None, help="selection rule of the population (default: the package's)")
    p.add_argument(
        "--mutation-rate",
        type=float,
        default=None,
        help="probability that each mutated hyperparameter changes at an explore (default: the package's)",
    )
    p.add_argument(
        "--explore",
        default=None,
        help="explore strategy of the population arm (`random`, `pb2`; default: the package's); the independent "
        "arm never explores, so it is the same either way",
    )
    p.add_argument(
        "--member-flag",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for every member of both arms, repeatable (e.g. --member-flag=--pbt-window=32)",
    )
    p.add_argument(
        "--population-flag",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the population arm's members only, repeatable: a variant of the search judged "
        "against the same baselines (--baselines-from), e.g. --population-flag=--pbt-start-grace-frames=262144",
    )
    p.add_argument("--sequential", action="store_true", help="train the two arms of a seed one after the other")
    p.add_argument(
        "--tuned-reference",
        default=None,
        help="results.json of a finished `--case tuned` study with the same seeds and frames: reports, per seed and "
        "target, the frames the tuned start's best independent run needs (what no search can beat)",
    )
    p.add_argument(
        "--baselines-from",
        default=None,
        help="a finished study folder of the same case and settings: reuse its sweep and independent arms (their runs "
        "never exploit or explore, so the population's explore strategy does not change them; the sweep's start is "
        "drawn from the same seed) instead of training them again; the settings that define them must match (the "
        "agent yaml by its bytes, so the same file in another clone does)",
    )
    p.add_argument(
        "--vec-env",
        default="gymnasium",
        choices=("gymnasium", "envpool"),
        help="every member's env backend (cpu_member --vec-env); the held-out evaluation plays gymnasium's env",
    )
    p.add_argument("--smoke", action="store_true", help="tiny run (1 seed, 2 members, 12k frames) of every step")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    case = CASES[args.case]
    # The arms' launchers run in their seed's folder: a relative --out would put their workspaces under it.
    args.out = str(Path(args.out).absolute())
    preset = SMOKE if args.smoke else {**FULL, **case.full}
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.task = case.task if args.task is None else args.task
    args.target = case.targets[0] if args.target is None else args.target
    args.sweep = list(case.targets[1:]) if args.sweep is None else args.sweep
    args.set_values = list(case.set_values) if args.set_values is None else args.set_values
    args.mutate = list(case.mutate) if args.mutate is None else args.mutate
    args.tuned = dict(case.tuned)
    args.goal = case.goal
    args.trainer = case.trainer
    args.agent_source = str(arms.agent_yaml(args))
    try:  # recorded, so --baselines-from accepts the same file from another clone
        args.agent_source_sha256 = hashlib.sha256(Path(args.agent_source).read_bytes()).hexdigest()
    except OSError as exc:
        raise SystemExit(f"error: --agent-yaml {args.agent_source}: cannot read it ({exc.strerror})") from None
    args.agent_seeds = f"{arms.agent_seed(0)} + 1000 x seed"  # recorded, so older arms (1000 x seed) are not reused
    for flag, value in (
        ("--members", args.members),
        ("--frames-per-member", args.frames_per_member),
        ("--interval", args.interval),
        ("--eval-every", args.eval_every),
        ("--eval-episodes", args.eval_episodes),
    ):
        if value < 1:
            raise SystemExit(f"error: {flag} must be >= 1, got {value}")
    if args.final_episodes < 0:
        raise SystemExit(f"error: --final-episodes must be >= 0 (0: no final hand-over), got {args.final_episodes}")
    if args.vec_env not in case.vec_envs:
        raise SystemExit(f"error: --vec-env {args.vec_env}: case {args.case} trains on {', '.join(case.vec_envs)} only")
    for item in [*args.set_values, *args.mutate]:
        if "=" not in item or item.startswith("="):
            raise SystemExit(f"error: expected KEY=VALUE, got {item!r}")
    return args


def write_case_yaml(args: argparse.Namespace, out: Path) -> None:
    """The study's own copy of the yaml: the case's start values (``--set``) and, with ``--smoke``, the case's
    :attr:`Case.smoke_set`, used by every arm and the evaluation (``--agent-yaml`` from here on). The start is the
    yaml a user would run: the population's diverse start draws it, the independent arm trains it."""
    import yaml

    from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml

    smoke_set = CASES[args.case].smoke_set if args.smoke else ()
    smoke_prefix = TRAINERS[args.trainer].smoke_prefix
    overrides = [*value_overrides(args.set_values, args.trainer), *(smoke_prefix + item for item in smoke_set)]
    cfg = apply_overrides(load_yaml(args.agent_source), overrides)
    path = out / "agent_case.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    args.agent_yaml = str(path.absolute())


def frames_per_epoch(args: argparse.Namespace) -> int:
    from async_pbt_isaaclab.core.agent_config import load_yaml

    return config_epoch_frames(load_yaml(arms.agent_yaml(args)), args.trainer)


def tuned_reference(args: argparse.Namespace) -> dict | None:
    """``--tuned-reference``'s results.json (``None`` without the flag)."""
    import json

    if not args.tuned_reference:
        return None
    try:
        return json.loads(Path(args.tuned_reference).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: --tuned-reference {args.tuned_reference}: {exc}") from None


def add_tuned_bound(args: argparse.Namespace, results: dict) -> list[str]:
    """Store and describe the tuned reference's bound (:func:`study_analysis.tuned_bound`), if one was given."""
    tuned = tuned_reference(args)
    if tuned is None:
        return []
    try:
        results["tuned_bound"] = analysis.tuned_bound(results, tuned, [args.target, *args.sweep])
    except ValueError as exc:
        raise SystemExit(f"error: --tuned-reference {args.tuned_reference}: {exc}") from None
    return study_report.tuned_bound_lines(results["tuned_bound"], int(results["settings"]["members"]))


def play_final_handover(
    args: argparse.Namespace, evaluator, run: dict, seed: int, out: Path, frames: int, reused: dict | None
) -> None:
    """``--final-episodes``: every arm's hand-over at the end (:func:`study_analysis.final_handover`) into
    ``run["final_handover"]``; a reused arm's is taken from its own study where that played as many episodes."""
    if not args.final_episodes:
        return
    handover = {}
    for arm in arms.ARMS:
        earlier = (reused["seeds"][str(seed)].get("final_handover") or {}).get(arm) if reused is not None else None
        if arm in arms.BASELINE_ARMS and earlier is not None and earlier["episodes"] == args.final_episodes:
            handover[arm] = earlier
            continue
        folder = analysis.arm_folder(out, run, seed, arm)
        handover[arm] = analysis.final_handover(evaluator, folder, args.members, frames, args.final_episodes)
    run["final_handover"] = handover
    print(
        f"[study] seed {seed}: final hand-over on {args.final_episodes} + {args.final_episodes} new episodes: "
        + ", ".join(f"{arm} member {h['picked']} {study_report.fmt_value(h['report'])}" for arm, h in handover.items()),
        flush=True,
    )


def seed_figures(run: dict, points: list[int], target: float, sweep: list[float]) -> dict:
    """A seed's figures: against the independent runs, and against the sweep where it ran."""
    figures = analysis.seed_summary(run, points, target, sweep)
    if "sweep" in run:
        figures.update(study_sweep.sweep_summary({**run, **figures}, points, (target, *sweep)))
    return figures


def report_lines(results: dict, args: argparse.Namespace) -> list[str]:
    """The printed report: the figures against the independent runs, then against the sweep."""
    members = int(results["settings"]["members"])
    results["summary"]["sweep_goal"] = study_sweep.sweep_goal(results)
    return study_report.report(results, args.target, members) + study_sweep.sweep_report_lines(results, members)


def reanalyze(args: argparse.Namespace, out: Path) -> int:
    """Figures from the evaluated checkpoints in ``out/results.json``, with this command's target and sweep."""
    import json

    try:
        results = json.loads((out / "results.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"error: --reanalyze needs {out / 'results.json'} from a finished study ({exc})", file=sys.stderr)
        return 2
    members = int(results["settings"]["members"])
    for run in results["seeds"].values():
        run.update(seed_figures(run, results["eval_points"], args.target, args.sweep))
    results["summary"] = analysis.study_summary(results, args.target, members)
    results["settings"].update(target=args.target, sweep=args.sweep)
    plot = out / f"population_vs_independent_target{args.target:g}.png"
    study_report.plot(results, args.target, members, plot)
    for line in report_lines(results, args) + add_tuned_bound(args, results):
        print(line)
    print(f"plot: {plot} (results.json left as it was)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = resolve(build_parser().parse_args(argv))
    out = Path(args.out)
    if args.reanalyze:
        return reanalyze(args, out)
    if out.exists() and any(out.iterdir()):
        print(f"error: --out {out} exists and is not empty; a study needs a new folder", file=sys.stderr)
        return 2
    reused = arms.reused_baselines(args)  # checked before --out is written: a refused study leaves it as it was
    out.mkdir(parents=True, exist_ok=True)
    write_case_yaml(args, out)
    per_epoch = frames_per_epoch(args)
    epochs = math.ceil(args.frames_per_member / per_epoch)
    frames = epochs * per_epoch
    points = analysis.eval_points(frames, args.interval * args.eval_every)
    from async_pbt_isaaclab.commands.evaluate import make_evaluator

    evaluator = make_evaluator(args.task, arms.agent_yaml(args))
    results = {
        "settings": {k: v for k, v in vars(args).items()},
        "frames_per_member": frames,
        "frames_per_epoch": per_epoch,
        "eval_points": points,
        "seeds": {},
    }
    results["settings"]["member_command_population"] = arms.member_command(
        args, 0, out / "seedS" / "population", epochs, "population"
    )
    started = time.time()
    # Pipeline: seed k+1 trains while seed k's checkpoints are evaluated (held-out returns do not depend
    # on wall time, and the evaluation needs only one core for a few seconds per checkpoint).
    job = arms.start_seed(args, args.seeds[0], epochs)
    for k, seed in enumerate(args.seeds):
        run = arms.finish_seed(args, job)
        if k + 1 < len(args.seeds):
            job = arms.start_seed(args, args.seeds[k + 1], epochs)
        for arm in arms.trained_arms(args):
            folder = out / f"seed{seed}" / arm
            run[arm] = analysis.evaluate_arm(evaluator, folder, args.members, points, args.eval_episodes)
            run[arm].update(analysis.decided_changes(folder))
        if reused is not None:
            for arm in arms.BASELINE_ARMS:
                run[arm] = reused["seeds"][str(seed)][arm]
            run["baselines_reused_from"] = str(Path(args.baselines_from).absolute() / f"seed{seed}")
        play_final_handover(args, evaluator, run, seed, out, frames, reused)
        run.update(seed_figures(run, points, args.target, args.sweep))
        results["seeds"][str(seed)] = run
        analysis.write_json(out / "results.json", results)
        print(f"[study] seed {seed}: evaluated; population exploits {run['exploits']}", flush=True)
    results["wall_s"] = time.time() - started
    results["summary"] = analysis.study_summary(results, args.target, args.members)
    analysis.write_json(out / "results.json", results)
    study_report.plot(results, args.target, args.members, out / "population_vs_independent.png")
    bound_lines = add_tuned_bound(args, results)
    analysis.write_json(out / "results.json", results)
    for line in report_lines(results, args) + bound_lines:
        print(line)
    print(f"raw numbers: {out / 'results.json'}; plot: {out / 'population_vs_independent.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
