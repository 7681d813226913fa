"""Chaos, CI size: SIGKILL real CPU members in the dangerous windows and check nothing was lost.

Runs ``scripts/reliability/chaos.py`` (see its docstring) with 2 members and one landed kill in each window, once per
exploit path (the full runs are in docs/reliability.md). Exec restarts: a checkpoint write, a publish held inside the
member's background writer, the donor copy of an exploit, right after an exploit decision was logged, the exploit
restart in flight, and a random moment. In-process exploits, with both members as slices of one process (``--slices
2``: each kill takes both down): with the recipient pending (record being rewritten, the donor being loaded into the
live agent), after ``exploit_applied`` was logged and before ``state.json`` cleared the pending exploit, after
``state.json`` was saved and before the record was rewritten, and after the record; and a publish's step failing (EIO
from a planted fault) before the member rolled anything back. The members use the test fixture rule that exploits at
every decision, so exploit windows keep coming; the driver watches the workspace with inotify, kills the member's
process group as a window opens (the three narrowest in-process windows: while the member is held inside them at a
pause point, ``ASYNC_PBT_TEST_PAUSE_AT``), and counts the kill only if the files left at death show the window was
still open. The chaos phase lasts until every window has its kill, whatever the machine's load; then the population is
stopped with Ctrl-C and every member is launched again to finish a few epochs past where it stopped. What is checked
(by the script, listed in ``failures``):

* every window received its landed kill; every killed member came back; the first launch stopped
  cleanly and the finishing launches finished every member at its frame target;
* a reader process running all along never saw a partial or mismatched record, state, best list or
  checkpoint;
* at every death, for every member of the process: ``state.json`` names only checkpoints on disk (resume point,
  pending exploit, best list, history) with their sha256, and the audit log verifies against the head it anchors;
  the next start resumed from the checkpoint named at death;
* every audit chain verifies, every lineage matches its audit log, the RNG stream continues across
  the kills, every referenced checkpoint matches its sha256, no temp file or donor copy is left behind,
  and at least one exploit completed; ``async-pbt audit`` passes; a recipient checkpoint loaded again after
  a kill gives the same agent (model fingerprint) as the in-process load; an in-process exploit fell back
  to the restart path only after a kill.

No assertion depends on timing: ``--deadline`` only stops a hung run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "chaos.py"


def _load_chaos():
    spec = importlib.util.spec_from_file_location("pbt_chaos", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pbt_chaos"] = module
    spec.loader.exec_module(module)
    return module


# Each exploit path, with the windows it opens (the full runs in docs/reliability.md aim at every window).
# "restart": process members exploiting through an exec restart, at the windows of the publish and of that path.
# "slices": both members as slices of one process (docs/slices.md) exploiting in process, so every kill takes both
# down in one member's window: the four windows of an in-process exploit (the same executor code a process member
# runs; a separate process-member case was cut to keep CI short) and one of the writer's, a kill while a publish's
# step is failing, before the member rolled anything back (the SIGKILL after the rollback and Ctrl-C while a write
# fails are tests/integration/test_publish_failure_resume.py and tests/rl_games/test_background_publish.py).
RUNS = {
    "restart": [
        "--exploit-mode",
        "restart",
        "--kills",
        "6",
        "--windows",
        "checkpoint_write,background_write,donor_copy,exploit_decided,restart_pending,random",
    ],
    "slices": [
        "--slices",
        "2",
        "--exploit-mode",
        "inprocess",
        "--kills",
        "5",
        "--windows",
        "inprocess_pending,inprocess_applied,inprocess_saved,inprocess_done,write_failed",
    ],
}


@pytest.mark.slow
# pytest-timeout above the run's own safety deadline (--deadline), so a hung run reports its figures.
@pytest.mark.timeout(1200)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, /proc and inotify (Linux)")
@pytest.mark.parametrize("mode", sorted(RUNS))
def test_population_survives_kills_in_every_dangerous_window(tmp_path, mode):
    chaos = _load_chaos()
    args = chaos.build_parser().parse_args(
        [
            "--members",
            "2",
            "--kills",
            "5",
            "--aim-probability",
            "1",
            "--random-spread",
            "10",
            "--seed",
            "1",
            "--deadline",
            "900",
            "--workdir",
            str(tmp_path),
            *RUNS[mode],
        ]
    )
    started = time.monotonic()
    figures = chaos.run_chaos(args)
    print(f"run_chaos took {time.monotonic() - started:.1f} s")
    print("\n".join(chaos.chaos_checks.report(figures)))
    assert figures["failures"] == []
    assert set(figures["kills"]) == set(chaos.kill_quota(args))
    for window in figures["kills"]:
        assert figures["kills"][window] >= 1, f"no kill landed in {window}: {figures['kill_log']}"
        assert figures["kills_survived"][window] == figures["kills"][window] + figures["kills_missed"][window]
    assert figures["lost"] == [] and figures["exploits"]["applied"] >= 1
    assert figures["audit_command_exit"] == 0
    assert all(frame >= figures["frame_targets"][m] for m, frame in figures["final_frames"].items())
    if mode == "slices":
        # Exploits ran in the live process; the ones a kill interrupted were applied by the process that came back.
        assert figures["exploits_by_path"].get("inprocess (planned inprocess)", 0) >= 1
        assert set(figures["exploits_by_path"]) <= {"inprocess (planned inprocess)", "restart (planned inprocess)"}


def test_the_window_list_is_checked_against_the_exploit_path(capsys):
    chaos = _load_chaos()
    with pytest.raises(SystemExit) as exit_info:
        chaos.main(["--exploit-mode", "restart", "--windows", "inprocess_pending"])
    assert exit_info.value.code == 2
    assert (
        "--windows 'inprocess_pending': inprocess_pending not among the windows of --exploit-mode restart"
        in capsys.readouterr().err
    )


def test_a_kill_counts_only_when_its_window_was_still_open(tmp_path):
    """The driver's verdicts on the files a killed member left, for each window: open and closed."""
    chaos = _load_chaos()
    from async_pbt_isaaclab.core.decision.generation import PendingExploit
    from async_pbt_isaaclab.core.state.member_rng import MemberRng
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.core.workspace.audit import AuditLog
    from async_pbt_isaaclab.core.workspace.state_files import save_state

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
    # (a member held at the decision's pause point: the same test, of its last exploit decision)
    assert chaos.last_decision_not_acted_on(mdir).startswith("decision logged and state.json saved")
    # ... closed once the exploit is pending, or anything followed the decision in the audit log
    state.pending_exploit = PendingExploit("members/001/checkpoints/g0001_f000000004096.pth", "a" * 64, 1, 4096)
    save_state(mdir / "state.json", state)
    assert chaos.decision_not_acted_on(mdir, seq, 0, rng_after) is None
    # restart_pending: open while that exploit is pending, closed once applied (pending cleared)
    pending = state.pending_exploit.checkpoint
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
    assert chaos.last_decision_not_acted_on(mdir) is None


