"""``async-pbt evaluate`` on real checkpoints: a Pendulum-v1 PPO agent trained for two epochs here.

Two checkpoints of the same agent: one written by our ``save_checkpoint`` with PBT metadata (what a member
publishes) and one written by plain rl_games (``agent.save``), which the command must read just as well.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.commands.evaluate import DEFAULT_AGENT_YAML, DEFAULT_EVAL_SEED
from async_pbt_isaaclab.core.agent_config import load_yaml


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(ours with PBT metadata, plain rl_games) checkpoints of one agent after two epochs of real PPO."""
    from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint, with_pbt_metadata
    from async_pbt_isaaclab.testing.tiny_agent import train_agent

    tmp = tmp_path_factory.mktemp("evaluate")
    cfg = load_yaml(DEFAULT_AGENT_YAML)
    cfg["params"]["config"].update(
        max_epochs=2, train_dir=str(tmp / "runs"), full_experiment_name="eval", save_best_after=1000
    )
    agent = train_agent(cfg)
    ours = tmp / "member.pth"
    save_checkpoint(
        ours,
        with_pbt_metadata(agent.get_full_state_weights(), {"member": 3, "generation": 2, "frame": int(agent.frame)}),
    )
    agent.save(str(tmp / "plain"))  # rl_games appends .pth
    plain = tmp / "plain.pth"
    assert plain.is_file()
    return ours, plain


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["evaluate", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_figures_match_the_episodes(checkpoints, capsys):
    ours, _ = checkpoints
    code, out, err = run_cli(capsys, ours, "--episodes", "3", "--seed", "123", "--json")
    assert code == 0, err
    (result,) = json.loads(out)  # stdout holds only the JSON: rl_games' chatter went to stderr
    assert result["checkpoint"] == str(ours) and result["task"] == "Pendulum-v1" and result["seed"] == 123
    assert result["episodes"] == 3 and len(result["returns"]) == 3
    assert result["lengths"] == [200, 200, 200]  # Pendulum-v1 ends by its 200-step time limit
    returns = result["returns"]
    assert result["mean"] == pytest.approx(statistics.fmean(returns))
    assert result["std"] == pytest.approx(statistics.pstdev(returns))
    assert result["min"] == min(returns) and result["max"] == max(returns)
    # Pendulum rewards lie in [-16.27, 0] per step.
    assert all(-16.3 * 200 <= r <= 0 for r in returns)
    assert result["pbt"] == {"member": 3, "generation": 2, "frame": 4096}


def test_episode_i_is_seed_s_plus_i_and_the_policy_is_deterministic(checkpoints, capsys):
    ours, _ = checkpoints
    _, out, _ = run_cli(capsys, ours, "--episodes", "3", "--seed", "500", "--json")
    three = json.loads(out)[0]["returns"]
    _, out, _ = run_cli(capsys, ours, "--episodes", "1", "--seed", "502", "--json")
    (third,) = json.loads(out)[0]["returns"]
    # Same seed, same initial state, mean action: the same episode (up to float rounding of a 1-row vs a
    # 3-row batch through the network).
    assert third == pytest.approx(three[2], rel=1e-6)
    _, out, _ = run_cli(capsys, ours, "--episodes", "3", "--seed", "500", "--json")
    assert json.loads(out)[0]["returns"] == three
    assert len(set(three)) == 3  # different seeds start from different states


def test_default_seed_is_held_out_from_training_seeds(checkpoints, capsys):
    ours, _ = checkpoints
    _, out, _ = run_cli(capsys, ours, "--episodes", "2", "--json")
    assert json.loads(out)[0]["seed"] == DEFAULT_EVAL_SEED
    # Members seed their envs from params.seed (42 in the yaml) plus member index and env index.
    assert DEFAULT_EVAL_SEED > 10_000 + int(load_yaml(DEFAULT_AGENT_YAML)["params"]["seed"])


def test_plain_rl_games_checkpoint_and_several_at_once(checkpoints, capsys):
    ours, plain = checkpoints
    code, out, err = run_cli(capsys, ours, plain, "--episodes", "2", "--seed", "9", "--json")
    assert code == 0, err
    a, b = json.loads(out)
    assert b["pbt"] == {}
    # Same weights (saved from the same agent), same seeds: the same returns.
    assert a["returns"] == b["returns"]


def test_text_output(checkpoints, capsys):
    _, plain = checkpoints
    code, out, _ = run_cli(capsys, plain, "--episodes", "2", "--seed", "9", "--task", "Pendulum-v1")
    assert code == 0
    assert "held-out return on Pendulum-v1, deterministic policy, env seeds 9..10" in out
    row = [line for line in out.splitlines() if str(plain) in line][0].split()
    assert row[1] == "2" and math.isfinite(float(row[2]))


def test_an_explicit_agent_yaml(checkpoints, capsys, tmp_path):
    ours, _ = checkpoints
    yaml_path = tmp_path / "agent.yaml"
    yaml_path.write_text(DEFAULT_AGENT_YAML.read_text())
    code, out, _ = run_cli(capsys, ours, "--agent-yaml", yaml_path, "--episodes", "1", "--seed", "502", "--json")
    assert code == 0
    _, ref, _ = run_cli(capsys, ours, "--episodes", "1", "--seed", "502", "--json")
    assert json.loads(out)[0]["returns"] == json.loads(ref)[0]["returns"]


@pytest.mark.parametrize(
    "make_args, expected",
    [
        (lambda d, c: [d / "missing.pth"], "missing.pth does not exist"),
        (lambda d, c: [d], "is not a file"),
        (lambda d, c: [c, "--task", "MountainCarContinuous-v0"], "does not fit task 'MountainCarContinuous-v0'"),
        (lambda d, c: [c, "--task", "NoSuchTask-v9"], "'NoSuchTask-v9': not a registered gymnasium env"),
        (lambda d, c: [c, "--agent-yaml", d / "nope.yaml"], "nope.yaml"),
        (lambda d, c: [c, "--episodes", "0"], "--episodes must be >= 1"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(checkpoints, capsys, tmp_path, make_args, expected):
    ours, _ = checkpoints
    code, _, err = run_cli(capsys, *make_args(tmp_path, ours))
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("async-pbt evaluate: error:")]
    assert len(lines) == 1 and expected in lines[0], err


def test_bad_yaml_and_non_checkpoint_files(checkpoints, capsys, tmp_path):
    ours, _ = checkpoints
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("params: [unclosed\n")
    code, _, err = run_cli(capsys, ours, "--agent-yaml", bad_yaml)
    assert code == 2 and "bad.yaml" in err and "not valid YAML" in err
    not_agent = tmp_path / "not_agent.yaml"
    not_agent.write_text("foo: 1\n")
    code, _, err = run_cli(capsys, ours, "--agent-yaml", not_agent)
    assert code == 2 and "not an rl_games agent config" in err
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint at all")
    code, _, err = run_cli(capsys, junk)
    assert code == 2 and "junk.pth" in err and "not a torch checkpoint" in err


@pytest.fixture
def member_checkpoint(checkpoints, tmp_path):
    """Our checkpoint (member 3, generation 2) placed where a population's member 3 publishes it."""
    import shutil

    ours, _ = checkpoints
    ws = tmp_path / "ws"
    folder = ws / "members" / "003" / "checkpoints"
    folder.mkdir(parents=True)
    (ws / "population.json").write_text(json.dumps({"num_policies": 4, "objective": "episode_return"}))
    path = folder / "g0002_f000000004096.pth"
    shutil.copyfile(ours, path)
    return ws, path


def test_a_members_checkpoint_is_recorded_for_the_report_and_only_the_table_is_printed(member_checkpoint, capsys):
    from async_pbt_isaaclab.commands.population_history import read_evaluations
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws, path = member_checkpoint
    code, out, err = run_cli(capsys, path, "--episodes", "2", "--seed", "5")
    assert code == 0, err
    # Only the command's own output: no rl_games lines (self.seed = 42, build mlp, RunningMeanStd) anywhere.
    assert err == ""
    assert out.splitlines()[0].startswith("held-out return on Pendulum-v1")
    assert (
        out.splitlines()[-1]
        == f"recorded 1 result in {ws / 'evaluations.jsonl'} (async-pbt report shows them; --no-record: not)"
    )
    (line,) = (ws / "evaluations.jsonl").read_text().splitlines()
    entry = json.loads(line)
    row = [r for r in out.splitlines() if str(path) in r][0].split()
    assert entry["objective"] == pytest.approx(float(row[2]), abs=0.01)
    assert (entry["member"], entry["generation"], entry["episodes"], entry["seed"]) == (3, 2, 2, 5)
    assert entry["checkpoint"] == "members/003/checkpoints/g0002_f000000004096.pth" and "frame" in entry
    evaluations, problems = read_evaluations(Workspace(ws))  # what the report reads
    assert problems == [] and evaluations == [entry]
    # --no-record: nothing more is written.
    assert run_cli(capsys, path, "--episodes", "1", "--no-record")[0] == 0
    assert len((ws / "evaluations.jsonl").read_text().splitlines()) == 1


def test_verbose_shows_rl_games_lines_on_stderr(member_checkpoint, capsys):
    _, path = member_checkpoint
    code, _, err = run_cli(capsys, path, "--episodes", "1", "--no-record", "--verbose")
    assert code == 0 and "RunningMeanStd" in err


def test_record_refuses_what_it_cannot_record(checkpoints, member_checkpoint, capsys, tmp_path):
    ours, _ = checkpoints
    code, out, err = run_cli(capsys, ours, "--episodes", "1", "--record")
    assert code == 2 and "--workspace WS" in err and str(ours) in err and out == ""
    ws, path = member_checkpoint
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("")
    (ws / "evaluations.jsonl").symlink_to(elsewhere)  # a planted link is never followed
    code, _, err = run_cli(capsys, path, "--episodes", "1")
    assert code == 2 and "evaluations.jsonl" in err and elsewhere.read_text() == ""
    # An explicit workspace takes a checkpoint from anywhere.
    (ws / "evaluations.jsonl").unlink()
    code, _, err = run_cli(capsys, ours, "--episodes", "1", "--record", "--workspace", ws, "--label", "final")
    assert code == 0, err
    entry = json.loads((ws / "evaluations.jsonl").read_text())
    assert entry["label"] == "final" and entry["checkpoint"] == str(ours.resolve()) and entry["member"] == 3
