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
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("rl_games")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "chaos.py"


def _load_chaos():
    spec = importlib.util.spec_from_file_location("pbt_chaos", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pbt_chaos"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
# pytest-timeout above the run's own safety deadline (--deadline), so a hung run reports its figures.
@pytest.mark.timeout(1200)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc and inotify (Linux)")
def test_population_survives_kills_in_every_dangerous_window(tmp_path):
    chaos = _load_chaos()
    args = chaos.build_parser().parse_args([
        "--members", "3", "--kills", "5", "--aim-probability", "1", "--random-spread", "10", "--seed", "1",
        "--deadline", "900", "--workdir", str(tmp_path),
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


def test_a_kill_counts_only_when_its_window_was_still_open(tmp_path):
    """The driver's verdicts on the files a killed member left, for each window: open and closed."""
    chaos = _load_chaos()
    from async_pbt_isaaclab.core import fsio
    from async_pbt_isaaclab.core.audit import AuditLog
    from async_pbt_isaaclab.core.member_state import MemberState, save_state
    from async_pbt_isaaclab.core.mutation import MemberRng

    rng = MemberRng(1)
    rng_before = rng.get_state()
    rng.choice_index(3)
    rng_after = rng.get_state()

    mdir = tmp_path / "members" / "001"
    (mdir / "checkpoints").mkdir(parents=True)
    (mdir / "incoming").mkdir()
    ckpt = mdir / "checkpoints" / "g0000_f000000002048.pth"
    ckpt.write_bytes(b"weights")
    state = MemberState(member=1, rng_state=rng_before)
    save_state(mdir / "state.json", state)
    os.utime(ckpt, ns=(1, 1))  # the checkpoint is older than state.json: nothing in flight

    # checkpoint_write: closed, then open (a newer checkpoint than state.json; a temp file being written)
    assert chaos.publish_in_progress(mdir) is None
    newer = mdir / "checkpoints" / "g0000_f000000004096.pth"
    newer.write_bytes(b"weights")
    os.utime(newer, ns=(2**62, 2**62))
    assert chaos.publish_in_progress(mdir) == "checkpoint published, state.json not yet"
    newer.unlink()
    temp = mdir / "checkpoints" / f".g0000_f000000004096.pth{fsio.TEMP_MARKER}x"
    temp.write_bytes(b"half")
    assert fsio.is_temp_file(temp) and chaos.publish_in_progress(mdir) == "checkpoint temp file being written"
    temp.unlink()

    # donor_copy: open while a file is in incoming/
    assert chaos.donor_copy_in_flight(mdir) is None
    (mdir / "incoming" / "donor000_g0001.pth").write_bytes(b"copy")
    assert chaos.donor_copy_in_flight(mdir) == "donor copy in incoming/: verified, not yet loaded"
    # restart_decided: not while the donor copy is there ...
    audit = AuditLog.open(mdir / "audit.jsonl")
    decision = audit.append("decision", {"decision": {"outcome": "exploit", "donor": 0}, "rng_after": rng_after})
    seq = decision["seq"]
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is None
    (mdir / "incoming" / "donor000_g0001.pth").unlink()
    # ... open before and after state.json took the RNG state after the decision ...
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) == "decision logged, state.json not yet saved after it"
    state.rng_state = rng_after
    save_state(mdir / "state.json", state)
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after).startswith("decision logged and state.json saved")
    # ... closed once the exploit is pending, or anything followed the decision in the audit log
    state.pending_exploit = {"checkpoint": "members/001/checkpoints/g0001_f000000004096.pth", "sha256": "a" * 64}
    save_state(mdir / "state.json", state)
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is None
    # restart_pending: open while that exploit is pending, closed once applied (pending cleared)
    pending = state.pending_exploit["checkpoint"]
    assert chaos.restart_in_flight(mdir, pending, execd=True).startswith("restart in flight: new image after execv")
    assert chaos.restart_in_flight(mdir, "members/001/checkpoints/other.pth", execd=True) is None
    state.pending_exploit, state.generation = None, 1
    save_state(mdir / "state.json", state)
    assert chaos.restart_in_flight(mdir, pending, execd=False) is None
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is None
    # An exploit aborted after the decision (no pending, same generation) closes the window too.
    state.generation = 0
    save_state(mdir / "state.json", state)
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is not None
    audit.append("exploit_aborted", {"donor": 0, "reason": "donor checkpoint vanished"})
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is None
