"""The audit misses nothing: every entry of a member's log, the newest included, is anchored by something the
verifier checks, and each way of tampering with a log or its anchor is reported by ``async-pbt audit`` naming
the member and the line.

Members are started for real (claim, initial draw, start entry, state.json) and stopped through
``MemberSession.log``, the call the observer makes for its final ``stop`` entry. Each test tampers with a copy of
that workspace: a log cut at every line, the stop entry cut, state.json deleted, truncated, or another member's or
another workspace's, a log copied from another member or workspace, an entry appended after the last save; and the
ways already caught before (an edited entry, a removed middle entry).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.member_lock import MemberLock
from async_pbt_isaaclab.core.workspace.state_files import load_state


def _start_and_stop(ws: Path, index: int) -> None:
    """A real start of member ``index`` of a two-member Pendulum workspace, then its final ``stop`` entry."""
    from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
    from async_pbt_isaaclab.member.session import start_member

    yaml = Path(__file__).resolve().parents[2] / "async_pbt_isaaclab" / "examples" / "pendulum_ppo.yaml"
    raw = load_yaml(yaml)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": index,
        "num_policies": 2,
        "workspace": str(ws),
        "interval_steps": 10**9,
        "mutation": {"learning_rate": "mutate_float"},
    }
    agent_cfg, cfg = load_population_config(raw)
    session, _ = start_member(agent_cfg, cfg, train_dir=str(ws.parent / "runs"), task="Pendulum-v1")
    session.log("stop", {"status": "finished", "frame": 0})
    session.close()


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory) -> tuple[Path, Path]:
    """Two populations (A and B) of two members, each started twice and stopped."""
    base = tmp_path_factory.mktemp("anchors")
    for name in ("a", "b"):
        for index in (0, 1):
            for _ in range(2):
                _start_and_stop(base / name / "ws", index)
    return base / "a" / "ws", base / "b" / "ws"


def _audit(ws: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["audit", str(ws)])
    return code, capsys.readouterr().out


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _log(ws: Path, index: int = 1) -> Path:
    return ws / "members" / f"{index:03d}" / "audit.jsonl"


def _state(ws: Path, index: int = 1) -> Path:
    return ws / "members" / f"{index:03d}" / "state.json"


def test_a_stopped_member_is_anchored_up_to_its_stop_entry(workspaces, capsys):
    ws, _ = workspaces
    entries = [json.loads(line) for line in _log(ws).read_text().splitlines()]
    assert [e["kind"] for e in entries] == ["initial_draw", "start", "stop", "start", "stop"]
    assert load_state(_state(ws)).audit_head.to_dict() == {"seq": 4, "hash": entries[-1]["hash"]}
    code, out = _audit(ws, capsys)
    assert code == 0 and "member 001: 5 entries checked, ok" in out and "all entries verified" in out


@pytest.mark.parametrize("kept", [0, 1, 2, 3, 4])
def test_a_log_cut_at_any_line_is_reported(workspaces, tmp_path, capsys, kept):
    ws = _copy(workspaces[0], tmp_path)
    lines = _log(ws).read_text().splitlines(keepends=True)
    _log(ws).write_text("".join(lines[:kept]))
    code, out = _audit(ws, capsys)
    assert code == 1 and "FAILED for member(s) 001" in out
    assert f"member 001 line {kept + 1} (seq 4): log ends at seq" in out and "state.json records seq 4" in out


def test_a_deleted_log_is_reported(workspaces, tmp_path, capsys):
    ws = _copy(workspaces[0], tmp_path)
    _log(ws).unlink()
    code, out = _audit(ws, capsys)
    assert code == 1 and "member 001 file (seq 4): log missing" in out


@pytest.mark.parametrize(
    "tamper, said",
    [
        (lambda ws, other: _state(ws).unlink(), "state.json is missing"),
        (lambda ws, other: _state(ws).write_bytes(_state(ws).read_bytes()[:200]), "is unreadable (truncated"),
        (lambda ws, other: shutil.copy(_state(ws, 0), _state(ws)), "is member 0's state, not member 1's"),
        (lambda ws, other: shutil.copy(_state(other), _state(ws)), "belongs to another workspace"),
    ],
    ids=["missing", "truncated", "other-member", "other-workspace"],
)
def test_a_missing_truncated_or_foreign_state_is_reported_on_the_newest_line(
    workspaces, tmp_path, capsys, tamper, said
):
    ws = _copy(workspaces[0], tmp_path)
    tamper(ws, workspaces[1])
    code, out = _audit(ws, capsys)
    assert code == 1 and "FAILED for member(s) 001" in out
    assert f"member 001 line 5: {_state(ws)} " in out and said in out and "nothing anchors" in out
    # and with the anchor gone, the stop entry can be cut: still reported
    _log(ws).write_text("".join(_log(ws).read_text().splitlines(keepends=True)[:4]))
    code, out = _audit(ws, capsys)
    assert code == 1 and "member 001 line 4" in out and said in out


@pytest.mark.parametrize("source", ["other-member", "other-workspace"])
def test_a_log_copied_from_another_member_or_workspace_is_reported_at_line_1(workspaces, tmp_path, capsys, source):
    ws = _copy(workspaces[0], tmp_path)
    origin = _log(ws, 0) if source == "other-member" else _log(workspaces[1])
    shutil.copy(origin, _log(ws))
    # with the state.json that matches it, so that the head alone cannot tell
    shutil.copy(origin.with_name("state.json"), _state(ws))
    state = json.loads(_state(ws).read_text())
    state["member"], state["population"] = 1, json.loads((ws / "population.json").read_text())["id"]
    _state(ws).write_text(json.dumps(state))
    code, out = _audit(ws, capsys)
    assert code == 1 and "FAILED for member(s) 001" in out
    assert "member 001 line 1 (seq 0): the log does not begin this member's chain in this workspace" in out


def test_an_entry_after_the_last_save_is_reported_unless_the_member_runs(workspaces, tmp_path, capsys):
    """A member killed between an append and its state save leaves an entry nothing anchors: reported while the
    member is down (cutting it would go unnoticed), not while it runs (its save follows); its next start anchors
    it."""
    ws = _copy(workspaces[0], tmp_path)
    AuditLog.open(_log(ws)).append("warning", {"message": "written, then killed before the save"})
    code, out = _audit(ws, capsys)
    assert code == 1 and "member 001 line 6 (seq 5): not anchored" in out
    lock = MemberLock(_log(ws).with_name("lock"))
    lock.acquire(1)
    try:
        assert _audit(ws, capsys)[0] == 0
    finally:
        lock.release()
    _start_and_stop(ws, 1)
    assert _audit(ws, capsys)[0] == 0


def test_the_ways_caught_before_are_still_caught(workspaces, tmp_path, capsys):
    ws = _copy(workspaces[0], tmp_path)
    lines = _log(ws).read_text().splitlines(keepends=True)
    edited = json.loads(lines[1])
    edited["pid"] += 1
    _log(ws).write_text("".join([lines[0], json.dumps(edited) + "\n", *lines[2:]]))
    code, out = _audit(ws, capsys)
    assert code == 1 and "member 001 line 2 (seq 1): hash mismatch" in out
    _log(ws).write_text("".join([lines[0], *lines[2:]]))  # the middle entry removed
    code, out = _audit(ws, capsys)
    assert code == 1 and "member 001 line 2 (seq 2): sequence number 2, expected 1" in out
