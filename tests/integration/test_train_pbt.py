"""``scripts/train_pbt.py`` and ``scripts/play_pbt.py`` where no Isaac Lab is installed: ``--help``, the install hint,
and the checkpoint choice of ``play_pbt``.

Training and playing through the real Isaac Lab releases (2.3.2 and 3.0.0, each with its users' rl-games line), a
population with an exploit restart included, is in tests/upstream/.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASK = "AsyncPbt-Cartpole-Direct"


def load_script(name: str):
    """Import ``scripts/<name>.py`` as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_async_pbt_script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script executes
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ command line (fast)


@pytest.mark.parametrize("script", ["train_pbt.py", "play_pbt.py"])
def test_help_works_without_isaaclab(script):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--task" in proc.stdout and "AppLauncher" in proc.stdout
    if script == "train_pbt.py":
        for flag in (
            "--pbt-workspace",
            "--pbt-members",
            "--pbt-index",
            "--checkpoint",
            "--max_iterations",
            "--num_envs",
            "--seed",
            "--distributed",
            "--track",
            "--video",
            "--export_io_descriptors",
            "--ray-proc-id",
        ):
            assert flag in proc.stdout, flag
    else:
        for flag in ("--pbt-workspace", "--member", "--best", "--checkpoint"):
            assert flag in proc.stdout, flag


def test_training_without_isaaclab_explains_how_to_install():
    try:
        import isaaclab  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Isaac Lab is installed")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train_pbt.py"), "--task", TASK],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "pip install -e /path/to/async-pbt-isaaclab" in proc.stderr and "supported:" in proc.stderr


def test_play_refuses_ambiguous_choices_and_damaged_files(tmp_path):
    play = load_script("play_pbt")
    ns = argparse.Namespace(checkpoint=None, member=None, best=False, pbt_workspace=None)
    with pytest.raises(play.PlayError, match="exactly one"):
        play.select_checkpoint(ns)
    ns.member = 0
    with pytest.raises(play.PlayError, match="--pbt-workspace"):
        play.select_checkpoint(ns)
    ns.pbt_workspace = str(tmp_path / "nothing")
    with pytest.raises(play.PlayError, match=r"population\.json"):
        play.select_checkpoint(ns)
    bad = tmp_path / "x.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(play.PlayError, match="differs from the published"):
        play.load_verified(bad, "0" * 64, trusted=False)
    with pytest.raises(play.PlayError):
        play.load_verified(bad, None, trusted=False)


def test_play_sets_the_members_env_values_keeps_a_typed_one_and_names_one_the_task_lacks():
    """What ``play_pbt`` does to the env config before the env is built (the built env, read back, is checked on the
    real releases in tests/upstream/test_env_values_isaaclab.py)."""
    play = load_script("play_pbt")
    cfg = argparse.Namespace(success_radius=0.1, reward_weights={"progress": 1.0}, episode_length_s=5.0)
    meta = {"hyperparameters": {"env.success_radius": 0.3, "env.reward_weights.progress": 2.5, "gamma": 0.97}}
    values, typed = play.set_env_values(cfg, meta, ["env.success_radius=0.2"], Path("m.pth"))
    assert values == {"env.reward_weights.progress": 2.5} and typed == ["env.success_radius"]
    assert cfg.reward_weights == {"progress": 2.5} and cfg.success_radius == 0.1  # Hydra sets the typed one
    meta["hyperparameters"]["env.friction"] = 0.8
    with pytest.raises(play.PlayError, match=r"m\.pth: .*env\.friction: .* has no 'friction'"):
        play.set_env_values(cfg, meta, [], Path("m.pth"))
