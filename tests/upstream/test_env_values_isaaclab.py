"""Searched env values (``pbt.mutation`` keys ``env.<path>``) on the real Isaac Lab releases, simulator stubbed.

The probe (``env_values_probes.env_values``, one Isaac Lab start per release) checks the env side against the
release's own code: a reward weight set through the real ``RewardManager`` of a manager-based env changes the reward
it computes by exactly the new weight; a direct task's config value read at every step is set live; a key naming no
term or field is refused in one line naming it; a restart's ``env.*`` override builds, through the release's own
Hydra loading and ``gym.make``, an env holding the new value. The member runs (one per trainer, on the release the
populations run on) train ``scripts/train_pbt.py`` (rl_games) and ``scripts/train_pbt_rsl_rl.py`` (rsl_rl) as member
1 of 2: its diverse start draws a live key (``env.success_radius``) and a restart-path key
(``env.reward_weights.progress``, copied into a buffer when the env is built), so the member restarts its process
once with the override, and the rebuilt env holds both values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import isaaclab_real  # noqa: E402

pytestmark = pytest.mark.slow

LIVE, REBUILT = "env.success_radius", "env.reward_weights.progress"


@pytest.fixture(scope="module")
def found(release):
    proc = isaaclab_real.run_entry(release, "-m", "env_values_probes:env_values")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE:")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("PROBE:") :])


def test_a_reward_weight_set_through_the_real_reward_manager_changes_the_reward_it_computes(found):
    seen = found["manager"]
    assert seen["problems"] == [] and seen["restart"] == ["env.episode_length_s"]
    assert seen["live"] == ["env.rewards.effort.weight", "env.rewards.progress.weight"]
    assert seen["manager_weights"] == seen["cfg_weights"] == {"progress": 3.0, "effort": -0.5}
    assert seen["read"] == {"env.rewards.progress.weight": 3.0, "env.rewards.effort.weight": -0.5}
    # The same raw term values, weighted anew by the manager: reward + dt * sum((new - old) weight * raw value).
    assert seen["reward_changed"] and seen["reward_as_weighted"]
    assert seen["start_values"] == {
        "env.episode_length_s": 5.0,
        "env.rewards.effort.weight": -0.01,
        "env.rewards.progress.weight": 1.0,
    }


def test_slices_of_one_env_differ_in_reward_weights_through_a_wrapper_around_the_real_reward_manager(found):
    seen = found["slices"]
    assert seen["held"] == [[3.0] * 8, [0.5] * 8]
    # The manager computes the searched terms at weight 1; the wrapper weights its step values per env.
    assert seen["manager_weights"] == {"progress": 1.0, "effort": 1.0} and seen["as_weighted"]
    assert seen["refused"] == [
        "pbt.mutation.env.episode_length_s: members on slices of one Isaac Lab env can differ in reward term weights "
        "(env.rewards.<term>.weight) only: the env's other values are one for all its envs"
    ]


def test_a_key_naming_no_term_or_field_is_one_line_naming_it(found):
    seen = found["manager"]
    (unknown,) = seen["unknown"]
    assert unknown.startswith("pbt.mutation.env.rewards.no_such_term.weight: ") and "progress, effort" in unknown
    assert seen["bad_field"] == [
        "pbt.mutation.env.rewards.progress.func: a reward term's weight or params.<name> is searched, not 'func'"
    ]
    assert [p.split(":")[0] for p in seen["start_problems"]] == [
        "pbt.mutation.env.no_field",
        "pbt.mutation.env.rewards.no_such_term.weight",
    ]
    (direct,) = found["direct"]["unknown"]
    assert direct.startswith("pbt.mutation.env.rewards.progress.weight: the task's env config (ReachDirectEnvCfg)")


def test_a_direct_tasks_value_read_every_step_is_set_live_and_one_built_in_goes_the_restart_path(found):
    seen = found["direct"]
    assert seen["problems"] == [] and seen["live"] == [LIVE] and seen["restart"] == [REBUILT]
    assert seen["cfg_radius"] == 100.0
    # At rest inside a 100 m radius, every env succeeds at the next step: the running env read the new value.
    assert seen["terminated_before"] < 16 and seen["terminated_after"] == 16
    assert seen["overrides"] == {REBUILT: 3.0}


def test_a_restart_override_rebuilds_the_env_with_the_value_through_the_releases_config_loading(found):
    assert found["restart_argv"][-2:] == [f"{REBUILT}=3.0", "agent.params.config.gamma=0.9"]
    assert found["restart_argv"].count("--checkpoint=b.pth") == 1 and "--checkpoint=a.pth" not in found["restart_argv"]
    assert found["rebuilt_cfg"]["progress"] == 3.0 and found["rebuilt_weights"][0] == 3.0
    # Members that differ in a searched value compare their evidence; a value nobody searches still tells rewards apart.
    assert found["fingerprints"] == {"searched_equal": True, "unsearched_differ": True}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("script", ["train_pbt.py", "train_pbt_rsl_rl.py"])
def test_a_member_starts_with_its_drawn_env_values_live_and_rebuilt(population_release, script, tmp_path):
    """One member per trainer: the draw's restart-path value rebuilds the env (one exec), its live value is set."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log

    if script == "train_pbt_rsl_rl.py":
        pytest.importorskip("rsl_rl")
        # rsl_rl's runner config has no pbt section: the population comes from agent.pbt.* overrides.
        search = [f"agent.pbt.mutation.{LIVE}={{kind: log_float, low: 0.05, high: 0.5}}"]
        search += [
            f"agent.pbt.mutation.{REBUILT}={{kind: log_float, low: 0.5, high: 4.0}}",
            "agent.pbt.objective=success",
        ]
    else:
        search = ["--agent", "rl_games_env_values_cfg_entry_point"]  # reach_task.agent_searching_env_values
    ws = tmp_path / "ws"
    flags = ["--num_envs", "32", "--max_iterations", "2", "--pbt-workspace", str(ws), "--pbt-members", "2"]
    flags += ["--pbt-index", "1", "--pbt-interval-steps", "2048", "--pbt-start-grace-frames", "0"]
    args = isaaclab_real.script_args(population_release, script, isaaclab_real.TASK)
    proc = isaaclab_real.run_entry(population_release, *args, *flags, *search, cwd=tmp_path, timeout=800)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    state = json.loads((ws / "members/001/state.json").read_text())
    drawn = state["hyperparameters"]
    assert set(drawn) == {LIVE, REBUILT} and 0.05 <= drawn[LIVE] <= 0.5 and 0.5 <= drawn[REBUILT] <= 4.0
    audit = [json.loads(line) for line in (ws / "members/001/audit.jsonl").read_text().splitlines()]
    starts = [e for e in audit if e["kind"] == "start"]
    assert len(starts) == 2 and starts[1]["argv"][len(starts[0]["argv"]) :] == [f"{REBUILT}={drawn[REBUILT]!r}"]
    # What the rebuilt process's env holds, read back from it: the restart-path value built in, the live one set.
    held = f"env values {REBUILT}={drawn[REBUILT]!r} (built), {LIVE}={drawn[LIVE]!r} (live)"
    assert out.count("the env is rebuilt with its own values") == 1 and held in out
    count, problems = verify_log(ws / "members/001/audit.jsonl")
    assert count > 0 and problems == [], problems
    if script == "train_pbt.py":
        _play_holds_the_members_env_values(population_release, ws, drawn, tmp_path)