def test_background_write_window_is_open_from_the_checkpoint_until_state_or_record_names_it(tmp_path):
    """The verdict on the files a member held in its background writer left: open once the publish's checkpoint is
    written and until ``state.json`` or ``record.json`` names it."""
    chaos = _load_chaos()
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.core.workspace.state_files import save_state

    mdir = tmp_path / "members" / "001"
    (mdir / "checkpoints").mkdir(parents=True)
    old = "members/001/checkpoints/g0000_f000000002048.pth"
    (tmp_path / old).write_bytes(b"weights")
    os.utime(tmp_path / old, ns=(1, 1))
    state = MemberState(member=1, last_checkpoint=old, last_checkpoint_sha256="a" * 64)
    save_state(mdir / "state.json", state)
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": old})
    assert chaos.background_write_in_flight(mdir) is None  # the newest checkpoint is the one both name
    new = "members/001/checkpoints/g0000_f000000004096.pth"
    temp = (tmp_path / new).with_name(f".{Path(new).name}{fsio.TEMP_MARKER}x")
    temp.write_bytes(b"half")
    assert chaos.background_write_in_flight(mdir) is None  # still being written: the checkpoint_write window's
    temp.rename(tmp_path / new)
    assert chaos.background_write_in_flight(mdir).startswith("background publish in flight")
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": new})
    assert chaos.background_write_in_flight(mdir) is None
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": old})
    state.last_checkpoint = new
    save_state(mdir / "state.json", state)
    assert chaos.background_write_in_flight(mdir) is None


