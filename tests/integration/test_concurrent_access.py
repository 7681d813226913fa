"""Readers and writers of one workspace at the same time (processes and threads, no training).

Writers are separate processes that behave like members, through the real core functions: each holds
its member lock and, in a loop, writes a checkpoint (``fsio.atomic_write_bytes``, a few hundred kB,
a new name each time), publishes a ``MemberRecord`` pointing to it with its sha256
(``fsio.atomic_write_json``), saves ``state.json`` (``save_state``), rewrites ``best.json``, appends to
its audit log (``AuditLog.append``) and deletes old checkpoints (``apply_retention``).

Readers are two processes with two threads each (plus the reader's main thread), reading as peers
and ``async-pbt status`` do: ``Workspace.read_records``, ``load_state``, ``best.json``, the audit log, and
the checkpoint each record points to, hashed and compared with the sha256 that record published.

What is shown here:
1. readers never see partial data: zero record / state / best.json parse errors, and every
   checkpoint read either matches the sha256 of the record that pointed to it or is gone (deleted
   by retention after a newer record was published: reported, never a mismatch accepted);
2. an audit log read while being appended to has complete lines everywhere except possibly the last
   one (an append in flight), and the complete lines form a valid hash chain;
3. readers never block a writer: with both reader processes still reading (they read until the test lets them
   stop), every writer completes as many full iterations again as it made alone (readers take no lock). No clock
   is read: how long a write takes on a loaded machine is not what is promised.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace.layout import Workspace

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import hashlib, json, os, sys, time
    from pathlib import Path
    from async_pbt_isaaclab.core.workspace import fsio
    from async_pbt_isaaclab.core.workspace.audit import AuditLog
    from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.workspace.state_files import save_state
    from async_pbt_isaaclab.core.state.records import MemberRecord
    from async_pbt_isaaclab.core.workspace.member_lock import MemberLock
    from async_pbt_isaaclab.core.state.best import BestEntry
    from async_pbt_isaaclab.core.workspace.retention import apply_retention
    from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_name

    root, member, control, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    ws = Workspace(root)
    mdir = ws.member_dir(member)
    lock = MemberLock(mdir / "lock")
    lock.acquire(member)
    (mdir / "checkpoints").mkdir(parents=True, exist_ok=True)
    audit = AuditLog.open(mdir / "audit.jsonl")
    best = []

    i = 0
    while not (control / "stop").exists():  # the test says when: after the readers are done
        i += 1
        frame = 1000 * i
        payload = os.urandom(1024) * (100 + (i * 37 + member * 11) % 300)  # 100-400 kB
        path = mdir / "checkpoints" / checkpoint_name(0, frame)
        fsio.atomic_write_bytes(path, payload)
        sha = hashlib.sha256(payload).hexdigest()
        rel = ws.relative(path)
        values = tuple(float(-1000 + i + k) for k in range(32))
        rec = MemberRecord(member=member, generation=0, frame=frame, generation_start_frame=0, restarts=0,
                           heartbeat=time.time(), evidence=EvidenceSummary("episode_return", 0, values, 40 + i, 0),
                           condition=ConditionLabel(task="t"), hyperparameters={"learning_rate": 1e-3 / i},
                           checkpoint=rel, checkpoint_sha256=sha, status="running", epoch=i, pid=os.getpid())
        fsio.atomic_write_json(mdir / "record.json", rec.to_dict())
        best = sorted(best + [{"objective": values[0] + (i % 7), "checkpoint": rel, "sha256": sha, "frame": frame}],
                      key=lambda e: -e["objective"])[:2]
        fsio.atomic_write_json(mdir / "best.json", best)
        save_state(mdir / "state.json", MemberState(member=member, process_starts=1, last_checkpoint=rel,
                                                    last_checkpoint_sha256=sha,
                                                    best=[BestEntry.from_dict(b, "best") for b in best]))
        audit.append("warning", {"message": "x" * (50 + i % 500), "frame": frame})
        apply_retention(ws, member, keep_last=2, keep={rel, *(b["checkpoint"] for b in best)})
    lock.release()
    Path(out).write_text(json.dumps({"iterations": i}))
    """
)

READER = textwrap.dedent(
    """
    import hashlib, json, sys, threading, time
    from collections import Counter
    from pathlib import Path
    from async_pbt_isaaclab.core.workspace.audit import GENESIS, entry_hash
    from async_pbt_isaaclab.core.workspace.state_files import load_state
    from async_pbt_isaaclab.core.state.records import RecordError
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    root, out, may_stop = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    # Each reader stops once it has read enough of everything and the test lets it stop (after the writers made their
    # iterations while it read): no clock decides how much is read.
    WANT = {"record_reads": 120, "state_reads": 120, "best_reads": 120, "checkpoint_verified": 30,
            "audit_reads": 60}
    ws = Workspace(root)
    counts = Counter()
    samples = []
    guard = threading.Lock()

    def bump(key, n=1, sample=None):
        with guard:
            counts[key] += n
            if sample and len(samples) < 20:
                samples.append(sample)

    def enough():
        with guard:
            return all(counts[k] >= n for k, n in WANT.items()) and may_stop.exists()

    def read_population():
        while not enough():
            records, errors = ws.read_records()
            bump("record_reads", len(records))
            if errors:
                bump("record_errors", len(errors), str(errors))
            for index, rec in records.items():
                try:
                    data = ws.checkpoint_path(rec.checkpoint).read_bytes()
                except FileNotFoundError:
                    bump("checkpoint_gone")
                    continue
                if hashlib.sha256(data).hexdigest() == rec.checkpoint_sha256:
                    bump("checkpoint_verified")
                else:
                    bump("checkpoint_mismatch", sample=f"{rec.checkpoint}: {len(data)} bytes do not match")

    def read_private():
        while not enough():
            for index in ws.member_indices():
                mdir = ws.member_dir(index)
                try:
                    if load_state(mdir / "state.json") is not None:
                        bump("state_reads")
                except RecordError as exc:
                    bump("state_errors", sample=str(exc))
                try:
                    json.loads((mdir / "best.json").read_bytes())
                    bump("best_reads")
                except FileNotFoundError:
                    pass
                except ValueError as exc:
                    bump("best_errors", sample=f"best.json: {exc}")
                try:
                    data = (mdir / "audit.jsonl").read_bytes()
                except FileNotFoundError:
                    continue
                lines = data.split(b"\\n")
                tail = lines.pop()  # b"" when the file ends with a newline, else an append in flight
                if tail:
                    bump("audit_torn_tail_seen")
                prev = GENESIS
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        bump("audit_bad_complete_line", sample=repr(line[:100]))
                        break
                    if entry.get("prev_hash") != prev or entry_hash(prev, entry) != entry.get("hash"):
                        bump("audit_chain_errors", sample=f"seq {entry.get('seq')}")
                        break
                    prev = entry["hash"]
                bump("audit_reads")

    threads = [threading.Thread(target=f) for f in (read_population, read_private)]
    for t in threads:
        t.start()
    read_population()
    for t in threads:
        t.join()
    Path(out).write_text(json.dumps({"counts": counts, "samples": samples}))
    """
)

