"""The bad-input matrix: each case asserts the exact error, and that healthy members keep training.

Part 1 runs two real CPU members while a driver plants bad peers in the shared workspace (a corrupt
record, an unknown schema version, a heartbeat from the future, an index outside the population) and
a "best" peer whose checkpoint is, phase by phase: checksum-mismatched, not a checkpoint, a pickle with
a disallowed global, a real checkpoint of another network shape, and gone. The worst real member tries to
exploit that peer each time, says what happened in its audit log and on stderr, and keeps training. The
members exploit in-process (``--pbt-exploit-mode inprocess``): a bad donor must be refused before anything
touches the running agent, and the member loses nothing (same process, same generation, no exploit left
pending). The donor is fetched and checked by the same code before either path is taken, so this covers the
restart path's refusals too. Member 0 starts over the lock a killed process left behind, and takes it over.

Part 2 covers the cases that stop a member before it trains (out-of-range index, a claimed index, an
unwritable workspace, an unloadable warm-start checkpoint) with their exact messages.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from async_pbt_isaaclab.core.state.evidence import EvidenceSummary
from async_pbt_isaaclab.core.state.records import SCHEMA_VERSION, HistoryEntry, MemberRecord, RecordError
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.state_files import read_record
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.slow

# -X faulthandler: a member that does not stop is sent SIGABRT, and its log then shows where every thread was.
MEMBER = [sys.executable, "-X", "faulthandler", "-m", "async_pbt_isaaclab.examples.cpu_member"]


class Evil:
    """A class no checkpoint allowlist contains: unpickling it must be refused before it runs."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/async_pbt_pwned",))


def _member_args(ws: Path, root: Path, index: int, members: int = 6) -> list[str]:
    return [
        *MEMBER,
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        str(members),
        "--pbt-index",
        str(index),
        "--train-dir",
        str(root / "runs"),
        "--max_iterations",
        "2000",
        "--num_envs",
        "8",
        "--pbt-interval-steps",
        "2048",
        "--pbt-start-grace-frames",
        "0",
        "--pbt-restart-grace-frames",
        "0",
        "--pbt-min-episodes",
        "8",
        "--pbt-gap-std-fraction",
        "0",
        "--pbt-gap-donor-fraction",
        "0",
        "--pbt-protect-interval-best",
        "false",
        "--pbt-max-frame-lag",
        "1000000000",
        "--pbt-heartbeat-interval-s",
        "0.5",
        "--pbt-exploit-mode",
        "inprocess",
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=128",
        "agent.params.config.mini_epochs=1",
        "agent.pbt.mutation.learning_rate=mutate_float",
    ]


