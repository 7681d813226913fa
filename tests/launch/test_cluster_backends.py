"""The SLURM batch script and the backends' command line, without a cluster.

The generated script is executed with bash as SLURM would run one array task (``SLURM_ARRAY_TASK_ID`` set), with
a member command that records its argv: the task id must become ``--pbt-index`` through the per-member
supervisor. Submitting, requeueing and cancelling on a real SLURM are in ``tests/cluster``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.launch.slurm import array_spec


@pytest.mark.parametrize(
    "indices, spec", [([0], "0"), ([0, 1, 2, 3], "0-3"), ([5, 0, 2, 1, 7, 6], "0-2,5-7"), ([1, 3, 5], "1,3,5")]
)
def test_array_spec(indices, spec):
    assert array_spec(indices) == spec


def _dry_run(capsys, *extra: str, command=("python", "train.py", "--task", "Isaac Ant")) -> tuple[int, str, str]:
    code = main(["launch", "--backend", "slurm", "--dry-run", "--members", "4", *extra, "--", *command])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_dry_run_prints_the_batch_script(tmp_path, capsys):
    ws = tmp_path / "ws"
    code, script, _ = _dry_run(
        capsys,
        "--workspace",
        str(ws),
        "--partition",
        "gpu",
        "--gres",
        "gpu:1",
        "--time",
        "2-00:00:00",
        "--sbatch-arg=--account=rl",
        "--sbatch-arg=--qos=high",
        "--setup",
        "module load cuda",
        "--indices",
        "0,2-3",
    )
    assert code == 0
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in (
        "#SBATCH --array=0,2-3",
        "#SBATCH --requeue",
        "#SBATCH --partition=gpu",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --time=2-00:00:00",
        "#SBATCH --account=rl",
        "#SBATCH --qos=high",
        f"#SBATCH --output={ws}/logs/slurm_%A_%a.out",
        "module load cuda",
    ):
        assert line in lines
    exec_line = lines[-1]
    assert exec_line.startswith(
        f"exec {sys.executable} -m async_pbt_isaaclab.launch --members 4 "
        f'--workspace {ws} --indices "$index" --gpus none'
    )
    assert exec_line.endswith("-- python train.py --task 'Isaac Ant'")
    assert not ws.exists(), "a dry run submits and creates nothing"
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_the_script_maps_the_array_task_id_to_the_member_index(tmp_path, capsys):
    ws = tmp_path / "ws"
    member = [sys.executable, "-c", "import json, sys; json.dump(sys.argv[1:], open('argv.json', 'w'))"]
    code, script, _ = _dry_run(capsys, "--workspace", str(ws), "--progress-interval", "60", command=member)
    assert code == 0
    path = tmp_path / "member.sbatch"
    path.write_text(script.replace(f"#SBATCH --chdir={os.getcwd()}", "#SBATCH --chdir=."))
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="2", SLURM_ARRAY_JOB_ID="77")
    task = subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert task.returncode == 0, task.stdout + task.stderr
    assert "member 2: job 77_2" in task.stdout
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[-6:] == ["--pbt-workspace", str(ws), "--pbt-members", "4", "--pbt-index", "2"]

    outside = subprocess.run(
        ["bash", str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
    )
    assert outside.returncode != 0 and "runs as a task of a SLURM job array" in outside.stderr


def test_slice_processes_are_one_array_task_each(tmp_path, capsys):
    """``--pbt-slices 2`` in the member command: tasks 0 and 2 (each process's first member), not one per member."""
    slices = ("python", "train.py", "--pbt-slices", "2")
    code, script, _ = _dry_run(capsys, "--workspace", str(tmp_path / "ws"), command=slices)
    assert code == 0 and "#SBATCH --array=0,2\n" in script
    code, _, err = _dry_run(capsys, "--workspace", str(tmp_path / "ws"), "--indices", "1,2", command=slices)
    assert code == 2 and "--indices 1 and 2: under --pbt-slices 2 the process started at 1 hosts members 1..2" in err


def test_bad_cluster_options_are_usage_errors(tmp_path, capsys):
    code, _, err = _dry_run(capsys, "--workspace", str(tmp_path), "--sbatch-arg=--qos=a\n--account=b")
    assert code == 2 and "contains a newline" in err
    code, _, err = _dry_run(capsys, "--workspace", str(tmp_path), "--indices", "4")
    assert code == 2 and "within 0..3" in err
    code, _, err = _dry_run(capsys, "--workspace", str(tmp_path), command=("python", "t.py", "--pbt-index", "1"))
    assert code == 2 and "--pbt-index" in err
    code = main(
        [
            "launch",
            "--backend",
            "ray",
            "--members",
            "2",
            "--workspace",
            str(tmp_path / "w"),
            "--gpus-per-member",
            "-1",
            "--",
            "python",
            "t.py",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--gpus-per-member -1: must be >= 0" in err
    assert not (tmp_path / "w").exists(), "refused before anything was written"


@pytest.mark.parametrize(
    ("backend", "option", "owner"),
    [
        ("local", ["--dry-run"], "slurm"),
        ("ray", ["--dry-run"], "slurm"),
        ("local", ["--partition", "gpu"], "slurm"),
        ("ray", ["--sbatch-arg=--account=rl"], "slurm"),
        ("local", ["--address", "auto"], "ray"),
        ("slurm", ["--cpus-per-member", "2"], "ray"),
    ],
)
def test_an_option_of_another_backend_is_refused_before_anything_starts(tmp_path, capsys, backend, option, owner):
    """`--dry-run` on a local launch used to start the members for real: every backend option is checked."""
    ws = tmp_path / "ws"
    code = main(["launch", "--backend", backend, "--members", "2", "--workspace", str(ws), *option, "--", "true"])
    err = capsys.readouterr().err.strip()
    flag = option[0].split("=")[0]
    assert code == 2
    expected = f"{flag} applies only to --backend {owner} (this launch: --backend {backend})"
    assert err == f"async-pbt launch: error: {expected}"
    assert not ws.exists()


def test_ray_refuses_a_gpu_request_its_own_instance_cannot_meet(capsys):
    """A local Ray instance without GPUs would keep the members waiting for ever; a joined cluster may grow."""
    from async_pbt_isaaclab.launch.arguments import LaunchError
    from async_pbt_isaaclab.launch.ray_backend import check_gpus

    check_gpus(1.0, 0.5, None)  # fits
    with pytest.raises(LaunchError, match=r"--gpus-per-member 0\.5: the Ray cluster \(local\) has 0 GPUs"):
        check_gpus(0.0, 0.5, None)
    check_gpus(0.0, 1.0, "auto")  # warned, not refused
    assert "members wait until it has enough" in capsys.readouterr().err


def test_slurm_backend_without_sbatch_says_what_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no SLURM client tools on PATH
    code = main(
        ["launch", "--backend", "slurm", "--members", "2", "--workspace", str(tmp_path / "ws"), "--", "python", "t.py"]
    )
    assert code == 2 and "sbatch not found on PATH" in capsys.readouterr().err
