#!/usr/bin/env python
"""Cost of the population observer: the same rl_games PPO run with and without :class:`PbtObserver`.

::

    python scripts/benchmarks/observer_overhead.py                 # 6 pairs x 25 epochs, about 3-4 min on 2 cores
    python scripts/benchmarks/observer_overhead.py --pairs 3 --epochs 10   # quick look

Both variants train the packaged Pendulum-v1 PPO config (``async_pbt_isaaclab/examples/pendulum_ppo.yaml``,
16 envs x 128 steps = 2048 frames per epoch, CPU, one torch thread) in this process, with the same seed,
through the in-process gymnasium vec-env, and with rl_games' ``IsaacAlgoObserver`` behind a
:class:`MultiObserver`:

* **baseline**: ``MultiObserver([IsaacAlgoObserver()])``;
* **observer**: ``MultiObserver([PbtObserver(session), IsaacAlgoObserver()])`` on a claimed member of a fresh
  one-member workspace with realistic settings: a publish + decide (checkpoint save with fsync, record,
  retention, audit entry) every ``--interval-epochs`` epochs, a heartbeat (drain the episode summaries,
  rewrite the record) every ``--heartbeat-s`` seconds.

So the only difference is our observer. (The gym vec-env's episode-summary emitter runs in both: it is the
env layer's cost, measured by ``summary_emitter.py``.)

Two measures, because the machines are shared and noisy (10-20 % run to run):

1. **A/B frames/s**: frames trained / wall time of ``runner.run`` (agent construction included, process
   start and imports excluded). Pairs are interleaved ABBA (A B, B A, A B, ...) so drift hits both alike; the
   median and spread (min-max) of each variant and of the per-pair ratio observer/baseline are printed.
2. **Direct hook time** (the robust one): wall time spent inside every hook of the PbtObserver
   (``after_steps`` is where all the work is: ``PbtObserver.hook_seconds`` / ``hook_calls``; the other hooks
   are no-ops and are timed too) as a fraction of the run's wall time. ``1 - fraction`` is the frames/s
   ratio the observer allows if nothing else changes.

Target: ratio >= 0.99 (Isaac Lab's own PBT observer measured 0.994 on this task and machine). The script
prints PASS/FAIL for the hook-time measure and for the median A/B ratio, and says when the A/B spread is
larger than the effect it is trying to resolve. ``--profile`` adds a cProfile of the observer's
``after_steps`` calls (what dominates the added time).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_RATIO = 0.99
"""frames/s with the observer / frames/s without, at least."""


# ------------------------------------------------------------------------------------------- helpers
class TimedObserver:
    """Wraps an observer and times every hook it receives (its own cost included: about 0.2 us per call)."""

    HOOKS = ("before_init", "after_init", "process_infos", "after_steps", "after_clear_stats", "after_print_stats")

    def __init__(self, inner: Any, profile: cProfile.Profile | None = None):
        self.inner = inner
        self.seconds = {h: 0.0 for h in self.HOOKS}
        self.calls = {h: 0 for h in self.HOOKS}
        self.after_steps_s: list[float] = []
        self.profile = profile

    def _timed(self, name: str, *args: Any) -> None:
        method = getattr(self.inner, name, None)
        if method is None:
            return
        t0 = time.perf_counter()
        if name == "after_steps" and self.profile is not None:
            self.profile.runcall(method, *args)
        else:
            method(*args)
        dt = time.perf_counter() - t0
        self.seconds[name] += dt
        self.calls[name] += 1
        if name == "after_steps":
            self.after_steps_s.append(dt)

    def before_init(self, *a):
        self._timed("before_init", *a)

    def after_init(self, *a):
        self._timed("after_init", *a)

    def process_infos(self, *a):
        self._timed("process_infos", *a)

    def after_steps(self):
        self._timed("after_steps")

    def after_clear_stats(self):
        self._timed("after_clear_stats")

    def after_print_stats(self, *a):
        self._timed("after_print_stats", *a)


class FsyncMeter:
    """Counts ``os.fsync`` calls and their wall time (the durable-write cost of the workspace protocol)."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._orig = os.fsync

    def __enter__(self) -> "FsyncMeter":
        orig = self._orig

        def fsync(fd):
            t0 = time.perf_counter()
            try:
                return orig(fd)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        os.fsync = fsync
        return self

    def __exit__(self, *exc) -> None:
        os.fsync = self._orig


class Capture:
    """Remembers the agent (to read ``frame`` and close its writer and env after the run)."""

    algo: Any = None

    def after_init(self, algo):
        self.algo = algo


