#!/usr/bin/env python
"""Frames/s of a MuJoCo task's rl_games PPO run through each env backend this machine can run, side by side.

    python scripts/benchmarks/mujoco_backends.py --task HalfCheetah-v5 --epochs 6 --repeats 3

Backends: the CPU member's two vec-envs, ``gymnasium`` (``async_pbt_isaaclab.envs.gym_vec_env``, over
``gymnasium.vector.SyncVectorEnv``) and ``envpool`` (``async_pbt_isaaclab.envs.envpool_vec_env``, ``cpu_member
--vec-env envpool``: envpool's C++ pool with same-step resets and the same per-episode evidence; skipped with a reason
when envpool is not installed), and ``rl_games-envpool`` with ``--rl-games-envpool`` (rl_games' own ``env_name:
envpool`` vec-env, no PBT evidence, next-step resets). All train the same packaged agent yaml (same PPO config,
actors, horizon, network, one torch thread); only the env backend differs. Each run is a fresh process; repeats are
interleaved (A B A B ...) so all see the same machine load. Frames/s is measured from the end of the first epoch to
the end of the last (process start, imports and env construction excluded), the PPO update included. Prints each
run, the median and spread per backend, each backend's ratio to gymnasium per repeat, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
from rl_games.common.algo_observer import AlgoObserver
from rl_games.torch_runner import Runner
from async_pbt_isaaclab.examples.agents import packaged_agent_yaml
from async_pbt_isaaclab.core.agent_config import load_yaml
task, backend, epochs, train_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cfg = load_yaml(packaged_agent_yaml(task))
cfg.pop("pbt", None)
c = cfg["params"]["config"]
c.update(max_epochs=epochs, train_dir=train_dir, save_best_after=10**9)
if backend == "rl_games-envpool":
    c["env_name"] = "envpool"
    c["env_config"] = {"env_name": task}
else:
    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv
    register_gym_vecenv(task, backend)
marks = []
class Clock(AlgoObserver):
    def after_print_stats(self, frame, epoch_num, total_time):
        marks.append((time.perf_counter(), frame))
runner = Runner(Clock())
runner.load(cfg)
runner.run({"train": True, "play": False})
(t0, f0), (t1, f1) = marks[0], marks[-1]
print("RESULT " + json.dumps({"fps": (f1 - f0) / (t1 - t0), "frames": f1 - f0, "seconds": t1 - t0}))
"""


def run_once(task: str, backend: str, epochs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, task, backend, str(epochs), tmp],
            capture_output=True,
            text=True,
            check=False,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{backend} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="HalfCheetah-v5", help="a task with a packaged agent yaml")
    p.add_argument("--epochs", type=int, default=6, help="rl_games epochs per run (the first is not timed)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs per backend")
    p.add_argument("--rl-games-envpool", action="store_true", help="also rl_games' own envpool vec-env")
    args = p.parse_args(argv)
    backends = ["gymnasium"]
    try:
        import envpool  # noqa: F401

        backends += ["envpool", *(["rl_games-envpool"] if args.rl_games_envpool else [])]
    except ImportError:
        print("envpool: skipped (not installed; pip install -e '.[envpool]')")
    fps: dict[str, list[float]] = {b: [] for b in backends}
    loads = [os.getloadavg()[0]]
    for rep in range(args.repeats):
        for backend in backends if rep % 2 == 0 else backends[::-1]:
            result = run_once(args.task, backend, args.epochs)
            fps[backend].append(result["fps"])
            loads.append(os.getloadavg()[0])
            print(
                f"repeat {rep} {backend}: {result['fps']:.0f} frames/s ({result['frames']} frames in "
                f"{result['seconds']:.1f} s), load average {loads[-1]:.1f}",
                flush=True,
            )
    for backend, values in fps.items():
        print(f"{backend}: median {statistics.median(values):.0f} frames/s [{min(values):.0f}, {max(values):.0f}]")
    for other in backends[1:]:
        ratios = [e / g for e, g in zip(fps[other], fps["gymnasium"], strict=True)]
        print(
            f"{other} / gymnasium, per repeat: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"
        )
    print(f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
