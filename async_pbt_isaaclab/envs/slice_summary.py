"""Evidence per slice: one completed-episode emitter for each member that shares a vectorized env.

A process that hosts several members on one env (``envs/slice_env.py``) must not let the env's one
:class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` see all envs as one member's: a
:class:`SlicedSummarySource` takes its place, feeding each slice's emitter with its slice of every step.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter
from async_pbt_isaaclab.member.summary_source import SUMMARY_SOURCE_ATTR, find_summary_source


class SlicedSummarySource:
    """One :class:`EpisodeSummaryEmitter` per slice, fed by the env layer as if it were one emitter.

    It takes the place of the env's ``pbt_summary_source`` (the gymnasium vec-env and the Isaac Lab wrapper call
    ``step``, ``reset``, ``start_generation`` and read or set ``condition`` on it); each member's
    :class:`~async_pbt_isaaclab.envs.slice_env.SliceVecEnv` exposes its own part. ``step`` slices every input with
    views: a fixed number of kernels per slice, no host synchronisation."""

    def __init__(self, whole: EpisodeSummaryEmitter, bounds: Sequence[tuple[int, int]]):
        if whole.layout.log_terms:
            raise ValueError(
                f"pbt terms {list(whole.layout.log_terms)} read extras['log'], a mean over every env reset in a step; "
                f"with several members on one env it would mix their episodes: give them a per-env source "
                f"(docs/isaaclab.md, pbt_summary terms), or run members as separate processes"
            )
        self.num_envs = whole.num_envs
        """Envs of the shared env."""
        self.bounds = tuple(bounds)
        """``[start, stop)`` of every slice."""
        condition: Any = whole._condition_fn if whole._condition_fn is not None else whole.condition
        self.parts = [
            EpisodeSummaryEmitter(
                num_envs=stop - start,
                device=whole.device,
                term_names=whole.term_names,
                condition=condition,
                generation=whole.generation,
                term_modes=whole.term_modes,
                dtype=whole.dtype,
                settle_max_steps=whole.settle_max_steps,
            )
            for start, stop in self.bounds
        ]
        """Each slice's emitter (its member's summary source)."""
        for (start, stop), part in zip(self.bounds, self.parts, strict=True):
            # Episodes in flight carry over (an env attached mid-episode stays "start unknown", segment -1): a copy
            # on the device, no host read.
            part._acc.copy_(whole._acc[:, start:stop])
            segment = part._acc[part._seg_row]
            torch.where(segment < 0, segment, part._init[part._seg_row, 0], out=segment)

    def step(self, rewards, terminated, truncated, terms=None, log=None) -> None:
        n = self.num_envs
        rewards = rewards.reshape(n)
        terminated = terminated.reshape(n)
        truncated = truncated.reshape(n)
        for (start, stop), part in zip(self.bounds, self.parts, strict=True):
            part_terms = None if terms is None else {k: v.reshape(n)[start:stop] for k, v in terms.items()}
            part.step(rewards[start:stop], terminated[start:stop], truncated[start:stop], terms=part_terms, log=log)

    def reset(self) -> None:
        for part in self.parts:
            part.reset()

    @property
    def generation(self) -> int:
        return self.parts[0].generation

    def start_generation(self, generation: int) -> None:
        """Every slice starts a new segment (the env's own reset logic asks this of the one emitter it knows); each
        member's generation stays its own: the number passed is each part's."""
        for part in self.parts:
            part.start_generation(part.generation if generation == self.generation else generation)

    @property
    def condition(self) -> Any:
        return self.parts[0].condition

    @condition.setter
    def condition(self, label: Any) -> None:
        for part in self.parts:
            part.condition = label

    def drain(self) -> Any:
        raise RuntimeError("a sliced env has one summary source per member: drain each SliceVecEnv's")


def split_summary_source(env: Any, bounds: Sequence[tuple[int, int]]) -> SlicedSummarySource:
    """Replace the emitter reachable from ``env`` by one emitter per slice; returns the sliced source."""
    holder, whole = _source_holder(env)
    if isinstance(whole, SlicedSummarySource):
        return whole
    sliced = SlicedSummarySource(whole, bounds)
    setattr(holder, SUMMARY_SOURCE_ATTR, sliced)
    return sliced


def _source_holder(env: Any) -> tuple[Any, Any]:
    source = find_summary_source(env)
    if source is None:
        raise RuntimeError(
            "shared env: no 'pbt_summary_source' along the env's wrappers (use the gymnasium vec-env or the Isaac "
            "Lab wrapper, async_pbt_isaaclab.envs.isaaclab)"
        )
    todo, seen = [env], set()
    while todo:
        cur = todo.pop(0)
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur.__dict__.get(SUMMARY_SOURCE_ATTR) is source if hasattr(cur, "__dict__") else False:
            return cur, source
        for attr in ("vec_env", "env", "unwrapped"):
            nxt = getattr(cur, attr, None)
            if nxt is not None and nxt is not cur:
                todo.append(nxt)
    raise RuntimeError("shared env: its summary source is not an attribute it can be replaced in")
