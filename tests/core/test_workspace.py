"""The shared workspace (async_pbt_isaaclab.core.workspace.layout, records).

What is shown here:
1. member lock: a second process claiming the same member gets a clear error naming the member and the
   owner's pid; a lock left by a SIGKILLed process is recovered (the next claim succeeds); a second
   claim from the same process is refused without breaking the first;
2. member names are validated (no path traversal, no negative or non-int index); ``resolve_inside``
   refuses paths that escape the workspace, symlinks included;
3. records: round trip; wrong schema version, bad JSON, truncated file, NaN evidence, missing or
   mistyped keys raise RecordError naming the file and key, and ``read_records`` reports them per member
   while still returning the good ones;
4. retention keeps the newest K, everything in ``keep`` (bests) and never deletes a pinned checkpoint;
   stale pins (older than the TTL) no longer protect;
5. historical bests rank numerically (-3 beats -10 beats -100); population_best merges members;
6. population.json: created once, and a member with a different population setup is refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.records import SCHEMA_VERSION, MemberRecord, RecordError
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import (
    Workspace,
    WorkspaceError,
    checkpoint_name,
    member_dirname,
    resolve_inside,
)
from async_pbt_isaaclab.core.workspace.member_lock import MemberLock
from async_pbt_isaaclab.core.workspace.retention import (
    PIN_TTL_S,
    active_pins,
    apply_retention,
    list_checkpoints,
    pin_checkpoint,
    population_best,
    update_best,
)
from async_pbt_isaaclab.core.workspace.state_files import read_record

CLAIMER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from async_pbt_isaaclab.core.workspace.member_lock import MemberLock
    lock = MemberLock(Path(sys.argv[1]))
    try:
        lock.acquire(int(sys.argv[2]))
    except Exception as exc:
        print("error:", exc, flush=True)
        sys.exit(3)
    print("locked", flush=True)
    time.sleep(600)
    """
)


def _claim_in_subprocess(lock_path, member):
    proc = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(lock_path), str(member)], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline().strip()
    return proc, line


@pytest.fixture
def ws(tmp_path):
    w = Workspace(tmp_path / "ws")
    w.ensure(num_policies=4, objective="episode_return", task="t")
    return w


# ------------------------------------------------------------------ lock


def test_second_process_gets_clear_error_and_killed_owner_is_recovered(ws):
    lock_path = ws.member_dir(3) / "lock"
    owner, line = _claim_in_subprocess(lock_path, 3)
    try:
        assert line == "locked"
        with pytest.raises(WorkspaceError) as excinfo:
            MemberLock(lock_path).acquire(3)
        msg = str(excinfo.value)
        assert "member 3" in msg and f"pid {owner.pid}" in msg and "already claimed" in msg

        # A third process gets the same answer.
        other, line = _claim_in_subprocess(lock_path, 3)
        assert other.wait(timeout=600) == 3 and f"pid {owner.pid}" in line

        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=600)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
    # The kernel released the dead owner's lock: the restart claims it at once.
    lock = MemberLock(lock_path)
    lock.acquire(3)
    try:
        assert json.loads(lock_path.read_text())["pid"] == os.getpid()
    finally:
        lock.release()


def test_same_process_second_claim_is_refused_and_first_claim_survives(ws):
    lock_path = ws.member_dir(1) / "lock"
    first = MemberLock(lock_path)
    first.acquire(1)
    try:
        with pytest.raises(WorkspaceError, match="member 1 is already claimed by this process"):
            MemberLock(lock_path).acquire(1)
        # The refused attempt must not have dropped the real claim (POSIX locks die with any close()).
        proc, line = _claim_in_subprocess(lock_path, 1)
        assert proc.wait(timeout=600) == 3 and "already claimed" in line
    finally:
        first.release()
    proc, line = _claim_in_subprocess(lock_path, 1)
    try:
        assert line == "locked"
    finally:
        proc.kill()
        proc.wait()