def _play_holds_the_members_env_values(release: str, ws: Path, drawn: dict, cwd: Path) -> None:
    """``play_pbt.py --member 1`` builds the env with the member's own values (one of them typed on its command
    line instead, which is kept): read back from the env it built."""
    args = isaaclab_real.script_args(release, "play_pbt.py", isaaclab_real.TASK)
    flags = ["--num_envs", "16", "--num_steps", "8", "--pbt-workspace", str(ws), "--member", "1"]
    proc = isaaclab_real.run_entry(release, *args, *flags, f"{LIVE}=0.123", cwd=cwd, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    held = f"env values of the checkpoint's member: {REBUILT}={drawn[REBUILT]!r}, {LIVE}=0.123 (typed)\n"
    assert held in out, out[-3000:]


def test_a_restart_path_key_is_refused_where_the_member_cannot_restart(release, tmp_path):
    args = isaaclab_real.script_args(release, "train_pbt.py", isaaclab_real.TASK)
    flags = ["--agent", "rl_games_env_values_cfg_entry_point", "--pbt-workspace", str(tmp_path / "ws")]
    flags += ["--pbt-members", "2", "--pbt-index", "1", "--pbt-exploit-mode", "inprocess", "--num_envs", "16"]
    proc = isaaclab_real.run_entry(release, *args, *flags, cwd=tmp_path, timeout=600)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: pbt.mutation.{REBUILT}: the running env does not read it again (the env is built with it), and "
        "pbt.exploit_mode is inprocess (no restart)"
    ]
