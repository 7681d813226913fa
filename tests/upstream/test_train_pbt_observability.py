"""``scripts/train_pbt.py`` on a real Isaac Lab release (only the simulator stubbed), seen through what its runs write:

* ``--pbt-replay``: the single run applies every step of a schedule at the step's frame (rl_games' own ``info/*``
  scalars, the ``pbt/hp/*`` scalars and the run's log lines), and a schedule it cannot follow is refused before the
  simulator starts.

W&B tracking through ``train_pbt.py`` is checked on the population of test_real_isaaclab_population.py.

One release is enough here: these code paths (the replay flag and observer) are the same on 2.x and 3.0; what
differs between releases (launch, Hydra config loading, the wrapper, exploit restarts) runs for both releases in
test_real_isaaclab*.py. The newest release under test is used (3.0.0 with
rl-games 1.6.5; 2.3.2 in CI's rl-games 1.6.1 job, so the replay is checked on the line Isaac Lab 2.x pins too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402
from isaaclab_real import TASK  # noqa: E402

RELEASE = isaaclab_real.releases_under_test()[-1]


from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleStep, dump_schedule  # noqa: E402

EPOCH = 32 * 32
"""Frames per epoch of the runs below: 32 envs x horizon_length 32 (the reach yaml's)."""


@pytest.fixture(scope="module")
def release() -> str:
    return isaaclab_real.fetched_or_skip(RELEASE)


def train_pbt(release: str, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return isaaclab_real.run_entry(
        release, *isaaclab_real.script_args(release, "train_pbt.py", TASK), *args, cwd=cwd, timeout=1800, env=env
    )


def _scalars(folder: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------ --pbt-replay


@pytest.mark.slow
@pytest.mark.rlgames_compat
@pytest.mark.timeout(3600)
def test_train_pbt_replay_applies_every_change_at_the_recorded_frame(release, tmp_path):
    # An exploit and an explore as `async-pbt replay` writes them (the export itself is tested on a real population
    # in tests/integration/test_observability.py); frames on this run's epoch starts.
    steps = (
        ScheduleStep(0, {"learning_rate": 1e-3, "e_clip": 0.2, "entropy_coef": 1e-3, "gamma": 0.99}, 0, 0, 0, "start"),
        ScheduleStep(
            2 * EPOCH,
            {"learning_rate": 4e-4, "e_clip": 0.25, "entropy_coef": 2e-3, "gamma": 0.99},
            1,
            4 * EPOCH,
            1,
            "exploit",
        ),
        ScheduleStep(
            4 * EPOCH,
            {"learning_rate": 1.5e-4, "e_clip": 0.3, "entropy_coef": 2e-3, "gamma": 0.97},
            1,
            6 * EPOCH,
            2,
            "explore",
        ),
    )
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text(dump_schedule(Schedule(1, steps, "ws", 6 * EPOCH)))
    # A constant learning-rate schedule, so rl_games' own info/last_lr shows the applied rate (adaptive would move it).
    proc = train_pbt(
        release,
        tmp_path,
        "--num_envs",
        "32",
        "--max_iterations",
        "6",
        "--pbt-replay",
        str(schedule),
        "agent.params.config.lr_schedule=constant",
        "agent.params.config.mini_epochs=2",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    run = tmp_path / "logs" / "rl_games" / "torch_reach_pbt" / "torch_reach_pbt_replay_001"
    scalars = _scalars(run / "summaries")
    epochs = sorted(scalars["info/e_clip"])
    assert epochs == [EPOCH * i for i in range(6)]
    # rl_games' own scalars: each epoch trained with the values of the newest step at or before its start frame.
    for frame in epochs:
        values = max((s for s in steps if s.frame <= frame), key=lambda s: s.frame).values
        assert scalars["info/e_clip"][frame] == pytest.approx(values["e_clip"]), frame
        assert scalars["info/last_lr"][frame] == pytest.approx(values["learning_rate"]), frame
    # The run's record of each application: exactly at the step frames, with every value of the step.
    for key in steps[0].values:
        assert scalars[f"pbt/hp/{key}"] == pytest.approx({s.frame: s.values[key] for s in steps}), key
    applied = [line for line in proc.stdout.splitlines() if line.startswith("[async-pbt] replay: frame ")]
    assert [int(line.split()[3].rstrip(":")) for line in applied] == [s.frame for s in steps]
    assert "gamma=0.97" in applied[2] and "learning_rate=0.00015" in applied[2]
    # One plain run: its own run folder, no population workspace beside it.
    assert [p.name for p in run.parent.iterdir()] == [run.name]


@pytest.mark.rlgames_compat
def test_train_pbt_refuses_a_schedule_it_cannot_follow_before_the_simulator_starts(release, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: async-pbt-schedule/1\nmember: 0\nsteps:\n- {frame: 0, values: {warp_factor: 9}}\n")
    proc = train_pbt(release, tmp_path, "--pbt-replay", str(bad))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--pbt-replay" in errors[0] and str(bad) in errors[0] and "warp_factor" in errors[0]
    assert "Parsing configuration" not in proc.stdout  # refused before the task's configs were loaded
