"""The :class:`~async_pbt_isaaclab.member.group.RankGroup` of a member whose trainer joined ``torch.distributed``
itself (rl_games' ``multi_gpu`` agent, rsl_rl's multi-GPU ``OnPolicyRunner``): the collectives run on the default
process group, objects travel pickled, and a sync's checkpoint state travels on the CPU (a rank's device is its own:
rank 1 must not unpickle rank 0's ``cuda:0`` tensors). torch is imported when a group is made, not with this module.

Neither rl_games nor rsl-rl-lib leaves the process group at the end, and a process that exits without
``destroy_process_group`` can abort (SIGABRT, "terminate called without an active exception") when gloo's worker
threads outlive the interpreter; torchrun then reports the member failed and the launcher would restart a member
that had finished. A group therefore leaves the process group at exit, while the interpreter is still whole.
"""

from __future__ import annotations

import atexit
import dataclasses
from typing import Any

from async_pbt_isaaclab.member.donors import clone_state


class TorchRankGroup:
    """The default ``torch.distributed`` group (the one the trainer joined), as the member's collectives see it."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        atexit.unregister(leave_process_group)  # one entry however many groups this process makes
        atexit.register(leave_process_group)

    def broadcast(self, value: Any) -> Any:
        box = [_on_cpu(value) if self.rank == 0 else None]
        self._dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, value)
        return out


def leave_process_group() -> None:
    """Destroy the default process group if this process is still in one (the trainer joined it)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _on_cpu(value: Any) -> Any:
    """``value`` with the checkpoint state of a sync copied to the CPU."""
    state = getattr(value, "state", None)
    return dataclasses.replace(value, state=clone_state(state, to="cpu")) if state is not None else value
