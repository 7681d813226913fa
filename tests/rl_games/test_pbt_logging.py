"""pbt/* TensorBoard scalars read back from real event files, across a restart that opens a second writer in the
same run folder (as an exec restart does); and a W&B run id kept across restarts, checked offline."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalars, wandb_init_kwargs, wandb_run_id


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
        log.record(make_record(1, values, frame=frame, hyperparameters={"learning_rate": 1e-3, "gamma": 0.95,
                                                                       "e_clip": 0.2, "use_x": True,
                                                                       "activation": "elu"}))
    writer.close()
    # Exploit restart: a new process writes into the same folder at the member's continuing frame counter.
    writer = SummaryWriter(str(summaries))
    log = PbtScalars(writer)
    log.exploit(8192, donor=3, member=1)
    log.record(make_record(1, [-150.0], frame=12288, generation=1,
                           hyperparameters={"learning_rate": 2e-3, "gamma": 0.96, "e_clip": 0.2, "use_x": False,
                                            "activation": "relu"}))
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


@dataclass
class _State:
    member: int = 1
    wandb_run_id: str = ""


def test_run_id_is_stable_and_kept_in_the_state(tmp_path):
    ws = tmp_path / "pbt_ws"
    state = _State()
    first = wandb_run_id(state, ws, "pendulum_ppo_pbt_001")
    assert state.wandb_run_id == first and len(first) == 16
    assert wandb_run_id(None, ws, "pendulum_ppo_pbt_001") == first  # derivable without the state, too
    assert wandb_run_id(None, ws, "pendulum_ppo_pbt_002") != first
    moved = _State(wandb_run_id=first)
    assert wandb_run_id(moved, tmp_path / "elsewhere", "pendulum_ppo_pbt_001") == first
    kw = wandb_init_kwargs(state, ws, "pendulum_ppo_pbt_001")
    assert kw == {"id": first, "resume": "allow", "group": "pbt_ws", "name": "pendulum_ppo_pbt_001"}


_MEMBER_PROCESS = """
import sys, wandb
from async_pbt_isaaclab.rl_games.pbt_logging import wandb_init_kwargs
kw = wandb_init_kwargs(None, sys.argv[1], sys.argv[2])
run = wandb.init(project="pbt-test", dir=sys.argv[3], **kw)
run.log({"pbt/generation": int(sys.argv[4])})
print("RUN", run.id, run.group)
run.finish()
"""


@pytest.mark.slow
def test_wandb_offline_run_is_resumed_by_each_process(tmp_path):
    pytest.importorskip("wandb")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    ws, wdir = tmp_path / "pop", tmp_path / "wandb"
    wdir.mkdir()
    ids = []
    for generation in (0, 1):  # the member before and after an exploit restart: two processes
        proc = subprocess.run([sys.executable, "-c", _MEMBER_PROCESS, str(ws), "cart_pbt_000", str(wdir),
                               str(generation)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = [l for l in proc.stdout.splitlines() if l.startswith("RUN ")][-1]
        ids.append(line.split()[1:])
    assert ids[0] == ids[1] == [wandb_run_id(None, ws, "cart_pbt_000"), "pop"]
    runs = sorted(p.name for p in (wdir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.endswith(ids[0][0]) for r in runs)
