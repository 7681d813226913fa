"""Our Isaac Lab layer against the real Isaac Lab releases 2.3.2 and 3.0.0, only the simulator stubbed.

Each release runs with the rl-games line its users have (``isaaclab_real.releases_under_test``): 3.0.0 under the
README's test command (rl-games 1.6.5), 2.3.2 in .ci/run's rl-games 1.6.1 job.

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
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# rlgames_compat: also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x). slow: every check starts Isaac Lab
# in a child process (a minute of CPU for the file), so test workers take this file early, not last.
pytestmark = [pytest.mark.rlgames_compat, pytest.mark.slow]

sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402
from isaaclab_real import TASK, run_entry  # noqa: E402


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


PBT_CHANGES = {"config.name", "config.torch_compile"}
"""What every PBT variant's agent yaml changes of its base task's (marked "PBT:" there): the run name, no compile."""
PBT_CHANGES_OF = {"Allegro": {"config.entropy_coef"}}
"""Changes of one variant only, by a word of its id: Allegro starts entropy_coef at its mutation's lower bound."""


def test_every_variant_keeps_its_base_tasks_rl_games_settings(release, probes):
    """Each variant's agent params against its base task's, both loaded by the release's own registry loader from
    the release's own files: every setting upstream has is ours, unchanged, but for what our yamls mark "PBT:"."""
    from yaml_values import changed_settings

    for task_id, variant in probe(probes, "variants")["variants"].items():
        ours, upstream = variant["agent_params"], variant["base_agent_params"]
        allowed = PBT_CHANGES.union(*(keys for word, keys in PBT_CHANGES_OF.items() if word in task_id))
        assert changed_settings(ours, upstream) <= allowed, task_id
        assert ours["config"]["name"] == upstream["config"]["name"] + "_pbt", task_id


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
    # What a member of several ranks cannot do, one line each, once its configuration is loaded (on the CPU ranks of
    # the tests: --gloo-ranks; the GPU path refuses the same).
    group = ["--pbt-members", "2", "--distributed", "--pbt-exploit-mode", "restart", "--pbt-slices", "2"]
    search_env = ["--agent", "rl_games_env_values_cfg_entry_point"]
    proc = run_entry(release, "--gloo-ranks", *base, *group, *search_env, cwd=tmp_path)
    refused = [line for line in proc.stderr.splitlines() if line.startswith("error: --distributed: ")]
    assert proc.returncode == 2 and len(refused) == 3, proc.stderr[-3000:]
    assert "exploit_mode is 'restart' (--pbt-exploit-mode, agent.pbt.exploit_mode)" in refused[0]
    assert "searched env keys (env.reward_weights.progress, env.success_radius)" in refused[1]
    assert refused[2].endswith("--pbt-slices 2: a process of several slice members is one rank")
