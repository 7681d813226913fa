"""When a segment's evidence has settled: the emitter's settling gate, kept on the env device.

Right after a start every env is at step 0, so the first episodes to finish are the short ones (early terminations,
fast failures, or fast successes on tasks that end on success); their mean is far from what the policy achieves in
steady state. A segment (one policy generation under one condition label) is *settled* once every env has finished
an episode that began inside it, or once ``max_steps`` env steps of the segment have passed (for tasks whose
episodes need not end). The :class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` keeps only the
episodes that finished once their segment had settled.

:meth:`SettlingGate.observe` is a few small kernels per env step and never synchronises with the host, so the
emitter can call it inside its fused (optionally compiled) update; :meth:`SettlingGate.settled` and
:meth:`SettlingGate.progress` read back to the host.
"""

from __future__ import annotations

import torch

_NO_CAP = 2**62
"""Step cap that is never reached: the gate waits for every env."""


class SettlingGate:
    """Which envs finished an episode begun in the current segment, and how many env steps the segment has run."""

    def __init__(self, num_envs: int, device: torch.device, max_steps: int | None = None):
        self.num_envs = int(num_envs)
        """Number of environments."""
        self.env_settled = torch.zeros(self.num_envs, dtype=torch.bool, device=device)
        """Per env: finished an episode that began in the current segment."""
        self.segment_steps = torch.zeros((), dtype=torch.int64, device=device)
        """Env steps since the segment began (a 0-d device tensor)."""
        self._cap = torch.full((), _NO_CAP, dtype=torch.int64, device=device)
        self.max_steps: int | None = None
        """Env steps after which a segment counts as settled whatever the envs did (``None``: no cap)."""
        self.set_max_steps(max_steps)

    def set_max_steps(self, steps: int | None) -> None:
        """Cap the gate: settled after ``steps`` env steps of a segment (``None`` or < 0: no cap)."""
        self.max_steps = None if steps is None or steps < 0 else int(steps)
        self._cap.fill_(_NO_CAP if self.max_steps is None else self.max_steps)

    def observe(self, finished_in_segment: torch.Tensor) -> torch.Tensor:
        """Account one env step; ``finished_in_segment`` (bool, ``(num_envs,)``) marks the envs that finished an
        episode begun in the segment at this step. Returns whether the segment is settled once this step is
        accounted for (a 0-d bool tensor: no host synchronisation)."""
        self.env_settled.logical_or_(finished_in_segment)
        self.segment_steps.add_(1)
        return self.env_settled.all() | (self.segment_steps >= self._cap)

    def restart(self) -> None:
        """A new segment began, or every env was reset: nothing has settled."""
        self.env_settled.zero_()
        self.segment_steps.zero_()

    def settled(self) -> bool:
        """Whether the current segment has settled. Synchronises with the device."""
        return bool((self.env_settled.all() | (self.segment_steps >= self._cap)).item())

    def progress(self) -> tuple[int, int]:
        """(envs that finished an episode begun in the current segment, num_envs). Synchronises."""
        return int(self.env_settled.sum().item()), self.num_envs
