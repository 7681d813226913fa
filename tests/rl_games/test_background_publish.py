"""Publishing beside training, in real rl_games training: what is written in which order, on which thread.

Real members (Pendulum-v1 PPO on CPU) publish at every epoch while ``os.fsync`` and ``os.replace`` are watched in
this process (the files are real; only the order of the system calls is noted). Where a publish must still be in
flight when the member acts or stops, the writer's thread is held at one of its fsyncs until the training thread
is waiting in the writer's ``drain``: a condition on the training thread's stack, not a time.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.rlgames_compat,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd names an fsynced file (Linux)"),
]

import async_pbt_isaaclab.examples as examples  # noqa: E402
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml  # noqa: E402
from async_pbt_isaaclab.core.workspace import fsio  # noqa: E402
from async_pbt_isaaclab.member.loop import MemberLoop  # noqa: E402
from async_pbt_isaaclab.member.writer import BackgroundWriteError  # noqa: E402
from async_pbt_isaaclab.rl_games.observer import PbtObserver  # noqa: E402
from async_pbt_isaaclab.testing.tiny_agent import train_agent  # noqa: E402

YAML = Path(examples.__file__).parent / "pendulum_ppo.yaml"
FRAMES_PER_EPOCH = 16 * 128


def start(tmp: Path, *, index: int = 1, epochs: int = 4, **pbt):
    """Claim member ``index`` of a 2-member workspace under ``tmp``: a publish at every epoch."""
    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv_for
    from async_pbt_isaaclab.member.session import start_member

    raw = load_yaml(YAML)
    raw["params"]["seed"] = 5
    raw["params"]["config"].update(max_epochs=epochs, print_stats=False)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": index,
        "num_policies": 2,
        "workspace": str(tmp / "ws"),
        "interval_steps": FRAMES_PER_EPOCH,
        "heartbeat_interval_s": 0.0,
        "min_episodes": 8,
        "window": 32,
        "start_grace_frames": 0,
        "mutation": {"learning_rate": "mutate_float"},
        **pbt,
    }
    agent_cfg, cfg = load_population_config(raw)
    task = register_gym_vecenv_for(agent_cfg)
    return start_member(agent_cfg, cfg, train_dir=str(tmp / "runs"), task=task)


class Syscalls:
    """Notes every ``os.fsync`` (the file, through /proc/self/fd), ``os.replace`` and ``os.rename`` under ``root``, in
    order, with the thread; ``hold(test)`` makes an fsync for which ``test(path)`` is true wait until the training
    (main) thread is inside the member writer's ``drain``."""

    def __init__(self, monkeypatch, root: Path):
        self.root = str(root)
        self.events: list[tuple[str, str, str, object]] = []
        self.lock = threading.Lock()
        self.hold_test = None
        self.held_until_drain = 0
        self.fail_test = None
        real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

        def fsync(fd):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if self.fail_test is not None and self.fail_test(path):
                raise OSError(errno.EIO, "Input/output error (injected by the test)")
            writer_thread = threading.current_thread() is not threading.main_thread()
            if writer_thread and self.hold_test is not None and self.hold_test(path):
                self.hold_test = None
                self._wait_for_drain()
            result = real_fsync(fd)
            self.note("fsync", path, None)
            return result

        def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
            # Writers rename through their folder's descriptor: the full names are read back through /proc.
            src_path = src if src_dir_fd is None else os.path.join(os.readlink(f"/proc/self/fd/{src_dir_fd}"), src)
            dst_path = dst if dst_dir_fd is None else os.path.join(os.readlink(f"/proc/self/fd/{dst_dir_fd}"), dst)
            content = None
            if str(dst).endswith((".json",)):
                content = json.loads(Path(src_path).read_text())
            result = real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            dst = dst_path
            self.note("replace", str(dst), content)
            return result

        def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
            # Retention retires a checkpoint by renaming it in its folder: noted as ("rename", the old full name).
            result = real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            folder = "" if src_dir_fd is None else os.readlink(f"/proc/self/fd/{src_dir_fd}")
            self.note("rename", os.path.join(folder, str(src)), str(dst))
            return result

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "rename", rename)

    def note(self, kind: str, path: str, content: object) -> None:
        if path.startswith(self.root):
            with self.lock:
                self.events.append((kind, path, threading.current_thread().name, content))

    def _wait_for_drain(self) -> None:
        main = threading.main_thread().ident
        safety = time.monotonic() + 600  # only a hung test ends here; the assertion below then says so
        while time.monotonic() < safety:
            frame = sys._current_frames().get(main)
            while frame is not None:
                if frame.f_code.co_name == "drain" and frame.f_code.co_filename.endswith("writer.py"):
                    self.held_until_drain += 1
                    return
                frame = frame.f_back
            time.sleep(0.001)

    def index(self, kind: str, test, after: int = -1) -> int:
        """The first such event after event ``after``."""
        return next(i for i, (k, p, _t, c) in enumerate(self.events) if i > after and k == kind and test(p, c))


