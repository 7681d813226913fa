"""Smoke run of the end-to-end emitter benchmark (``scripts/benchmarks/summary_emitter.py e2e``).

Tiny settings (64 envs, 8-step horizon, 3 epochs, one pair, no warm-up): it checks that the benchmark runs the
rl_games PPO loop with and without the emitter wrapper and reports both frames/s figures, their ratio and the
direct added-time measure. No timing assertion: the machines are shared and noisy.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("rl_games")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmarks" / "summary_emitter.py"


def _load_script():
    name = "_async_pbt_bench_summary_emitter"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _median(out: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}\s+([0-9.]+)\s", out, re.MULTILINE)
    assert match, f"no {label!r} row in:\n{out}"
    return float(match.group(1))


def test_e2e_benchmark_reports_both_frame_rates(capsys):
    bench = _load_script()
    rc = bench.main(["e2e", "--num-envs", "64", "--horizon", "8", "--epochs", "3", "--pairs", "1",
                     "--warmup-epochs", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert _median(out, "frames/s without emitter") > 0
    assert _median(out, "frames/s with emitter") > 0
    assert _median(out, "per-pair ratio with/without") > 0
    assert _median(out, "added work per env step, total (us)") > 0
    assert re.search(r"^(PASS|FAIL): direct measure 1 - added/epoch", out, re.MULTILINE), out
    assert re.search(r"^(PASS|FAIL): median A/B frames/s ratio", out, re.MULTILINE), out
    # Same seed, and the emitter draws no random numbers: both variants train exactly the same policy.
    assert "training identical in both variants (same seed; final parameters and frames compared in every pair): yes" \
        in out, out
