"""Stopping a whole population and starting it again resumes every member where it was.

Two real CPU members (rl_games PPO on Pendulum-v1) run under the local launcher
(``python -m async_pbt_isaaclab.launch``, a separate process) with a rule that makes the worse
member exploit the better one at nearly every decision, so lineage, generations and the mutation RNG
have moved before the population is stopped. The members exploit in-process (``--pbt-exploit-mode
inprocess``; the exec restart's resume is covered by the chaos run's finishing launches and
tests/integration/test_cpu_exploit.py). The population is

1. started, and stopped with SIGTERM to the launcher (what a scheduler sends) once every member has decided and
   at least one has exploited;
2. started again with the same command and workspace, and stopped with SIGINT (Ctrl-C) once every member has
   decided again.

The epoch limit is far away: every stop interrupts every member mid-run. A resume after Ctrl-C is the same code
path in the member (both signals end training the same way); it is run by every chaos run's finishing launches
(tests/integration/test_chaos.py), after the population was stopped with Ctrl-C.

What is shown here, for every member at the resume (read back from state.json, record.json, the audit log and the
checkpoints the processes wrote):
* the launcher exits 143 after SIGTERM and 130 after Ctrl-C;
* the stopped member published status ``stopped`` pointing to its last checkpoint, the one its
  ``state.json`` names;
* the next process's ``start`` entry has mode ``resume`` (``exploit_applied`` if an exploit restart was
  in flight at the stop), the same generation and one more process start, and it restored exactly that
  checkpoint: same frame and epoch as the checkpoint file;
* the RNG continues: the first decision after the resume starts from the RNG state the last decision
  before the stop ended with (also what state.json held);
* generation, restart count and lineage are unchanged by the resume (lineage only grows afterwards);
* every exploit was applied by the running process, and a stop never left one half done: a stop landing
  during an in-process exploit is delivered once the exploit is applied and saved, so no stopped member
  has an exploit pending, and the next process resumes the new generation from the recipient's checkpoint
  or a later one;
* every audit chain verifies.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

MEMBERS = 2
ITERATIONS = 100_000
"""Epochs per member (512 frames each): never reached, every stop interrupts every member."""


def _command(ws: Path) -> list[str]:
    member = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations",
        str(ITERATIONS),
        "--num_envs",
        "8",
        "--train-dir",
        str(ws / "runs"),
        "--pbt-rule",
        "dexpbt",
        "--pbt-interval-steps",
        "2048",
        "--pbt-gap-std-fraction",
        "0",
        "--pbt-gap-donor-fraction",
        "0",
        "--pbt-protect-interval-best",
        "false",
        "--pbt-start-grace-frames",
        "0",
        "--pbt-restart-grace-frames",
        "1024",
        "--pbt-min-episodes",
        "4",
        "--pbt-window",
        "16",
        "--pbt-max-frame-lag",
        "100000000",
        "--pbt-heartbeat-interval-s",
        "1",
        "--pbt-exploit-mode",
        "inprocess",
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=256",
        "agent.params.config.mini_epochs=2",
        "agent.pbt.mutation_rate=1.0",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
    ]
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.launch",
        "--members",
        str(MEMBERS),
        "--workspace",
        str(ws),
        "--gpus",
        "none",
        "--backoff",
        "0.5",
        "--progress-interval",
        "60",
        "--stop-grace",
        "30",
        "--",
        *member,
    ]


def _entries(ws: Path, m: int) -> list[dict]:
    path = ws / "members" / f"{m:03d}" / "audit.jsonl"
    return [e for _, e, _ in read_entries(path) if e is not None] if path.exists() else []


def _state(ws: Path, m: int) -> dict:
    return json.loads((ws / "members" / f"{m:03d}" / "state.json").read_text())


def _launch(ws: Path, root: Path, run: int) -> subprocess.Popen:
    log = open(root / f"launcher{run}.log", "wb")
    return subprocess.Popen(
        _command(ws), stdout=log, stderr=subprocess.STDOUT, cwd=root, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )


def _wait_until(proc: subprocess.Popen, predicate, timeout: float, what: str, root: Path, run: int) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, (
            f"launcher exited early ({proc.returncode}) while waiting for {what}:\n"
            + (root / f"launcher{run}.log").read_text()[-3000:]
        )
        if predicate():
            return
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(1200)
    pytest.fail(f"timed out waiting for {what}:\n" + (root / f"launcher{run}.log").read_text()[-3000:])


def _snapshot(ws: Path) -> dict[int, dict]:
    out = {}
    for m in range(MEMBERS):
        mdir = ws / "members" / f"{m:03d}"
        state = _state(ws, m)
        # Read now: once the population runs again, retention deletes old checkpoints.
        ckpt = load_checkpoint(ws / state["last_checkpoint"], expected_sha256=state["last_checkpoint_sha256"])
        out[m] = {
            "state": state,
            "record": json.loads((mdir / "record.json").read_text()),
            "entries": _entries(ws, m),
            "checkpoint": {"frame": ckpt["frame"], "epoch": ckpt["epoch"]},
        }
    return out


def _decided_since(ws: Path, seqs: dict[int, int]) -> bool:
    """Every member logged a decision after ``seqs[m]`` and none has an exploit restart in flight."""
    for m in range(MEMBERS):
        if not any(e["kind"] == "decision" and e["seq"] > seqs.get(m, -1) for e in _entries(ws, m)):
            return False
        try:
            if _state(ws, m)["pending_exploit"]:
                return False
        except (OSError, ValueError):
            return False
    return True


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    ws = root / "ws"
    snaps, codes = [], []

    # Run 1: until every member decided and one exploited; then SIGTERM.
    proc = _launch(ws, root, 1)
    _wait_until(
        proc,
        lambda: _decided_since(ws, {}) and any(_state(ws, m)["generation"] > 0 for m in range(MEMBERS)),
        960,
        "a decision by every member and an exploit",
        root,
        1,
    )
    proc.send_signal(signal.SIGTERM)
    codes.append(proc.wait(1200))
    snaps.append(_snapshot(ws))

    # Run 2: same command and workspace; until every member decided again; then Ctrl-C.
    proc = _launch(ws, root, 2)
    last = {m: snaps[0][m]["entries"][-1]["seq"] for m in range(MEMBERS)}
    _wait_until(proc, lambda: _decided_since(ws, last), 960, "a decision by every member after the resume", root, 2)
    proc.send_signal(signal.SIGINT)
    codes.append(proc.wait(1200))
    final = _snapshot(ws)
    return {"ws": ws, "root": root, "codes": codes, "snaps": snaps, "final": final}


def test_launcher_exit_codes(population):
    logs = "\n".join((population["root"] / f"launcher{i}.log").read_text()[-2000:] for i in (1, 2))
    assert population["codes"] == [128 + signal.SIGTERM, 128 + signal.SIGINT], logs


def test_stopped_members_published_status_stopped_and_their_last_checkpoint(population):
    stopped_in_training = 0
    for snap in [*population["snaps"], population["final"]]:
        for m, s in snap.items():
            entries = s["entries"]
            last_start = max(i for i, e in enumerate(entries) if e["kind"] == "start")
            if entries[-1]["kind"] != "stop":
                # The stop came before the process was training, so it could not publish "stopped": during
                # an exploit restart (os.execv, the new image starting; the exploit is still pending and the
                # next start applies it) or while rl_games built the agent after our start entry.
                assert s["state"]["pending_exploit"] or not any(
                    e["kind"] == "decision" for e in entries[last_start:]
                ), f"member {m}: {entries[-1]}"
                continue
            stopped_in_training += 1
            assert s["record"]["status"] == "stopped"
            assert s["record"]["checkpoint"] == s["state"]["last_checkpoint"], f"member {m}"
            assert entries[-1]["status"] == "stopped"
    assert stopped_in_training >= 2


def _after(entries: list[dict], seq: int) -> list[dict]:
    return [e for e in entries if e["seq"] > seq]


def test_every_member_resumes_from_its_own_last_checkpoint(population):
    ws = population["ws"]
    later = population["final"]
    for m, before in population["snaps"][0].items():
        state = before["state"]
        new = _after(later[m]["entries"], before["entries"][-1]["seq"])
        expected_mode = "exploit_applied" if state["pending_exploit"] else "resume"
        if state["pending_exploit"]:
            # Stopped with an exploit restart in flight: the next process applies it first, once its weights are in
            # (right after its start entry).
            assert new[1]["kind"] == "exploit_applied"
            assert new[1]["checkpoint"] == state["pending_exploit"]["checkpoint"] == state["last_checkpoint"]
        start = new[0]
        assert start["kind"] == "start"
        assert start["mode"] == expected_mode, f"member {m}"
        assert start["generation"] == state["generation"]
        assert start["process_starts"] == state["process_starts"] + 1
        ckpt_path = ws / state["last_checkpoint"]
        assert start["checkpoint"] == str(ckpt_path)
        restored = next(e for e in new if e["kind"] == "restored")
        assert restored["mode"] == expected_mode and restored["checkpoint"] == str(ckpt_path)
        ckpt = before["checkpoint"]  # the file as it was at the stop, checked against the sha256 in state.json
        frame_in_name = int(re.search(r"_f(\d+)\.pth$", state["last_checkpoint"]).group(1))
        assert restored["frame"] == ckpt["frame"] == frame_in_name, f"member {m}"
        assert restored["epoch"] == ckpt["epoch"]
        assert restored["frame"] <= before["record"]["frame"]


def test_rng_generation_and_lineage_continue_across_the_resume(population):
    later = population["final"]
    for m, before in population["snaps"][0].items():
        state = before["state"]
        decisions = [e for e in before["entries"] if e["kind"] == "decision"]
        assert decisions, f"member {m} decided before the stop"
        assert state["rng_state"] == decisions[-1]["rng_after"]
        new = _after(later[m]["entries"], before["entries"][-1]["seq"])
        first = next(e for e in new if e["kind"] == "decision")
        assert first["rng_before"] == decisions[-1]["rng_after"], f"member {m}: RNG restarted instead of continuing"
        me = first["inputs"]["me"]
        assert me["generation"] == state["generation"] and me["restarts"] == state["restarts"]
        assert me["frame"] > decisions[-1]["inputs"]["me"]["frame"]
        # Nothing but the resume happened between the stop and that decision: lineage unchanged.
        assert (
            not [e for e in new if e["kind"] == "exploit_applied" and e["seq"] < first["seq"]]
            or state["pending_exploit"]
        )
        final_lineage = population["final"][m]["state"]["lineage"]
        assert final_lineage[: len(state["lineage"])] == state["lineage"]


def test_the_population_exploited_and_every_audit_verifies(population):
    ws, final = population["ws"], population["final"]
    assert sum(s["state"]["generation"] for s in population["snaps"][0].values()) > 0
    for m, s in final.items():
        modes = [e["mode"] for e in s["entries"] if e["kind"] == "start"]
        assert modes[0] == "fresh" and "resume" in modes, modes
        count, problems = verify_log(ws / "members" / f"{m:03d}" / "audit.jsonl")
        assert count > 0 and problems == []


def test_exploits_ran_in_process_and_no_stop_left_one_half_done(population):
    for snap in [*population["snaps"], population["final"]]:
        for m, s in snap.items():
            assert s["state"]["pending_exploit"] is None, f"member {m} stopped with an exploit pending"
    applied = 0
    for m, s in population["final"].items():
        pid = None
        for e in s["entries"]:
            if e["kind"] == "start":
                pid = e["pid"]
            elif e["kind"] == "exploit_applied":
                applied += 1
                assert e["path"] == "inprocess" and e["pid"] == pid, f"member {m}: {e}"
        # Each generation after the first began at an in-process exploit, and its checkpoint is where a resume in
        # that generation may start from: no resume went back to an older generation's checkpoint.
        for e in s["entries"]:
            if e["kind"] == "restored" and e["mode"] == "resume":
                generation = int(re.search(r"/g(\d+)_f\d+\.pth$", e["checkpoint"]).group(1))
                start = next(x for x in reversed(s["entries"][: s["entries"].index(e)]) if x["kind"] == "start")
                assert generation == start["generation"], f"member {m}: resumed {e['checkpoint']} in {start}"
    assert applied >= 1


def test_a_stop_during_a_members_step_is_delivered_after_the_step():
    """Ctrl-C / SIGTERM landing between the writes of one publish-decide step is held until the step is
    written (so record.json never names a checkpoint that state.json, the resume point, does not)."""
    from async_pbt_isaaclab.member.held_stop import HeldStop

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    # The handlers a member runs with (Python's Ctrl-C handler; the runner's SIGTERM-as-Ctrl-C), whatever
    # earlier tests in this process left installed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt(f"signal {s}")))
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            steps = []
            with pytest.raises(KeyboardInterrupt):
                with HeldStop() as held:
                    # To the main thread itself, so its handler runs now (a process-directed signal may be
                    # taken by another thread, and Python runs the handler only when the main thread looks).
                    signal.pthread_kill(threading.main_thread().ident, sig)
                    deadline = time.monotonic() + 60  # a safety net; the handler runs within microseconds
                    while held.requested is None and time.monotonic() < deadline:
                        time.sleep(0.001)
                    steps.append("written")
                    assert held.requested == sig  # held: recorded, not raised inside the step
            assert steps == ["written"]
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for sig, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
            if handler is not None:  # None: installed outside Python, nothing to restore from here
                signal.signal(sig, handler)


def test_ctrl_c_right_after_an_audit_append_does_not_fork_the_chain(tmp_path, monkeypatch):
    """Found by this test's population: Ctrl-C landing just after an entry was written (during the fsync)
    must not make the stop entry repeat that entry's seq with the same prev_hash (a forked chain)."""
    from async_pbt_isaaclab.core.workspace import audit as audit_module
    from async_pbt_isaaclab.core.workspace.audit import AuditLog

    log = AuditLog.open(tmp_path / "audit.jsonl")
    log.append("start", {"mode": "fresh"})
    real_fsync = os.fsync

    def interrupted_fsync(fd):
        real_fsync(fd)
        raise KeyboardInterrupt("signal 2")

    monkeypatch.setattr(audit_module.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        log.append("restored", {"mode": "resume"})
    monkeypatch.setattr(audit_module.os, "fsync", real_fsync)
    log.append("stop", {"status": "stopped"})
    entries = [e for _, e, _ in read_entries(tmp_path / "audit.jsonl")]
    assert [(e["seq"], e["kind"]) for e in entries] == [(0, "start"), (1, "restored"), (2, "stop")]
    assert verify_log(tmp_path / "audit.jsonl") == (3, [])