def test_different_members_do_not_block_each_other(ws):
    a, b = MemberLock(ws.member_dir(0) / "lock"), MemberLock(ws.member_dir(2) / "lock")
    a.acquire(0)
    b.acquire(2)
    a.release()
    b.release()
    assert a.fd == -1 and b.fd == -1


# ------------------------------------------------------------------ names and paths


@pytest.mark.parametrize("bad", ["../x", "3", -1, 1.5, True, None, 10**7])
def test_member_names_are_validated(bad):
    with pytest.raises(WorkspaceError, match="member index"):
        member_dirname(bad)


def test_member_dir_layout(ws):
    assert member_dirname(3) == "003" and member_dirname(1234) == "1234"
    assert ws.member_dir(7) == ws.root / "members" / "007"
    (ws.members_dir / "005").mkdir()
    (ws.members_dir / "..evil").mkdir()
    (ws.members_dir / "abc").mkdir()
    (ws.members_dir / "12").mkdir()  # too short to be ours
    assert ws.member_indices() == [5]
    assert checkpoint_name(2, 1234567) == "g0002_f000001234567.pth"


@pytest.mark.parametrize("bad", ["../outside.pth", "members/../../outside.pth", "/etc/passwd", "", "a\x00b"])
def test_resolve_inside_refuses_escaping_paths(ws, bad):
    with pytest.raises(WorkspaceError):
        resolve_inside(ws.root, bad)
    with pytest.raises(WorkspaceError):
        ws.checkpoint_path(bad)


def test_resolve_inside_refuses_symlink_escape_and_accepts_inside(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.members_dir / "000").mkdir()
    os.symlink(outside, ws.members_dir / "000" / "checkpoints")
    with pytest.raises(WorkspaceError, match="symbolic link"):
        resolve_inside(ws.root, "members/000/checkpoints/x.pth")
    ok = resolve_inside(ws.root, "members/001/checkpoints/g0000_f000000001000.pth")
    assert ok == (ws.root / "members/001/checkpoints/g0000_f000000001000.pth").resolve()


# ------------------------------------------------------------------ records


def _publish(ws, rec: MemberRecord):
    ws.member_dir(rec.member).mkdir(parents=True, exist_ok=True)
    fsio.atomic_write_json(ws.member_dir(rec.member) / "record.json", rec.to_dict())


def test_record_round_trip(ws, make_record):
    rec = make_record(2, [1.0, -2.5, 3.25], interval_best=4.0, epoch=12, last_decision="keep: x", host="h", pid=9)
    _publish(ws, rec)
    records, errors = ws.read_records()
    assert errors == {} and records == {2: rec}
    assert read_record(ws.member_dir(2) / "record.json").to_dict() == rec.to_dict()


