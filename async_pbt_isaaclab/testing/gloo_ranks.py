"""For tests only: a CPU member of several ranks, rl_games' multi-GPU path over the ``gloo`` backend.

    torchrun --standalone --nproc_per_node 2 -m async_pbt_isaaclab.testing.gloo_ranks \\
        --pbt-workspace ws --pbt-members 2 --pbt-index 0 agent.params.config.multi_gpu=True

rl_games (1.6.1 and 1.6.5) joins the process group with ``nccl`` and puts each rank on ``cuda:LOCAL_RANK``, so its
multi-GPU agent needs GPUs. This entry point runs the CPU member (``examples/cpu_member.py``) after three changes
to this process only, none to rl_games' files: ``torch.distributed.init_process_group`` joins with ``gloo``,
``torch.cuda.set_device`` does nothing, and the agent's ``params.config`` keeps its ``device`` (rl_games writes
``cuda:LOCAL_RANK`` into it). Everything else (gradient averaging, the frame count, rank 0's exit decision, the
member's collectives) is rl_games' and the package's own code, over real processes. Never use it for training:
a GPU group runs ``scripts/train_pbt.py --distributed`` or the CPU member under torchrun without this module.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
from async_pbt_isaaclab.core.workspace.pause_points import MARKER_PREFIX, PAUSE_ENV, release_held
from async_pbt_isaaclab.testing.forced_exploit import (
    forced_exploit_flags,
    member_env,
    run_donor_and_recipient,
    wait_for_history,
)

ON_CPU = False
"""Set by :func:`use_gloo_on_cpu` and :func:`rsl_rl_on_cpu`: this process's ranks are on the CPU (what
``async_pbt_isaaclab.envs.isaaclab.api.cpu_ranks`` reads, so that ``scripts/train_pbt.py --distributed`` and
``scripts/train_pbt_rsl_rl.py --distributed`` accept ``--device cpu`` here and nowhere else)."""


class DevicePinnedConfig(dict):
    """An agent's ``params.config`` whose ``device`` stays what the yaml says."""

    def __setitem__(self, key: Any, value: Any) -> None:
        if key == "device" and "device" in self:
            return
        super().__setitem__(key, value)


def _join_with_gloo() -> None:
    """``init_process_group`` joins with ``gloo`` whatever backend it is given; ``torch.cuda.set_device`` does
    nothing (this process only)."""
    import torch
    import torch.distributed as dist

    join = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        return join("gloo", *args, **kwargs)

    dist.init_process_group = init_process_group
    torch.cuda.set_device = lambda device: None
    # By its import name: run as ``-m`` this file is ``__main__``, and the flag is read from the named module.
    import async_pbt_isaaclab.testing.gloo_ranks as named

    named.ON_CPU = True


def use_gloo_on_cpu() -> None:
    """Make rl_games' multi-GPU agent run its ranks on the CPU over gloo (this process only)."""
    from rl_games.torch_runner import Runner

    _join_with_gloo()
    load_config = Runner.load_config

    def pinned_load_config(self: Any, params: dict[str, Any]) -> Any:
        params["config"] = DevicePinnedConfig(params["config"])
        return load_config(self, params)

    Runner.load_config = pinned_load_config


def rsl_rl_on_cpu() -> None:
    """Make rsl_rl's multi-GPU ``OnPolicyRunner`` run its ranks on the CPU over gloo (this process only): its
    check that the device is ``cuda:LOCAL_RANK`` sees that device, the runner keeps the CPU."""
    from rsl_rl.runners import OnPolicyRunner

    _join_with_gloo()
    configure = OnPolicyRunner._configure_multi_gpu

    def on_cpu(self: Any) -> None:
        device, self.device = self.device, f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
        try:
            configure(self)
        finally:
            self.device = device

    OnPolicyRunner._configure_multi_gpu = on_cpu