def test_in_process_windows_open_and_close_with_each_write_of_the_exploit(tmp_path):
    """The verdicts on the files a member killed inside an in-process exploit left, write by write."""
    chaos = _load_chaos()
    from async_pbt_isaaclab.core.decision.generation import DonorSource, LineageEntry, PendingExploit
    from async_pbt_isaaclab.core.state.member_rng import MemberRng
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.core.workspace.audit import AuditLog
    from async_pbt_isaaclab.core.workspace.state_files import save_state

    mdir = tmp_path / "members" / "002"
    (mdir / "checkpoints").mkdir(parents=True)
    recipient = "members/002/checkpoints/g0001_f000000004096.pth"
    audit = AuditLog.open(mdir / "audit.jsonl")
    audit.append("decision", {"decision": {"outcome": "exploit", "donor": 0}})
    fsio.atomic_write_json(mdir / "record.json", {"generation": 0})

    def stamp(name: str, ns: int) -> None:
        os.utime(mdir / name, ns=(ns, ns))

    # The recipient checkpoint and state.json with the pending in-process exploit, record not yet rewritten.
    state = MemberState(member=2, rng_state=MemberRng(2).get_state())
    source = DonorSource(0, 0, "members/000/checkpoints/g0000_f000000004096.pth", "a" * 64, 4096)
    state.begin_generation(
        PendingExploit(recipient, "a" * 64, 1, 4096, path="inprocess", source=source),
        LineageEntry(1, "exploit", 4096, 0.0, (), source),
        origin_sha256="a" * 64,
    )
    save_state(mdir / "state.json", state)
    stamp("record.json", 10**18)
    stamp("state.json", 2 * 10**18)
    assert (
        chaos.inprocess_pending(mdir, recipient)
        == "in-process exploit pending in state.json, record.json not yet rewritten"
    )
    stamp("record.json", 3 * 10**18)
    assert chaos.inprocess_pending(mdir, recipient).startswith("in-process exploit pending, record.json rewritten")
    assert chaos.inprocess_applied(mdir, recipient) is None and chaos.inprocess_saved(mdir, recipient, 1) is None
    # exploit_applied by the live process: the pending window closes, the applied one opens.
    audit.append("exploit_applied", {"checkpoint": recipient, "path": "inprocess"})
    assert chaos.inprocess_pending(mdir, recipient) is None
    assert chaos.inprocess_applied(mdir, recipient).startswith("live agent holds the donor")
    audit.append("restored", {"mode": "exploit_inprocess", "checkpoint": str(tmp_path / recipient)})
    assert chaos.inprocess_applied(mdir, recipient).startswith("exploit_applied and restored logged")
    # state.json saved with the exploit done: applied closes; saved is open until the record is rewritten.
    state.pending_exploit = None
    save_state(mdir / "state.json", state)
    stamp("state.json", 4 * 10**18)
    assert chaos.inprocess_applied(mdir, recipient) is None and chaos.inprocess_done(mdir, recipient, 1) is None
    assert (
        chaos.inprocess_saved(mdir, recipient, 1)
        == "in-process exploit done in state.json, record.json not yet rewritten"
    )
    stamp("record.json", 5 * 10**18)
    assert chaos.inprocess_saved(mdir, recipient, 1) is None
    assert chaos.inprocess_done(mdir, recipient, 1).startswith("in-process exploit complete")
    # Anything logged since (a new process's start, the next decision) closes the last window too.
    audit.append("start", {"mode": "resume"})
    assert chaos.inprocess_done(mdir, recipient, 1) is None and chaos.inprocess_saved(mdir, recipient, 1) is None
    # An exploit applied by a new process after a kill (path restart) is not the live agent's window.
    state.pending_exploit = PendingExploit(recipient, "a" * 64, 1, 4096, path="inprocess")
    save_state(mdir / "state.json", state)
    audit.append("exploit_applied", {"checkpoint": recipient, "path": "restart", "planned_path": "inprocess"})
    assert chaos.inprocess_applied(mdir, recipient) is None


