"""Chaos, CI size: SIGKILL real CPU members in the dangerous windows and check nothing was lost.

Runs ``scripts/reliability/chaos.py`` (see its docstring) with 3 members and one landed kill in each
window: a checkpoint write, the donor copy of an exploit, right after an exploit decision was logged, the
exploit restart in flight, and a random moment. The members use the test fixture rule that exploits at
every decision, so exploit windows keep coming; the driver watches the workspace with inotify, kills the
member's process group as a window opens, and counts the kill only if the files left at death show the
window was still open. The chaos phase lasts until every window has its kill, whatever the machine's
load; then the population is stopped with Ctrl-C and every member is launched again to finish a few
epochs past where it stopped. What is checked (by the
script, listed in ``failures``):

* every window received its landed kill; every killed member came back; the first launch stopped
  cleanly and the finishing launches finished every member at its frame target;
* a reader process running all along never saw a partial or mismatched record, state, best list or
  checkpoint;
* every audit chain verifies, every lineage matches its audit log, the RNG stream continues across
  the kills, every referenced checkpoint matches its sha256, no temp file or donor copy is left behind,
  and at least one exploit completed.

No assertion depends on timing: ``--deadline`` only stops a hung run.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("rl_games")

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "chaos.py"


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
        "--members", "3", "--kills", "5", "--aim-probability", "1", "--random-spread", "10", "--seed", "1",
        "--deadline", "1200", "--workdir", str(tmp_path),
    ])
    started = time.monotonic()
    figures = chaos.run_chaos(args)
    print(f"run_chaos took {time.monotonic() - started:.1f} s")
    print("\n".join(chaos.chaos_checks.report(figures)))
    assert figures["failures"] == []
    for window in chaos.WINDOWS:
        assert figures["kills"][window] >= 1, f"no kill landed in {window}: {figures['kill_log']}"
        assert figures["kills_survived"][window] == figures["kills"][window] + figures["kills_missed"][window]
    assert figures["lost"] == [] and figures["exploits"]["applied"] >= 1
    assert all(frame >= figures["frame_targets"][m] for m, frame in figures["final_frames"].items())
