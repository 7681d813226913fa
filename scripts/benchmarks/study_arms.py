"""The arms of ``population_vs_independent.py``: how each arm's members are launched, waited for and reused.

An arm is one workspace of ``--members`` CPU members under ``async-pbt launch``, trained from the study's own yaml
(:func:`agent_yaml`): ``population`` searches, ``sweep`` draws the population's own start and never exploits,
``independent`` trains the case's start as given. Everything an arm's command line says is decided here; the driver
evaluates what the arms leave in their workspaces (``study_analysis``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_cases import CASES, TRAINERS, case_config  # next to this script

NEW_POPULATION_SEED = "agent.pbt.seed={seed}"
"""How the study passes its seed to the population: every random stream of the search follows it."""


def agent_seed(seed: int) -> int:
    """Member 0's agent seed for study seed ``seed`` (member ``i`` adds ``i``): never 0, which rl_games reads as unset
    and seeds nothing with. The runs docs/validation.md and docs/sweep-study.md report used ``1000 * seed``: their
    study seed 0's member 0 trained unseeded in every arm."""
    return 1000 * seed + 1


INDEPENDENT_ARM = ("--pbt-max-restarts", "0", "agent.pbt.start_spread=0")
"""What makes the independent arm independent runs of the case's start: never exploit or explore, and no diverse
start (each run trains the values it was given, as a user's run of the yaml would)."""


ARMS = ("population", "sweep", "independent")
"""``population``: the package's defaults (``--explore``); ``sweep``: the same command, the same generation-0 draw
(same population seed: the same diverse values and agent seeds), never exploiting (``--pbt-max-restarts 0``): what a
user who launches N runs over the bounds and keeps the best gets; ``independent``: N runs at the case's start."""


BASELINE_ARMS = ARMS[1:]
"""The arms no change to the population's search code changes (reused with ``--baselines-from``)."""


SWEEP_ARM = ("--pbt-max-restarts", "0")
"""What makes the sweep arm a sweep: the population's own start, never an exploit or explore."""


def agent_overrides(args: argparse.Namespace) -> list[str]:
    """The mutation specs of the case. Its start values are in the study's own yaml (the driver's
    ``write_case_yaml``): a value typed on a member's command line is kept out of the diverse start, a value in the
    yaml is drawn."""
    return [f"agent.pbt.mutation.{item}" for item in args.mutate]


def agent_yaml(args: argparse.Namespace) -> Path:
    """The config every arm trains and the evaluation plays: ``--agent-yaml``, else the case's (its own, or the
    task's packaged one for the case's trainer)."""
    if args.agent_yaml:
        return Path(args.agent_yaml).absolute()
    try:
        return case_config(dataclasses.replace(CASES[args.case], task=args.task))
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"error: --task {args.task}: no packaged {args.trainer} config ({exc})") from None


def member_command(args: argparse.Namespace, seed: int, workspace: Path, epochs: int, arm: str) -> list[str]:
    trainer = TRAINERS[args.trainer]
    cmd = [
        sys.executable,
        "-m",
        trainer.module,
        trainer.config_flag,
        str(agent_yaml(args)),
        "--max_iterations",
        str(epochs),
        "--train-dir",
        str(workspace / "runs"),
        "--pbt-interval-steps",
        str(args.interval),
        "--pbt-heartbeat-interval-s",
        "5",
        # Retention off: the held-out evaluation afterwards needs every interval's checkpoint.
        "--pbt-keep-last-checkpoints",
        "1000000",
        f"{trainer.threads_key}=1",
        f"{trainer.seed_key}={agent_seed(seed)}",
        f"{trainer.task_key}={args.task}",
        *agent_overrides(args),
    ]
    # The population arm runs the package's defaults for a new population; only what is given here changes them.
    cmd += ["--pbt-rule", args.rule] if args.rule else []
    cmd += ["--pbt-mutation-rate", str(args.mutation_rate)] if args.mutation_rate is not None else []
    cmd += [f"agent.pbt.explore={args.explore}"] if args.explore and arm == "population" else []
    cmd += ["--vec-env", args.vec_env] if args.vec_env != "gymnasium" else []
    cmd.append(NEW_POPULATION_SEED.format(seed=seed))
    cmd += {"independent": INDEPENDENT_ARM, "sweep": SWEEP_ARM}.get(arm, ())
    cmd += list(args.member_flag)
    # The baselines never see it, so a study with other population flags may reuse them (not in REUSE_MUST_MATCH).
    return cmd + (list(args.population_flag) if arm == "population" else [])