def test_the_writer_windows_open_and_close_with_the_files(tmp_path):
    """The verdicts on what a member held in its writer, or killed or stopped as a publish failed, left."""
    chaos = _load_chaos()
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.core.workspace.audit import AuditLog
    from async_pbt_isaaclab.core.workspace.pause_points import FAULT_FILE
    from async_pbt_isaaclab.core.workspace.state_files import save_state

    windows = chaos.sys.modules["chaos_windows"]
    mdir = tmp_path / "members" / "001"
    (mdir / "checkpoints").mkdir(parents=True)
    old, new = (f"members/001/checkpoints/g0000_f{f:012d}.pth" for f in (2048, 4096))
    for rel, ns in ((old, 1), (new, 2**62)):
        (tmp_path / rel).write_bytes(b"weights")
        os.utime(tmp_path / rel, ns=(ns, ns))
    save_state(mdir / "state.json", MemberState(member=1, last_checkpoint=old, last_checkpoint_sha256="a" * 64))
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": old, "status": "running"})
    audit = AuditLog.open(mdir / "audit.jsonl")
    audit.append("warning", {"message": "another warning"})
    # warning_busy: the publish in flight (newest checkpoint named by neither file) and the warning last
    assert windows.warning_logged_busy(mdir) is None
    audit.append("warning", {"message": "writing member 1: publish at frame 4096 for 3 s; training goes on"})
    assert windows.warning_logged_busy(mdir).startswith("slow-write warning logged")
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": new, "status": "running"})
    assert windows.warning_logged_busy(mdir) is None  # the publish reached its record: no longer in flight
    # write_failed: the plant taken, nothing logged for it after the seq noted when it was planted
    seq = audit.last_seq
    fsio.atomic_write_json(mdir / FAULT_FILE, {"step": "decision", "when": "before"})
    assert windows.write_failing(mdir, seq) is None  # not taken yet
    (mdir / FAULT_FILE).unlink()
    assert windows.write_failing(mdir, seq).startswith("a step of the publish failed")
    audit.append("publish_failed", {"error": "EIO", "lost": []})
    assert windows.write_failing(mdir, seq) is None  # rolled back and logged: past the window
    # ctrl_c_failing: publish_failed, then stop, and the record stopped
    assert windows.stopped_after_failure(mdir, seq) is None
    audit.append("stop", {"status": "stopped"})
    assert windows.stopped_after_failure(mdir, seq) is None  # the record still says running
    fsio.atomic_write_json(mdir / "record.json", {"checkpoint": old, "status": "stopped"})
    assert windows.stopped_after_failure(mdir, seq).startswith("Ctrl-C during the failing write")
    assert windows.stopped_after_failure(mdir, audit.last_seq) is None  # nothing after a later seq


def test_an_exploits_earlier_window_waits_for_its_later_ones_to_catch_up(tmp_path):
    """Aimed at every exploit decision, a long run killed nearly every exploit right after its decision, and the
    windows after it hardly opened: an earlier window of an exploit takes a kill only while it is not ahead."""
    import argparse
    import random

    _load_chaos()
    import chaos_driver

    restart = ("exploit_decided", "donor_copy", "restart_pending")
    driver = chaos_driver.Driver(argparse.Namespace(), tmp_path, random.Random(0))
    driver.wanted = dict.fromkeys(restart, 3)
    driver.quota = dict.fromkeys(restart, 3)
    assert all(driver.exploit_window_due(w) for w in restart)  # level: every window may take the next kill
    driver.quota["exploit_decided"] = 2  # the decision took one
    driver.opportunities.update({"exploit_decided": 1})
    assert not driver.exploit_window_due("exploit_decided") and driver.exploit_window_due("donor_copy")
    driver.quota["donor_copy"] = 2  # the donor copy took one: the restart is now behind both
    driver.opportunities.update({"donor_copy": 1})
    assert not driver.exploit_window_due("donor_copy") and driver.exploit_window_due("restart_pending")
    driver.quota["restart_pending"] = 2
    assert all(driver.exploit_window_due(w) for w in restart)
    assert driver.exploit_window_due("random") and driver.exploit_window_due("checkpoint_write")

    # In-memory donors (slices): no donor copy ever opens, so it holds nothing back once the next window has opened.
    inprocess = ("exploit_decided", "donor_copy", "inprocess_pending")
    driver = chaos_driver.Driver(argparse.Namespace(), tmp_path, random.Random(0))
    driver.wanted, driver.quota = dict.fromkeys(inprocess, 2), dict.fromkeys(inprocess, 2)
    driver.quota["exploit_decided"] = driver.quota["inprocess_pending"] = 1
    driver.opportunities.update({"exploit_decided": 2, "inprocess_pending": 1})
    assert driver.exploit_window_due("exploit_decided")
    driver.opportunities["inprocess_pending"] = 0  # nothing after the donor copy seen yet: it may still open
    assert not driver.exploit_window_due("exploit_decided")


