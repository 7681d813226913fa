"""The W&B run id a member keeps in its state: given once, kept across restarts and moves, and read back by every
process of the member. The W&B runs of real members through exploit restarts and a resume (offline) are checked in
tests/upstream/test_train_pbt_observability.py, since train_pbt.py is the entry point with W&B tracking."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace.state_files import load_state, save_state
from async_pbt_isaaclab.member.wandb_run import assign_wandb_run_id, member_wandb_init_kwargs, wandb_init_kwargs


def test_a_member_gets_its_wandb_run_id_once_and_keeps_it(tmp_path):
    ws = tmp_path / "pbt_ws"
    state = MemberState(member=1, experiment_name="pendulum_ppo_pbt_001")
    first = assign_wandb_run_id(state, ws, fresh=True)
    assert state.wandb_run_id == first and re.fullmatch(r"[0-9a-f]{16}", first)
    # Every later start keeps it (a restart, a resume; a moved workspace too) ...
    assert assign_wandb_run_id(state, tmp_path / "moved", fresh=False) == first
    # ... and a new member, even at the same workspace path and run name, gets another run.
    assert assign_wandb_run_id(MemberState(member=1, experiment_name="pendulum_ppo_pbt_001"), ws, True) != first
    save_state(tmp_path / "state.json", state)
    assert load_state(tmp_path / "state.json").wandb_run_id == first
    kw = wandb_init_kwargs(state, ws, "pendulum_ppo_pbt_001")
    assert kw == {"id": first, "resume": "allow", "group": "pbt_ws", "name": "pendulum_ppo_pbt_001"}


def test_a_state_written_before_the_id_was_kept_loads_and_keeps_its_earlier_run(tmp_path):
    ws = tmp_path / "pbt_ws"
    old = MemberState(member=2, experiment_name="cart_pbt_002").to_dict()
    del old["wandb_run_id"]
    (tmp_path / "state.json").write_text(json.dumps(old))
    state = load_state(tmp_path / "state.json")
    assert state.wandb_run_id == ""
    # Its earlier processes opened the run derived from the workspace and run name: it goes on there.
    derived = hashlib.sha1(f"{ws.absolute()}|cart_pbt_002".encode()).hexdigest()[:16]
    assert assign_wandb_run_id(state, ws, fresh=False) == derived == state.wandb_run_id
    bad = dict(old, wandb_run_id=7)
    (tmp_path / "state.json").write_text(json.dumps(bad))
    with pytest.raises(RecordError, match=r"state\.json\.wandb_run_id: expected str"):
        load_state(tmp_path / "state.json")


def test_member_wandb_init_kwargs_reads_the_id_from_state_json(tmp_path):
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws = tmp_path / "pop"
    mdir = Workspace(ws).member_dir(3)
    mdir.mkdir(parents=True)
    with pytest.raises(RuntimeError, match="no wandb_run_id"):
        member_wandb_init_kwargs(ws, 3)  # not started yet: W&B must not invent an id of its own
    save_state(mdir / "state.json", MemberState(member=3, experiment_name="cart_pbt_003", wandb_run_id="abc123"))
    assert member_wandb_init_kwargs(ws, 3, name="shown") == {
        "id": "abc123",
        "resume": "allow",
        "group": "pop",
        "name": "shown",
    }
