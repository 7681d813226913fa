"""rsl_rl members where Isaac Lab users train: the real Isaac Lab release (simulator stubbed) and the rsl-rl-lib line
it pins (the main job: 3.0.0 with 5.5.1; .ci/side-jobs: 2.3.2 with 3.1.2, through the rslrl_compat marker).

The probe (``upstream_probes.rsl_rl_member``) wraps the test reach task in our evidence wrapper and Isaac Lab's own
``RslRlVecEnvWrapper``, builds the runner from Isaac Lab's own cartpole ``RslRlOnPolicyRunnerCfg`` as the release's
train script does (3.0: ``handle_deprecated_rsl_rl_cfg`` and ``create_rsl_rl_runner``), trains through the adapter,
and plays the member's checkpoint with rsl_rl's ``runner.load``, as Isaac Lab's play script does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isaaclab_real

pytestmark = pytest.mark.rslrl_compat

pytest.importorskip("rsl_rl")


def test_an_rsl_rl_member_trains_through_isaac_labs_wrapper_and_plays_with_its_load(release, tmp_path):
    proc = isaaclab_real.run_entry(release, "-m", "rsl_rl_member", str(tmp_path), cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE:")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(lines[-1][len("PROBE:") :])
    assert seen["wrapper"] == "isaaclab_rl.rsl_rl.vecenv_wrapper.RslRlVecEnvWrapper" and seen["source_is_ours"]
    # 16 envs x Isaac Lab cartpole's 16 steps per iteration, 14 iterations; every env finished episodes of at most
    # 100 steps, so the member's evidence holds completed episodes (settled), each one counted per env.
    assert (seen["frames_per_iteration"], seen["epoch"], seen["frame"]) == (256, 14, 14 * 256)
    assert seen["episodes"] >= 16
    assert seen["played_fingerprint_equal"] and seen["same_actions"]


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three Isaac Lab starts: member 0, member 1 and its exploit restart
def _run_in_turn(tmp_path: Path, commands: dict[int, list[str]]) -> dict[int, str]:
    """Run each member's command (``--pbt-index`` added) to its end, in order: the donor first, to completion, so
    that the exploit is certain; their logs."""
    from async_pbt_isaaclab.testing.forced_exploit import member_env

    logs = {}
    for index, command in commands.items():
        with open(tmp_path / f"member{index}.log", "w") as log:
            proc = subprocess.run(
                [*command, "--pbt-index", str(index)],
                cwd=tmp_path,
                env=member_env(OMP_NUM_THREADS="1"),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=900,
            )
        logs[index] = (tmp_path / f"member{index}.log").read_text()
        assert proc.returncode == 0, f"member {index} failed:\n{logs[index][-6000:]}"
    return logs


def test_an_rsl_rl_population_on_isaac_labs_train_entry_exploits_through_a_restart(release, tmp_path):
    """Two members of ``scripts/train_pbt_rsl_rl.py`` on the release's own config loading, ``RslRlVecEnvWrapper``
    and runner config (Isaac Lab's cartpole ``RslRlOnPolicyRunnerCfg`` registered for the reach task): member 0
    trains to completion, member 1 exploits it at its first decision (test rule) and restarts with the new values as
    Isaac Lab's own Hydra overrides of the runner config."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags

    ws = tmp_path / "ws"
    common = [
        sys.executable,
        str(isaaclab_real.ENTRY),
        release,
        *isaaclab_real.script_args(release, "train_pbt_rsl_rl.py", isaaclab_real.TASK),
        "--num_envs",
        "32",
        *forced_exploit_flags(interval_steps=1024, exploit_mode="restart"),
        "agent.pbt.mutation.desired_kl=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
        "agent.algorithm.gamma=0.98",  # typed in Hydra's name of the runner config's value: no draw replaces it
    ]
    flags = ["--pbt-workspace", str(ws), "--pbt-members", "2"]
    logs = _run_in_turn(tmp_path, {i: [*common, *flags, "--max_iterations", str(n)] for i, n in ((0, 8), (1, 10))})
    audit = _entries(ws / "members/001/audit.jsonl")
    (draw,) = [e for e in audit if e["kind"] == "initial_draw"]
    assert draw["pinned"] == ["gamma"] and draw["new_hyperparameters"]["gamma"] == 0.98
    starts = [e for e in audit if e["kind"] == "start"]
    (applied,) = [e for e in audit if e["kind"] == "exploit_applied"]
    assert [s["mode"] for s in starts] == ["fresh", "exploit_applied"] and applied["donor"] == 0
    state = json.loads((ws / "members/001/state.json").read_text())
    changes = {c["key"]: c["new"] for c in state["lineage"][0]["changes"]}
    added = [a for a in starts[1]["argv"] if a not in starts[0]["argv"]]
    # The new values, in the runner config's own names, which Isaac Lab's config loading applied after the restart;
    # the typed gamma replaced, not left beside its new value.
    assert added[0].startswith("--checkpoint=") and sorted(a.split("=")[0] for a in added[1:]) == sorted(
        f"agent.algorithm.{key}" for key in changes
    )
    assert "agent.algorithm.gamma=0.98" not in starts[1]["argv"]
    assert set(changes) == {"desired_kl", "gamma"} and state["hyperparameters"] == {
        **state["hyperparameters"],
        **changes,
    }
    record = json.loads((ws / "members/001/record.json").read_text())
    assert record["status"] == "finished" and record["epoch"] == 10 and record["frame"] == 10 * 32 * 16
    assert record["condition"]["task"] == isaaclab_real.TASK and record["condition"]["reward_config"].startswith(
        "sha256"
    )
    for member in (0, 1):
        count, problems = verify_log(ws / f"members/{member:03d}/audit.jsonl")
        assert count > 0 and problems == [], problems
    # rsl_rl's own checkpoints in the member's run folder, where Isaac Lab's play script finds them.
    runs = tmp_path / "logs" / "rsl_rl" / "cartpole"
    assert sorted(p.name for p in runs.iterdir()) == ["cartpole_pbt_000", "cartpole_pbt_001"]
    indices = [int(i) for i in re.findall(r"Learning iteration (\d+)/", logs[1])]
    assert indices == list(range(10)), "no iteration index repeated or skipped across the restart"


@pytest.mark.slow
def test_two_rsl_rl_slices_train_and_exploit_in_memory_on_one_isaaclab_env(release, tmp_path):
    """``scripts/train_pbt_rsl_rl.py --pbt-slices 2``: one process, one Isaac Lab env of 2 x 16 envs through Isaac
    Lab's own ``RslRlVecEnvWrapper``, each member its own ``OnPolicyRunner`` built as the release builds it; member 1
    exploits member 0 (test rule) from memory, inside the process."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.testing.forced_exploit import slice_exploit

    ws = tmp_path / "ws"
    mutations = ("agent.pbt.mutation.desired_kl=mutate_float", "agent.pbt.mutation.gamma=mutate_discount")
    # Published inline, so that member 1's decision one interval after member 0's evidence settles is certain to read
    # it and to find its state in memory (``testing/forced_exploit.py``): a decision every 4 of the 20 iterations.
    inline = "+agent.pbt.publish_in_background=false"
    typed = "agent.algorithm.gamma=0.98"  # Hydra's name of the runner config's value: kept out of slice 1's draw too
    isaaclab_real.run_two_slices(release, "train_pbt_rsl_rl.py", tmp_path, 20, *mutations, inline, typed)
    (draw,) = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "initial_draw"]
    assert draw["pinned"] == ["gamma"] and draw["new_hyperparameters"]["gamma"] == 0.98
    for member in (0, 1):
        start = next(e for e in _entries(ws / f"members/{member:03d}/audit.jsonl") if e["kind"] == "start")
        assert start["slices"]["members"] == [0, 1] and start["slices"]["num_envs"] == 32 and start["slot"] == member
        record = json.loads((ws / f"members/{member:03d}/record.json").read_text())
        # 16 envs x Isaac Lab cartpole's 16 steps per iteration: the member's own frames, not the simulator's.
        assert record["status"] == "finished" and record["frame"] == 20 * 16 * 16
        assert record["history"], "each member published evidence of its own slice"
        count, problems = verify_log(ws / f"members/{member:03d}/audit.jsonl")
        assert count > 0 and problems == [], problems
    slice_exploit(ws, recipient=1, donor=0, interval_steps=1024, inline=True)
    audit = _entries(ws / "members/001/audit.jsonl")
    (memory,) = [e for e in audit if e["kind"] == "donor_in_memory"]
    (applied,) = [e for e in audit if e["kind"] == "exploit_applied"]
    assert memory["donor"] == 0 and applied["path"] == "inprocess" and applied["donor"] == 0
    restored = [e for e in audit if e["kind"] == "restored" and e["mode"] == "exploit_inprocess"]
    assert restored[0]["model_sha256"] == memory["model_sha256"]
    # Each member's rsl_rl checkpoints in its own run folder, where Isaac Lab's play script finds them.
    runs = tmp_path / "logs" / "rsl_rl" / "cartpole"
    assert sorted(p.name for p in runs.iterdir()) == ["cartpole_pbt_000", "cartpole_pbt_001"]


GROUP_ITERATIONS = {0: 8, 1: 10}
"""Iterations of each member of the group test, of 512 frames each (member 0: 32 envs, member 1: 2 ranks x 16 envs, x
cartpole's 16 steps), a decision every 1024 frames once the evidence has settled; member 1 exploits member 0 at its
first (test rule), as in the restart test above."""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_rsl_rl_member_of_two_ranks_exploits_in_process_on_isaac_labs_train_entry(release, tmp_path):
    """``scripts/train_pbt_rsl_rl.py --distributed`` as a torchrun group of 2 ranks (gloo on the CPU:
    ``run_isaaclab.py --gloo-ranks``) on the release's own launcher, config loading, ``RslRlVecEnvWrapper`` and
    rsl-rl-lib's multi-GPU runner: member 1 exploits the one-process member 0 (trained first, to completion)
    in-process, and both ranks hold the donor's weights and the same optimizer rates before their next rollout."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags
    from async_pbt_isaaclab.testing.gloo_ranks import rsl_rl_checkpoint_fingerprint

    ws = tmp_path / "ws"
    script = isaaclab_real.script_args(release, "train_pbt_rsl_rl.py", isaaclab_real.TASK)
    common = ["--pbt-workspace", str(ws), "--pbt-members", "2"]
    common += [*forced_exploit_flags(interval_steps=1024, exploit_mode="inprocess", keep_last_checkpoints=100)]
    common += ["agent.pbt.mutation.desired_kl=mutate_float", "agent.pbt.mutation.gamma=mutate_discount"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    commands = {
        0: [sys.executable, str(isaaclab_real.ENTRY), release, *script, "--num_envs", "32", *common],
        1: [*torchrun, str(isaaclab_real.ENTRY), release, "--gloo-ranks", *script, "--distributed", "--num_envs",
            "16", *common],
    }  # fmt: skip
    logs = _run_in_turn(tmp_path, {i: [*c, "--max_iterations", str(GROUP_ITERATIONS[i])] for i, c in commands.items()})
    entries = _entries(ws / "members/001/audit.jsonl")
    (i,) = [i for i, e in enumerate(entries) if e["kind"] == "exploit_applied"]
    exploit = entries[i]
    assert exploit["path"] == "inprocess" and exploit["donor"] == 0
    assert exploit["plan_inputs"]["abilities"]["restarts"] is False, "a group is told it cannot restart"
    restored = next(e for e in entries[i:] if e["kind"] == "restored")
    # Written at the next epoch start, before either rank plays a step: each rank's fingerprint and optimizer rates.
    synced = next(e for e in entries[i:] if e["kind"] == "group_synced")
    assert synced["reason"] == "exploit" and synced["world_size"] == 2 and synced["generation"] == exploit["generation"]
    assert synced["model_sha256"] == [restored["model_sha256"]] * 2 == [exploit["model_sha256"]] * 2
    donor_weights = rsl_rl_checkpoint_fingerprint(ws / exploit["donor_checkpoint"])
    assert exploit["model_sha256"] == rsl_rl_checkpoint_fingerprint(ws / exploit["checkpoint"]) == donor_weights
    assert restored["optimizer_lr"] and synced["optimizer_lr"] == [restored["optimizer_lr"]] * 2
    # The group's frames are its ranks' total; every decision records the group.
    record = json.loads((ws / "members/001/record.json").read_text())
    assert record["status"] == "finished" and record["frame"] == GROUP_ITERATIONS[1] * 2 * 16 * 16
    assert all(e["world_size"] == 2 for e in entries if e["kind"] == "decision")
    for member in (0, 1):
        count, problems = verify_log(ws / f"members/{member:03d}/audit.jsonl")
        assert count > 0 and problems == [], problems
    # Each rank seeded as the release's script seeds it: the runner config's 42, + member index 1, + the rank.
    assert sorted(re.findall(r"\[INFO\] PBT member 1/2, .*, seed (\d+)$", logs[1], re.M)) == ["43", "44"]


def test_what_an_rsl_rl_group_cannot_do_is_refused_in_one_line_each(release, tmp_path):
    script = isaaclab_real.script_args(release, "train_pbt_rsl_rl.py", isaaclab_real.TASK)
    population = ["--pbt-workspace", str(tmp_path / "ws"), "--pbt-members", "2", "--distributed"]
    proc = isaaclab_real.run_entry(release, *script, *population, cwd=tmp_path)
    assert proc.returncode == 2 and "error: --distributed needs GPUs, but --device is 'cpu'" in proc.stderr
    # On the tests' CPU ranks (the GPU path refuses the same), once the configuration is loaded.
    group = ["--pbt-exploit-mode", "restart", "--pbt-slices", "2"]
    search_env = ["agent.pbt.mutation.env.success_radius={kind: log_float, low: 0.05, high: 0.5}"]
    search_env += ["agent.pbt.objective=success"]  # not the return the searched env value shapes
    proc = isaaclab_real.run_entry(release, "--gloo-ranks", *script, *population, *group, *search_env, cwd=tmp_path)
    refused = [line for line in proc.stderr.splitlines() if line.startswith("error: --distributed: ")]
    assert proc.returncode == 2 and len(refused) == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "exploit_mode is 'restart' (--pbt-exploit-mode, agent.pbt.exploit_mode)" in refused[0]
    assert "searched env keys (env.success_radius) would be set on rank 0's env only" in refused[1]
    assert refused[2].endswith("--pbt-slices 2: a process of several slice members is one rank")
