"""No member left behind: a member that starts 30 intervals after its peers, with real CPU member processes.

Members 0 and 1 start together; member 2 starts once member 0 has published 30 intervals. Each record keeps its
newest ``history_length`` entries and as many older ones spread over the run (``member_state.thin_history``), so
the late member finds member 0's entry at or before its own frame, is compared with it, and exploits it (the
fixture rule makes every generation-0 member above the lowest index exploit the lowest-index compared one). Members 0
and 1 leave it out of their ranking while it is far behind (``max_frame_lag: -1`` is 8 intervals), so it never takes
the worst slot among them: they keep comparing each other (on a loaded machine one of them can run more than
8 intervals ahead of the other and leave that one out too, for the same reason). Everything is read back from what
the processes wrote; every wait is for an event in the workspace, with a safety net only.

The latest member of all starts after a peer has finished and its heartbeat has stopped: it is still compared with
that peer's final record, and copies it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.state_files import load_state
from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env

pytestmark = pytest.mark.slow

INTERVAL = 2048
"""One epoch of the CPU member (16 envs x 128 steps): one decision per epoch."""
LATE_BY = 30
"""Intervals member 0 has published when member 2 starts."""
SAFETY_S = 1800.0


def _entries(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    except FileNotFoundError:
        return []


def _record_frame(ws: Path, member: int) -> int:
    try:
        return int(json.loads((ws / "members" / f"{member:03d}" / "record.json").read_text())["frame"])
    except (FileNotFoundError, ValueError, KeyError):
        return -1


def _decisions(ws: Path, member: int) -> list[dict]:
    return [e for e in _entries(ws / "members" / f"{member:03d}" / "audit.jsonl") if e["kind"] == "decision"]


def _far_decisions(ws: Path, member: int) -> list[dict]:
    """``member``'s decisions made with the late member's settled evidence in view, leaving it out as far behind."""
    return [d for d in _decisions(ws, member) if "far behind" in d["decision"]["excluded"].get("2", "")]


def _ranked_each_other(ws: Path) -> bool:
    """Members 0 and 1 compared each other in a decision that left the late member out. Either may be several
    intervals ahead of the other on a loaded machine, and then the one ahead leaves the other out too (far
    behind, as it should); the one behind still compares both, so one of the two always gets here."""
    return any(sorted(d["decision"]["compared"]) == [0, 1] for m in (0, 1) for d in _far_decisions(ws, m))


def _late_member_stuck(ws: Path) -> None:
    """Fail at once (rather than at the safety net) when the late member keeps deciding without ever comparing:
    what happens when peers keep only their newest entries."""
    decisions = _decisions(ws, 2)
    if len(decisions) >= 20 and not any(d["decision"]["outcome"] == "exploit" for d in decisions):
        raise AssertionError(f"the late member decided 20 times, never exploiting: {decisions[-1]['decision']}")


def _wait(what: str, done, procs: list[subprocess.Popen], logs: list[Path]) -> None:
    deadline = time.monotonic() + SAFETY_S
    while not done():
        dead = [i for i, p in enumerate(procs) if p.poll() is not None and p.returncode != 0]
        if dead:
            raise AssertionError(
                f"member {dead[0]} exited {procs[dead[0]].returncode}:\n{logs[dead[0]].read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {SAFETY_S:.0f} s for {what}")
        time.sleep(0.2)


def _member_command(ws: Path, members: int, max_heartbeat_age_s: float, iterations: int) -> list[str]:
    """A CPU member of a forced-exploit population of ``members`` in ``ws`` (index and seed are the caller's)."""
    return [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        str(members),
        *forced_exploit_flags(interval_steps=INTERVAL, heartbeat_interval_s=0.5),
        "--pbt-max-heartbeat-age-s",
        str(max_heartbeat_age_s),
        "--num_envs",
        "16",
        "--max_iterations",
        str(iterations),
        "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.params.config.mini_epochs=1",
        "agent.params.torch_threads=1",
    ]


@pytest.fixture(scope="module")
def late_population(tmp_path_factory):
    root = tmp_path_factory.mktemp("late")
    ws = root / "ws"
    common = _member_command(ws, members=3, max_heartbeat_age_s=100_000_000, iterations=2000)  # stopped by the test
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []

    def start(index: int) -> None:
        logs.append(root / f"member{index}.log")
        with open(logs[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    [*common, "--pbt-index", str(index), "--seed", str(index)],
                    cwd=root,
                    env=member_env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    try:
        start(0)
        start(1)
        _wait(f"member 0 at {LATE_BY} intervals", lambda: _record_frame(ws, 0) >= LATE_BY * INTERVAL, procs, logs)
        start(2)
        late_state = ws / "members" / "002" / "state.json"
        _wait(
            "the late member's exploit and members 0 and 1 leaving it out as far behind",
            lambda: (
                (load_state(late_state) or None) is not None
                and load_state(late_state).generation >= 1
                and _far_decisions(ws, 0)
                and _far_decisions(ws, 1)
                and _ranked_each_other(ws)
            ),
            procs,
            logs,
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # a clean stop: each member saves its state and says where it resumes
        for proc in procs:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return ws, [p.read_text() for p in logs]


def test_the_late_member_is_compared_at_its_own_frame_and_exploits(late_population):
    ws, _ = late_population
    late = _decisions(ws, 2)
    (exploit,) = [d for d in late if d["decision"]["outcome"] == "exploit"]
    me = exploit["inputs"]["me"]
    assert me["frame"] < LATE_BY * INTERVAL  # it was far behind member 0 when it decided
    entry = exploit["decision"]["donor_entry"]
    assert exploit["decision"]["donor"] == 0 and entry["frame"] <= me["frame"]  # member 0 at matching progress
    peer0 = next(p for p in exploit["inputs"]["peers"] if p["member"] == 0)
    assert peer0["frame"] >= LATE_BY * INTERVAL and len(peer0["history"]) > 12  # its archive reached back
    state = load_state(ws / "members" / "002" / "state.json")
    assert state.lineage[0].source.member == 0 and state.lineage[0].source.frame == entry["frame"]


def test_the_others_keep_ranking_each_other_while_the_late_member_is_far_behind(late_population):
    ws, _ = late_population
    for member, other in ((0, 1), (1, 0)):
        far = _far_decisions(ws, member)
        assert far
        for d in far:
            me_frame = d["inputs"]["me"]["frame"]
            late = next(p for p in d["inputs"]["peers"] if p["member"] == 2)
            assert late["history"] and late["history"][-1]["frame"] < me_frame - 8 * INTERVAL
            assert 2 not in d["decision"]["compared"]  # it never took a slot in their ranking
            # The other on-schedule member is ranked, unless it had itself fallen more than 8 intervals behind.
            if other not in d["decision"]["compared"]:
                assert d["decision"]["excluded"][str(other)].startswith("far behind"), d["decision"]
                peer = next(p for p in d["inputs"]["peers"] if p["member"] == other)
                assert peer["history"][-1]["frame"] < me_frame - 8 * INTERVAL
    # ... and the two on-schedule members went on ranking each other.
    assert _ranked_each_other(ws)


def test_every_decision_of_the_late_population_verifies(late_population):
    ws, _ = late_population
    for member in range(3):
        count, problems = verify_log(ws / "members" / f"{member:03d}" / "audit.jsonl")
        assert count > 0 and problems == [], problems[:3]


def test_a_member_that_starts_after_a_peer_finished_still_copies_it(tmp_path):
    """Member 0 trains to its end and exits; member 1 starts once member 0's final heartbeat is older than
    ``max_heartbeat_age_s`` (1 s here; 600 by default, when a slower node or a later start lags by more). A finished
    member's record is final, so member 1 compares itself with member 0's history at its own frame and, under the
    fixture rule, copies it; before, member 0 was stale and member 1, alone, kept to its end."""
    ws = tmp_path / "ws"
    common = _member_command(ws, members=2, max_heartbeat_age_s=1, iterations=6)
    for index in (0, 1):
        if index == 1:
            record = json.loads((ws / "members" / "000" / "record.json").read_text())
            assert record["status"] == "finished"
            while time.time() - record["heartbeat"] <= 1.0:  # the one wait on the clock: what the case is about
                time.sleep(0.1)
        run = subprocess.run(
            [*common, "--pbt-index", str(index), "--seed", str(index + 1)],
            cwd=tmp_path,
            env=member_env(),
            capture_output=True,
            text=True,
            timeout=SAFETY_S,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    first = _decisions(ws, 1)[0]
    peer0 = next(p for p in first["inputs"]["peers"] if p["member"] == 0)
    assert peer0["status"] == "finished" and first["inputs"]["now"] - peer0["heartbeat"] > 1.0
    assert first["decision"]["outcome"] == "exploit" and first["decision"]["donor"] == 0, first["decision"]
    assert load_state(ws / "members" / "001" / "state.json").lineage[0].source.member == 0
    for member in (0, 1):
        count, problems = verify_log(ws / "members" / f"{member:03d}" / "audit.jsonl")
        assert count > 0 and problems == [], problems[:3]