GROUP_EPOCHS = {0: 4, 1: 4}
"""Epochs of each member of :func:`run_group_population`: 512 frames an epoch (2 ranks x 8 envs x 32 steps, every
env of every rank ending a 32-step episode each epoch), a decision every 1024 frames: member 0 publishes at frame
1024 (where its rank 1 is killed and the group resumes), member 1 exploits member 0 at frame 1024 (the fixture rule
exploits once) and trains its last epoch from the donor's weights."""


def group_member_args(ws: Path, index: int, epochs: int) -> list[str]:
    """The arguments after ``torchrun ... -m async_pbt_isaaclab.testing.gloo_ranks`` of member ``index`` of 2, each
    a group of 2 ranks on the CPU, in a forced-exploit population (in-process exploits)."""
    return [
        "--pbt-workspace", str(ws), "--pbt-members", "2", "--pbt-index", str(index), "--max_iterations", str(epochs),
        "--num_envs", "8", "--seed", "7",
        *forced_exploit_flags(interval_steps=1024, exploit_mode="inprocess", keep_last_checkpoints=100),
        "--pbt-max-heartbeat-age-s", "100000000",
        "agent.pbt.mutation.learning_rate=mutate_float", "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.params.config.multi_gpu=True", "agent.params.config.env_config.max_episode_steps=32",
        "agent.params.config.horizon_length=32", "agent.params.config.minibatch_size=128",
        "agent.params.config.mini_epochs=2", "agent.params.torch_threads=1",
    ]  # fmt: skip


def torchrun(ranks: int, module: str, args: list[str]) -> list[str]:
    """A ``torchrun`` command of ``ranks`` processes on this machine (a free rendezvous port of its own)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), "-m", module,
            *args]  # fmt: skip


def run_group_population(root: Path) -> tuple[str, Any]:
    """Two members of 2 gloo ranks each, as real ``torchrun`` process groups, in workspace ``root/ws``. Member 0
    runs under the launcher and loses its rank 1 at its first publish (:func:`kill_rank_1_at_first_publish`).
    Member 1 starts once member 0's record offers that publish, and exploits member 0 at its first decision. Returns
    member 1's log (both ranks') and the launch's result; raises when member 1 fails."""
    ws = root / "ws"
    launched = kill_rank_1_at_first_publish(
        ws, [sys.executable, "-m", __name__, *group_member_args(ws, 0, GROUP_EPOCHS[0])]
    )
    with open(root / "member1.log", "w") as log:
        command = torchrun(2, __name__, group_member_args(ws, 1, GROUP_EPOCHS[1]))
        code = subprocess.run(command, cwd=root, env=member_env(), stdout=log, stderr=subprocess.STDOUT).returncode
    result = launched()
    text = (root / "member1.log").read_text()
    if code != 0:
        raise RuntimeError(f"member 1 exited {code}:\n{text[-3000:]}")
    return text, result


def kill_rank_1_at_first_publish(ws: Path, command: list[str]) -> Callable[[], Any]:
    """Start member 0 of 2 in ``ws`` as a group of 2 ranks under ``async-pbt launch --gpus-per-member 2``
    (``launch_population``, in a thread; ``command`` is a member's command, its population flags the launcher's to
    set). Held once its first publish is on disk (the ``published`` pause point: checkpoint, state and record
    written), its rank 1 is killed with SIGKILL: the group goes down and the launcher restarts it from that
    checkpoint. Returns once member 0's record offers a history entry, with a call that waits for the launch to end
    and gives its result."""
    results: list[Any] = []
    mdir = ws / "members" / "000"
    launcher = threading.Thread(target=lambda: results.append(_launch_member_0(ws, command)))
    launcher.start()
    # Rank 0 holds with its first publish complete on disk (an event, not a race with the group's last epochs, which
    # follow in a second on an idle machine): rank 1 dies there and the group goes down before its next publish.
    # Held earlier, at the checkpoint alone, a SIGTERM from torchrun's teardown could stop rank 0 before it wrote the
    # state naming it, and the restart began fresh (seen once on CI).
    held = None
    while held is None:
        if not launcher.is_alive():
            raise RuntimeError("member 0 ended before it published")
        held = next(iter(mdir.glob(f"{MARKER_PREFIX}*.json")), None) if mdir.is_dir() else None
        time.sleep(0.05)
    pid = rank_pid(ws, 1)
    assert pid is not None, "member 0 has no rank 1"
    os.kill(pid, signal.SIGKILL)
    threading.Thread(target=_let_go_while, args=(mdir, launcher), daemon=True).start()
    wait_for_history(mdir / "record.json", lambda: None if launcher.is_alive() else "ended (its launch is done)")

    def launched() -> Any:
        launcher.join()
        return results[0] if results else None

    return launched