class CtrlC:
    """After the PBT observer: a Ctrl-C right after the publish at frame ``stop_at`` was handed to the writer."""

    def __init__(self, stop_at: int):
        self.stop_at = stop_at
        self.algo = None

    def after_init(self, algo):
        self.algo = algo

    def after_steps(self):
        if self.algo.frame == self.stop_at:
            raise KeyboardInterrupt("test stop")


def train(session, agent_cfg, observer=None, *more, raises: type[BaseException] | None = None):
    """Train member ``session`` with rl_games (``observer``: a ``PbtObserver`` of it unless given; ``more``: other
    callbacks), then close the session. With ``raises``, training must raise that, the member then stops as its
    runner does when training raised, and what was raised is returned."""
    observer = observer or PbtObserver(session)
    try:
        if raises is None:
            train_agent(agent_cfg, [observer, *more])
            return None
        with pytest.raises(raises) as info:
            train_agent(agent_cfg, [observer, *more])
        observer.finish("stopped")
        return info.value
    finally:
        session.close()


def checkpoint_written_before(calls: Syscalls, name: str, before: int) -> None:
    """The checkpoint ``name`` was fsynced (its temp file) and renamed into place before event ``before``."""
    synced = calls.index("fsync", lambda p, c: Path(p).name.startswith(f".{name}{fsio.TEMP_MARKER}"))
    placed = calls.index("replace", lambda p, c: Path(p).name == name)
    assert synced < placed < before, (name, synced, placed, before)


@pytest.mark.parametrize("background", [True, False], ids=["background", "inline"])
def test_a_record_or_state_names_a_checkpoint_only_once_it_is_fsynced(tmp_path, monkeypatch, background):
    session, agent_cfg = start(tmp_path, epochs=5, publish_in_background=background)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    train(session, agent_cfg)  # rl_games returns once the last epoch drained the writer
    named = [
        (i, Path(path).name, Path(content["checkpoint" if path.endswith("record.json") else "last_checkpoint"]).name)
        for i, (kind, path, _t, content) in enumerate(calls.events)
        if kind == "replace"
        and path.endswith(("record.json", "state.json"))
        and (content.get("checkpoint") or content.get("last_checkpoint"))
    ]
    assert len({ckpt for _i, _f, ckpt in named}) >= 4  # one checkpoint per publish, each named when written
    for i, _file, ckpt in named:
        checkpoint_written_before(calls, ckpt, i)
    # The publishes' checkpoints were written beside training, or on it with the synchronous path.
    threads = {t for kind, path, t, _c in calls.events if kind == "replace" and path.endswith(".pth")}
    main = threading.main_thread().name
    assert (main not in threads) if background else (threads == {main})
    on_disk = json.loads((session.dir / "record.json").read_text())
    assert fsio.sha256_file(session.ws.root / on_disk["checkpoint"]) == on_disk["checkpoint_sha256"]


