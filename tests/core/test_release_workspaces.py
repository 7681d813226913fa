"""Workspaces written by release 0.1.0 load, verify and read the same with the typed member state.

``tests/data/workspace_0_1_0`` holds three real workspaces (records, states and audit logs; checkpoints left
out) written by the 0.1.0 code: a forced exploit carried out by restart, one carried out in-process, and a
population with the initial mutation. They were made with ``async_pbt_isaaclab.testing.forced_exploit`` and two
CPU members before the member state became typed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.core.decision.generation import LineageEntry, PendingExploit
from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.member_state import AuditHead, MemberState
from async_pbt_isaaclab.core.state.records import HistoryEntry
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.state_files import load_state

RELEASE = Path(__file__).resolve().parents[1] / "data" / "workspace_0_1_0"
WORKSPACES = sorted(p.name for p in RELEASE.iterdir())


def states(name: str) -> list[tuple[Path, MemberState]]:
    folders = sorted((RELEASE / name / "members").iterdir())
    return [(f, load_state(f / "state.json")) for f in folders]


def test_the_release_data_is_there():
    assert WORKSPACES == ["initial_mutation", "inprocess", "restart"]


@pytest.mark.parametrize("name", WORKSPACES)
def test_states_load_typed_and_write_back_byte_for_byte(name):
    for folder, state in states(name):
        raw = json.loads((folder / "state.json").read_text())
        assert isinstance(state, MemberState)
        assert all(isinstance(e, LineageEntry) for e in state.lineage)
        assert all(isinstance(e, HistoryEntry) for e in state.history) and state.history
        assert all(isinstance(e, BestEntry) for e in state.best) and state.best
        assert isinstance(state.audit_head, AuditHead)
        assert state.pending_exploit is None or isinstance(state.pending_exploit, PendingExploit)
        # Nothing is lost or renamed: the typed state writes the file it was read from.
        assert state.to_dict() == raw


@pytest.mark.parametrize("name", ["inprocess", "restart"])
def test_the_exploits_lineage_reads_typed(name):
    (_, donor), (_, recipient) = states(name)
    assert donor.lineage == [] and len(recipient.lineage) == 1
    entry = recipient.lineage[0]
    assert (entry.generation, entry.outcome, entry.source.member) == (1, "exploit", 0)
    assert recipient.origin_sha256 == entry.source.sha256


@pytest.mark.parametrize("name", WORKSPACES)
def test_release_audit_logs_verify_with_the_replayed_plans(name, capsys):
    for folder, state in states(name):
        count, problems = verify_log(folder / "audit.jsonl", state.audit_head.to_dict())
        assert count > 0 and problems == []
    assert cli.main(["audit", str(RELEASE / name)]) == 0
    assert "all entries verified" in capsys.readouterr().out


def test_a_forged_plan_in_a_release_log_is_caught(tmp_path):
    """The replayed plan checks the donor frame too (a key the verifier did not compare before)."""
    from async_pbt_isaaclab.core.workspace.audit import entry_hash

    src = RELEASE / "restart" / "members" / "001" / "audit.jsonl"
    entries = [json.loads(line) for line in src.read_text().splitlines()]
    applied = next(e for e in entries if e["kind"] == "exploit_applied")
    applied["donor_frame"] += 1
    prev = entries[0]["prev_hash"]
    for e in entries:  # a consistent chain: only the replayed plan can catch the edit
        e["prev_hash"] = prev
        e["hash"] = prev = entry_hash(prev, e)
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    problems = verify_log(path)[1]
    assert len(problems) == 1 and "donor_frame: applied" in problems[0].problem


@pytest.mark.parametrize("command", ["status", "lineage", "best"])
def test_release_workspaces_read_in_every_view(command, capsys):
    for name in WORKSPACES:
        assert cli.main([command, str(RELEASE / name)]) == 0
        out = capsys.readouterr().out
        assert "member 001" in out or "001" in out


# Keys an entry's config records that the release's entries predate, and why today's default is not read for them:
# ``start_spread`` only by the diverse start's ``initial_draw`` entries, which came with it and record it;
# ``allow_shaped_return_objective`` only by the config check, which the release's objectives pass either way.
NOT_REPLAYED_FROM_DEFAULTS = {"start_spread", "allow_shaped_return_objective"}


def test_every_selection_key_a_release_entry_lacks_replays_with_its_old_meaning():
    """A config key added since the release replays with the value that reproduces the release's decisions (the
    ``explore`` entry: ``random``), never with today's default, so changing a default cannot break an old log."""
    from async_pbt_isaaclab.core.config import PopulationConfig
    from async_pbt_isaaclab.core.workspace.audit_replay import ADDED_CONFIG_KEYS, recorded_config

    entries = [
        json.loads(line)
        for name in WORKSPACES
        for log in sorted((RELEASE / name / "members").glob("*/audit.jsonl"))
        for line in log.read_text().splitlines()
    ]
    recorded = [e for e in entries if "config" in e]
    assert recorded
    today = set(PopulationConfig(mutation={}).selection_dict())
    lacking = today - set().union(*(e["config"] for e in recorded))
    assert "explore" in lacking
    unfilled = lacking - NOT_REPLAYED_FROM_DEFAULTS - set(ADDED_CONFIG_KEYS)
    assert not unfilled, f"replayed with today's default: {sorted(unfilled)}"
    assert all(recorded_config(e)["explore"] == "random" for e in recorded)
