#!/usr/bin/env python
"""Benchmarks of the episode-summary emitter (:class:`async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter`).

Subcommands:

* ``emitter``: the emitter alone on synthetic step inputs that already live on the device: microseconds
  added per env step, microseconds per drain, host synchronisations per step::

      python scripts/benchmarks/summary_emitter.py emitter --num-envs 4096 65536 --device cpu cuda

  Repeats are interleaved across configurations (so drift of the machine hits all of them alike) and the
  median and spread (min-max) over repeats are printed. Host synchronisations are counted on CUDA with
  ``torch.cuda.set_sync_debug_mode("warn")``; on CPU there is no device to synchronise with, so the count
  reads "n/a (no device)". On every device the step path is additionally run with the tensor-to-host APIs
  (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``, ``__int__``, ``__float__``, ``nonzero``,
  ``masked_select``, boolean-mask indexing) patched to count calls, which must stay at zero.

* ``e2e``: the emitter inside a training loop on Isaac Lab's own RL-Games wrappers (real wheels, simulator stubbed),
  with and without the wrapper that feeds the emitter, side by side: frames/s of both and their ratio. See
  ``summary_emitter_e2e.py`` (this folder) for what runs and how it is measured::

      python scripts/benchmarks/summary_emitter.py e2e --num-envs 4096
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the e2e mode's module, next to this file
import summary_emitter_e2e as e2e

# ------------------------------------------------------------------------------------------- emitter (part a)

TERM_NAMES = ["rew_a", "rew_b", "success", "peak", "Episode_Reward/rew_a", "Curriculum/stage"]
TERM_MODES = {"rew_a": "sum", "rew_b": "sum", "success": "last", "peak": "max"}
POOL_STEPS = 64  # distinct precomputed step inputs, cycled


@dataclass
class Config:
    device: str
    num_envs: int
    emitter: EpisodeSummaryEmitter = None
    pool: list = field(default_factory=list)
    step_us: list = field(default_factory=list)
    drain_us: list = field(default_factory=list)
    episodes_per_block: list = field(default_factory=list)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _make_pool(num_envs: int, device: str, episode_length: float, seed: int) -> list:
    """Step inputs on the device: rewards, terminated, truncated, per-env terms, an Isaac Lab-like log."""
    gen = torch.Generator().manual_seed(seed)
    pool = []
    for _ in range(POOL_STEPS):
        u = torch.rand(num_envs, generator=gen)
        done = u < 1.0 / episode_length
        truncated = done & (torch.rand(num_envs, generator=gen) < 0.3)
        terminated = done & ~truncated
        terms = {
            "rew_a": torch.randn(num_envs, generator=gen),
            "rew_b": torch.randn(num_envs, generator=gen),
            "success": torch.rand(num_envs, generator=gen) < 0.5,
            "peak": torch.randn(num_envs, generator=gen),
        }
        log = {"Episode_Reward/rew_a": torch.randn((), generator=gen).to(device), "Curriculum/stage": 2.0}
        pool.append(
            (
                torch.randn(num_envs, generator=gen).to(device),
                terminated.to(device),
                truncated.to(device),
                {k: v.to(device) for k, v in terms.items()},
                log,
            )
        )
    return pool


def _run_steps(cfg: Config, steps: int, offset: int = 0) -> None:
    em, pool = cfg.emitter, cfg.pool
    for i in range(steps):
        em.step(*pool[(offset + i) % POOL_STEPS])


def _measure_block(cfg: Config, steps: int) -> None:
    _sync(cfg.device)
    t0 = time.perf_counter()
    _run_steps(cfg, steps)
    _sync(cfg.device)
    t1 = time.perf_counter()
    batch = cfg.emitter.drain()
    t2 = time.perf_counter()
    cfg.step_us.append((t1 - t0) / steps * 1e6)
    cfg.drain_us.append((t2 - t1) * 1e6)
    cfg.episodes_per_block.append(len(batch) + cfg.emitter.last_drain.dropped_overflow)


def _count_cuda_syncs(cfg: Config, steps: int) -> str:
    if not cfg.device.startswith("cuda"):
        return "n/a (no device)"
    cfg.emitter.drain()
    _sync(cfg.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _run_steps(cfg, steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = sum("synchroniz" in str(w.message).lower() for w in caught)
    # and the strict mode: any synchronising call raises
    torch.cuda.set_sync_debug_mode("error")
    try:
        _run_steps(cfg, steps)
        strict = "ok"
    except RuntimeError as exc:  # pragma: no cover - only on a regression
        strict = f"raised: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    cfg.emitter.drain()
    return f"{syncs / steps:g} (error mode {strict})"


@contextmanager
def _count_host_api_calls():
    """Patch the tensor-to-host APIs to count their calls (they still work)."""
    counts: dict[str, int] = {}
    patched = []

    def wrap(owner, name):
        original = getattr(owner, name)

        def counting(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return original(*args, **kwargs)

        patched.append((owner, name, original))
        setattr(owner, name, counting)

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "nonzero", "masked_select"):
        wrap(torch.Tensor, name)
    wrap(torch, "nonzero")
    wrap(torch, "masked_select")
    original_getitem = torch.Tensor.__getitem__

    def getitem(self, index):
        parts = index if isinstance(index, tuple) else (index,)
        if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
            counts["bool-mask index"] = counts.get("bool-mask index", 0) + 1
        return original_getitem(self, index)

    patched.append((torch.Tensor, "__getitem__", original_getitem))
    torch.Tensor.__getitem__ = getitem
    try:
        yield counts
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def _host_api_calls(cfg: Config, steps: int) -> str:
    cfg.emitter.drain()
    _sync(cfg.device)
    with _count_host_api_calls() as counts:
        _run_steps(cfg, steps)
    cfg.emitter.drain()
    total = sum(counts.values())
    return "0" if total == 0 else f"{total / steps:g} ({counts})"


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def run_emitter(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = []
    for device in args.device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            print(f"device {device}: not available on this machine, skipped")
            continue
        devices.append(device)
    if not devices:
        print("no device to benchmark")
        return 1
    configs = [Config(d, n) for d in devices for n in args.num_envs]
    modes = ", ".join(f"{n}:{TERM_MODES.get(n, 'log')}" for n in TERM_NAMES)
    print(
        f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}, terms {len(TERM_NAMES)} "
        f"({modes}), mean episode length "
        f"{args.episode_length} steps, {args.steps} steps per block, {args.repeats} interleaved repeats, "
        f"compile={args.compile}"
    )
    for i, cfg in enumerate(configs):
        cfg.pool = _make_pool(cfg.num_envs, cfg.device, args.episode_length, seed=i)
        cfg.emitter = EpisodeSummaryEmitter(
            cfg.num_envs,
            cfg.device,
            TERM_NAMES,
            term_modes=TERM_MODES,
            capacity=args.capacity,
            compile=args.compile,
        )
        _run_steps(cfg, args.warmup)  # warm-up (and compilation with --compile)
        _sync(cfg.device)
        cfg.emitter.drain()
    for _ in range(args.repeats):
        for cfg in configs:
            _measure_block(cfg, args.steps)
    header = (
        f"{'device':<8} {'num_envs':>9} {'us/step median':>15} {'(min-max)':>15} {'drain us median':>16} "
        f"{'episodes/drain':>14}  host syncs/step; host-API calls/step"
    )
    print(header)
    print("-" * len(header))
    for cfg in configs:
        syncs = _count_cuda_syncs(cfg, min(args.steps, 100))
        api = _host_api_calls(cfg, min(args.steps, 100))
        print(
            f"{cfg.device:<8} {cfg.num_envs:>9} {statistics.median(cfg.step_us):>15.1f} {_spread(cfg.step_us):>15} "
            f"{statistics.median(cfg.drain_us):>16.1f} {statistics.median(cfg.episodes_per_block):>14.0f}  "
            f"{syncs}; {api}"
        )
    return 0


# ------------------------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("emitter", help="the emitter alone: us per step, us per drain, host syncs per step")
    p.add_argument("--num-envs", type=int, nargs="+", default=[4096, 65536])
    p.add_argument("--device", nargs="+", default=["cpu"], help="cpu and/or cuda[:i]")
    p.add_argument("--steps", type=int, default=200, help="env steps per timed block (one drain after each)")
    p.add_argument("--repeats", type=int, default=7, help="timed blocks per configuration, interleaved")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--episode-length", type=float, default=250.0, help="mean episode length (done rate 1/L)")
    p.add_argument("--capacity", type=int, default=None, help="ring buffer size (default: the emitter's)")
    p.add_argument("--compile", action="store_true", help="use the emitter's torch.compile path")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU intra-op threads)")
    p.set_defaults(func=run_emitter)
    e = sub.add_parser(
        "e2e",
        help="rl_games PPO through Isaac Lab's RL-Games wrappers with and without the emitter: frames/s, ratio",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    e.add_argument("--num-envs", type=int, default=4096)
    e.add_argument(
        "--horizon", type=int, default=32, help="rl_games horizon_length (env steps per epoch; the yaml's 32)"
    )
    e.add_argument(
        "--minibatches", type=int, default=None, help="minibatches per epoch (None: as many as the agent yaml has)"
    )
    e.add_argument("--epochs", type=int, default=6, help="epochs per run (the first one is not timed)")
    e.add_argument("--pairs", type=int, default=6, help="A/B pairs, interleaved ABBA")
    e.add_argument("--warmup-epochs", type=int, default=2, help="untimed warm-up run per variant (0: none)")
    e.add_argument("--drain-every", type=int, default=1, help="drain the emitter every this many epochs (0: never)")
    e.add_argument("--seed", type=int, default=42, help="params.seed and env seed of both variants")
    e.add_argument("--threads", type=int, default=None, help="params.torch_threads (None: the yaml's)")
    e.add_argument("--agent", default=str(e2e.E2E_AGENT), help="rl_games agent yaml with pbt_summary/pbt sections")
    e.add_argument(
        "--isaaclab",
        choices=e2e.RELEASES,
        default=e2e.RELEASES[0],
        help="Isaac Lab release whose RL-Games wrappers run (fetched and cached by tests/upstream)",
    )
    e.add_argument("--profile", action="store_true", help="cProfile the wrapper's step in one extra 'with' run")
    e.set_defaults(func=e2e.run_e2e)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
