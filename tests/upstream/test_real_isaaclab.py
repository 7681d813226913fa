"""Our Isaac Lab layer against the real Isaac Lab releases 2.3.2 and 3.0.0, only the simulator stubbed.

The ``isaaclab`` wheels are fetched from PyPI into a cache (``isaaclab_real.py``); the checks run in child processes
(``run_isaaclab.py``), since the two releases cannot share one; the probes of one release share a process (the
``probes`` fixture), so Isaac Lab starts once for all of them. What runs is Isaac Lab's own code: its launcher
(``AppLauncher`` on 2.x, ``launch_simulation`` on 3.0), its config loading through Hydra (``hydra_task_config`` /
``resolve_task_config``), its task registry, ``RlGamesVecEnvWrapper`` and ``RlGamesGpuEnv``; and rl_games trains for
real on a CPU. The env of the test task is a ``DirectRLEnv`` whose dynamics are the pure-torch reach task
(``reach_task.py``): physics is the one thing these tests cannot run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENTRY = HERE / "run_isaaclab.py"
TASK = "AsyncPbtTest-Reach-Direct-v0"
RELEASES = tuple(os.environ.get("ASYNC_PBT_TEST_RELEASES", "2.3.2,3.0.0").split(","))
"""Releases to run against (.ci/run's rl-games 1.6.1 job runs 2.3.2 only: that line is what 2.x pins)."""
POPULATION_RELEASE = RELEASES[-1]
"""The release the two-member population (the slowest check: three Isaac Lab starts, an exec restart, two plays)
runs on: the newest one asked for. .ci/run's main job (2.3.2 and 3.0.0, rl-games 1.6.5) runs it on 3.0.0, its
rl-games 1.6.1 job (2.3.2 only, what 2.x pins) on 2.3.2, so each release has its population run, with the rl-games
its users have. Every lighter check, a real train_pbt.py run included, runs on every release."""

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402

pytest.importorskip("rl_games")

from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env  # noqa: E402


def _fetched(release: str) -> str:
    try:
        isaaclab_real.ensure(release)
    except isaaclab_real.Unavailable as exc:
        pytest.skip(f"Isaac Lab {release} could not be fetched from PyPI: {exc}")
    return release


@pytest.fixture(scope="session", params=RELEASES)
def release(request) -> str:
    return _fetched(request.param)


@pytest.fixture(scope="session", params=[POPULATION_RELEASE])
def population_release(request) -> str:
    return _fetched(request.param)


def _env() -> dict:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def run_entry(release: str, *args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRY), release, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=_env(),
    )


def _probe_calls(release: str) -> list[list[str]]:
    """The probes of this module, with their arguments, in the order one process runs them."""
    cartpole = "AsyncPbt-Cartpole-Direct-v0" if release.startswith("2.") else "AsyncPbt-Cartpole-Direct"
    return [
        ["release"],
        ["contracts"],
        ["train_flags"],
        ["variants"],
        ["wrapper_chain"],
        ["multi_agent"],
        [
            "configs",
            cartpole,
            "env.scene.num_envs=7",
            "agent.params.config.learning_rate=0.002",
            "+agent.params.config.pbt_probe=3",
        ],
        ["restart_keeps_hydra_keys"],
    ]


@pytest.fixture(scope="session")
def probes(release) -> dict[str, dict]:
    """Every probe's findings on ``release``, from one child process: Isaac Lab is imported once, not per probe."""
    proc = run_entry(release, "-m", "batch", json.dumps(_probe_calls(release)))
    found = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"PROBE\[(\w+)\]:(.*)", line)
        if match:
            found[match.group(1)] = json.loads(match.group(2))
    return {"found": found, "output": proc.stdout[-3000:] + proc.stderr[-5000:], "rc": proc.returncode}


def probe(probes: dict, name: str) -> dict:
    """What probe ``name`` observed (the test fails with the child's output or the probe's traceback otherwise)."""
    found = probes["found"].get(name)
    assert found is not None, f"probe {name} printed nothing (exit {probes['rc']}):\n{probes['output']}"
    assert "error" not in found, f"probe {name} raised:\n{found['error']}"
    return found


# ------------------------------------------------------------------ the release, its configs and its wrapper