def test_the_frequent_windows_are_level_and_one_with_all_its_kills_holds_none_back(tmp_path):
    """Without pacing, a frequent window takes a kill only while no other frequent window that still wants kills is
    behind it. A window with all its kills holds none back: levelled with them too, a 500-kill slices run's `random`
    (which wants 48 where the writer's windows want 42) stopped at 43 once they had theirs."""
    import argparse
    import random

    _load_chaos()
    import chaos_driver

    windows = ("checkpoint_write", "write_failed", "random")
    driver = chaos_driver.Driver(argparse.Namespace(no_pace=True), tmp_path, random.Random(0))
    driver.wanted = {"checkpoint_write": 2, "write_failed": 2, "random": 4}
    driver.quota = dict(driver.wanted)
    assert all(driver.frequent_window_due(w) for w in windows)
    driver.quota["checkpoint_write"] = 1  # one landed: it waits for the others
    assert not driver.frequent_window_due("checkpoint_write") and driver.frequent_window_due("random")
    driver.quota.update(write_failed=1, random=3)
    assert all(driver.frequent_window_due(w) for w in windows)
    driver.quota.update(checkpoint_write=0, write_failed=0, random=2)  # level; the last kill of the others
    assert driver.frequent_window_due("random")
    driver.quota["random"] = 1  # one past them: they have all theirs, random wants one more
    assert driver.frequent_window_due("random")
    assert driver.frequent_window_due("donor_copy")  # not a frequent window: never held back here


