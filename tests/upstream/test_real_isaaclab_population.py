"""A two-member population on a real Isaac Lab release, only the simulator stubbed: an exploit restart, then play.

Member 0 trains to completion, then member 1 exploits it once (the test fixture rule) and restarts with ``os.execv``
through Isaac Lab's own launcher, Hydra config loading and rl_games wrappers (``run_isaaclab.py``); ``play_pbt.py``
then plays the recipient's checkpoint and the population's best. Both members track to W&B (``--track``,
``WANDB_MODE=offline``): each member is one W&B run whose id is the one in its ``state.json``, the same across the
exploit restart (a new process image that reads it from ``state.json``, as a resume does; tests/member/test_wandb_run.py
covers the resume itself), grouped by the workspace. It runs on one release, the newest under test
(``POPULATION_RELEASE`` in conftest.py). Its own file, apart from test_real_isaaclab.py's lighter checks, so test
workers run the two side by side.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402
from isaaclab_real import ENTRY, TASK, run_entry  # noqa: E402

from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env  # noqa: E402

TRACKING = importlib.util.find_spec("wandb") is not None
"""The members track to W&B (offline) when wandb is installed (the test extra installs it)."""


@pytest.fixture(scope="session")
def population(population_release, tmp_path_factory):
    """Two members as separate processes; member 1 exploits member 0 once (test rule) and restarts with execv. Both
    track to W&B, offline, when wandb is installed."""
    release = population_release
    root = tmp_path_factory.mktemp(f"population_{release}")
    ws = root / "ws"
    env = member_env(OMP_NUM_THREADS="1")
    tracking = []
    if TRACKING:
        env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true", WANDB_DIR=str(root))
        tracking = ["--track", "--wandb-entity", "tester", "--wandb-project-name", "pbt-test"]
    common = [
        sys.executable,
        str(ENTRY),
        release,
        *isaaclab_real.script_args(release, "train_pbt.py", TASK),
        "--num_envs",
        "32",
        *forced_exploit_flags(exploit_mode="restart", keep_last_checkpoints=100),
        *tracking,
        "agent.params.config.mini_epochs=2",
    ]
    per_member = {
        # Isaac Lab's own PBT overrides ...
        0: [
            "--max_iterations",
            "12",
            "agent.pbt.enabled=True",
            "agent.pbt.num_policies=2",
            "agent.pbt.policy_idx=0",
            f"agent.pbt.workspace={ws}",
        ],
        # ... and the population flags mean the same thing.
        1: ["--max_iterations", "12", "--pbt-workspace", str(ws), "--pbt-members", "2", "--pbt-index", "1"],
    }
    logs = {}
    # Member 0 first, to completion: it is the donor, and a finished donor's checkpoint stays valid. Running the two
    # one after the other keeps the exploit certain without timing assumptions.
    for index, extra in per_member.items():
        with open(root / f"member{index}.log", "w") as log:
            proc = subprocess.run(
                [*common, *extra], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=1500
            )
        logs[index] = (root / f"member{index}.log").read_text()
        assert proc.returncode == 0, f"member {index} failed:\n{logs[index][-6000:]}"
    return root, ws, logs


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two member processes run one after the other, each starting Isaac Lab
def test_population_exploit_restart_on_the_real_release(population_release, population):
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log

    root, ws, logs = population
    state = json.loads((ws / "members/001/state.json").read_text())
    assert state["restarts"] == 1 and state["generation"] == 1, logs[1][-3000:]
    assert state["lineage"][0]["donor"] == 0 and state["lineage"][0]["outcome"] == "exploit"
    starts = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "start"]
    assert [s["mode"] for s in starts] == ["fresh", "exploit_applied"]
    before, after = starts[0]["argv"], starts[1]["argv"]
    assert after[: len(before)] == before, "every flag survives the restart, in order"
    assert Path(before[1]) == ENTRY, "the restart re-ran the same entry (and the same release)"
    added = after[len(before) :]
    assert added[0].startswith("--checkpoint=") and all(a.startswith("agent.params.config.") for a in added[1:])
    for member in (0, 1):
        count, problems = verify_log(ws / f"members/{member:03d}/audit.jsonl")
        assert count > 0 and problems == [], problems
        record = json.loads((ws / f"members/{member:03d}/record.json").read_text())
        assert record["condition"]["task"] == TASK and record["condition"]["objective"] == "success"
        assert record["condition"]["reward_config"].startswith("sha256:")
    runs = root / "logs" / "rl_games" / "torch_reach_pbt"
    assert sorted(p.name for p in runs.iterdir()) == ["torch_reach_pbt_pbt_000", "torch_reach_pbt_pbt_001"]
    assert (runs / "torch_reach_pbt_pbt_001" / "params" / "env.yaml").is_file()


PLAYED = re.compile(r"\[INFO\] played (\S+) \((.+)\): (\d+) steps, (\d+) episodes")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_play_pbt_plays_the_recipient_and_the_best(population_release, population):
    release = population_release
    root, ws, _ = population
    applied = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "exploit_applied"][0]
    common = [
        *isaaclab_real.script_args(release, "play_pbt.py", TASK),
        "--num_envs",
        "16",
        "--num_steps",
        "120",
    ]
    proc = run_entry(release, *common, "--checkpoint", str(ws / applied["checkpoint"]), cwd=root)
    match = PLAYED.search(proc.stdout)
    assert proc.returncode == 0 and match, proc.stdout[-3000:] + proc.stderr[-3000:]
    # How many episodes end in 120 steps depends on how well the recipient reaches; that some do shows it acts.
    assert int(match.group(3)) == 120 and int(match.group(4)) >= 1
    proc = run_entry(release, *common, "--pbt-workspace", str(ws), "--best", cwd=root)
    match = PLAYED.search(proc.stdout)
    assert proc.returncode == 0 and match, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert match.group(2).startswith("best (member")


WANDB_LINE = re.compile(r"^\[async-pbt\] W&B run (\S+) \(group (\S+), project pbt-test\)$", re.M)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_each_member_keeps_the_wandb_run_its_state_names_across_the_exploit_restart(population):
    assert TRACKING, "wandb comes with the [test] extra: without it the members tracked nothing to check"
    root, ws, logs = population
    states = {m: json.loads((ws / f"members/{m:03d}/state.json").read_text()) for m in (0, 1)}
    ids = {m: states[m]["wandb_run_id"] for m in (0, 1)}
    assert all(ids.values()) and ids[0] != ids[1], ids
    assert states[1]["lineage"][0]["donor"] == 0, "member 1 took member 0's weights, and kept its own W&B run"
    # What each process of a member opened: the run its state.json names, in the workspace's group.
    opened = {m: WANDB_LINE.findall(log) for m, log in logs.items()}
    assert opened[0] == [(ids[0], ws.name)]
    assert opened[1] == [(ids[1], ws.name), (ids[1], ws.name)], "before and after the exploit restart"
    # W&B's own record: one offline run folder per process, named by run id; two run ids, one per member.
    folders = sorted(p.name for p in (root / "wandb").glob("offline-run-*"))
    assert sorted(f.rsplit("-", 1)[1] for f in folders) == sorted([ids[0], ids[1], ids[1]])
    for folder in folders:
        run_id = folder.rsplit("-", 1)[1]
        assert (root / "wandb" / folder / f"run-{run_id}.wandb").stat().st_size > 0