def test_a_failed_background_write_stops_training_on_its_thread_and_nothing_names_the_lost_checkpoint(
    tmp_path, monkeypatch
):
    # One best checkpoint kept: the lost publish, if better, pushes the kept one out of the list, and it must return.
    session, agent_cfg = start(tmp_path, epochs=8, keep_best_checkpoints=1)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    failing = f"f{3 * FRAMES_PER_EPOCH:012d}.pth{fsio.TEMP_MARKER}"
    before: dict[int, dict] = {}
    prepare = MemberLoop._publish

    def noting_the_state(self, *args, **kwargs):
        before[self.trainer.counters().frame] = json.loads(json.dumps(self.session.state.to_dict()))
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(MemberLoop, "_publish", noting_the_state)
    calls.fail_test = lambda path: failing in path  # the disk fails under the third publish's checkpoint
    observer = PbtObserver(session)
    raised = train(session, agent_cfg, observer, raises=BackgroundWriteError)
    lost = f"g0000_f{3 * FRAMES_PER_EPOCH:012d}.pth"
    assert f"publish at frame {3 * FRAMES_PER_EPOCH}: writing checkpoint" in str(raised)
    assert lost in str(raised) and "Input/output error" in str(raised)
    assert isinstance(raised.__cause__, OSError) and raised.__cause__.errno == errno.EIO
    assert observer.algo.epoch_num < 8  # training stopped at the next hook, it did not run to its end
    checkpoints = session.dir / "checkpoints"
    assert not (checkpoints / lost).exists() and not [p for p in checkpoints.iterdir() if fsio.is_temp_file(p)]
    record, state = (json.loads((session.dir / f).read_text()) for f in ("record.json", "state.json"))
    assert record["status"] == "stopped"
    kept = f"g0000_f{2 * FRAMES_PER_EPOCH:012d}.pth"
    for named, sha in ((record["checkpoint"], record["checkpoint_sha256"]), (state["last_checkpoint"], None)):
        assert Path(named).name == kept
        assert fsio.sha256_file(session.ws.root / named) == (sha or state["last_checkpoint_sha256"])
    # The history, best list and evidence are what they were before the lost publish: an entry it pushed out is back.
    prior = before[3 * FRAMES_PER_EPOCH]
    assert prior["best"] and state["best"] == prior["best"] == json.loads((session.dir / "best.json").read_text())
    assert state["history"] == prior["history"] and state["evidence"] == prior["evidence"]


def test_an_exploit_is_acted_on_only_once_its_publish_and_decision_are_written(tmp_path, monkeypatch, publish_donor):
    session, agent_cfg = start(tmp_path, interval_steps=2 * FRAMES_PER_EPOCH, heartbeat_interval_s=3600.0)
    publish_donor(session.ws.root, frame=2 * FRAMES_PER_EPOCH, model={"w": torch.arange(16, dtype=torch.float32)})
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    audit_log = str(session.dir / "audit.jsonl")
    calls.hold_test = lambda path: path == audit_log  # the decision's append waits: the job is still in flight
    train(session, agent_cfg, PbtObserver(session, exit_on_restart=True))
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    (decision,) = [e for e in entries if e["kind"] == "decision"]
    assert decision["decision"]["outcome"] == "exploit" and decision["decision"]["donor"] == 0
    assert calls.held_until_drain == 1  # the training thread reached the exploit with the publish in flight
    decided = calls.index("fsync", lambda p, c: p == audit_log)
    state_saved = calls.index("replace", lambda p, c: p.endswith("001/state.json"), after=decided)
    record_written = calls.index("replace", lambda p, c: p.endswith("001/record.json"), after=state_saved)
    pinned = calls.index("replace", lambda p, c: p.endswith("000/pins/001.pin"))
    copied = calls.index("replace", lambda p, c: "/001/incoming/" in p)
    assert decided < state_saved < record_written < pinned < copied
    assert c_names(calls, state_saved) == c_names(calls, record_written)  # both name the publish's checkpoint
    aborted = next(e for e in entries if e["kind"] == "exploit_aborted")
    assert "does not fit this member's model" in aborted["reason"]


def c_names(calls: Syscalls, index: int) -> str:
    """The checkpoint the record or state replaced at event ``index`` names."""
    content = calls.events[index][3]
    return Path(content.get("checkpoint") or content.get("last_checkpoint")).name


