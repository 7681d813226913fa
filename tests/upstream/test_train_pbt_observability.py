"""``scripts/train_pbt.py`` on a real Isaac Lab release (only the simulator stubbed), seen through what its runs write:

* ``--pbt-replay``: the single run applies every step of a schedule at the step's frame (rl_games' own ``info/*``
  scalars, the ``pbt/hp/*`` scalars and the run's log lines);
* W&B tracking (``--track``, ``WANDB_MODE=offline``): each member is one W&B run whose id is the one in its
  ``state.json``, the same across an exploit restart (a new process image that reads it from ``state.json``, as a
  resume does), grouped by the workspace.

One release is enough here: these code paths (the replay flag and observer, the W&B observer and the member state)
are the same on 2.x and 3.0; what differs between releases (launch, Hydra config loading, the wrapper, exploit
restarts) runs for both releases in test_real_isaaclab*.py. The newest release listed in ``ASYNC_PBT_TEST_RELEASES``
is used (2.3.2 in the rl-games 1.6.1 job, so the replay is checked on the rl_games line Isaac Lab 2.x pins too).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402
from isaaclab_real import TASK  # noqa: E402

RELEASE = isaaclab_real.releases_under_test()[-1]

pytest.importorskip("rl_games")
pytest.importorskip("tensorboard")

from async_pbt_isaaclab.core.fixtures import TEST_FIXTURE_ENV  # noqa: E402
from async_pbt_isaaclab.core.schedule import Schedule, ScheduleStep, dump_schedule  # noqa: E402
from async_pbt_isaaclab.testing.forced_exploit import FIXTURE_RULE, forced_exploit_flags  # noqa: E402

EPOCH = 32 * 32
"""Frames per epoch of the runs below: 32 envs x horizon_length 32 (the reach yaml's)."""


@pytest.fixture(scope="module")
def release() -> str:
    return isaaclab_real.fetched_or_skip(RELEASE)


def train_pbt(release: str, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return isaaclab_real.run_entry(
        release, *isaaclab_real.script_args(release, "train_pbt.py", TASK), *args, cwd=cwd, timeout=900, env=env
    )


def _scalars(folder: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


# ------------------------------------------------------------------ --pbt-replay


@pytest.mark.slow
@pytest.mark.rlgames_compat
@pytest.mark.timeout(900)
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


# ------------------------------------------------------------------ Weights & Biases across restarts

WANDB_LINE = re.compile(r"^\[async-pbt\] W&B run (\S+) \(group (\S+), project pbt-test\)$", re.M)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three member processes one after the other, each starting Isaac Lab and W&B
def test_each_member_resumes_the_wandb_run_its_state_names(release, tmp_path):
    pytest.importorskip("wandb")
    ws = tmp_path / "pop"
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DIR": str(tmp_path),
        TEST_FIXTURE_ENV: FIXTURE_RULE,
    }
    common = [
        "--num_envs",
        "32",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        *forced_exploit_flags(exploit_mode="restart"),
        "--track",
        "--wandb-entity",
        "tester",
        "--wandb-project-name",
        "pbt-test",
        "agent.params.config.mini_epochs=2",
    ]
    # Member 0 to completion first (the donor; a finished donor's checkpoint stays valid), then member 1, which
    # exploits it at frame 4096 and restarts with execv: the new process image finds its run id in state.json only,
    # as a resumed member does (a resume is the same code path; tests/member/test_wandb_run.py covers it).
    runs = {}
    for key, index, iterations in (("m0", 0, "6"), ("m1", 1, "6")):
        proc = train_pbt(release, tmp_path, *common, "--pbt-index", str(index), "--max_iterations", iterations, env=env)
        assert proc.returncode == 0, f"{key}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        runs[key] = proc.stdout

    states = {m: json.loads((ws / f"members/{m:03d}/state.json").read_text()) for m in (0, 1)}
    ids = {m: states[m]["wandb_run_id"] for m in (0, 1)}
    assert all(ids.values()) and ids[0] != ids[1], ids
    starts = [
        json.loads(line)["mode"]
        for line in (ws / "members/001/audit.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "start"
    ]
    assert starts == ["fresh", "exploit_applied"]
    assert states[1]["lineage"][0]["donor"] == 0, "member 1 took member 0's weights, and kept its own W&B run"
    # What each process of a member opened: the run its state.json names, in the workspace's group.
    opened = {key: WANDB_LINE.findall(out) for key, out in runs.items()}
    assert opened["m0"] == [(ids[0], "pop")]
    assert opened["m1"] == [(ids[1], "pop"), (ids[1], "pop")], "before and after the exploit restart"
    # W&B's own record: one offline run folder per process, named by run id; two run ids, one per member.
    folders = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert sorted(f.rsplit("-", 1)[1] for f in folders) == sorted([ids[0], ids[1], ids[1]])
    for folder in folders:
        run_id = folder.rsplit("-", 1)[1]
        assert (tmp_path / "wandb" / folder / f"run-{run_id}.wandb").stat().st_size > 0