BAD_RECORDS = {
    "schema version": (lambda d: json.dumps(dict(d, schema_version=SCHEMA_VERSION + 1)), "schema_version"),
    "no schema version": (
        lambda d: json.dumps({k: v for k, v in d.items() if k != "schema_version"}),
        "schema_version",
    ),
    "bad json": (lambda d: "{not json", "not valid JSON"),
    "truncated": (lambda d: json.dumps(d)[: len(json.dumps(d)) // 2], "truncated"),
    "empty": (lambda d: "", "not valid JSON"),
    "nan evidence": (lambda d: json.dumps(d).replace('"values": [1.0', '"values": [NaN'), "NaN"),
    "inf evidence": (lambda d: json.dumps(d).replace('"values": [1.0', '"values": [1e999'), "evidence.values"),
    "missing key": (lambda d: json.dumps({k: v for k, v in d.items() if k != "frame"}), "'frame'"),
    "wrong type": (lambda d: json.dumps(dict(d, generation="2")), ".generation"),
    "negative frame": (lambda d: json.dumps(dict(d, frame=-5)), ".frame"),
    "bad status": (lambda d: json.dumps(dict(d, status="zombie")), ".status"),
    "bad sha": (lambda d: json.dumps(dict(d, checkpoint_sha256="xyz")), ".checkpoint_sha256"),
    "inf hyperparameter": (
        lambda d: json.dumps(d).replace('"learning_rate": 0.0003', '"learning_rate": 1e999'),
        "hyperparameters.learning_rate",
    ),
    "not an object": (lambda d: "[1, 2, 3]", "JSON object"),
    "not utf8": (lambda d: b"\xff\xfe{}", "UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_bad_records_are_reported_naming_file_and_key(ws, make_record, case):
    make, fragment = BAD_RECORDS[case]
    good = make_record(0, [5.0] * 4)
    _publish(ws, good)
    bad = make_record(1, [1.0, 2.0])
    text = make(bad.to_dict())
    assert text != json.dumps(bad.to_dict())
    ws.member_dir(1).mkdir(parents=True, exist_ok=True)
    path = ws.member_dir(1) / "record.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())

    with pytest.raises(RecordError) as excinfo:
        read_record(path)
    assert str(path) in str(excinfo.value) and fragment in str(excinfo.value)

    records, errors = ws.read_records()  # one broken member does not stop the population
    assert records == {0: good}
    assert set(errors) == {1} and str(path) in errors[1] and fragment in errors[1]


def test_record_in_the_wrong_folder_is_reported(ws, make_record):
    rec = make_record(2, [1.0])
    ws.member_dir(3).mkdir(parents=True)
    fsio.atomic_write_json(ws.member_dir(3) / "record.json", rec.to_dict())
    records, errors = ws.read_records()
    assert records == {} and "record says member 2" in errors[3]


def test_member_folder_without_record_is_skipped(ws):
    ws.member_dir(0).mkdir(parents=True)
    assert ws.read_records() == ({}, {})


# ------------------------------------------------------------------ retention and pins


def _make_checkpoints(ws, member, n):
    folder = ws.member_dir(member) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    rels = []
    for i in range(n):
        p = folder / checkpoint_name(i // 3, 1000 * (i + 1))
        p.write_bytes(b"w%d" % i)
        rels.append(ws.relative(p))
    return rels


def test_list_checkpoints_orders_by_frame(ws):
    rels = _make_checkpoints(ws, 0, 5)
    (ws.member_dir(0) / "checkpoints" / "notes.txt").write_text("ignored")
    listed = list_checkpoints(ws.member_dir(0) / "checkpoints")
    assert [ws.relative(p) for _, _, p in listed] == rels
    assert [f for _, f, _ in listed] == [1000, 2000, 3000, 4000, 5000]


def test_retention_keeps_last_k_bests_and_pinned(ws):
    rels = _make_checkpoints(ws, 1, 8)
    pin_checkpoint(ws, donor=1, checkpoint_rel=rels[2], by_member=3)
    removed = apply_retention(ws, 1, keep_last=3, keep=[rels[0]])
    kept = {ws.relative(p) for _, _, p in list_checkpoints(ws.member_dir(1) / "checkpoints")}
    assert kept == {rels[0], rels[2], rels[5], rels[6], rels[7]}
    assert {ws.relative(p) for p in removed} == {rels[1], rels[3], rels[4]}
    assert active_pins(ws, 1) == {rels[2]}

    # Once the recipient removes its pin, the next retention pass may delete it.
    (ws.member_dir(1) / "pins" / "003.pin").unlink()
    apply_retention(ws, 1, keep_last=3, keep=[rels[0]])
    kept = {ws.relative(p) for _, _, p in list_checkpoints(ws.member_dir(1) / "checkpoints")}
    assert kept == {rels[0], rels[5], rels[6], rels[7]}


def test_a_pin_written_between_retentions_two_reads_keeps_the_file_and_the_copy_finds_it(ws, monkeypatch, tmp_path):
    """The recipient pins (and starts its copy) in the window after retention's first read of the pins, when the file
    is already set aside: retention's second read sees the pin and puts the file back; the copy succeeds."""
    from async_pbt_isaaclab.core.workspace import retention
    from async_pbt_isaaclab.member.donors import _copy_pinned

    rels = _make_checkpoints(ws, 1, 3)
    path = ws.checkpoint_path(rels[0])
    sha = fsio.sha256_file(path)
    copied: list[str] = []
    reads = iter(range(100))
    real_pins = retention.active_pins

    def recipient_in_the_window(*args, **kwargs):
        if next(reads) == 1:  # retention has set the oldest checkpoint aside: the recipient pins and copies now
            assert not path.exists() and retention.retiring_name(path).exists()
            pin_checkpoint(ws, donor=1, checkpoint_rel=rels[0], by_member=3)
            _copy_pinned(path, tmp_path / "copy.pth", sha)
            copied.append(fsio.sha256_file(tmp_path / "copy.pth"))
        return real_pins(*args, **kwargs)

    monkeypatch.setattr(retention, "active_pins", recipient_in_the_window)
    assert apply_retention(ws, 1, keep_last=2) == []
    assert copied == [sha] and fsio.sha256_file(path) == sha  # put back under its own name
    assert not retention.retiring_name(path).exists()


def test_a_checkpoint_set_aside_by_a_killed_deleter_is_put_back(ws):
    from async_pbt_isaaclab.core.workspace import retention

    rels = _make_checkpoints(ws, 1, 3)
    path = ws.checkpoint_path(rels[0])
    os.rename(path, retention.retiring_name(path))
    pin_checkpoint(ws, donor=1, checkpoint_rel=rels[0], by_member=3)
    assert apply_retention(ws, 1, keep_last=1) == [ws.checkpoint_path(rels[1])]
    assert path.exists() and not retention.retiring_name(path).exists()


def test_stale_pin_does_not_protect(ws):
    rels = _make_checkpoints(ws, 2, 4)
    pin = pin_checkpoint(ws, donor=2, checkpoint_rel=rels[0], by_member=0)
    data = json.loads(pin.read_text())
    fsio.atomic_write_json(pin, dict(data, time=time.time() - PIN_TTL_S - 1))  # its owner died long ago
    assert active_pins(ws, 2) == set()
    apply_retention(ws, 2, keep_last=1)
    kept = [ws.relative(p) for _, _, p in list_checkpoints(ws.member_dir(2) / "checkpoints")]
    assert kept == [rels[3]]


def test_unreadable_pin_protects_everything(ws):
    rels = _make_checkpoints(ws, 0, 4)
    (ws.member_dir(0) / "pins").mkdir()
    (ws.member_dir(0) / "pins" / "002.pin").write_text("{garbage")
    assert apply_retention(ws, 0, keep_last=1) == []
    assert len(list_checkpoints(ws.member_dir(0) / "checkpoints")) == len(rels)


# ------------------------------------------------------------------ bests


def test_update_best_ranks_numerically_with_negative_objectives():
    best: list = []
    for obj, frame in [(-10.0, 1), (-100.0, 2), (-3.0, 3), (-25.5, 4), (-3.0, 5)]:
        best = update_best(best, BestEntry(checkpoint=f"c{frame}", objective=obj, frame=frame), keep=3)
    assert [(e.objective, e.frame) for e in best] == [(-3.0, 5), (-3.0, 3), (-10.0, 1)]
    # Re-publishing a checkpoint replaces its entry instead of duplicating it.
    best = update_best(best, BestEntry(checkpoint="c1", objective=-1.0, frame=1), keep=3)
    assert [e.checkpoint for e in best] == ["c1", "c5", "c3"]


def test_population_best_merges_members(ws):
    for member, entries in {0: [-10.0, -100.0], 1: [-3.0], 2: [-50.0, -4.0]}.items():
        ws.member_dir(member).mkdir(parents=True, exist_ok=True)
        best = []
        for i, obj in enumerate(entries):
            best = update_best(
                best, BestEntry(checkpoint=f"members/{member:03d}/checkpoints/c{i}.pth", objective=obj, frame=i), keep=3
            )
        fsio.atomic_write_json(ws.member_dir(member) / "best.json", [b.to_dict() for b in best])
    (ws.member_dir(3)).mkdir()
    (ws.member_dir(3) / "best.json").write_text("{corrupt")  # skipped, not fatal
    top = population_best(ws, top=4)
    assert [(e["member"], e["objective"]) for e in top] == [(1, -3.0), (2, -4.0), (0, -10.0), (2, -50.0)]


# ------------------------------------------------------------------ population.json


def test_population_meta_is_created_once_and_checked(tmp_path):
    w = Workspace(tmp_path / "pop")
    meta = w.ensure(num_policies=8, objective="success", task="Isaac-X")
    assert meta["num_policies"] == 8 and (tmp_path / "pop" / "population.json").exists()
    assert w.ensure(num_policies=8, objective="success", task="")["task"] == "Isaac-X"
    with pytest.raises(WorkspaceError) as excinfo:
        Workspace(tmp_path / "pop").ensure(num_policies=4, objective="success", task="Isaac-X")
    assert "num_policies=8" in str(excinfo.value) and "num_policies=4" in str(excinfo.value)
    with pytest.raises(WorkspaceError, match="objective"):
        w.ensure(num_policies=8, objective="episode_return", task="Isaac-X")
    with pytest.raises(WorkspaceError, match="not a population workspace"):
        Workspace(tmp_path / "empty").population_meta()


def test_a_marker_left_by_a_member_killed_while_creating_the_workspace_does_not_block_it(tmp_path):
    # An earlier layout created an empty .population.json.init before writing population.json; a member killed
    # in between left the marker alone, and every later member gave up with "population.json: missing".
    root = tmp_path / "pop"
    (root / "members").mkdir(parents=True)
    (root / ".population.json.init").touch()
    # A member killed after writing its temporary file but before publishing it leaves that file too.
    (root / ".population.json.tmp-host-1-2").write_text('{"num_policies": 99}')
    meta = Workspace(root).ensure(num_policies=2, objective="episode_return", task="t")
    assert meta["num_policies"] == 2
    assert json.loads((root / "population.json").read_text())["num_policies"] == 2
    assert not (root / ".population.json.init").exists()


RACER = """
import json, sys, time
from pathlib import Path
from async_pbt_isaaclab.core.workspace.layout import Workspace
root, go = Path(sys.argv[1]), Path(sys.argv[2])
Path(sys.argv[3]).touch()  # imported and ready: the test says go once every racer is
while not go.exists():
    time.sleep(0.001)
print(json.dumps(Workspace(root).ensure(num_policies=4, objective="episode_return", task="t")))
"""


def test_members_racing_to_create_the_workspace_all_get_the_same_one(tmp_path):
    root, go = tmp_path / "pop", tmp_path / "go"
    ready = [tmp_path / f"ready{i}" for i in range(4)]
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, str(root), str(go), str(r)], stdout=subprocess.PIPE, text=True)
        for r in ready
    ]
    deadline = time.monotonic() + 600  # only ends a hung run: go is given once every racer is ready, never before
    while not all(r.exists() for r in ready):
        assert all(p.poll() is None for p in procs), "a racer died before it was ready"
        assert time.monotonic() < deadline, "hung: the racers never all got ready"
        time.sleep(0.01)
    go.touch()
    metas = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    on_disk = json.loads((root / "population.json").read_text())
    assert all(m == on_disk for m in metas), "one winner: every member read the same created time"
    assert [p.name for p in root.iterdir() if p.name.startswith(".population")] == [], "no temporary file left"
