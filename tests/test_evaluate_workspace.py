"""``async-pbt evaluate`` on the checkpoint of a real member that trained a task other than the default, with a
network other than its yaml's: the workspace says which task and which network (no ``--task``, no
``--agent-yaml``); a checkpoint that does not fit the task asked for is one line naming both; evaluating a
checkpoint again is one result in the report."""

from __future__ import annotations

import subprocess
import sys

import pytest

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.commands.evaluate import DEFAULT_AGENT_YAML

pytestmark = pytest.mark.slow  # a real member process, and episodes of 999 steps

TASK = "MountainCarContinuous-v0"
"""A gymnasium task without a packaged yaml: 2 observations, where Pendulum (the default) has 3."""


@pytest.fixture(scope="module")
def member_checkpoint(tmp_path_factory):
    """(workspace, checkpoint) of member 0 after one epoch of real PPO on TASK, with a network of 32x32 units."""
    ws = tmp_path_factory.mktemp("evaluate_ws") / "ws"
    from async_pbt_isaaclab.launch.arguments import member_command

    member = [sys.executable, "-m", "async_pbt.examples.cpu_member", "--task", TASK, "--agent", str(DEFAULT_AGENT_YAML)]
    member += ["--max_iterations", "1", "agent.params.network.mlp.units=[32,32]", "agent.params.torch_threads=1"]
    proc = subprocess.run(
        member_command(member, str(ws), 2, 0),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (checkpoint,) = sorted((ws / "members" / "000" / "checkpoints").glob("*.pth"))
    return ws, checkpoint


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["evaluate", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_members_checkpoint_is_played_on_its_workspaces_task_with_its_members_network(member_checkpoint, capsys):
    ws, checkpoint = member_checkpoint
    code, out, err = run_cli(capsys, checkpoint, "--episodes", "1", "--no-record")
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"held-out return on {TASK}, deterministic policy")
    # The same as naming the member's own config: the yaml its member was built with, kept in its folder.
    agent = ws / "members" / "000" / "agent.yaml"
    code, named, err = run_cli(capsys, checkpoint, "--episodes", "1", "--no-record", "--agent-yaml", agent)
    assert code == 0, err
    assert named == out


def test_a_checkpoint_that_does_not_fit_the_task_is_one_line_naming_both(member_checkpoint, capsys):
    _, checkpoint = member_checkpoint
    code, out, err = run_cli(capsys, checkpoint, "--episodes", "1", "--no-record", "--task", "Pendulum-v1")
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"async-pbt evaluate: error: {checkpoint}: does not fit task 'Pendulum-v1'")
    assert "observations: 2 in the checkpoint, 3 in the task" in line and "state_dict" not in line


def test_a_checkpoint_evaluated_twice_is_one_result_of_the_report(member_checkpoint, capsys, tmp_path):
    import shutil

    from async_pbt_isaaclab.commands.population_history import population_history
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws = tmp_path / "ws"
    shutil.copytree(member_checkpoint[0], ws)
    (checkpoint,) = sorted((ws / "members" / "000" / "checkpoints").glob("*.pth"))
    for seed in ("7", "8"):
        assert run_cli(capsys, checkpoint, "--episodes", "1", "--seed", seed)[0] == 0
    assert len((ws / "evaluations.jsonl").read_text().splitlines()) == 2
    data = population_history(Workspace(ws), 0.0)
    (kept,) = data["evaluations"]
    assert kept["seed"] == 8  # the newest
    assert main(["report", str(ws), "--out", str(tmp_path / "r.html")]) == 0
    assert "(1 evaluation(s))" in (tmp_path / "r.html").read_text()