def test_the_installed_release_is_detected(release, probes):
    found = probe(probes, "release")
    if release.startswith("2."):
        assert found["series"] == "2" and found["source_install"] and found["version"] == "0.54.2"
    else:
        assert found["series"] == "3" and not found["source_install"] and found["version"] == "3.0.0"


def test_every_variant_resolves_its_base_task_on_this_release(release, probes):
    found = probe(probes, "variants")
    suffix = release.startswith("2.")
    assert all(task_id.endswith("-v0") == suffix for task_id in found["ids"]), found["ids"]
    bases = {v["base"] for v in found["variants"].values()}
    if suffix:
        assert bases == {
            "Isaac-Repose-Cube-Allegro-Direct-v0",
            "Isaac-Velocity-Flat-Anymal-C-v0",
            "Isaac-Velocity-Rough-Anymal-C-v0",
            "Isaac-Cartpole-Direct-v0",
        }
    else:
        assert bases == {
            "Isaac-Reorient-Cube-Allegro-Direct",
            "IsaacContrib-Velocity-Flat-AnymalC",
            "IsaacContrib-Velocity-Rough-AnymalC",
            "Isaac-Cartpole-Direct",
        }
    for task_id, variant in found["variants"].items():
        assert variant["same_as_base"] and variant["has_pbt"], (task_id, variant)


def test_hydra_overrides_load_through_the_releases_own_config_path(release, probes):
    found = probe(probes, "configs")
    assert found["env_cfg_type"] == "CartpoleEnvCfg" and found["has_to_dict"]
    assert found["num_envs"] == 7
    assert found["config"]["learning_rate"] == 0.002 and found["config"]["pbt_probe"] == 3


def test_a_restart_keeps_the_users_hydra_add_prefix(release, probes):
    found = probe(probes, "restart_keeps_hydra_keys")
    assert "+agent.params.config.pbt_probe_coef=0.25" in found["argv"]
    # Real Hydra accepted the rewritten command line and applied the mutated values.
    assert found["pbt_probe_coef"] == 0.25 and found["learning_rate"] == 0.0005


def test_the_evidence_wrapper_works_inside_the_real_rl_games_wrappers(release, probes):
    found = probe(probes, "wrapper_chain")
    assert found["wrapper"] == "isaaclab_rl.rl_games.rl_games.RlGamesVecEnvWrapper"
    assert found["gpu_env"] == "isaaclab_rl.rl_games.rl_games.RlGamesGpuEnv"
    assert found["source_is_ours"], "the observer finds our source through RlGamesGpuEnv -> RlGamesVecEnvWrapper"
    assert found["episodes"] >= 16 and found["obs_shape"] == [16, 6]
    assert set(found["extras"]) >= {"episode", "time_outs"} and "rlgpu" in found["registered"]


MARL_TASK = "AsyncPbtTest-Reach-TwoAgent-Direct-v0"
"""The multi-agent test task (``reach_marl_task.py``): a real ``DirectMARLEnv`` subclass, two agents, one per axis."""


def test_a_multi_agent_task_is_converted_to_one_agent_as_isaac_lab_does(release, probes):
    found = probe(probes, "multi_agent")
    # The dispatch is on Isaac Lab's own classes: the multi-agent env goes through multi_agent_to_single_agent, a
    # single-agent env is left alone.
    assert found["marl_type_is_upstream"] and found["untouched_single_agent"]
    assert found["converted_is_direct_rl_env"] and found["converted_wraps_task"]
    # Two agents of 3 observations and 1 action each: one agent of 6 and 2 in the real RL-Games wrapper.
    assert found["obs_space_shape"] == [6] and found["action_space_shape"] == [2] and found["obs_shape"] == [16, 6]
    # The evidence is read from the task's multi-agent env (its terms, its resets), not from the conversion.
    assert found["hook_on_task_env"]
    assert found["episodes"] >= 16 and found["terms"] == ["out_of_bounds", "progress", "success"]
    assert found["successes"] >= 1
    assert set(found["extras"]) >= {"episode", "time_outs"}


