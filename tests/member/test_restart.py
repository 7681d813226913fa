"""The restart command line: every flag kept in order, only checkpoint and mutated values replaced, exec in place."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.agent_config import parse_override, yaml_load
from async_pbt_isaaclab.core.decision.mutation import isaaclab_key
from async_pbt_isaaclab.member.restart import exec_command, format_override_value, restart_argv

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

REPO = Path(__file__).resolve().parents[2]
LR = "agent.params.config.learning_rate"
GAMMA = "agent.params.config.gamma"

TYPED = [
    sys.executable,
    "-u",
    "scripts/train_pbt.py",
    "--task",
    "Isaac-Repose-Cube-Allegro-Direct-v0",
    "--headless",
    "--num_envs",
    "8192",
    "--device",
    "cuda:1",
    "--seed",
    "17",
    "--max_iterations",
    "5000",
    "--pbt-workspace",
    "/shared/pbt",
    "--pbt-members",
    "8",
    "--pbt-index",
    "3",
    "agent.params.config.minibatch_size=16384",
    "env.scene.num_envs=8192",
]


def test_keeps_every_flag_in_order_and_appends_checkpoint_and_overrides():
    out = restart_argv(TYPED, "/shared/pbt/members/003/checkpoints/g0001.pth", {LR: 3e-4, GAMMA: 0.995})
    assert out[: len(TYPED)] == TYPED  # interpreter, its flags, script, every flag and override as typed
    assert out[len(TYPED) :] == [
        "--checkpoint=/shared/pbt/members/003/checkpoints/g0001.pth",
        f"{GAMMA}=0.995",
        f"{LR}=0.0003",
    ]


def test_overrides_come_from_isaaclab_keys_of_short_names():
    # The observer passes {isaaclab_key(k): v}; network keys live under params.network.
    overrides = {isaaclab_key("learning_rate"): 1e-3, isaaclab_key("network.log_std_bounds.low"): -3.0}
    out = restart_argv(["python", "train.py"], "c.pth", overrides)
    assert out == [
        "python",
        "train.py",
        "--checkpoint=c.pth",
        "agent.params.config.learning_rate=0.001",
        "agent.params.network.log_std_bounds.low=-3.0",
    ]


@pytest.mark.parametrize("form", [["--checkpoint", "old.pth"], ["--checkpoint=old.pth"]])
def test_replaces_checkpoint_flag_in_both_forms(form):
    argv = ["python", "train.py", "--task", "T", *form, "--headless"]
    out = restart_argv(argv, "/ws/new.pth", {})
    assert out == ["python", "train.py", "--task", "T", "--headless", "--checkpoint=/ws/new.pth"]
    assert "old.pth" not in " ".join(out)


def test_replaces_every_earlier_checkpoint_including_one_from_a_previous_restart():
    argv = ["python", "train.py", "--checkpoint", "user.pth", "--seed", "1", "--checkpoint=/ws/g1.pth"]
    out = restart_argv(argv, "/ws/g2.pth", {})
    assert out == ["python", "train.py", "--seed", "1", "--checkpoint=/ws/g2.pth"]
    assert sum(a.startswith("--checkpoint") for a in out) == 1


@pytest.mark.parametrize(
    "typed",
    [
        "agent.params.config.learning_rate=1e-3",
        "params.config.learning_rate=1e-3",
        "+agent.params.config.learning_rate=1e-3",
        "++agent.params.config.learning_rate=1e-3",
    ],
)
def test_replaces_an_earlier_override_of_a_mutated_key(typed):
    argv = ["python", "train.py", "--seed", "3", typed, "agent.params.config.entropy_coef=0.01"]
    out = restart_argv(argv, "c.pth", {LR: 2.5e-4})
    assert typed not in out
    # Hydra's "+" (add a key the yaml lacks) is kept, or real Hydra refuses the key as not in struct.
    plus = typed[: len(typed) - len(typed.lstrip("+"))]
    assert [a for a in out if "learning_rate" in a] == [f"{plus}{LR}=0.00025"]
    # An override of a key that was not mutated survives, in place.
    assert out[:4] == ["python", "train.py", "--seed", "3"]
    assert out[4] == "agent.params.config.entropy_coef=0.01"


def test_second_restart_replaces_the_first_restarts_overrides():
    first = restart_argv(["python", "train.py", "--seed", "3"], "/ws/g1.pth", {LR: 3e-4, GAMMA: 0.99})
    second = restart_argv(first, "/ws/g2.pth", {LR: 1.5e-4, GAMMA: 0.98})
    assert second == ["python", "train.py", "--seed", "3", "--checkpoint=/ws/g2.pth", f"{GAMMA}=0.98", f"{LR}=0.00015"]
    # The command line does not grow across restarts.
    third = restart_argv(second, "/ws/g3.pth", {LR: 1.5e-4, GAMMA: 0.98})
    assert len(third) == len(second)


def test_flags_that_look_like_overrides_are_not_removed():
    argv = ["python", "train.py", "--pbt-workspace=/a=b", "--learning_rate=5", "learning_rate_note"]
    out = restart_argv(argv, "c.pth", {LR: 1e-4})
    assert out[: len(argv)] == argv


FLOATS = [
    3e-4,
    1e-3,
    0.1 + 0.2,
    2.0 / 3.0,
    0.9987654321012345,
    1 - 1e-9,
    5e-324,
    1.7976931348623157e308,
    1e16,
    123456789.123456789,
    -3.0,
    0.0,
    2.5e-05,
    1e-10,
]


@pytest.mark.parametrize("value", FLOATS + [8, 0, -2, 2**40, True, False, "adaptive", "elu"])
def test_values_round_trip_exactly_through_yaml(value):
    text = format_override_value(value)
    out = restart_argv(["python", "train.py"], "c.pth", {LR: value})
    override = out[-1]
    assert override == f"{LR}={text}"
    path, parsed = parse_override(override)  # what the restarted member's override parser reads
    assert path == ["params", "config", "learning_rate"]
    assert parsed == value and type(parsed) is type(value)
    assert yaml_load(text) == value


@pytest.mark.parametrize("value", FLOATS)
def test_floats_use_repr(value):
    assert format_override_value(value) == repr(value)
    assert float(format_override_value(value)) == value


def test_exec_command_without_prefix_is_this_interpreter():
    argv = ["/some/other/python", "-u", "train.py", "--seed", "1"]
    program, args = exec_command(argv)
    assert program == sys.executable
    assert args == [sys.executable, "-u", "train.py", "--seed", "1"]


def test_exec_command_with_launcher_prefix():
    env = shutil.which("env")
    assert env is not None
    argv = [sys.executable, "train.py", "--seed", "1", "--checkpoint=c.pth"]
    program, args = exec_command(argv, ["env", "--", "torchrun", "--nproc_per_node=1"])
    assert program == env  # resolved on PATH for os.execv
    assert args == ["env", "--", "torchrun", "--nproc_per_node=1", "train.py", "--seed", "1", "--checkpoint=c.pth"]
    # A launcher not on PATH is used as given (os.execv then reports it).
    program, args = exec_command(argv, ["/opt/launch/run_member"])
    assert program == "/opt/launch/run_member" and args[0] == "/opt/launch/run_member"


# ------------------------------------------------------------------------------- real exec
SCRIPT = textwrap.dedent("""
    import json, os, sys
    from async_pbt_isaaclab.member.restart import capture_argv, replace_process, restart_argv

    argv = capture_argv()
    out = sys.argv[sys.argv.index("--out") + 1]
    info = {"pid": os.getpid(), "argv": argv, "environ_len": len(os.environ),
            "environ_size": sum(len(k) + len(v) for k, v in os.environ.items())}
    if not any(a == "--checkpoint=/ws/new.pth" for a in argv):
        with open(os.path.join(out, "first.json"), "w") as fh:
            json.dump(info, fh)
        replace_process(restart_argv(argv, "/ws/new.pth", {"agent.params.config.learning_rate": 2.5e-4}))
        raise SystemExit("replace_process returned")
    with open(os.path.join(out, "second.json"), "w") as fh:
        json.dump(info, fh)
""")


def test_replace_process_execs_in_place_with_the_new_argv(tmp_path):
    script = tmp_path / "member.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    typed = [
        sys.executable,
        "-u",
        str(script),
        "--out",
        str(tmp_path),
        "--checkpoint",
        "/ws/old.pth",
        "--seed",
        "3",
        "agent.params.config.learning_rate=1e-3",
        "agent.params.config.gamma=0.99",
    ]
    proc = subprocess.Popen(typed, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    assert first["argv"] == typed
    # os.execv keeps the process: the pid we started is the pid both images report.
    assert second["pid"] == first["pid"] == proc.pid
    assert second["argv"] == [
        sys.executable,
        "-u",
        str(script),
        "--out",
        str(tmp_path),
        "--seed",
        "3",
        "agent.params.config.gamma=0.99",
        "--checkpoint=/ws/new.pth",
        "agent.params.config.learning_rate=0.00025",
    ]
    assert second["environ_len"] == first["environ_len"]
    assert second["environ_size"] == first["environ_size"]
    assert "[async-pbt] restarting:" in stdout
