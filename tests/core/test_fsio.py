"""Crash-safe file primitives (async_pbt_isaaclab.core.workspace.fsio).

What is shown here:
1. a writer SIGKILLed in the middle of large writes never leaves a partial file under the final name:
   a reader that reads and parses it while each version is half written (the writer waits there for the read)
   and after the kill always gets the previous version, complete;
2. a write callback that fails leaves the final file unchanged and no temp file behind;
3. a verified copy refuses a checksum mismatch without creating the destination;
4. stale temp files (left by killed writers) are cleaned up after the grace period, fresh ones are not;
5. canonical JSON is deterministic and refuses NaN.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from async_pbt_isaaclab.core.workspace import fsio

WRITER = textwrap.dedent(
    """
    import hashlib, json, pathlib, sys, time
    from async_pbt_isaaclab.core.workspace import fsio

    final, control, stall_at = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
    i = 0
    while True:
        payload = (str(i) * 64).encode() * 2000  # a few hundred kB per version
        digest = hashlib.sha256(payload).hexdigest()
        header = json.dumps({"version": i, "sha256": digest, "size": len(payload)}).encode() + b"\\n"

        def write(fh, payload=payload, header=header, i=i):
            fh.write(header)
            fh.write(payload[: len(payload) // 2])
            fh.flush()
            if i == stall_at:
                (control / "stalled").write_text("half written")  # the parent kills us here
                time.sleep(600)
            if i > 0:  # version 0 has nothing under the final name yet to read
                # Half written: hold here until the reader has read the final name (an event, not a duration).
                (control / f"writing_{i}").touch()
                while not (control / f"read_{i}").exists():
                    time.sleep(0.001)
            fh.write(payload[len(payload) // 2 :])

        fsio.atomic_write(final, write)
        i += 1
    """
)
STALL_AT = 30
"""The version the writer is killed in the middle of; each version before it is fsynced and renamed into place."""
SAFETY_S = 600
"""Only ends a hung run: every wait below is for a file the writer makes."""


def _check_complete(data: bytes) -> int:
    header, _, payload = data.partition(b"\n")
    meta = json.loads(header)
    assert len(payload) == meta["size"], "partial file visible under the final name"
    assert hashlib.sha256(payload).hexdigest() == meta["sha256"], "mixed or partial content"
    return meta["version"]


def test_sigkilled_writer_never_exposes_a_partial_file(tmp_path):
    final = tmp_path / "record.bin"
    control = tmp_path.parent / (tmp_path.name + "-control")
    control.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(final), str(control), str(STALL_AT)])

    def wait_for(path):
        deadline = time.monotonic() + SAFETY_S
        while not path.exists():
            assert proc.poll() is None, f"the writer died (exit {proc.returncode}) before {path.name}"
            assert time.monotonic() < deadline, f"hung: no {path.name} after {SAFETY_S} s"
            time.sleep(0.001)

    try:
        # Each read is made while the next version is half written (the writer waits for it there).
        versions = []
        for i in range(1, STALL_AT):
            wait_for(control / f"writing_{i}")
            versions.append(_check_complete(final.read_bytes()))
            (control / f"read_{i}").touch()
        wait_for(control / "stalled")
        versions.append(_check_complete(final.read_bytes()))
        os.kill(proc.pid, signal.SIGKILL)  # mid-write of version STALL_AT
        proc.wait(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # Every read during a write saw the version before it, whole: never the half-written one.
    assert versions == list(range(STALL_AT)), versions
    # After the kill the final name holds the last complete version, not the half-written one...
    assert _check_complete(final.read_bytes()) == STALL_AT - 1
    # ...and the killed write left only its temp file, which names its dead writer: cleanup removes it at once.
    leftovers = [p for p in tmp_path.iterdir() if fsio.is_temp_file(p)]
    assert len(leftovers) == 1
    assert fsio.temp_writer(leftovers[0].name) == (socket.gethostname(), proc.pid)
    removed = fsio.remove_stale_temp_files(tmp_path, older_than_s=3600)
    assert removed == leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.bin"]


def test_failing_write_leaves_final_unchanged_and_no_temp(tmp_path):
    final = tmp_path / "state.json"
    fsio.atomic_write_json(final, {"generation": 1})
    before = final.read_bytes()

    class Boom(RuntimeError):
        pass

    def write(fh):
        fh.write(b'{"generation": 2, "partial": ')
        raise Boom("disk full")

    with pytest.raises(Boom):
        fsio.atomic_write(final, write)
    assert final.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]

    # A new file that fails is never created at all.
    with pytest.raises(Boom):
        fsio.atomic_write(tmp_path / "new.json", write)
    assert not (tmp_path / "new.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_atomic_write_json_round_trip_and_nan_refused(tmp_path):
    final = tmp_path / "x.json"
    fsio.atomic_write_json(final, {"b": [1, 2.5], "a": "z"})
    assert json.loads(final.read_text()) == {"a": "z", "b": [1, 2.5]}
    with pytest.raises(ValueError):
        fsio.atomic_write_json(final, {"v": float("nan")})
    assert json.loads(final.read_text()) == {"a": "z", "b": [1, 2.5]}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_canonical_json_is_deterministic():
    a = fsio.canonical_json({"b": 1, "a": [1.5, {"y": 2, "x": 1}]})
    b = fsio.canonical_json({"a": [1.5, {"x": 1, "y": 2}], "b": 1})
    assert a == b == b'{"a":[1.5,{"x":1,"y":2}],"b":1}'
    with pytest.raises(ValueError):
        fsio.canonical_json({"x": float("inf")})


def test_verified_copy(tmp_path):
    src = tmp_path / "donor.pth"
    src.write_bytes(os.urandom(3 << 20))
    digest = fsio.sha256_file(src)
    assert digest == hashlib.sha256(src.read_bytes()).hexdigest()

    dst = tmp_path / "copy" / "mine.pth"
    dst.parent.mkdir()
    assert fsio.atomic_copy_verified(src, dst, digest) == digest
    assert dst.read_bytes() == src.read_bytes()

    bad_dst = tmp_path / "copy" / "bad.pth"
    with pytest.raises(fsio.ChecksumMismatch) as excinfo:
        fsio.atomic_copy_verified(src, bad_dst, "0" * 64)
    assert str(src) in str(excinfo.value) and "0" * 64 in str(excinfo.value)
    assert not bad_dst.exists()
    assert sorted(p.name for p in dst.parent.iterdir()) == ["mine.pth"]


def test_stale_temp_cleanup_keeps_fresh_temps_and_real_files(tmp_path):
    real = tmp_path / "record.json"
    real.write_text("{}")
    old_tmp = tmp_path / f".record.json{fsio.TEMP_MARKER}other-host-1-2"
    old_tmp.write_text("partial")
    os.utime(old_tmp, (time.time() - 1000, time.time() - 1000))
    fresh_tmp = tmp_path / f".other.json{fsio.TEMP_MARKER}other-host-1-2"
    fresh_tmp.write_text("in progress")
    assert fsio.is_temp_file(old_tmp) and fsio.is_temp_file(fresh_tmp) and not fsio.is_temp_file(real)
    removed = fsio.remove_stale_temp_files(tmp_path, older_than_s=600)
    assert removed == [old_tmp]
    assert real.exists() and fresh_tmp.exists()
    assert fsio.remove_stale_temp_files(tmp_path / "missing", 0) == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_writers_temp_file_goes_at_once_and_a_live_writers_never(tmp_path):
    """Temp names hold host and pid: a dead process of this host left it (removed at once, whatever its age); a live
    one is writing it (kept, however old); another host's is judged by age alone."""
    host = socket.gethostname()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        dead = tmp_path / f".population.json{fsio.TEMP_MARKER}{host}-{_dead_pid()}-1"
        writing = tmp_path / f".population.json{fsio.TEMP_MARKER}{host}-{live.pid}-2"
        mine = fsio.temp_name(tmp_path / "state.json")
        other_old = tmp_path / f".record.json{fsio.TEMP_MARKER}node-7.cluster-{live.pid}-3"
        other_new = tmp_path / f".record.json{fsio.TEMP_MARKER}node-7.cluster-{live.pid}-4"
        for path in (dead, writing, mine, other_old, other_new):
            path.write_text("partial")
        for path in (writing, mine, other_old):
            os.utime(path, (time.time() - 10_000, time.time() - 10_000))
        assert fsio.temp_writer(other_old.name) == ("node-7.cluster", live.pid)
        assert fsio.temp_writer(".x.tmp-nopid") is None and fsio.temp_writer("record.json") is None
        removed = fsio.remove_stale_temp_files(tmp_path, older_than_s=600)
        assert sorted(removed) == sorted([dead, other_old])
        assert writing.exists() and mine.exists() and other_new.exists()
    finally:
        live.kill()
        live.wait()
    assert fsio.remove_stale_temp_files(tmp_path, older_than_s=600) == [writing]  # its writer is gone now


def test_temp_names_are_unique_and_beside_the_final(tmp_path):
    final = tmp_path / "a.json"
    names = {fsio.temp_name(final) for _ in range(100)}
    assert len(names) == 100
    assert all(n.parent == tmp_path and n.name.startswith(".a.json") for n in names)


def test_the_next_member_start_removes_a_dead_writers_population_json_temp(tmp_path, start_pendulum_member):
    """A member killed while publishing population.json leaves ``.population.json.tmp-*`` at the workspace root:
    the next member start removes it; a live writer's stays."""
    start_pendulum_member(tmp_path, {})
    root = tmp_path / "ws"
    host = socket.gethostname()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        dead = root / f".population.json{fsio.TEMP_MARKER}{host}-{_dead_pid()}-1"
        writing = root / f".population.json{fsio.TEMP_MARKER}{host}-{live.pid}-2"
        for path in (dead, writing):
            path.write_text('{"schema_version": 1')
        start_pendulum_member(tmp_path, {})
        assert not dead.exists() and writing.exists()
    finally:
        live.kill()
        live.wait()


def test_a_folder_link_planted_after_the_check_is_refused_and_nothing_is_written_through_it(tmp_path, monkeypatch):
    folder, outside = tmp_path / "members" / "001", tmp_path / "outside"
    folder.mkdir(parents=True)
    outside.mkdir()
    checked = fsio.refuse_links_at

    def then_plant_a_link(final):
        checked(final)  # the check passes; the folder is swapped for a link right after it
        folder.rename(tmp_path / "moved")
        folder.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(fsio, "refuse_links_at", then_plant_a_link)
    with pytest.raises(fsio.UnsafePathError, match="symbolic link"):
        fsio.atomic_write_json(folder / "state.json", {"a": 1})
    assert list(outside.iterdir()) == []


def test_a_file_link_planted_at_the_temp_name_is_not_followed(tmp_path, monkeypatch):
    target = tmp_path / "elsewhere.txt"
    target.write_text("kept")
    names = iter([tmp_path / ".planted"])
    monkeypatch.setattr(fsio, "temp_name", lambda final: next(names))
    (tmp_path / ".planted").symlink_to(target)
    with pytest.raises(OSError):
        fsio.atomic_write_bytes(tmp_path / "final.bin", b"new")
    assert target.read_text() == "kept" and not (tmp_path / "final.bin").exists()