def test_train_pbt_trains_a_multi_agent_task_as_a_population_member(release, tmp_path):
    ws = tmp_path / "ws"
    proc = run_entry(
        release,
        *isaaclab_real.script_args(release, "train_pbt.py", MARL_TASK),
        "--num_envs",
        "32",
        "--max_iterations",
        "8",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--pbt-interval-steps",
        "2048",
        "--pbt-min-episodes",
        "8",
        "--pbt-start-grace-frames",
        "0",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((ws / "members/000/record.json").read_text())
    assert record["status"] == "finished" and record["epoch"] == 8 and record["frame"] == 8 * 32 * 32
    assert record["condition"]["task"] == MARL_TASK and record["condition"]["reward_config"].startswith("sha256:")
    # Episodes of 100 steps in 256: the member published evidence from the converted env's episodes.
    evidence = record["evidence"]
    assert evidence["episodes_seen"] >= 32 and evidence["settled"]
    assert set(evidence["values"]) <= {0.0, 1.0}


def test_isaac_lab_keeps_the_contracts_the_evidence_wrapper_relies_on(release, probes):
    found = probe(probes, "contracts")
    assert all(found.values()), {k: v for k, v in found.items() if not v}


def test_train_pbt_accepts_every_flag_of_the_releases_train_script(release, probes):
    found = probe(probes, "train_flags")
    missing = sorted(set(found["upstream"]) - set(found["ours"]))
    assert not missing, f"train_pbt.py lacks {missing} ({found['origin']})"
    # Same meaning: each shared flag lands in the same argparse destination.
    if release.startswith("3."):
        differ = {
            o: (found["ours_dest"][o], d) for o, d in found["upstream_dest"].items() if found["ours_dest"].get(o) != d
        }
        assert not differ, differ
    extra = sorted(set(found["ours"]) - set(found["upstream"]))
    assert all(flag.startswith("--pbt-") or flag in ("--num-envs", "--max-iterations") for flag in extra), extra


# ------------------------------------------------------------------ refusals


def test_headless_is_explained_on_3_0_and_cpu_distributed_is_refused(release, tmp_path):
    if release.startswith("3."):
        proc = run_entry(release, str(ROOT / "scripts/train_pbt.py"), "--task", TASK, "--headless", cwd=tmp_path)
        assert proc.returncode == 2 and "drop --headless" in proc.stderr
    proc = run_entry(release, *isaaclab_real.script_args(release, "train_pbt.py", TASK), "--distributed", cwd=tmp_path)
    assert proc.returncode == 2 and "--distributed needs GPUs" in proc.stderr


def test_configuration_errors_stop_with_a_clear_line(release, tmp_path):
    base = isaaclab_real.script_args(release, "train_pbt.py", TASK)
    proc = run_entry(release, *base, "--pbt-members", "2", "--pbt-index", "5", cwd=tmp_path)
    assert proc.returncode == 2 and "policy_idx: 5 is out of range" in proc.stderr
    gpu = [a if a != "cpu" else "cuda:0" for a in base]
    proc = run_entry(release, *gpu, "--pbt-members", "2", "--distributed", cwd=tmp_path)
    assert proc.returncode == 2 and "async-pbt launch" in proc.stderr


# ------------------------------------------------------------------ a population with an exploit restart (slow)


@pytest.fixture(scope="session")
def population(population_release, tmp_path_factory):
    """Two members as separate processes; member 1 exploits member 0 once (test rule) and restarts with execv."""
    release = population_release
    root = tmp_path_factory.mktemp(f"population_{release}")
    ws = root / "ws"
    env = member_env(OMP_NUM_THREADS="1")
    common = [
        sys.executable,
        str(ENTRY),
        release,
        *isaaclab_real.script_args(release, "train_pbt.py", TASK),
        "--num_envs",
        "32",
        *forced_exploit_flags(exploit_mode="restart", keep_last_checkpoints=100),
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
                [*common, *extra], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600
            )
        logs[index] = (root / f"member{index}.log").read_text()
        assert proc.returncode == 0, f"member {index} failed:\n{logs[index][-6000:]}"
    return root, ws, logs


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two member processes run one after the other, each starting Isaac Lab
def test_population_exploit_restart_on_the_real_release(population_release, population):
    from async_pbt_isaaclab.core.audit import verify_log

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
@pytest.mark.timeout(1500)
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
