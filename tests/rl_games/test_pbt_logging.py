"""pbt/* TensorBoard scalars read back from real event files, across a restart that opens a second writer in the
same run folder (as an exec restart does); and the W&B run id a member keeps in its state. The W&B runs of real
members through exploit restarts and a resume (offline) are checked in
tests/upstream/test_train_pbt_observability.py, since train_pbt.py is the entry point with W&B tracking."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from async_pbt_isaaclab.core.member_state import MemberState, load_state, save_state
from async_pbt_isaaclab.core.records import RecordError
from async_pbt_isaaclab.rl_games.pbt_logging import (
    PbtScalars,
    assign_wandb_run_id,
    member_wandb_init_kwargs,
    wandb_init_kwargs,
)


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_scalars_are_continuous_across_a_restart(tmp_path, make_record):
    summaries = tmp_path / "run" / "summaries"
    # First process image: generation 0, two intervals.
    writer = SummaryWriter(str(summaries))
    log = PbtScalars(writer)
    for frame, values in ((4096, [-300.0, -280.0]), (8192, [-250.0, -270.0, -260.0])):
        log.record(
            make_record(
                1,
                values,
                frame=frame,
                hyperparameters={
                    "learning_rate": 1e-3,
                    "gamma": 0.95,
                    "e_clip": 0.2,
                    "use_x": True,
                    "activation": "elu",
                },
            )
        )
    writer.close()
    # Exploit restart: a new process writes into the same folder at the member's continuing frame counter.
    writer = SummaryWriter(str(summaries))
    log = PbtScalars(writer)
    log.exploit(8192, donor=3, member=1)
    log.record(
        make_record(
            1,
            [-150.0],
            frame=12288,
            generation=1,
            hyperparameters={"learning_rate": 2e-3, "gamma": 0.96, "e_clip": 0.2, "use_x": False, "activation": "relu"},
        )
    )
    log.record(make_record(1, [], frame=16384, generation=1, hyperparameters={"learning_rate": 2e-3}))
    log.exploit(16384, donor=1, member=1)  # an explore of own weights
    log.flush()
    writer.close()
    assert len(list(summaries.glob("events.out.tfevents.*"))) == 2

    s = _scalars(summaries)
    assert s["pbt/objective_mean"] == [(4096, -290.0), (8192, -260.0), (12288, -150.0)]
    assert s["pbt/objective_count"] == [(4096, 2.0), (8192, 3.0), (12288, 1.0), (16384, 0.0)]
    assert s["pbt/generation"] == [(4096, 0.0), (8192, 0.0), (12288, 1.0), (16384, 1.0)]
    assert s["pbt/exploit"] == [(8192, 3.0), (16384, -1.0)]
    assert [v for _, v in s["pbt/hp/learning_rate"]] == pytest.approx([1e-3, 1e-3, 2e-3, 2e-3])
    assert [v for _, v in s["pbt/hp/gamma"]] == pytest.approx([0.95, 0.95, 0.96])
    assert [v for _, v in s["pbt/hp/use_x"]] == [1.0, 1.0, 0.0]
    # A choice of strings is an index among the values seen by that process (sorted), so a change shows.
    assert [v for _, v in s["pbt/hp/activation"]] == [0.0, 0.0, 0.0]
    steps = [f for f, _ in s["pbt/generation"]]
    assert steps == sorted(steps), "steps never go backwards across the restart"


def test_no_writer_means_no_output():
    log = PbtScalars(None)
    log.exploit(1, 2)
    log.hyperparameters({"a": 1.0}, 5)
    log.flush()


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
    from async_pbt_isaaclab.core.workspace import Workspace

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