WRITERS = 3
ITERATIONS_ALONE = 25
"""Iterations each writer makes before the readers start, and at least as many again while they read."""
SAFETY_S = 1200
"""Only stops a hung run; every phase ends on an event (iterations done, reads done)."""


def _spawn(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)])


def _iterations(ws: Path, member: int) -> int:
    try:
        return json.loads((ws / "members" / f"{member:03d}" / "record.json").read_text())["frame"] // 1000
    except (OSError, ValueError, KeyError):
        return 0


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + SAFETY_S
    while not predicate():
        assert time.monotonic() < deadline, f"no progress within {SAFETY_S}s: {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("concurrent")
    ws = root / "ws"
    control = root / "control"
    control.mkdir()
    Workspace(ws).ensure(WRITERS, "episode_return", "t")
    writers = [_spawn(WRITER, ws, m, control, root / f"writer{m}.json") for m in range(WRITERS)]
    try:
        _wait(lambda: all(_iterations(ws, m) >= ITERATIONS_ALONE for m in range(WRITERS)), "writers alone")
        (control / "readers_on").touch()
        started = [_iterations(ws, m) for m in range(WRITERS)]
        readers = [_spawn(READER, ws, root / f"reader{r}.json", control / "readers_may_stop") for r in range(2)]
        _wait(
            lambda: all(_iterations(ws, m) >= started[m] + ITERATIONS_ALONE for m in range(WRITERS)),
            "writers while readers ran",
        )
        readers_still_reading = [p.poll() is None for p in readers]
        advanced = [_iterations(ws, m) - started[m] for m in range(WRITERS)]
        (control / "readers_may_stop").touch()
        for p in readers:
            assert p.wait(timeout=SAFETY_S) == 0
    finally:
        (control / "readers_may_stop").touch()
        (control / "stop").touch()
    for p in writers:
        assert p.wait(timeout=SAFETY_S) == 0
    writer_out = [json.loads((root / f"writer{m}.json").read_text()) for m in range(WRITERS)]
    reader_out = [json.loads((root / f"reader{r}.json").read_text()) for r in range(2)]
    counts: dict[str, int] = {}
    for r in reader_out:
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + v
    samples = [s for r in reader_out for s in r["samples"]]
    return {
        "counts": counts,
        "samples": samples,
        "readers_still_reading": readers_still_reading,
        "advanced_while_reading": advanced,
        "iterations": [w["iterations"] for w in writer_out],
    }


def test_readers_never_see_partial_records_states_or_best_lists(run):
    c = run["counts"]
    print(f"reader counts: {c}")
    assert c.get("record_reads", 0) > 100 and c.get("state_reads", 0) > 100 and c.get("best_reads", 0) > 100
    for key in ("record_errors", "state_errors", "best_errors"):
        assert c.get(key, 0) == 0, run["samples"]


def test_every_checkpoint_read_matches_the_sha_its_record_published_or_is_gone(run):
    c = run["counts"]
    assert c.get("checkpoint_verified", 0) > 20
    assert c.get("checkpoint_mismatch", 0) == 0, run["samples"]
    # Retention deletes a checkpoint once newer ones exist: a reader holding an old record finds it gone.
    print(f"checkpoints verified {c.get('checkpoint_verified', 0)}, gone (reported) {c.get('checkpoint_gone', 0)}")


def test_audit_log_read_during_appends_is_complete_except_the_line_in_flight(run):
    c = run["counts"]
    assert c.get("audit_reads", 0) > 50
    assert c.get("audit_bad_complete_line", 0) == 0, run["samples"]
    assert c.get("audit_chain_errors", 0) == 0, run["samples"]
    print(
        f"audit reads {c['audit_reads']}, of which with an append in flight (torn last line) "
        f"{c.get('audit_torn_tail_seen', 0)}"
    )


def test_readers_do_not_block_writers(run):
    # Readers take no lock: with both reader processes still reading, every writer made ITERATIONS_ALONE more full
    # iterations (checkpoint, record, best list, state, audit entry, retention). A writer that waited on a reader
    # would make none until the readers were let go (and the run would end at SAFETY_S).
    assert run["readers_still_reading"] == [True, True], run
    assert all(n >= ITERATIONS_ALONE for n in run["advanced_while_reading"]), run
    print(f"iterations per writer while the readers read {run['advanced_while_reading']}, in all {run['iterations']}")
