"""Chaos, CI size: SIGKILL real CPU members in the dangerous windows and check nothing was lost.

Runs ``scripts/benchmarks/chaos.py`` (see its docstring) with 3 members and one kill in each window:
a checkpoint write, the donor copy of an exploit, right after an exploit decision was logged, the
exploit restart in flight, and a random moment. The driver watches the workspace with inotify and
kills the member's process group within a millisecond of the window opening; the launcher restarts
it. What is checked (by the script, listed in ``failures``):

* every killed member came back and every member finished its frame target;
* a reader process running all along never saw a partial or mismatched record, state, best list or
  checkpoint;
* every audit chain verifies, every lineage matches its audit log, the RNG stream continues across
  the kills, every referenced checkpoint matches its sha256, no temp file or donor copy is left behind,
  and at least one exploit completed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("rl_games")

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "benchmarks" / "chaos.py"


def _load_chaos():
    spec = importlib.util.spec_from_file_location("pbt_chaos", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pbt_chaos"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc and inotify (Linux)")
def test_population_survives_kills_in_every_dangerous_window(tmp_path):
    chaos = _load_chaos()
    args = chaos.build_parser().parse_args([
        "--members", "3", "--kills", "5", "--iterations", "40", "--duration", "30", "--warmup", "6",
        "--aim-probability", "1", "--min-gap", "3", "--finish-timeout", "150", "--seed", "1",
        "--workdir", str(tmp_path),
    ])
    figures = chaos.run_chaos(args)
    print("\n".join(chaos.report(figures)))
    assert figures["failures"] == []
    assert figures["kills_total"] >= 4, figures["kills"]
    # Every window was hit at least once except possibly the random one (the run may end first).
    for window in chaos.WINDOWS[:-1]:
        assert figures["kills"][window] >= 1, f"no kill landed in {window}: {figures['kill_opportunities_seen']}"
    assert figures["lost"] == [] and figures["exploits"]["applied"] >= 1