def _agent_cfg(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT

    cfg = load_yaml(args.agent or DEFAULT_AGENT)
    cfg["params"]["seed"] = args.seed
    rl = cfg["params"]["config"]
    rl.update(
        max_epochs=args.epochs,
        num_actors=args.num_envs,
        train_dir=str(root / "runs"),
        full_experiment_name="bench",
        print_stats=False,
        save_best_after=10**9,
        save_frequency=0,
    )  # no rl_games best-checkpoint saves in either variant
    frames_per_epoch = int(rl["num_actors"]) * int(rl["horizon_length"])
    cfg["pbt"] = {
        "enabled": True,
        "policy_idx": 0,
        "num_policies": 1,
        "workspace": str(root / "ws"),
        "interval_steps": args.interval_epochs * frames_per_epoch,
        "heartbeat_interval_s": args.heartbeat_s,
        "min_episodes": 16,
        "window": 64,
        "mutation": {"learning_rate": "mutate_float", "entropy_coef": "mutate_float", "gamma": "mutate_discount"},
    }
    return cfg


def one_run(variant: str, args: argparse.Namespace, profile: cProfile.Profile | None = None) -> dict[str, Any]:
    """Train ``args.epochs`` epochs on a fresh temp workspace; returns frames, wall seconds and hook times."""
    import torch
    from rl_games.common.algo_observer import IsaacAlgoObserver
    from rl_games.torch_runner import Runner

    from async_pbt_isaaclab.core.agent_config import load_population_config
    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv_for
    from async_pbt_isaaclab.member.session import start_member
    from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver
    from async_pbt_isaaclab.rl_games.observer import PbtObserver

    root = Path(tempfile.mkdtemp(prefix=f"obs_bench_{variant}_", dir=args.workdir))
    threads = torch.get_num_threads()
    try:
        raw = _agent_cfg(args, root)
        agent_cfg, pcfg = load_population_config(raw)
        task = register_gym_vecenv_for(agent_cfg)
        capture = Capture()
        timed = observer = session = None
        if variant == "observer":
            session, agent_cfg = start_member(agent_cfg, pcfg, train_dir=str(root / "runs"), task=task)
            observer = PbtObserver(session)
            timed = TimedObserver(observer, profile)
            observers = [timed, IsaacAlgoObserver(), capture]
        else:
            agent_cfg = copy.deepcopy(agent_cfg)
            agent_cfg["params"]["config"]["full_experiment_name"] = "bench"
            observers = [IsaacAlgoObserver(), capture]
        runner = Runner(MultiObserver(observers))
        runner.load(agent_cfg)
        runner.reset()
        with FsyncMeter() as fsyncs:
            t0 = time.perf_counter()
            runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
            wall = time.perf_counter() - t0
        algo = capture.algo
        out: dict[str, Any] = {
            "variant": variant,
            "frames": int(algo.frame),
            "epochs": int(algo.epoch_num),
            "wall_s": wall,
            "fps": int(algo.frame) / wall,
        }
        if observer is not None:
            out.update(
                hook_seconds=observer.hook_seconds,
                hook_calls=observer.hook_calls,
                all_hooks_s=sum(timed.seconds.values()),
                hook_split=dict(timed.seconds),
                hook_calls_split=dict(timed.calls),
                after_steps_s=list(timed.after_steps_s),
                publishes=len(observer.publisher.decisions),
                fsync_calls=fsyncs.calls,
                fsync_s=fsyncs.seconds,
            )
            observer.finish()  # final checkpoint + record: after the timed run (once per process, not per epoch)
        if getattr(algo, "writer", None) is not None:
            algo.writer.close()
        algo.vec_env.close()
        return out
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(root, ignore_errors=True)


def _spread(values: list[float]) -> str:
    return f"{min(values):.4g}..{max(values):.4g}"


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.3f} %"