def test_a_stop_writes_the_publish_in_flight_before_its_stopped_record(tmp_path, monkeypatch):
    session, agent_cfg = start(tmp_path, epochs=6, heartbeat_interval_s=3600.0)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    stop_at = 3 * FRAMES_PER_EPOCH
    held = f"f{stop_at:012d}.pth{fsio.TEMP_MARKER}"
    calls.hold_test = lambda path: held in path  # that publish's checkpoint fsync waits for the training thread

    train(session, agent_cfg, PbtObserver(session), CtrlC(stop_at), raises=KeyboardInterrupt)
    assert calls.held_until_drain == 1
    records = [c for kind, path, _t, c in calls.events if kind == "replace" and path.endswith("001/record.json")]
    in_flight = f"g0000_f{stop_at:012d}.pth"
    assert [Path(r["checkpoint"]).name for r in records[-2:]] == [in_flight, in_flight]
    assert [r["status"] for r in records[-2:]] == ["running", "stopped"]
    state = json.loads((session.dir / "state.json").read_text())
    assert Path(state["last_checkpoint"]).name == in_flight
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in entries[-2:]] == ["decision", "stop"]


def names_only_written_checkpoints(calls: Syscalls) -> int:
    """Every ``state.json`` replaced names a checkpoint already fsynced and in place; returns how many were."""
    saves = [
        (i, Path(c["last_checkpoint"]).name)
        for i, (kind, path, _t, c) in enumerate(calls.events)
        if kind == "replace" and path.endswith("001/state.json") and c.get("last_checkpoint")
    ]
    for i, ckpt in saves:
        checkpoint_written_before(calls, ckpt, i)
    return len(saves)


