"""pbt/* TensorBoard scalars read back from real event files, across a restart that opens a second writer in the
same run folder (as an exec restart does). The W&B run id a member keeps is tested in tests/member/test_wandb_run.py."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalars, ScalarFile


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


def test_no_writer_means_no_output_and_a_file_alone_gets_every_scalar(tmp_path, make_record, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write_all(log):
        log.record(make_record(1, [-5.0, -7.0], frame=4096, hyperparameters={"gamma": 0.9}))
        log.exploit(8192, 2, member=1)
        log.hyperparameters({"a": 1.0}, 8192)
        log.flush()

    quiet = PbtScalars(None)
    assert not quiet.active
    write_all(quiet)
    assert list(tmp_path.iterdir()) == []  # nothing anywhere: no writer, no file

    # The report's file without a TensorBoard writer (rl_games' writer disabled): the same scalars, one line a frame.
    path = tmp_path / "pbt_scalars.jsonl"
    write_all(PbtScalars(None, ScalarFile(path)))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {
            "frame": 4096,
            "scalars": {
                "pbt/objective_count": 2.0,
                "pbt/objective_mean": -6.0,
                "pbt/generation": 0.0,
                "pbt/hp/gamma": 0.9,
            },
        },
        {"frame": 8192, "scalars": {"pbt/exploit": 2.0, "pbt/hp/a": 1.0}},
    ]