def launch(args: argparse.Namespace, seed: int, arm: str, workspace: Path, epochs: int) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.cli",
        "launch",
        "--members",
        str(args.members),
        "--workspace",
        str(workspace),
        "--gpus",
        "none",
        "--progress-interval",
        "60",
        "--backoff",
        "1",
        "--",
        *member_command(args, seed, workspace, epochs, arm),
    ]
    log = open(workspace.parent / f"{arm}-launcher.log", "w")
    print(f"[study] seed {seed} {arm}: {' '.join(cmd)}", flush=True)
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(workspace.parent), env=dict(os.environ, PYTHONUNBUFFERED="1")
    )


def start_seed(args: argparse.Namespace, seed: int, epochs: int) -> dict:
    """Start the seed's arms (both at once, or the first with ``--sequential``); see :func:`finish_seed`."""
    seed_dir = Path(args.out) / f"seed{seed}"
    seed_dir.mkdir(parents=True)
    trained = trained_arms(args)
    first = trained if not args.sequential else trained[:1]
    return {
        "seed": seed,
        "dir": seed_dir,
        "epochs": epochs,
        "started": time.time(),
        "load": [os.getloadavg()[0]],
        "codes": {},
        "procs": {arm: launch(args, seed, arm, seed_dir / arm, epochs) for arm in first},
    }


def finish_seed(args: argparse.Namespace, job: dict) -> dict:
    """Wait for the seed's launchers (starting the second arm with ``--sequential``); training facts."""
    while True:
        for arm, proc in job["procs"].items():
            while proc.poll() is None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    job["load"].append(os.getloadavg()[0])
            job["codes"][arm] = proc.returncode
        remaining = [a for a in trained_arms(args) if a not in job["codes"]]
        if not remaining:
            break
        job["procs"] = {arm: launch(args, job["seed"], arm, job["dir"] / arm, job["epochs"]) for arm in remaining}
    wall, load = time.time() - job["started"], job["load"]
    print(
        f"[study] seed {job['seed']}: trained in {wall:.0f}s (launcher exit codes {job['codes']}, "
        f"load average {min(load):.1f}-{max(load):.1f})",
        flush=True,
    )
    return {"wall_s": wall, "launcher_exit": job["codes"], "load_average": [min(load), max(load)]}


REUSE_MUST_MATCH = (
    "case task agent_source set_values mutate members frames_per_member interval eval_every eval_episodes "
    "member_flag vec_env agent_seeds trainer"
).split()
"""The settings that define the baseline arms and their evaluation: a reused arm must have run with these (the sweep
also draws its start from the population seed, the members and the mutation specs, all of them here)."""


def _by_content(key: str, settings: dict) -> bool:
    """The agent yaml is compared by its bytes where the study recorded them (a clone of the same commit in another
    folder trains the same file); a study recorded before that, by its path."""
    return key == "agent_source" and bool(settings.get("agent_source_sha256"))


def _setting_differs(key: str, settings: dict, args: argparse.Namespace) -> bool:
    """Whether a reused study's setting differs from this one's."""
    if _by_content(key, settings):
        return settings["agent_source_sha256"] != args.agent_source_sha256
    return settings.get(key) != getattr(args, key)


def _shown(key: str, settings: dict) -> object:
    """A setting as an error names it: the agent yaml by path and content."""
    if _by_content(key, settings):
        return f"{settings[key]} (sha256 {settings['agent_source_sha256'][:12]})"
    return settings.get(key)


def trained_arms(args: argparse.Namespace) -> tuple[str, ...]:
    """The arms this command trains (the baseline arms are skipped when reused)."""
    return ARMS[:1] if args.baselines_from else ARMS


def reused_baselines(args: argparse.Namespace) -> dict | None:
    """The finished study whose sweep and independent arms are reused (``--baselines-from``), after checking it ran
    with the settings that define them; ``None`` without the flag."""
    import json

    if not args.baselines_from:
        return None
    path = Path(args.baselines_from) / "results.json"
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: --baselines-from needs {path} from a finished study ({exc})") from None
    settings = {"trainer": "rl_games", **old["settings"]}  # studies before the rsl_rl cases trained rl_games
    differ = [k for k in REUSE_MUST_MATCH if _setting_differs(k, settings, args)]
    missing = [s for s in args.seeds if str(s) not in old["seeds"] or "sweep" not in old["seeds"][str(s)]]
    if differ or missing:
        raise SystemExit(
            f"error: {path} cannot stand in for these baseline arms: "
            + "; ".join([f"{k}: {_shown(k, settings)!r} there, {_shown(k, vars(args))!r} here" for k in differ])
            + (f"; seeds {missing} not in it (with a sweep arm)" if missing else "")
        )
    return old
