"""``scripts/train_pbt_rsl_rl.py`` before the simulator starts: what it refuses, each in one line with exit code 2.

Training through it on the real Isaac Lab releases is ``tests/upstream/test_rsl_rl_isaaclab.py``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_pbt_rsl_rl.py"


def _script():
    spec = importlib.util.spec_from_file_location("train_pbt_rsl_rl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _no_simulator() -> IsaacLabHooks:
    """Hooks with only AppLauncher's ``--device`` flag; opening a session fails the test (nothing may get that far)."""

    def open_session(*_args):
        raise AssertionError("the simulator was started for a command line that must be refused")

    def add_launcher_args(parser, script="train"):
        parser.add_argument("--device", type=str, default=None)

    return IsaacLabHooks(add_launcher_args=add_launcher_args, open_session=open_session)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--task", "Isaac-Cartpole-v0"], "give --pbt-workspace and --pbt-members"),
        (["--pbt-workspace", "ws", "--pbt-members", "2"], "--task is required"),
        # A member of several ranks is --distributed on GPUs (docs/distributed.md); on the CPU it is refused.
        (["--task", "T", "--pbt-members", "2", "--distributed", "--device", "cpu"], "--distributed needs GPUs"),
    ],
)
def test_a_command_line_that_cannot_train_a_member_is_refused_before_the_simulator(argv, expected, capsys):
    assert _script().main(argv, hooks=_no_simulator()) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def test_without_isaac_lab_it_says_what_to_install_and_help_still_works(tmp_path):
    if importlib.util.find_spec("isaaclab") is not None:
        pytest.skip("Isaac Lab is importable here")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--task", "T", "--pbt-members", "2"], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2 and "Isaac Lab is needed" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "--pbt-workspace" in proc.stdout and "with rsl_rl" in proc.stdout