def verified(session) -> None:
    """``async-pbt audit``'s check of the member's log passes against the head its state.json anchors."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log

    state = json.loads((session.dir / "state.json").read_text())
    assert verify_log(session.dir / "audit.jsonl", state["audit_head"], final=True)[1] == []


def test_a_warning_at_a_heartbeat_saves_the_state_only_once_the_publish_in_flight_is_written(tmp_path, monkeypatch):
    from async_pbt_isaaclab.member.publication import Publication

    session, agent_cfg = start(tmp_path, epochs=5, interval_steps=2 * FRAMES_PER_EPOCH)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    held = f"f{2 * FRAMES_PER_EPOCH:012d}.pth{fsio.TEMP_MARKER}"
    calls.hold_test = lambda path: held in path  # the first publish's checkpoint waits for a drain
    collect = Publication.collect

    def warning_after_the_first_publish(self):
        warnings = collect(self)
        if self.named is not None and self.warn_once("test"):
            warnings.append(("test", "a warning while the publish is in flight (injected by the test)"))
        return warnings

    monkeypatch.setattr(Publication, "collect", warning_after_the_first_publish)
    train(session, agent_cfg)
    assert calls.held_until_drain == 1  # the warning's state save waited for the publish in flight
    assert names_only_written_checkpoints(calls) >= 2
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert any("injected by the test" in e.get("message", "") for e in entries)
    verified(session)


def test_a_failed_decision_write_rolls_the_rng_back_and_is_logged_as_publish_failed(tmp_path, monkeypatch, capfd):
    session, agent_cfg = start(tmp_path, epochs=6)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    audit_log = str(session.dir / "audit.jsonl")
    failed: list[str] = []

    def second_decision(path):
        # The writer's second append of a decision fails: its checkpoint is on disk, its decision is not.
        if path != audit_log or threading.current_thread() is threading.main_thread() or failed == ["x", "x"]:
            return False
        failed.append("x")
        return len(failed) == 2

    calls.fail_test = second_decision
    train(session, agent_cfg, raises=BackgroundWriteError)
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    decisions = [e for e in entries if e["kind"] == "decision"]
    assert len(decisions) == 2  # the failed fsync came after the line was written: that decision is logged
    state = json.loads((session.dir / "state.json").read_text())
    assert state["rng_state"] == decisions[-1]["rng_after"]  # not the RNG after the decision never logged
    (failure,) = [e for e in entries if e["kind"] == "publish_failed"]
    assert "decision in audit.jsonl" in failure["error"] and "Input/output error" in failure["error"]
    assert failure["lost"] == []  # the checkpoint of that publish was written: it stays the resume point
    assert fsio.sha256_file(session.ws.root / state["last_checkpoint"]) == state["last_checkpoint_sha256"]
    record = json.loads((session.dir / "record.json").read_text())
    assert record["status"] == "stopped" and entries[-1]["kind"] == "stop"
    from async_pbt_isaaclab.commands.workspace_views import status_data

    (shown,) = [m for m in status_data(session.ws, time.time(), 60.0)["members"] if m.get("member") == 1]
    assert shown["last_decision"].startswith("publish failed: member 1: publish at frame")
    assert "Input/output error" in shown["last_decision"]
    assert "publish failed, the member stops" in capfd.readouterr().err
    verified(session)


def test_a_failed_publish_that_carries_an_exploit_rolls_back_the_rng_and_the_decision_list(
    tmp_path, monkeypatch, publish_donor
):
    """The decision at the failed publish exploits (it drew from the member's RNG); the publish's checkpoint write
    fails, so the decision never reaches the audit log: the RNG and the decisions the records name are put back."""
    from async_pbt_isaaclab.member.publishing import Publishing

    session, agent_cfg = start(tmp_path, epochs=6, interval_steps=2 * FRAMES_PER_EPOCH, heartbeat_interval_s=3600.0)
    publish_donor(session.ws.root, frame=2 * FRAMES_PER_EPOCH, model={"w": torch.arange(16, dtype=torch.float32)})
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    handed: list[tuple[dict, object, list]] = []
    publish = Publishing.publish

    def noting_what_is_handed(self, files):
        # What the records name once the publish is committed: its decision is the last one.
        handed.append((files.decision, files.undo.rng_state, list(self.publication.decisions)))
        return publish(self, files)

    monkeypatch.setattr(Publishing, "publish", noting_what_is_handed)
    failing = f"f{2 * FRAMES_PER_EPOCH:012d}.pth{fsio.TEMP_MARKER}"
    calls.fail_test = lambda path: failing in path  # the first publish (the one with the exploit) fails
    observer = PbtObserver(session, exit_on_restart=True)
    train(session, agent_cfg, observer, raises=BackgroundWriteError)
    (decision, rng_before, decisions_named), *_ = handed
    assert decision["decision"]["outcome"] == "exploit" and decision["decision"]["donor"] == 0
    assert [d.outcome.value for d in decisions_named] == ["exploit"]  # named while the publish was in flight
    assert decision["rng_after"] != decision["rng_before"] == rng_before  # the exploit moved the RNG
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert not [e for e in entries if e["kind"] == "decision"]  # never logged: its checkpoint failed first
    state = json.loads((session.dir / "state.json").read_text())
    assert state["rng_state"] == rng_before  # the RNG as before the decision that was never logged
    assert observer.publisher.decisions == []  # the records name no decision now
    record = json.loads((session.dir / "record.json").read_text())
    assert record["status"] == "stopped" and "exploit" not in record["last_decision"]
    assert record["last_decision"].startswith("publish failed")
    (failure,) = [e for e in entries if e["kind"] == "publish_failed"]
    assert failure["lost"] == [f"members/001/checkpoints/g0000_f{2 * FRAMES_PER_EPOCH:012d}.pth"]
    assert entries[-1]["kind"] == "stop" and "exploit" not in json.dumps(entries[-1])
    verified(session)


def test_ctrl_c_while_the_publish_in_flight_fails_still_writes_the_stop_record_and_entry(tmp_path, monkeypatch):
    session, agent_cfg = start(tmp_path, epochs=6, heartbeat_interval_s=3600.0)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    stop_at = 3 * FRAMES_PER_EPOCH
    failing = f"f{stop_at:012d}.pth{fsio.TEMP_MARKER}"
    calls.fail_test = lambda path: failing in path  # the publish handed to the writer just before Ctrl-C fails

    observer = PbtObserver(session)
    try:
        with pytest.raises(KeyboardInterrupt):
            train_agent(agent_cfg, [observer, CtrlC(stop_at)])
        with pytest.raises(BackgroundWriteError):
            observer.finish("stopped")
    finally:
        session.close()
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in entries[-2:]] == ["publish_failed", "stop"]
    record, state = (json.loads((session.dir / f).read_text()) for f in ("record.json", "state.json"))
    assert record["status"] == "stopped" and record["last_decision"].startswith("publish failed")
    kept = f"g0000_f{2 * FRAMES_PER_EPOCH:012d}.pth"
    assert Path(record["checkpoint"]).name == Path(state["last_checkpoint"]).name == kept
    assert fsio.sha256_file(session.ws.root / state["last_checkpoint"]) == state["last_checkpoint_sha256"]
    verified(session)


def test_heartbeats_flow_and_a_slow_write_is_said_while_the_writer_is_held(tmp_path, monkeypatch, capfd):
    session, agent_cfg = start(tmp_path, epochs=6, interval_steps=2 * FRAMES_PER_EPOCH)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    held = f"g0000_f{4 * FRAMES_PER_EPOCH:012d}.pth"
    calls.hold_test = lambda path: f".{held}{fsio.TEMP_MARKER}" in path  # held until the next publish drains
    train(session, agent_cfg)
    assert calls.held_until_drain == 1
    placed = calls.index("replace", lambda p, c: Path(p).name == held)
    main = threading.main_thread().name
    beside = [
        (i, c)
        for i, (kind, path, thread, c) in enumerate(calls.events)
        if kind == "replace" and path.endswith("001/record.json") and thread == main and i < placed
    ]
    assert beside, "no heartbeat reached record.json while the publish was held"
    for i, content in beside:  # the record on disk again (a written checkpoint), its heartbeat fresh
        checkpoint_written_before(calls, Path(content["checkpoint"]).name, i)
        assert content["last_decision"].startswith(f"writing member 1: publish at frame {4 * FRAMES_PER_EPOCH}")
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert any("training goes on" in e.get("message", "") for e in entries)
    assert "training goes on" in capfd.readouterr().err
    verified(session)


def test_repeated_record_write_failures_are_counted_in_the_record_and_status_and_said_at_1_and_10(
    tmp_path, monkeypatch, capfd
):
    """``record.json`` cannot be written for a while (its fsync fails 11 times): training goes on; the log and the
    audit log say it at the 1st and the 10th failure only; the first record written again carries the count, and
    ``async-pbt status`` shows it."""
    from async_pbt_isaaclab.commands.status_view import _member_row
    from async_pbt_isaaclab.commands.workspace_views import status_data

    session, agent_cfg = start(tmp_path, epochs=14)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    failed: list[str] = []

    def first_eleven_records(path):
        if f"/001/.record.json{fsio.TEMP_MARKER}" not in path or len(failed) == 11:
            return False
        failed.append(path)
        return True

    calls.fail_test = first_eleven_records
    train(session, agent_cfg)
    assert len(failed) == 11
    record = json.loads((session.dir / "record.json").read_text())
    assert record["record_write_failures"] == 11
    said = [line for line in capfd.readouterr().err.splitlines() if "cannot write" in line]
    assert len(said) == 2 and "(1 failed record write so far)" in said[0] and "(10 failed" in said[1], said
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert len([e for e in entries if "failed record write" in e.get("message", "")]) == 2
    (shown,) = [m for m in status_data(session.ws, time.time(), 60.0)["members"] if m.get("member") == 1]
    assert shown["record_write_failures"] == 11
    assert f"{record['status']} (11 record writes failed)" in _member_row(shown)
    verified(session)


def test_retention_removes_no_checkpoint_the_state_on_disk_still_names(tmp_path, monkeypatch):
    """History thinned to 2 entries, one checkpoint kept besides those named: publishes drop older history entries
    and retention retires their checkpoints. Each retirement must come after the ``state.json`` that stopped naming
    the file, or a kill in between leaves a state naming a removed checkpoint (a long chaos run found retention
    running before ``state.json``)."""
    from async_pbt_isaaclab.core.workspace.retention import RETIRING

    session, agent_cfg = start(tmp_path, epochs=12, history_length=2, keep_last_checkpoints=1, keep_best_checkpoints=1)
    calls = Syscalls(monkeypatch, tmp_path / "ws")
    train(session, agent_cfg)
    on_disk: set[str] = set()
    retired = 0
    for kind, path, _thread, content in calls.events:
        if kind == "replace" and path.endswith("001/state.json"):
            named = [content["last_checkpoint"]] + [e.get("checkpoint") for e in content["history"] + content["best"]]
            on_disk = {Path(c).name for c in named if c}
        elif kind == "rename" and str(content).startswith(RETIRING):
            retired += 1
            assert Path(path).name not in on_disk, f"{Path(path).name} retired while state.json names it"
    assert retired >= 3
