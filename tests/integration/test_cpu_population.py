"""``python -m async_pbt.examples.cpu_population``: user errors, and Ctrl-C on a real population.

What a user depends on:
1. every bad argument or workspace is one line on stderr naming the value, exit code 2, no traceback, and
   nothing is written (not even the "new experiment" line);
2. Ctrl-C on a running population exits with the launcher's code (130), says "stopped", and says for each
   member how many frames since its last checkpoint are lost and where it resumes -- numbers that match
   what the member left on disk.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_frame

MODULE = "async_pbt.examples.cpu_population"


def _run(*args: str, cwd: Path, wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", MODULE, *args]
    if wrap:  # a shell command prefix: the last element ends the script that runs the example
        cmd = [*wrap[:-1], f"{wrap[-1]} {shlex.join(cmd)}"]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1200)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _assert_one_line_usage_error(proc: subprocess.CompletedProcess, *named: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for text in named:
        assert text in lines[0], (text, lines[0])


@pytest.mark.parametrize(
    "args, named",
    [
        (["--members", "0"], ["--members 0", "at least 2"]),
        (["--members", "1"], ["--members 1", "at least 2", "cpu_member"]),
        (["--members", "x"], ["--members", "'x'"]),
        (["--iterations", "0"], ["--iterations 0", "at least 1"]),
        (["--iterations", "-5"], ["--iterations -5"]),
        (["--rule", "foo"], ["--rule", "'foo'", "dexpbt"]),
        (["--progress-interval", "0"], ["--progress-interval 0"]),
        (["--members", "4", "--slices", "3"], ["--slices 3", "must divide --members 4"]),
        (["--members", "4", "--slices", "0"], ["--slices 0"]),
        (["--no-such-flag"], ["--no-such-flag"]),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path, args, named):
    before = _tree(tmp_path)
    proc = _run("--workspace", str(tmp_path / "ws"), *args, cwd=tmp_path)
    _assert_one_line_usage_error(proc, *named)
    assert _tree(tmp_path) == before


def test_a_workspace_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "taken").write_text("not a folder")
    before = _tree(tmp_path)
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "taken"), cwd=tmp_path), str(tmp_path / "taken"), "is a file"
    )
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "taken" / "ws"), cwd=tmp_path), str(tmp_path / "taken"), "is a file"
    )
    assert _tree(tmp_path) == before


def test_a_workspace_of_another_population_size_or_corrupt_is_refused(tmp_path):
    Workspace(tmp_path / "three").ensure(num_policies=3, objective="episode_return")
    before = _tree(tmp_path)
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "three"), "--members", "2", cwd=tmp_path),
        "created for 3 members",
        "--members 3",
    )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "population.json").write_text("{")
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "broken"), cwd=tmp_path), "population.json", "corrupt"
    )
    assert _tree(tmp_path) == sorted(before + ["broken", "broken/population.json"])


def test_a_workspace_of_another_task_or_objective_is_refused_before_anything_starts(tmp_path):
    """Another --task on a resume is refused like another --members: one line, exit 2, nothing written (it used to
    start both members, which refused, were given up and left a journal)."""
    Workspace(tmp_path / "ws").ensure(num_policies=2, objective="episode_return", task="Pendulum-v1")
    Workspace(tmp_path / "success").ensure(num_policies=2, objective="success", task="Pendulum-v1")
    before = _tree(tmp_path)
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "ws"), "--task", "Hopper-v5", cwd=tmp_path),
        "created for task 'Pendulum-v1', not --task Hopper-v5",
        "pass --task Pendulum-v1",
    )
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "success"), cwd=tmp_path), "objective 'success'", "'episode_return'"
    )
    assert _tree(tmp_path) == before


def test_a_task_without_a_packaged_yaml_says_that_agent_takes_any_gymnasium_task(tmp_path):
    _assert_one_line_usage_error(
        _run("--workspace", str(tmp_path / "ws"), "--task", "Humanoid-v5", cwd=tmp_path),
        "--task Humanoid-v5: no packaged agent yaml",
        "--agent YOUR.yaml",
    )
    assert list(tmp_path.iterdir()) == []
    text = " ".join(_run("--help", cwd=tmp_path).stdout.split())
    assert "on Pendulum-v1" not in text and "on a gymnasium task" in text and "--agent YAML" in text
    assert "(default runs/cpu-population)" in text and "Pendulum-v1, HalfCheetah-v5, Hopper-v5" in text


def test_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        proc = _run("--workspace", str(folder / "ws"), cwd=tmp_path)
        folder.chmod(0o755)
    else:
        # root writes through permission bits; a read-only bind mount in a private mount namespace is read-only
        # for root too.
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: cannot make a folder read-only for this user")
        probe = subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {folder} {folder}"], capture_output=True, text=True
        )
        if probe.returncode != 0:
            pytest.skip(f"running as root and cannot mount read-only here: {probe.stderr.strip()}")
        proc = _run(
            "--workspace",
            str(folder / "ws"),
            cwd=tmp_path,
            wrap=["unshare", "-m", "sh", "-c", f"mount --bind -o ro {folder} {folder} && exec"],
        )
    _assert_one_line_usage_error(proc, str(folder / "ws"))
    assert "read-only" in proc.stderr or "not writable" in proc.stderr
    assert list(folder.iterdir()) == []


# ------------------------------------------------------------------ Ctrl-C on a real population (slow)


def _progress_since_checkpoint(ws: Path, index: int) -> bool:
    """Member ``index`` has a checkpoint and has finished an epoch past it (so a stop now loses frames).

    Read from the epoch lines rl_games prints to the member's log (``epoch: N/M frames: F``), not from the
    record: the record's frame moves only at a publish or a heartbeat, and a fast machine finishes a whole
    interval between two heartbeats, so the record may never show a frame past the checkpoint.
    """
    try:
        state = json.loads((ws / "members" / f"{index:03d}" / "state.json").read_text())
        log = (ws / "logs" / f"member_{index:03d}.log").read_text()
    except (FileNotFoundError, ValueError):
        return False
    checkpoint = checkpoint_frame(state.get("last_checkpoint") or "")
    epochs = re.findall(r"epoch: \d+/\d+ frames: (\d+)", log)
    return checkpoint is not None and bool(epochs) and int(epochs[-1]) > checkpoint


@pytest.mark.slow
def test_ctrl_c_exits_130_and_says_what_is_lost_and_where_each_member_resumes(tmp_path):
    ws = tmp_path / "ws"
    out = open(tmp_path / "out.log", "w")
    # Long enough that it is still training when stopped; one publish every 4 epochs (--smoke preset).
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            MODULE,
            "--members",
            "2",
            "--smoke",
            "--iterations",
            "2000",
            "--workspace",
            str(ws),
            "--progress-interval",
            "600",
        ],
        cwd=tmp_path,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        deadline = time.monotonic() + 1200
        while not _progress_since_checkpoint(ws, 0) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, (tmp_path / "out.log").read_text()[-3000:]
        assert _progress_since_checkpoint(ws, 0), "member 0 never published past a checkpoint"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    text = (tmp_path / "out.log").read_text()
    assert code == 130, text[-3000:]
    assert "stopped by SIGINT" in text and "done after" not in text
    assert "run the same command again" in text
    for index in (0, 1):
        member_dir = ws / "members" / f"{index:03d}"
        record = json.loads((member_dir / "record.json").read_text())
        state = json.loads((member_dir / "state.json").read_text())
        if state["last_checkpoint"]:
            resume = checkpoint_frame(state["last_checkpoint"])
            expected = (
                f"member {index:03d} stopped at frame {record['frame']:,}; "
                f"{record['frame'] - resume:,} frames since its last checkpoint are lost: its next start "
                f"resumes from frame {resume:,} ({state['last_checkpoint']})"
            )
        else:
            expected = f"member {index:03d} stopped at frame {record['frame']:,} with no checkpoint yet"
        assert expected in text, (expected, text[-3000:])
        if index == 0:
            # Member 0 was stopped inside its training loop (we waited for it there): it says the same in its
            # own log, which is what a user running one member by hand sees. (Member 1 may have been stopped
            # while it was exec-restarting, before it is a member again; the launcher's line covers it.)
            log = (ws / "logs" / f"member_{index:03d}.log").read_text()
            assert f"[async-pbt] {expected}" in log, log[-3000:]
    lost = re.search(r"member 000 stopped at frame [\d,]+; ([\d,]+) frames", text)
    assert lost and int(lost.group(1).replace(",", "")) > 0


def test_what_the_yaml_sets_is_kept_and_the_demo_fills_in_the_rest(tmp_path):
    """Without ``--rule`` the demo passes no rule: a user's yaml that names one keeps it, and one that does not gets
    the package's default (decided in ``PopulationConfig`` alone); ``--rule`` wins over both. The demo's interval,
    windows and searched values fill in only what the yaml's pbt: section leaves unset."""
    import yaml

    from async_pbt_isaaclab.core.config import PopulationConfig, with_task_start_grace
    from async_pbt_isaaclab.examples import cpu_population, demo_presets
    from async_pbt_isaaclab.examples.agents import PACKAGED_AGENTS

    agent = yaml.safe_load(PACKAGED_AGENTS["Pendulum-v1"].read_text())
    own_lr = {"kind": "log_float", "low": 1.0e-4, "high": 1.0e-2}
    agent["pbt"] = {"rule": "welch", "interval_steps": 4096, "min_episodes": 80, "mutation": {"learning_rate": own_lr}}
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(agent))

    def config(*argv: str) -> PopulationConfig:
        args = cpu_population.build_parser().parse_args([*argv, "--smoke", "--workspace", str(tmp_path / "ws")])
        assert ("--pbt-rule" in cpu_population.member_command(args, tmp_path / "ws")) == ("--rule" in argv)
        return cpu_population.check_member_config(args, tmp_path / "ws")[1]

    cfg = config("--agent", str(mine))
    assert cfg.rule == "welch" and cfg.interval_steps == 4096 and cfg.min_episodes == 80 and cfg.window == 80
    lr = cfg.mutation["learning_rate"]
    assert (lr.kind, lr.low, lr.high) == ("log_float", 1.0e-4, 1.0e-2)  # not the demo's mutate_float
    assert {"entropy_coef", "gamma", "e_clip"} <= set(cfg.mutation)  # the demo's, beside the yaml's own
    assert config("--agent", str(mine), "--rule", "isaaclab").rule == "isaaclab"
    plain = config()
    assert plain.rule == PopulationConfig().rule and plain.interval_steps == demo_presets.SMOKE["interval"]
    assert plain.window == 64 and config("--rule", "welch").rule == "welch"
    # The learning run leaves the start grace to the member's task: on Hopper (64 envs, 1,000-step episodes, a window
    # of 64) no decision before 128,000 frames, where the demo's own 65,536 let every episode of the first window
    # begin at frame 0.
    assert config("--task", "Hopper-v5").start_grace_frames == demo_presets.SMOKE["start_grace"]  # a smoke's own
    args = cpu_population.build_parser().parse_args(["--task", "Hopper-v5", "--workspace", str(tmp_path / "ws")])
    assert "--pbt-start-grace-frames" not in cpu_population.member_command(args, tmp_path / "ws")
    agent, learning = cpu_population.check_member_config(args, tmp_path / "ws")
    assert agent["params"]["config"]["num_actors"] == 64 and learning.window == 64
    assert with_task_start_grace(learning, 64, 1000).start_grace_frames == 128_000
    assert not (tmp_path / "ws").exists()