LEADER_EXITS_FIRST = """
import ctypes, threading, time
def worker():
    while True:
        time.sleep(0.05)
threading.Thread(target=worker, daemon=True).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)  # the leader thread exits; the worker goes on
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/task (Linux)")
def test_a_death_is_read_only_once_every_thread_has_exited():
    """The leader thread shows zombie while another thread still runs: a long run over slice members read a death's
    files there, and a writer's last ``rename`` of ``state.json`` landed after the reading."""
    import signal
    import subprocess

    _load_chaos()
    import chaos_driver

    child = subprocess.Popen([sys.executable, "-c", LEADER_EXITS_FIRST])
    try:
        deadline = time.monotonic() + 60
        while chaos_driver.process_state(child.pid) != "Z":  # an event: the leader's exit, polled
            assert time.monotonic() < deadline and child.poll() is None, "the leader never exited alone"
            time.sleep(0.01)
        assert chaos_driver.threads_alive(child.pid)  # the worker thread still runs
        assert not chaos_driver._wait_dead(child.pid, 0.05)  # not dead yet, whatever the leader shows
        os.kill(child.pid, signal.SIGKILL)
        assert chaos_driver._wait_dead(child.pid, 60)
        assert not chaos_driver.threads_alive(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_death_is_checked_on_the_files_as_they_were_at_death(tmp_path):
    """The next start appends to the audit log while the driver still reads the dead process's (seconds, for a long
    log on a loaded machine): a long run took the next start's entries for the dead one's, so the start it compared
    with the checkpoint named at death was the one after, and five correct resumes were reported as wrong."""
    _load_chaos()
    import chaos_death

    from async_pbt_isaaclab.core.state.member_state import AuditHead, MemberState
    from async_pbt_isaaclab.core.workspace.audit import AuditLog
    from async_pbt_isaaclab.core.workspace.state_files import save_state

    mdir = tmp_path / "members" / "000"
    (mdir / "checkpoints").mkdir(parents=True)
    checkpoint = mdir / "checkpoints" / "g0000_f000000001024.pth"
    checkpoint.write_bytes(b"weights")
    audit = AuditLog.open(mdir / "audit.jsonl")
    audit.append("start", {"mode": "fresh"})
    state = MemberState(member=0)
    state.published("members/000/checkpoints/g0000_f000000001024.pth", "")
    seq, digest = audit.head()
    state.anchor(AuditHead(seq, digest))
    save_state(mdir / "state.json", state)

    left = chaos_death.read_at_death(mdir)  # the process is gone: what it left
    audit.append("start", {"mode": "resume"})  # the next start, before the driver got to read
    audit.append("restored", {"mode": "resume", "checkpoint": str(checkpoint)})
    later = chaos_death.examine(tmp_path, 0, mdir, chaos_death.read_at_death(mdir))
    at_death = chaos_death.examine(tmp_path, 0, mdir, left)
    assert at_death.last_seq == seq and later.last_seq == seq + 2
    assert at_death.resume == "members/000/checkpoints/g0000_f000000001024.pth" and at_death.problems == []
    entries = [e for _n, e, _err in chaos_death.read_entries(mdir / "audit.jsonl") if e is not None]
    assert chaos_death.resumed_from(entries, at_death.last_seq) == ("restored", str(checkpoint))
    assert chaos_death.resumed_from(entries, later.last_seq) is None  # read late: that start was not compared


def test_a_fault_plant_is_forgotten_when_its_process_dies_of_a_sigkill(tmp_path):
    """A slice process goes down with any of its members: a SIGKILL for another window can come after a plant and
    before the member stops at ``write_failed``, and the plant is never met. Kept, it barred that process from every
    later fault (an 80-minute slices run stopped killing in the writer's windows after its 64th kill of 274).
    Forgotten only at the next plant, its file could first be taken by the restarted process, which then stopped on
    the failure while its exit was no longer expected (a process run failed so). The driver's SIGKILL forgets it at
    death; a Ctrl-C, after which the process stops on its failure by itself, does not."""
    import argparse
    import random
    import signal

    _load_chaos()
    import chaos_driver
    import chaos_faults

    from async_pbt_isaaclab.core.workspace.pause_points import FAULT_FILE

    args = argparse.Namespace(slices=2, deadline=60, no_pace=True)
    driver = chaos_driver.Driver(args, tmp_path, random.Random(0), quota={"random": 2}, wanted={"random": 2})
    faults = chaos_faults.Faults(driver, random.Random(0))
    for member in range(4):
        driver.mdir(member).mkdir(parents=True)
    # Member 1 (process of members 0 and 1) and member 3 (process of 2 and 3) have plants not taken yet.
    faults.planted = {1: ("write_failed", 7, "checkpoint (before writing)"), 3: ("ctrl_c_failing", 9, "decision")}
    driver.expected_exits = {0, 2}
    for member in (1, 3):
        (driver.mdir(member) / FAULT_FILE).write_text('{"step": "checkpoint", "when": "before"}')
    # Real processes, killed through the driver's own kill path; the one sent Ctrl-C is let go at its pause marker.
    held = driver.mdir(2) / "pause.held.json"
    held.write_text("{}")
    for first, sig in ((0, signal.SIGKILL), (2, signal.SIGINT)):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        driver.pids.update({first: proc.pid, first + 1: proc.pid})
        driver.alive_pid = lambda member, pid=proc.pid: pid  # the journal's pid, without a launcher
        interrupt = held if sig == signal.SIGINT else None
        assert driver.try_kill(first, "random", "test", lambda: "landed", aimed=False, interrupt=interrupt)
        proc.wait(30)
    # The SIGKILLed process's plant is gone, with its file: a restart cannot take it, and its exit is not expected.
    assert 1 not in faults.planted and 0 not in driver.expected_exits
    assert not (driver.mdir(1) / FAULT_FILE).exists()
    # The process sent Ctrl-C keeps its plant and its expected exit (it stops on the failure by itself).
    assert 3 in faults.planted and 2 in driver.expected_exits and (driver.mdir(3) / FAULT_FILE).exists()