# ------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--pairs", type=int, default=6, help="A/B pairs (interleaved ABBA)")
    p.add_argument("--epochs", type=int, default=25, help="epochs per run")
    p.add_argument("--num-envs", type=int, default=16, help="gymnasium envs (frames per epoch = envs x 128)")
    p.add_argument("--interval-epochs", type=int, default=10, help="publish + decide every this many epochs")
    p.add_argument("--heartbeat-s", type=float, default=10.0, help="heartbeat interval (wall seconds)")
    p.add_argument("--seed", type=int, default=7, help="params.seed of both variants")
    p.add_argument("--agent", default=None, help="agent yaml (default: the packaged Pendulum-v1 PPO)")
    p.add_argument("--warmup-epochs", type=int, default=2, help="epochs of an untimed warm-up run per variant")
    p.add_argument(
        "--workdir",
        default=None,
        help="folder for the temp workspaces (default: the system temp dir; e.g. /dev/shm for no disk)",
    )
    p.add_argument("--profile", action="store_true", help="cProfile the observer's after_steps calls")
    p.add_argument("--json", default=None, help="also write all measurements to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import contextlib

    import torch

    quiet = open(os.devnull, "w")
    print(
        f"observer overhead: Pendulum-v1 PPO, {args.num_envs} envs x 128 steps, {args.epochs} epochs per run, "
        f"{args.pairs} pairs ABBA, publish+decide every {args.interval_epochs} epochs, heartbeat "
        f"{args.heartbeat_s:g} s; torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    t_start = time.perf_counter()
    warm = argparse.Namespace(**{**vars(args), "epochs": args.warmup_epochs})
    if args.warmup_epochs > 0:
        with contextlib.redirect_stdout(quiet):
            one_run("baseline", warm)
            one_run("observer", warm)

    profile = cProfile.Profile() if args.profile else None
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    for i in range(args.pairs):
        order = ("baseline", "observer") if i % 2 == 0 else ("observer", "baseline")
        pair = {}
        for variant in order:
            with contextlib.redirect_stdout(quiet):
                pair[variant] = one_run(variant, args, profile)
            runs.append(pair[variant])
        ratio = pair["observer"]["fps"] / pair["baseline"]["fps"]
        ratios.append(ratio)
        o = pair["observer"]
        print(
            f"  pair {i + 1}/{args.pairs} ({order[0][0].upper()}{order[1][0].upper()}): baseline "
            f"{pair['baseline']['fps']:7.0f} fps, observer {o['fps']:7.0f} fps, ratio {ratio:.4f}; hooks "
            f"{1e3 * o['all_hooks_s']:.1f} ms of {o['wall_s']:.1f} s ({_fmt_pct(o['all_hooks_s'] / o['wall_s'])}), "
            f"{o['publishes']} publish+decide",
            flush=True,
        )

    base = [r["fps"] for r in runs if r["variant"] == "baseline"]
    obs = [r for r in runs if r["variant"] == "observer"]
    obs_fps = [r["fps"] for r in obs]
    hook_frac = [r["all_hooks_s"] / r["wall_s"] for r in obs]
    after_frac = [r["hook_seconds"] / r["wall_s"] for r in obs]
    epoch_s = [r["wall_s"] / r["epochs"] for r in obs]
    per_call = [t for r in obs for t in r["after_steps_s"]]
    interval = args.interval_epochs
    # Epoch k (1-based) publishes when the frame crosses a multiple of interval_steps: k = interval+1, 2*interval+1...
    publish_calls = [t for r in obs for k, t in enumerate(r["after_steps_s"], 1) if k > 1 and (k - 1) % interval == 0]
    other_calls = [
        t for r in obs for k, t in enumerate(r["after_steps_s"], 1) if not (k > 1 and (k - 1) % interval == 0)
    ]
    split: dict[str, float] = {}
    for r in obs:
        for k, v in r["hook_split"].items():
            split[k] = split.get(k, 0.0) + v
    calls: dict[str, int] = {}
    for r in obs:
        for k, v in r["hook_calls_split"].items():
            calls[k] = calls.get(k, 0) + v

    med_ratio = statistics.median(ratios)
    med_frac = statistics.median(hook_frac)
    # Steady state (a long run): one publish+decide per interval, one heartbeat per heartbeat_s, the cheap
    # path on every other epoch, the no-op hooks on every step. A short run dilutes none of these much, but
    # its wall time also holds agent construction; the estimate does not.
    heartbeat_calls = [r["after_steps_s"][0] for r in obs]  # the first call of a run is a heartbeat
    epoch_med = statistics.median(epoch_s)
    noop_per_epoch = sum(split[h] for h in split if h != "after_steps") / sum(r["epochs"] for r in obs)
    steady = (
        (statistics.median(publish_calls) / (interval * epoch_med) if publish_calls else 0.0)
        + statistics.median(heartbeat_calls) / max(args.heartbeat_s, epoch_med)
        + (statistics.median(other_calls) + noop_per_epoch) / epoch_med
    )
    hook_overhead = max(med_frac, steady)
    hook_ratio = 1.0 - hook_overhead
    ratio_spread = max(ratios) - min(ratios)

    print()
    print(f"{'measure':<44}{'median':>12}{'min..max':>24}")
    print(f"{'baseline frames/s':<44}{statistics.median(base):>12.0f}{_spread(base):>24}")
    print(f"{'observer frames/s':<44}{statistics.median(obs_fps):>12.0f}{_spread(obs_fps):>24}")
    print(f"{'per-pair ratio observer/baseline':<44}{med_ratio:>12.4f}{_spread(ratios):>24}")
    print(f"{'epoch wall time, observer runs (s)':<44}{statistics.median(epoch_s):>12.3f}{_spread(epoch_s):>24}")
    print(
        f"{'after_steps per call, all (ms)':<44}{1e3 * statistics.median(per_call):>12.3f}"
        f"{_spread([1e3 * t for t in per_call]):>24}"
    )
    if publish_calls:
        print(
            f"{'after_steps per call, publish+decide (ms)':<44}{1e3 * statistics.median(publish_calls):>12.3f}"
            f"{_spread([1e3 * t for t in publish_calls]):>24}"
        )
    print(
        f"{'after_steps per call, other epochs (ms)':<44}{1e3 * statistics.median(other_calls):>12.3f}"
        f"{_spread([1e3 * t for t in other_calls]):>24}"
    )
    print(
        f"{'after_steps time / run wall time':<44}{_fmt_pct(statistics.median(after_frac)):>12}"
        f"{_fmt_pct(min(after_frac)) + '..' + _fmt_pct(max(after_frac)):>24}"
    )
    print(
        f"{'all observer hooks time / run wall time':<44}{_fmt_pct(med_frac):>12}"
        f"{_fmt_pct(min(hook_frac)) + '..' + _fmt_pct(max(hook_frac)):>24}"
    )
    fs_calls = sum(r["fsync_calls"] for r in obs)
    fs_s = sum(r["fsync_s"] for r in obs)
    hooks_s = sum(r["all_hooks_s"] for r in obs)
    print(
        f"fsync inside the observer runs: {fs_calls} calls, {1e3 * fs_s:.0f} ms = {100 * fs_s / hooks_s:.0f} % of "
        f"the hook time ({1e3 * fs_s / max(fs_calls, 1):.2f} ms per fsync on {args.workdir or tempfile.gettempdir()}); "
        "hook time without fsync / wall: "
        + _fmt_pct(statistics.median((r["all_hooks_s"] - r["fsync_s"]) / r["wall_s"] for r in obs))
    )
    print(
        f"steady-state estimate: publish+decide every {interval} epochs of {epoch_med:.3f} s, heartbeat "
        f"{1e3 * statistics.median(heartbeat_calls):.2f} ms every {args.heartbeat_s:g} s, "
        f"{1e3 * (statistics.median(other_calls) + noop_per_epoch):.3f} ms on other epochs -> {_fmt_pct(steady)}"
    )
    print(
        "hook time by hook, all observer runs (ms total / calls): "
        + ", ".join(f"{k} {1e3 * v:.1f}/{calls[k]}" for k, v in split.items() if calls[k])
    )
    print()
    verdict = "PASS" if hook_ratio >= TARGET_RATIO else "FAIL"
    print(
        f"{verdict}: hook-time ratio 1 - {_fmt_pct(hook_overhead)} = {hook_ratio:.4f} (target >= {TARGET_RATIO}) "
        f"[direct measure, robust to machine noise; the larger of measured {_fmt_pct(med_frac)} and "
        f"steady-state {_fmt_pct(steady)}]"
    )
    verdict = "PASS" if med_ratio >= TARGET_RATIO else "FAIL"
    noisy = ratio_spread > 2 * (1 - TARGET_RATIO)
    print(
        f"{verdict}: median A/B frames/s ratio {med_ratio:.4f} (target >= {TARGET_RATIO}); per-pair spread "
        f"{ratio_spread:.3f}"
        + (
            f" > {2 * (1 - TARGET_RATIO):.2f}: machine noise dominates the 1 % effect, rely on the hook-time measure"
            if noisy
            else ""
        )
    )
    print(f"total benchmark time {time.perf_counter() - t_start:.0f} s")

    if profile is not None:
        buf = io.StringIO()
        pstats.Stats(profile, stream=buf).sort_stats("cumulative").print_stats(25)
        print("\ncProfile of PbtObserver.after_steps (cumulative):")
        print(buf.getvalue())
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