def resume_after_the_dead_rank(ws: Path, launched: Any) -> dict:
    """Check what :func:`kill_rank_1_at_first_publish` left (raises ``AssertionError``): the launch ended with member
    0 finished after one restart, its starts were fresh then a resume, and every rank of the restarted group loaded
    the restored checkpoint before its first rollout (``group_synced``, reason ``restore``). Returns the resume's
    ``restored`` audit entry."""
    outcome = launched.members[0]
    assert launched.exit_code == 0 and launched.finished == [0], outcome
    assert outcome.restarts == 1 and outcome.exit_codes[0] != 0 and outcome.exit_codes[-1] == 0, outcome
    lines = (ws / "members" / "000" / "audit.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    modes = [e["mode"] for e in entries if e["kind"] == "start"]
    assert modes == ["fresh", "resume"], modes
    i = next(i for i, e in enumerate(entries) if e["kind"] == "restored" and e["mode"] == "resume")
    restored, synced = entries[i], next(e for e in entries[i:] if e["kind"] == "group_synced")
    assert synced["reason"] == "restore" and synced["model_sha256"] == [restored["model_sha256"]] * 2, synced
    return restored


def _let_go_while(mdir: Path, launcher: threading.Thread) -> None:
    """Let every process of member 0 that holds at its pause point go on, until its launcher is done."""
    while launcher.is_alive():
        release_held(mdir, deadline_s=60)
        time.sleep(0.05)


def _launch_member_0(ws: Path, command: list[str]) -> Any:
    """Member 0 of :func:`kill_rank_1_at_first_publish` under the launcher (which adds the population flags)."""
    from async_pbt_isaaclab.launch.local_backend import launch_population

    flags = {"--pbt-workspace", "--pbt-members", "--pbt-index"}
    command = [a for i, a in enumerate(command) if a not in flags and (i == 0 or command[i - 1] not in flags)]
    env = {k: v for k, v in member_env().items() if k in (TEST_FIXTURE_ENV, "PYTHONUNBUFFERED")}
    env[PAUSE_ENV] = "published"  # test facility: each publish holds once its checkpoint, state and record are written
    return launch_population(
        command, 2, ws, gpus=[], indices=[0], extra_env=env,
        output=io.StringIO(), ranks_per_member=2, restart_backoff_s=0.1, progress_interval_s=3600,
    )  # fmt: skip


def rank_pid(ws: Path, rank: int) -> int | None:
    """The pid of the running member process of ``rank`` working in ``ws`` (its environment names it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if __name__.encode() in cmdline and str(ws).encode() in cmdline and b"torch.distributed.run" not in cmdline:
            if f"RANK={rank}".encode() in environ:
                return int(entry.name)
    return None


RSL_RL_GROUP_ITERATIONS = {0: 4, 1: 4, 2: 8}
"""Iterations of each member of :func:`run_rsl_rl_group_population`: members 0 and 1 are groups of 2 ranks (2 x 8
envs x 16 steps: 256 frames an iteration), member 2 one process of 8 envs (128 frames an iteration); every env ends
a 16-step episode each iteration, and all three decide at the same total frames (512, 1024)."""


def rsl_rl_group_config(root: Path) -> Path:
    """The packaged Pendulum-v1 rsl_rl config with 16-step episodes and a fixed learning-rate schedule (a searched
    ``learning_rate`` that only the members' sync gives every rank), written under ``root``."""
    import yaml

    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.examples.agents import PACKAGED_RSL_RL_CONFIGS

    cfg = load_yaml(PACKAGED_RSL_RL_CONFIGS["Pendulum-v1"])
    cfg["env"]["env_config"] = {"max_episode_steps": 16}
    cfg["runner"]["algorithm"]["schedule"] = "fixed"
    path = root / "pendulum_16_steps.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_rsl_rl_group_population(root: Path) -> dict[int, str]:
    """Three rsl_rl members in workspace ``root/ws`` (:data:`RSL_RL_GROUP_ITERATIONS`): members 0 and 1 of 2 gloo
    ranks each, real ``torchrun`` process groups, member 2 a process of its own; members 1 and 2 exploit a peer
    in-process at their first decision. Returns each member's log (a group's: both ranks'); raises when one fails."""
    config = rsl_rl_group_config(root)

    def command(index: int, iterations: int) -> list[str]:
        args = rsl_rl_group_member_args(config, root / "ws", index, iterations)
        if index == 2:
            return [sys.executable, "-m", "async_pbt_isaaclab.examples.rsl_rl_member", *args]
        return torchrun(2, __name__, ["rsl_rl", *args])

    return run_donor_and_recipient(root, command, RSL_RL_GROUP_ITERATIONS)


def rsl_rl_group_member_args(config: Path, ws: Path, index: int, iterations: int) -> list[str]:
    """The ``rsl_rl_member`` arguments of member ``index`` of :func:`run_rsl_rl_group_population` (a decision every
    512 frames, in-process exploits)."""
    return [
        "--config", str(config), "--pbt-workspace", str(ws), "--pbt-members", "3",
        "--pbt-index", str(index), "--max_iterations", str(iterations), "--num_envs", "8", "--seed", "7",
        *forced_exploit_flags(interval_steps=512, exploit_mode="inprocess", keep_last_checkpoints=100),
        "--pbt-max-heartbeat-age-s", "100000000",
        "agent.pbt.mutation.learning_rate=mutate_float", "agent.pbt.mutation.entropy_coef=mutate_float",
    ]  # fmt: skip


def run_rsl_rl_group_restart(root: Path) -> Any:
    """Member 0 of :func:`run_rsl_rl_group_population` alone in workspace ``root/ws``, a group of 2 ranks under the
    launcher, 4 iterations of 256 frames: its rank 1 is killed at its first publish (frame 512), the launcher
    restarts the group, which resumes from that checkpoint and finishes at frame 1024. Returns the launch's result."""
    config = rsl_rl_group_config(root)
    args = rsl_rl_group_member_args(config, root / "ws", 0, RSL_RL_GROUP_ITERATIONS[0])
    return kill_rank_1_at_first_publish(root / "ws", [sys.executable, "-m", __name__, "rsl_rl", *args])()


def rsl_rl_checkpoint_fingerprint(path: Path) -> str:
    """The fingerprint a member's rsl_rl trainer takes of the weights in checkpoint ``path`` (every model key's state
    dict, in the installed rsl-rl-lib line's layout): what a group's ranks report in ``group_synced``."""
    import torch

    from async_pbt_isaaclab.checkpoint_io import model_fingerprint
    from async_pbt_isaaclab.rsl_rl.layout import LAYOUTS
    from async_pbt_isaaclab.rsl_rl.release import installed_line

    state = torch.load(path, weights_only=True)
    models = LAYOUTS[installed_line()].models
    return model_fingerprint({f"{k}/{n}": t for k in models for n, t in state[k].items()})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rsl_rl"]:  # an rsl_rl member (examples/rsl_rl_member.py)
        rsl_rl_on_cpu()
        from async_pbt_isaaclab.examples.rsl_rl_member import main as rsl_rl_member

        return rsl_rl_member(argv[1:])
    use_gloo_on_cpu()
    from async_pbt_isaaclab.examples.cpu_member import main as cpu_member

    return cpu_member(argv)


if __name__ == "__main__":
    sys.exit(main())
