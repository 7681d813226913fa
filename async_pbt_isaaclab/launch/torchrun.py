"""Members of several GPUs (``--gpus-per-member K``): each member's command run by torchrun, one rank per GPU.

The local backend runs one ``torchrun`` of ``K`` ranks per member on its block of ``K`` GPUs (``CUDA_VISIBLE_DEVICES``
set to the block, so rank ``r`` is ``cuda:r``); a SLURM array task asks for ``K`` GPUs and its supervisor runs the
same torchrun on what SLURM gives it; a Ray task asks for ``K`` GPUs and runs it too (docs/distributed.md). The
member command itself says it is a group (``--distributed`` for ``scripts/train_pbt.py`` and
``scripts/train_pbt_rsl_rl.py``, ``agent.params.config.multi_gpu=True`` for the CPU member's yaml).

Imports only the standard library (no torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from async_pbt_isaaclab.launch.arguments import LaunchError

GROUP_SCRIPTS = ("train_pbt.py", "train_pbt_rsl_rl.py")
"""The Isaac Lab scripts whose member is a group of ranks only with ``--distributed``."""


def ranks_per_member(gpus_per_member: float, backend: str) -> int:
    """The ranks of each member's torchrun: ``--gpus-per-member`` when it is a whole number of 2 or more, else 1
    (no torchrun). A fraction shares a GPU between members, which only the Ray backend does."""
    if gpus_per_member == int(gpus_per_member):
        return max(1, int(gpus_per_member))
    if backend != "ray":
        raise LaunchError(f"--gpus-per-member {gpus_per_member:g}: a fraction of a GPU applies only to --backend ray")
    if gpus_per_member > 1:
        raise LaunchError(f"--gpus-per-member {gpus_per_member:g}: above one GPU, give a whole number (a rank per GPU)")
    return 1


def torchrun_command(command: Sequence[str], ranks: int) -> list[str]:
    """``command`` (``python SCRIPT ...``, ``python -m MODULE ...`` or ``isaaclab.sh -p SCRIPT ...``) as a torchrun
    of ``ranks`` processes on this node with a rendezvous port of its own (``--standalone``); unchanged for 1. A
    command of one of :data:`GROUP_SCRIPTS` without ``--distributed`` is refused (each rank would be a member of its
    own)."""
    command = list(command)
    if ranks <= 1:
        return command
    head = 2 if len(command) > 1 and Path(command[0]).name.startswith("isaaclab") and command[1] == "-p" else 1
    if head == 1 and not Path(command[0]).name.startswith("python"):
        raise LaunchError(
            f"--gpus-per-member {ranks}: the member command must start with a Python interpreter (python "
            f"scripts/train_pbt.py ..., or isaaclab.sh -p ...) to run under torchrun; it starts with {command[0]!r}"
        )
    script = next((Path(arg).name for arg in command if Path(arg).name in GROUP_SCRIPTS), None)
    if script is not None and "--distributed" not in command:
        raise LaunchError(
            f"--gpus-per-member {ranks}: scripts/{script} runs a member of several ranks with --distributed; "
            f"add it to the member command"
        )
    return [*command[:head], "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
            *command[head:]]  # fmt: skip


def check_group_command(command: Sequence[str], ranks: int, slices: int) -> None:
    """Refuse, before anything starts, a member command torchrun cannot run as ``ranks`` ranks (a process of
    ``slices`` members is one rank: slices refuse a multi-GPU agent)."""
    if ranks > 1 and slices > 1:
        raise LaunchError(f"--gpus-per-member {ranks}: a process of several slice members is one rank")
    torchrun_command(command, ranks)


def member_gpus(index: int, ranks: int, gpu_ids: Sequence[str]) -> list[str]:
    """The ``ranks`` GPUs of member ``index``: the ``index``-th block of ``ranks`` consecutive ids, round-robin
    (members share blocks when there are more members than blocks)."""
    if ranks > len(gpu_ids):
        raise LaunchError(
            f"--gpus-per-member {ranks}: only {len(gpu_ids)} GPUs to place members on ({','.join(gpu_ids)})"
        )
    blocks = len(gpu_ids) // ranks
    start = (index % blocks) * ranks
    return list(gpu_ids[start : start + ranks])
