"""A task no one here wrote: the real CPU member trains gymnasium's MuJoCo HalfCheetah-v5 with the packaged yaml
adapted from rl_games' own tuned config, through the real command line, and publishes a record with evidence.

MuJoCo comes with the [test] extra (``pip install 'async-pbt-isaaclab[mujoco]'``). The run is shortened on the
command line only (few envs, short episodes, small batches); everything else is the packaged yaml.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rl_games
from yaml_values import changed_settings, flat_settings

from async_pbt_isaaclab.core.agent_config import load_yaml
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.core.workspace.state_files import read_record
from async_pbt_isaaclab.examples.agents import PACKAGED_AGENTS, packaged_agent_yaml

pytestmark = pytest.mark.slow

MEMBER = [sys.executable, "-m", "async_pbt.examples.cpu_member"]


def test_member_trains_halfcheetah_through_the_cli_and_publishes_a_record(tmp_path: Path):
    ws = tmp_path / "ws"
    cmd = [
        *MEMBER,
        "--task",
        "HalfCheetah-v5",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--max_iterations",
        "4",
        "--num_envs",
        "4",
        "--pbt-interval-steps",
        "256",
        "--pbt-start-grace-frames",
        "0",
        "--pbt-min-episodes",
        "4",
        # 50-step episodes (a gymnasium.make keyword, passed through env_config), so episodes end within the run.
        "agent.params.config.env_config.max_episode_steps=50",
        "agent.params.config.horizon_length=64",
        "agent.params.config.minibatch_size=128",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = read_record(Workspace(ws).member_dir(0) / "record.json")
    assert record.frame == 4 * 4 * 64
    assert record.condition.task == "HalfCheetah-v5"
    # 4 envs x 256 steps in 50-step episodes: 20 finished episodes, all evidence of generation 0.
    assert record.evidence.count >= 4
    assert record.checkpoint and (ws / record.checkpoint).is_file()


def test_task_without_a_packaged_yaml_is_refused_with_the_packaged_list(tmp_path: Path):
    proc = subprocess.run(
        [*MEMBER, "--task", "Ant-v5", "--max_iterations", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2
    assert "no packaged agent yaml for task 'Ant-v5'" in proc.stderr
    assert "HalfCheetah-v5" in proc.stderr and "--agent" in proc.stderr


RL_GAMES_MUJOCO = Path(rl_games.__file__).parent / "configs" / "mujoco"
"""rl_games' own tuned MuJoCo configs, as the installed rl_games ships them."""
UPSTREAM_YAML = {"HalfCheetah-v5": "halfcheetah.yaml", "Hopper-v5": "hopper.yaml", "Walker2d-v5": "walker2d.yaml"}
"""The rl_games config each packaged MuJoCo yaml is adapted from (its header names it)."""


CPU_MEMBER_KEYS = (
    "device",
    "device_name",
    "torch_compile",
    "multi_gpu",
    "mixed_precision",
    "ppo",
    "score_to_win",
    "save_best_after",
    "save_frequency",
    "print_stats",
    "train_dir",
)
"""rl_games settings our yamls add (a CPU member, the packaged Pendulum yaml's run settings); upstream has none."""


@pytest.mark.parametrize("task", sorted(set(PACKAGED_AGENTS) - {"Pendulum-v1"}))
def test_packaged_mujoco_yamls_keep_rl_games_tuned_values_and_run_on_cpu(task: str):
    cfg = load_yaml(packaged_agent_yaml(task))
    config = cfg["params"]["config"]
    assert config["env_name"] == task
    assert (config["device"], config["torch_compile"], cfg["params"]["torch_threads"]) == ("cpu", False, 1)
    # rl_games' tuned values, read from the yaml the installed rl_games ships: every key of it is ours unchanged,
    # except what the packaged yaml's header lists as adapted for a CPU member.
    upstream = load_yaml(RL_GAMES_MUJOCO / UPSTREAM_YAML[task])["params"]
    adapted = {"torch_threads", "config.name", "config.env_name", "config.max_epochs", "config.player.render"}
    adapted |= {k for k in flat_settings(upstream) if k.startswith("config.env_config.")} | {"config.player.games_num"}
    ours_only = {f"config.{k}" for k in CPU_MEMBER_KEYS}
    assert changed_settings(cfg["params"], upstream) <= adapted | ours_only
    assert "pbt" in cfg
    frames = config["max_epochs"] * config["num_actors"] * config["horizon_length"]
    assert 1_000_000 <= frames < 1_020_000


def test_member_without_mujoco_is_refused_with_one_line_naming_the_extra(tmp_path: Path):
    """Where mujoco cannot be imported, ``--task HalfCheetah-v5`` stops before training with one line, exit code 2."""
    code = textwrap.dedent(
        """
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "mujoco":
                    raise ModuleNotFoundError("No module named 'mujoco'", name="mujoco")
                return None

        sys.meta_path.insert(0, Block())
        from async_pbt_isaaclab.examples.cpu_member import main
        sys.exit(main(["--task", "HalfCheetah-v5", "--max_iterations", "1"]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: task HalfCheetah-v5 needs the Python package 'mujoco', which is not installed "
        "(pip install 'async-pbt-isaaclab[mujoco]')"
    )
    assert not (tmp_path / "runs").exists()


def test_evaluate_picks_the_tasks_packaged_yaml():
    from async_pbt_isaaclab.commands.evaluate import Evaluator

    evaluator = Evaluator("Hopper-v5")
    assert evaluator.agent_yaml == packaged_agent_yaml("Hopper-v5")
    obs_space, action_space = evaluator._spaces
    assert obs_space.shape == (11,) and action_space.shape == (3,)
