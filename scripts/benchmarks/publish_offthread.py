#!/usr/bin/env python
"""Publishing beside training against publishing on it, with a slow disk: the observer's hook time on the
training thread, both writers in the same run.

::

    python scripts/benchmarks/publish_offthread.py                      # 4 pairs x 33 epochs, fsync +20 ms
    python scripts/benchmarks/publish_offthread.py --fsync-delay-ms 50 --workdir /mnt/nfs/bench

Both variants are ``observer_overhead.py``'s observer run (the packaged Pendulum-v1 PPO, 16 envs x 128 steps,
CPU, a one-member workspace; publish + decide every ``--interval-epochs`` epochs, heartbeat every
``--heartbeat-s``), differing only in ``pbt.publish_in_background``:

* **inline**: ``false``, the synchronous path (every fsync on the training thread);
* **background**: ``true``, the default (the training thread copies the weights and decides; the writer thread
  does the fsyncs).

Every ``os.fsync`` in this process sleeps ``--fsync-delay-ms`` first (this benchmark process only: a stand-in for
a shared cluster filesystem, where an fsync often takes 10-50 ms). The measure is the wall time spent inside the
PbtObserver's hooks (on the training thread) over the run's wall time; runs are interleaved ABBA, and the median
and spread (min..max) of each variant are printed. Target: background under 1 %.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import observer_overhead

TARGET = 0.01
"""Hook time / wall time of the background variant, at most."""


class SlowFsync:
    """Every ``os.fsync`` in this process waits ``delay_s`` before the real one (GIL released, as a slow disk)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._orig = os.fsync

    def __enter__(self) -> SlowFsync:
        orig, delay = self._orig, self.delay_s

        def fsync(fd):
            time.sleep(delay)
            return orig(fd)

        os.fsync = fsync
        return self

    def __exit__(self, *exc) -> None:
        os.fsync = self._orig


def one_run(background: bool, args: argparse.Namespace) -> dict:
    original = observer_overhead._agent_cfg

    def agent_cfg(a, root):
        cfg = original(a, root)
        cfg["pbt"]["publish_in_background"] = background
        return cfg

    observer_overhead._agent_cfg = agent_cfg
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), SlowFsync(args.fsync_delay_ms / 1e3):
            out = observer_overhead.one_run("observer", args)
    finally:
        observer_overhead._agent_cfg = original
    out["fraction"] = out["all_hooks_s"] / out["wall_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=4, help="A/B pairs (interleaved ABBA)")
    p.add_argument("--epochs", type=int, default=33, help="epochs per run (two publishes at interval 16)")
    p.add_argument("--interval-epochs", type=int, default=16, help="publish + decide every this many epochs")
    p.add_argument("--heartbeat-s", type=float, default=10.0, help="heartbeat interval (wall seconds)")
    p.add_argument("--fsync-delay-ms", type=float, default=20.0, help="added to every fsync of this process")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--agent", default=None)
    p.add_argument("--workdir", default=None, help="folder for the temp workspaces (e.g. an NFS mount)")
    args = p.parse_args(argv)
    print(
        f"publish off the training thread: Pendulum-v1 PPO, {args.epochs} epochs per run, publish every "
        f"{args.interval_epochs} epochs, fsync +{args.fsync_delay_ms:g} ms, {args.pairs} pairs ABBA, "
        f"load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    runs: dict[str, list[dict]] = {"inline": [], "background": []}
    for i in range(args.pairs):
        order = ("inline", "background") if i % 2 == 0 else ("background", "inline")
        for variant in order:
            r = one_run(variant == "background", args)
            runs[variant].append(r)
            print(
                f"  pair {i + 1} {variant:<10} hooks {1e3 * r['all_hooks_s']:8.1f} ms of {r['wall_s']:6.1f} s "
                f"= {100 * r['fraction']:6.3f} %, {r['publishes']} publishes, {r['fsync_calls']} fsyncs",
                flush=True,
            )
    print(f"\n{'variant':<12}{'hook time / wall, median':>26}{'min..max':>22}{'publish call ms, median':>26}")
    for variant, rs in runs.items():
        f = [r["fraction"] for r in rs]
        interval = args.interval_epochs
        calls = [t for r in rs for k, t in enumerate(r["after_steps_s"], 1) if k > 1 and (k - 1) % interval == 0]
        print(
            f"{variant:<12}{100 * statistics.median(f):>25.3f}%{100 * min(f):>10.3f}..{100 * max(f):.3f} %"
            f"{1e3 * statistics.median(calls) if calls else float('nan'):>24.1f}"
        )
    med = statistics.median(r["fraction"] for r in runs["background"])
    ratio = statistics.median(r["fraction"] for r in runs["inline"]) / med if med else float("inf")
    verdict = "PASS" if med < TARGET else "FAIL"
    print(
        f"{verdict}: background hook time {100 * med:.3f} % of wall (target < {100 * TARGET:g} %); inline / "
        f"background {ratio:.1f}x"
    )
    return 0 if med < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