def _audit(ws: Path, member: int) -> list[dict]:
    path = ws / "members" / f"{member:03d}" / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _wait(predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _fake_record(template: MemberRecord, member: int, *, checkpoint: str, sha: str, heartbeat: float) -> dict:
    rec = template.to_dict()
    rec.update(
        member=member,
        generation=0,
        generation_start_frame=0,
        restarts=0,
        heartbeat=heartbeat,
        checkpoint=checkpoint,
        checkpoint_sha256=sha,
        interval_best=None,
        pid=0,
        last_decision="",
        status="running",
    )
    # The best objective Pendulum allows: this peer is always the top of the population. Peers are compared at
    # their history entry at or before one's own frame, and an exploit copies that entry's checkpoint: the entry
    # (at the template's frame, which every member has passed) carries the planted checkpoint.
    rec["evidence"] = EvidenceSummary("episode_return", 0, tuple([0.0] * 16), 16, 0).to_dict()
    rec["history"] = [
        HistoryEntry(
            template.frame, 0, 0.0, 0.0, 16, template.condition, checkpoint, sha, dict(template.hyperparameters)
        ).to_dict()
    ]
    rec["origin_sha256"] = ""
    return rec


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_inputs")
    ws = root / "ws"
    # Member 0's lock is left behind by a process that claimed it and was killed: member 0 must take it over.
    stale = _hold_member_lock(ws, members=6)
    stale.send_signal(signal.SIGKILL)
    stale.wait()
    logs, procs = [], []
    for index in (0, 1):
        log = open(root / f"member{index}.log", "w")
        logs.append(log)
        # SIGINT at its default in the member whatever the test process inherited: the teardown stops them with it.
        procs.append(
            subprocess.Popen(
                _member_args(ws, root, index),
                cwd=root,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                preexec_fn=_default_sigint,
            )
        )
    phases: dict[str, dict] = {}
    stuck: list[int] = []
    try:
        template = _wait(lambda: _try_read(ws / "members/000/record.json"), 480, "member 0's first record")
        lock_owner = json.loads((ws / "members/000/lock").read_text())  # read while member 0 runs
        real_ckpt = _wait(lambda: _published_checkpoint(ws), 480, "a published checkpoint")
        mdir = {i: ws / "members" / f"{i:03d}" for i in (2, 3, 4, 5, 7)}
        for d in mdir.values():
            d.mkdir(parents=True, exist_ok=True)
        (mdir[2] / "record.json").write_bytes(b'{"schema_version": 1, "member": 2, "generat')
        fsio.atomic_write_json(mdir[3] / "record.json", dict(template.to_dict(), schema_version=99, member=3))
        fsio.atomic_write_json(mdir[7] / "record.json", dict(template.to_dict(), member=7))
        (mdir[5] / "checkpoints").mkdir(exist_ok=True)
        bad = mdir[5] / "checkpoints"
        (bad / "mismatch.pth").write_bytes(real_ckpt.read_bytes())
        (bad / "garbage.pth").write_bytes(b"this is not a torch checkpoint\n" * 10)
        torch.save({"model": {}, "epoch": 1, "frame": 1, "optimizer": {}, "evil": Evil()}, bad / "evil.pth")
        # A genuine checkpoint (right sha256, loads safely) of a wider network: loading it into the running agent
        # would fail half-way, so it must be refused before.
        misfit = load_checkpoint(bad / "mismatch.pth")  # a byte copy of member 0's checkpoint
        name = next(k for k, v in misfit["model"].items() if k.endswith("weight") and v.dim() == 2)
        misfit["model"][name] = torch.zeros(misfit["model"][name].shape[0] + 3, misfit["model"][name].shape[1])
        save_checkpoint(bad / "misfit.pth", misfit)
        starts_before = {i: sum(1 for e in _audit(ws, i) if e["kind"] == "start") for i in (0, 1)}
        plan = [
            ("checksum", "mismatch.pth", "0" * 64, "does not match the published"),
            ("not_a_checkpoint", "garbage.pth", None, "garbage.pth"),
            ("disallowed_global", "evil.pth", None, "disallowed global(s) posix.system"),
            ("misfit", "misfit.pth", None, "does not fit this member's model"),
            ("vanished", "gone.pth", "1" * 64, "gone.pth"),
        ]
        for name, fname, sha, expect in plan:
            path = bad / fname
            sha = sha or fsio.sha256_file(path)
            seen_before = len(_aborts(ws))

            def refresh_and_check(fname=fname, sha=sha, seen_before=seen_before, expect=expect):
                now = time.time()
                rec5 = _fake_record(template, 5, checkpoint=f"members/005/checkpoints/{fname}", sha=sha, heartbeat=now)
                fsio.atomic_write_json(mdir[5] / "record.json", rec5)
                fsio.atomic_write_json(
                    mdir[4] / "record.json",
                    _fake_record(
                        template, 4, checkpoint=f"members/005/checkpoints/{fname}", sha=sha, heartbeat=now + 3600
                    ),
                )
                new = _aborts(ws)[seen_before:]
                return next((a for a in new if expect in a["reason"]), None)

            phases[name] = _wait(refresh_and_check, 600, f"an exploit_aborted entry for phase {name}")
        frames_after_phases = {i: read_record(ws / f"members/{i:03d}/record.json").frame for i in (0, 1)}
        # Healthy members keep training after every bad input.
        _wait(
            lambda: all(
                read_record(ws / f"members/{i:03d}/record.json").frame > frames_after_phases[i] for i in (0, 1)
            ),
            120,
            "both members to advance after the last phase",
        )
        alive = [p.poll() is None for p in procs]
        kept = {
            i: {
                "state": json.loads((ws / f"members/{i:03d}/state.json").read_text()),
                "starts": sum(1 for e in _audit(ws, i) if e["kind"] == "start") - starts_before[i],
            }
            for i in (0, 1)
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=240)
            except subprocess.TimeoutExpired:
                stuck.append(p.pid)
                p.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to the member's log
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for log in logs:
            log.close()
    output = "".join((root / f"member{i}.log").read_text() for i in (0, 1))
    return {
        "ws": ws,
        "phases": phases,
        "alive": alive,
        "codes": [p.returncode for p in procs],
        "output": output,
        "kept": kept,
        "stuck": stuck,
        "stale_lock_pid": stale.pid,
        "member_pids": [p.pid for p in procs],
        "lock_owner": lock_owner,
    }


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _try_read(path: Path):
    try:
        return read_record(path)
    except RecordError:  # not written yet, or refused: the caller polls again
        return None


def _published_checkpoint(ws: Path):
    rec = _try_read(ws / "members/000/record.json")
    return ws / rec.checkpoint if rec is not None and rec.checkpoint else None


def _aborts(ws: Path) -> list[dict]:
    return [e for m in (0, 1) for e in _audit(ws, m) if e["kind"] == "exploit_aborted"]


def _decisions(ws: Path) -> list[dict]:
    return [e for m in (0, 1) for e in _audit(ws, m) if e["kind"] == "decision"]


def test_members_stayed_alive_and_stop_cleanly(live):
    assert live["alive"] == [True, True], live["output"][-3000:]
    assert not live["stuck"], f"members {live['stuck']} did not stop within 240 s of SIGINT: {live['output'][-8000:]}"
    assert live["codes"] == [0, 0]
    for m in (0, 1):
        rec = read_record(live["ws"] / f"members/{m:03d}/record.json")
        assert rec.status == "stopped"


def test_truncated_record_is_skipped_with_reason(live):
    reasons = [d["inputs"]["unreadable_peers"].get("2", "") for d in _decisions(live["ws"])]
    assert any("members/002/record.json: not valid JSON" in r and "truncated or corrupt" in r for r in reasons)


def test_unknown_schema_version_is_skipped_with_reason(live):
    reasons = [d["inputs"]["unreadable_peers"].get("3", "") for d in _decisions(live["ws"])]
    assert any(f"schema_version 99 is not supported (this version reads {SCHEMA_VERSION})" in r for r in reasons)


def test_member_index_out_of_range_is_not_read(live):
    reasons = [d["inputs"]["unreadable_peers"].get("7", "") for d in _decisions(live["ws"])]
    assert any("member index 7 is out of range for num_policies=6" in r for r in reasons)


def test_heartbeat_from_the_future_is_excluded_as_clock_skew(live):
    reasons = [d["decision"]["excluded"].get("4", "") for d in _decisions(live["ws"])]
    assert any("in the future > max_clock_skew_s=60 (clock skew)" in r for r in reasons)
    assert all(d["decision"]["donor"] != 4 for d in _decisions(live["ws"]))


def test_checkpoint_whose_checksum_does_not_match_is_refused(live):
    reason = live["phases"]["checksum"]["reason"]
    assert "mismatch.pth: sha256" in reason and f"does not match the published {'0' * 64}" in reason


def test_file_that_is_not_a_checkpoint_is_refused_naming_it(live):
    reason = live["phases"]["not_a_checkpoint"]["reason"]
    assert "garbage.pth" in reason and "not a torch checkpoint" in reason


def test_pickle_with_disallowed_global_is_refused_and_never_runs(live):
    reason = live["phases"]["disallowed_global"]["reason"]
    assert "donor 5 checkpoint members/005/checkpoints/evil.pth" in reason
    assert "refusing to unpickle disallowed global(s) posix.system" in reason
    assert not Path("/tmp/async_pbt_pwned").exists()


def test_donor_of_another_network_shape_is_refused_before_touching_the_running_agent(live):
    reason = live["phases"]["misfit"]["reason"]
    assert "donor 5 checkpoint members/005/checkpoints/misfit.pth" in reason
    assert "donor network does not fit this member's model" in reason and "donor (" in reason


def test_a_refused_donor_costs_the_member_nothing(live):
    """Every refusal above happened on the in-process path and left the member as it was: the same process
    kept training (no new start), no exploit was applied from the bad peer or left pending, and every
    generation the member has came from a real peer."""
    ws = live["ws"]
    for m, kept in live["kept"].items():
        assert kept["starts"] == 0, f"member {m} was restarted by a refused exploit"
        state = kept["state"]
        assert state["pending_exploit"] is None
        assert all(g["donor"] in (0, 1) for g in state["lineage"])
        applied = [e for e in _audit(ws, m) if e["kind"] == "exploit_applied"]
        assert all(e["path"] == "inprocess" and e["donor"] in (0, 1) for e in applied)
        assert state["generation"] == len(applied)


def test_donor_that_disappears_between_decision_and_copy_aborts_the_exploit(live):
    reason = live["phases"]["vanished"]["reason"]
    assert "gone.pth" in reason and "No such file" in reason


def test_member_says_what_happened_and_what_it_did(live):
    assert "exploit aborted, keeps training" in live["output"]


def test_audit_logs_of_healthy_members_verify(live):
    for m in (0, 1):
        count, problems = verify_log(live["ws"] / f"members/{m:03d}/audit.jsonl")
        assert count > 0 and problems == []


# --------------------------------------------------------------------------- part 2: refused at start


def _run_member(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )


def _hold_member_lock(ws: Path, members: int = 2) -> subprocess.Popen:
    """A process that claims member 0 of ``ws`` (a workspace of ``members``) and sleeps (returns once the lock is
    held)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time; from async_pbt_isaaclab.core.workspace.layout import Workspace; "
                "from async_pbt_isaaclab.core.workspace.member_lock import MemberLock;"
                f"w=Workspace({str(ws)!r}); w.ensure({members},'episode_return','Pendulum-v1');"
                "l=MemberLock(w.member_dir(0)/'lock'); l.acquire(0); print('held', flush=True); time.sleep(120)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_member_index_out_of_range_is_refused_before_training(tmp_path):
    args = [*MEMBER, "--pbt-workspace", str(tmp_path / "ws"), "--pbt-members", "2", "--pbt-index", "5"]
    result = _run_member(args, tmp_path)
    assert result.returncode == 2
    assert "pbt.policy_idx: 5 is out of range; accepted: 0..1 (num_policies=2)" in result.stderr
    assert not (tmp_path / "ws").exists()


def test_second_process_claiming_a_live_members_index_is_refused(tmp_path):
    ws = tmp_path / "ws"
    holder = _hold_member_lock(ws)
    try:
        args = [
            *MEMBER,
            "--pbt-workspace",
            str(ws),
            "--pbt-members",
            "2",
            "--pbt-index",
            "0",
            "--max_iterations",
            "1",
            "--train-dir",
            str(tmp_path / "runs"),
        ]
        result = _run_member(args, tmp_path)
        assert result.returncode == 2
        assert f"member 0 is already claimed by a live process (pid {holder.pid} on host" in result.stderr
    finally:
        holder.kill()
        holder.wait()


def test_stale_lock_of_a_killed_member_is_recovered(live):
    """Member 0 of the live population started over the lock a killed process left (see ``live``)."""
    assert live["lock_owner"]["pid"] == live["member_pids"][0] != live["stale_lock_pid"]
    assert [e["mode"] for e in _audit(live["ws"], 0) if e["kind"] == "start"][:1] == ["fresh"]


def test_workspace_that_is_not_writable_is_refused(tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the workspace's parent should be")
    args = [
        *MEMBER,
        "--pbt-workspace",
        str(blocker / "ws"),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--max_iterations",
        "1",
        "--train-dir",
        str(tmp_path / "runs"),
    ]
    result = _run_member(args, tmp_path)
    assert result.returncode == 2
    assert f"cannot create workspace {blocker / 'ws'}" in result.stderr


def _warm_start_args(tmp_path: Path, checkpoint: Path) -> list[str]:
    """A one-epoch member of a fresh two-member workspace, warm-started from ``checkpoint``."""
    workspace = ["--pbt-workspace", str(tmp_path / "ws"), "--pbt-members", "2", "--pbt-index", "0"]
    training = ["--max_iterations", "1", "--train-dir", str(tmp_path / "runs")]
    return [*MEMBER, *workspace, *training, "--checkpoint", str(checkpoint)]


def test_warm_start_from_a_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    bogus = tmp_path / "model.pth"
    bogus.write_text("not a checkpoint")
    args = _warm_start_args(tmp_path, bogus)
    result = _run_member(args, tmp_path)
    assert result.returncode == 2
    assert str(bogus) in result.stderr and "not a torch checkpoint" in result.stderr


def test_warm_start_from_a_pickle_with_a_disallowed_global_is_refused(tmp_path):
    evil = tmp_path / "evil.pth"
    with open(evil, "wb") as fh:
        torch.save({"model": {}, "payload": Evil()}, fh, pickle_module=pickle)
    args = _warm_start_args(tmp_path, evil)
    result = _run_member(args, tmp_path)
    assert result.returncode == 2
    assert str(evil) in result.stderr and "system" in result.stderr and "trusted" in result.stderr
    assert not Path("/tmp/async_pbt_pwned").exists()
