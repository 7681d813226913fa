"""Per-episode summaries of a vectorized GPU environment, accumulated on the device.

Isaac Lab reports episode statistics only as batch means in ``extras["log"]``; population-based training
needs *per-episode* evidence (return, length, objective terms) of the *current* policy generation. The
:class:`EpisodeSummaryEmitter` builds those records on the env device, one fused update per env step,
and hands them to the host only when the member publishes (:meth:`EpisodeSummaryEmitter.drain`), as an
:class:`~async_pbt_isaaclab.core.state.evidence.EpisodeBatch`.

Data flow::

    env.step() --(rew, terminated, truncated, per-env terms, extras["log"])--> emitter.step()   [device]
    emitter.drain() --EpisodeBatch--> EvidenceWindow.add()                                     [host]

Cost model: :meth:`EpisodeSummaryEmitter.step` issues a fixed number of kernels (about a dozen, plus one
per ``"log"`` term) whatever the number of environments or finished episodes, never loops over
environments in Python and never synchronises with the host (no ``.item()``, no ``nonzero()``, no boolean
mask indexing). Pass ``compile=True`` to fuse the update with :func:`torch.compile`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union

import torch

from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EpisodeBatch
from async_pbt_isaaclab.envs.episode_layout import EpisodeLayout
from async_pbt_isaaclab.envs.settling_gate import SettlingGate

ConditionSource = Union[ConditionLabel, Callable[[], ConditionLabel]]
"""A fixed label, or a zero-argument callable returning the current one (for example reading a curriculum
stage). The callable is polled once per :meth:`EpisodeSummaryEmitter.step`, so it must read host state only
(a Python attribute), never a device tensor: reading a device tensor would synchronise every step."""


@dataclass(frozen=True)
class DrainStats:
    """What one :meth:`EpisodeSummaryEmitter.drain` found, including what it could not return."""

    episodes: int
    """Episodes returned in the batch."""
    dropped_overflow: int
    """Episodes completed since the previous drain but overwritten because the ring buffer was full."""
    dropped_stale: int
    """Episodes discarded because they did not both start and finish in the current segment (the current
    policy generation under the current condition label), see :meth:`EpisodeSummaryEmitter.start_generation`."""
    dropped_unsettled: int = 0
    """Episodes of the current segment discarded because they finished before it settled (see the class
    docstring: the first episodes after a start are the short ones)."""


class EpisodeSummaryEmitter:
    """Accumulates per-episode return, length and objective terms of ``num_envs`` envs on the env device.

    Contract of :meth:`step` (call it once after every ``env.step``, with that step's outputs):

    * ``rewards``: float tensor, shape ``(num_envs,)`` or ``(num_envs, 1)``; the reward of this step.
    * ``terminated`` / ``truncated``: bool tensors, shape ``(num_envs,)``. An env with either flag set finished
      its episode *at this step* (this step's reward and terms belong to that episode) and the env has already
      been reset, as in Isaac Lab's ``ManagerBasedRLEnv.step``: its next step starts a new episode.
    * ``terms``: ``{name: tensor (num_envs,)}`` with this step's value of every ``"sum"``, ``"last"`` and
      ``"max"`` term, for every env (values of finished envs must be their final-step values, i.e. taken
      before the reset). Required whenever such terms are configured.
    * ``log``: Isaac Lab's ``extras["log"]`` (scalar tensors or Python numbers). Read only for ``"log"``
      terms; a missing key yields NaN for the episodes finishing at that step. Isaac Lab rebuilds this dict
      only on steps where some env resets, and those are exactly the steps at which the values are used.

    Episode records: return (undiscounted sum of rewards), length (steps), every configured term, and a
    ``truncated`` flag (``True`` when the episode ended by ``truncated``, i.e. a time-out, even if it was also
    terminated; Isaac Lab sets at most one of them). Completed episodes go to a preallocated ring buffer on the
    device; :meth:`drain` copies the new ones to the host in completion order (steps in order, envs finishing
    at the same step in increasing env index) and clears it. When more than ``capacity`` episodes complete
    between two drains the oldest are overwritten and counted in :attr:`dropped_overflow`.

    Generations and conditions: evidence must come from one policy and one set of conditions. The emitter
    tags every episode with the *segment* it started in; a new segment starts at :meth:`start_generation` and
    whenever the condition label (when given as a callable) changes. :meth:`drain` returns only episodes that
    started *and* finished in the current segment, counting the others in :attr:`dropped_stale`. Why drop
    the straddlers rather than tag them with the old generation: after an exploit the member's evidence
    window restarts empty and ignores batches of older generations anyway, and an episode whose first half
    was played by the donor-replaced policy would bias the new generation's estimate in either direction.
    Dropping costs at most one episode per env, and callers that still want the old generation's finished
    episodes drain before calling :meth:`start_generation`.

    Settling gate (:mod:`~async_pbt_isaaclab.envs.settling_gate`): the first episodes after a start are the short
    ones, so a segment is *settled* once every env has finished an episode that began inside it, or once
    ``settle_max_steps`` env steps of it have passed. :meth:`drain` returns only episodes that finished once the
    segment had settled, the settling step included (so a fixed-length task loses nothing), counts the others in
    :attr:`dropped_unsettled` and stamps the batch with ``settled``. The gate costs a few small kernels per step
    and no host synchronisation.

    Attributes are documented where :meth:`__init__` and its setup steps define them.

    Args:
        num_envs: Number of environments the tensors passed to :meth:`step` have.
        device: Device of those tensors; all buffers live there.
        term_names: Per-episode objective terms to record, in the order they appear in the batch.
        condition: The condition label, or a callable returning it (polled once per step).
        generation: Policy generation of the member at construction.
        term_modes: Mode per term name (see :data:`~async_pbt_isaaclab.envs.episode_layout.TermMode`);
            unlisted names use :func:`~async_pbt_isaaclab.envs.episode_layout.default_term_mode`.
        capacity: Ring buffer size in episodes. Default ``max(4 * num_envs, 1024)``: several publish
            intervals of short episodes. Must be ``>= num_envs`` because all envs may finish at once.
        dtype: Accumulator dtype. float64 (default) keeps long sums exact enough and makes every record
            bit-identical to a Python-float reference; memory is ``(capacity + num_envs) * columns * 8``
            bytes, a few MiB at 65,536 envs.
        fresh_start: True when the envs start new episodes at the first :meth:`step` (the emitter was
            created with the env, before it stepped). False when attaching to envs that are mid-episode:
            their first episodes are then partial and are dropped as stale.
        compile: Fuse the per-step update with :func:`torch.compile`. Meant for CUDA, where kernel
            launches dominate the cost; on CPU the eager path measured faster. The first step compiles,
            which takes seconds to tens of seconds.
        settle_max_steps: A segment counts as settled after this many env steps even if some env has not
            finished an episode begun in it (``None``: wait for every env). See :meth:`set_settle_max_steps`.
    """

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        term_names: Sequence[str] = (),
        condition: ConditionSource = ConditionLabel(),
        generation: int = 0,
        *,
        term_modes: Mapping[str, str] | None = None,
        capacity: int | None = None,
        dtype: torch.dtype = torch.float64,
        fresh_start: bool = True,
        compile: bool = False,
        settle_max_steps: int | None = None,
    ):
        """Allocate the device buffers (arguments: the class docstring)."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        capacity = max(4 * num_envs, 1024) if capacity is None else int(capacity)
        if capacity < num_envs:
            raise ValueError(
                f"capacity ({capacity}) must be >= num_envs ({num_envs}): every env may finish in the same step"
            )
        layout = EpisodeLayout.build(term_names, term_modes)

        self.num_envs = int(num_envs)
        """Number of environments."""
        self.device = torch.device(device)
        """Device of all buffers and of the tensors :meth:`step` accepts."""
        self.capacity = capacity
        """Completed episodes the ring buffer holds between two drains."""
        self.dtype = dtype
        """Accumulator and ring buffer dtype."""
        self.layout = layout
        """Which row of the buffers holds which value of an episode."""
        self.term_names = list(layout.term_names)
        """Recorded terms, in batch order."""
        self.term_modes = layout.term_modes
        """Mode of each term (``"sum"``, ``"last"``, ``"max"`` or ``"log"``)."""
        self.generation = int(generation)
        """Current policy generation; stamped on every drained batch."""
        self.dropped_overflow = 0
        """Episodes lost to ring buffer overflow since construction (updated at drain)."""
        self.dropped_stale = 0
        """Episodes discarded for straddling a generation or condition change since construction (at drain)."""
        self.dropped_unsettled = 0
        """Episodes discarded for finishing before their segment settled, since construction (at drain)."""
        self.last_drain = DrainStats(0, 0, 0)
        """Counts of the most recent :meth:`drain`."""

        self._set_up_condition(condition)
        self._allocate_buffers(fresh_start, settle_max_steps)
        self._core = torch.compile(self._update, fullgraph=True, dynamic=False) if compile else self._update

    def _set_up_condition(self, condition: ConditionSource) -> None:
        """The segment's condition label: fixed, or polled from a callable once per step."""
        if callable(condition) and not isinstance(condition, ConditionLabel):
            self._condition_fn: Callable[[], ConditionLabel] | None = condition
            self.condition = self._read_condition(condition)
            """Condition label of the current segment (last value polled from the callable)."""
        else:
            self._condition_fn = None
            self.condition = condition

    def _allocate_buffers(self, fresh_start: bool, settle_max_steps: int | None) -> None:
        """The device buffers: per-env accumulators, the settling gate, the ring buffer of finished episodes."""
        layout, dtype, capacity = self.layout, self.dtype, self.capacity
        row = layout.row
        self._seg_row, self._settled_row, self._len_row = row["__segment"], row["__settled"], row["__length"]
        self._n_sum = layout.sum_rows
        self._max_start, self._max_stop = layout.max_rows
        self._last_start, self._last_stop = layout.last_rows

        # Segment: incremented by start_generation() and by condition changes; stored as a float in the
        # accumulator (exact up to 2**53). -1 means "episode start unknown".
        self._segment = 0
        # Value every accumulator row takes when an env starts a new episode: 0 for sums, -inf for maxima
        # (so the first step's value wins), the current segment for the segment row.
        init = torch.zeros(layout.num_rows, 1, dtype=dtype, device=self.device)
        init[self._max_start : self._max_stop] = -math.inf
        init[self._seg_row] = self._segment
        self._init = init
        self._acc = init.expand(layout.num_rows, self.num_envs).clone()
        self.gate = SettlingGate(self.num_envs, self.device, settle_max_steps)
        """The settling gate of the current segment."""
        if not fresh_start:
            self._mark_unknown_start()
        # Ring buffer with one spare column at index `capacity`: envs that did not finish are "written" there,
        # so the write is a single scatter with no data-dependent shape.
        self._ring = torch.zeros(layout.num_rows, capacity + 1, dtype=dtype, device=self.device)
        # (episodes ever written) - 1, on the device so that step() never reads it back.
        self._written_m1 = torch.full((), -1, dtype=torch.int64, device=self.device)
        self._drained = 0  # episodes ever written up to the previous drain (host-side)
        self._ones = torch.ones(self.num_envs, dtype=dtype, device=self.device)
        self._log_buf = torch.full((len(self.layout.log_terms),), math.nan, dtype=dtype, device=self.device)
        self._log_cols = [self._log_buf[i].expand(self.num_envs) for i in range(len(self.layout.log_terms))]

    # ------------------------------------------------------------------ per step (device only)

    def step(
        self,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        terms: Mapping[str, torch.Tensor] | None = None,
        log: Mapping[str, Any] | None = None,
    ) -> None:
        """Account one env step; record the episodes that finished in it. No host synchronisation.

        See the class docstring for the meaning and shapes of the arguments.
        """
        n = self.num_envs
        sum_cols = [rewards.reshape(n), self._ones]
        max_cols = []
        last_cols = [truncated.reshape(n)]
        if self.layout.sum_terms or self.layout.max_terms or self.layout.last_terms:
            if terms is None:
                needed = [*self.layout.sum_terms, *self.layout.max_terms, *self.layout.last_terms]
                raise KeyError(f"terms {needed} need step(terms=...)")
            sum_cols += [terms[name].reshape(n) for name in self.layout.sum_terms]
            max_cols = [terms[name].reshape(n) for name in self.layout.max_terms]
            last_cols += [terms[name].reshape(n) for name in self.layout.last_terms]
        if self.layout.log_terms:
            self._load_log(log)
            last_cols += self._log_cols
        self._core(terminated.reshape(n), truncated.reshape(n), sum_cols, max_cols, last_cols)
        if self._condition_fn is not None:
            # Polled after the update: envs reset inside this env step start their episodes under the new label.
            label = self._read_condition(self._condition_fn)
            if label != self.condition:
                self.condition = label
                self._new_segment()

    def _update(
        self,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        sum_cols: list[torch.Tensor],
        max_cols: list[torch.Tensor],
        last_cols: list[torch.Tensor],
    ) -> None:
        """The fused device update (a pure tensor program: compilable, no host reads)."""
        acc = self._acc
        done = terminated | truncated
        # Episodes finishing at this step count if the segment is settled once this step is accounted for: on a
        # fixed-length task every env finishes its first full episode at the same step, and those count.
        settled = self.gate.observe(done & (acc[self._seg_row] == self._init[self._seg_row, 0]))
        acc[self._settled_row].copy_(settled.to(acc.dtype).expand(acc.shape[1]))
        acc[: self._n_sum].add_(torch.stack(sum_cols))
        if max_cols:
            block = acc[self._max_start : self._max_stop]
            torch.maximum(block, torch.stack(max_cols), out=block)
        torch.stack(last_cols, out=acc[self._last_start : self._last_stop])
        # Slot of each finished env: running count of finishes (env order) after all earlier episodes.
        # capacity >= num_envs, so no two episodes of one step share a slot; unfinished envs go to the spare.
        k = torch.cumsum(done, 0)
        slot = torch.remainder(k + self._written_m1, self.capacity)
        slot = torch.where(done, slot, self.capacity)
        # scatter_ rather than index_copy_: same result (duplicates only hit the spare column), about twice
        # as fast on CPU for a column scatter; on CUDA both are one kernel.
        self._ring.scatter_(1, slot.expand_as(acc), acc)
        self._written_m1.add_(k[-1])
        # Finished envs were reset by the env: start their next episode from the initial values.
        torch.where(done, self._init, acc, out=acc)

    def _load_log(self, log: Mapping[str, Any] | None) -> None:
        """Copy this step's ``extras["log"]`` values of the ``"log"`` terms into the device buffer."""
        for i, name in enumerate(self.layout.log_terms):
            value = None if log is None else log.get(name)
            if value is None:
                self._log_buf[i].fill_(math.nan)
            elif isinstance(value, torch.Tensor):
                if value.device.type == "cpu" and self.device.type != "cpu":
                    # A host tensor: reading it is free, while copy_ to the device would wait for the stream.
                    self._log_buf[i].fill_(value.reshape(()).item())
                else:
                    # Same-device (or device-to-device) copy: no host involvement. Isaac Lab's reward manager
                    # logs 0-d tensors on the sim device; other managers log Python numbers.
                    self._log_buf[i].copy_(value.reshape(()))
            else:
                # A Python number travels as a kernel argument: no host-to-device copy.
                self._log_buf[i].fill_(float(value))

    # ------------------------------------------------------------------ segment bookkeeping

    def start_generation(self, generation: int) -> None:
        """The member's policy changed (exploit or explore): evidence of ``generation`` starts now.

        Episodes in progress started under the previous policy: they will be dropped when they finish (counted
        in :attr:`dropped_stale`), as will undrained episodes of the previous generation; drain first to keep
        those. Envs reset at the last step have not acted yet, so their current episodes count as new.
        """
        self.generation = int(generation)
        self._new_segment()

    def reset(self) -> None:
        """All envs were reset outside :meth:`step` (an explicit ``env.reset()``): abandon in-progress episodes.

        Their partial accumulators are cleared and every env starts a fresh episode in the current segment,
        which must settle again (all envs are back at step 0).
        """
        self._acc.copy_(self._init.expand_as(self._acc))
        self.gate.restart()

    def set_settle_max_steps(self, steps: int | None) -> None:
        """Cap the settling gate: settled after ``steps`` env steps of a segment (``None`` or < 0: no cap)."""
        self.gate.set_max_steps(steps)

    @property
    def settle_max_steps(self) -> int | None:
        """Env steps after which a segment counts as settled whatever the envs did (``None``: no cap)."""
        return self.gate.max_steps

    def _new_segment(self) -> None:
        self._segment += 1
        self._init[self._seg_row] = self._segment
        # An env with length 0 was reset by the last env step and has not acted yet: its episode is new.
        self._acc[self._seg_row].masked_fill_(self._acc[self._len_row] == 0, float(self._segment))
        self.gate.restart()

    def _mark_unknown_start(self) -> None:
        # Length NaN keeps "length == 0" false (so no later segment adopts these episodes) and segment -1
        # never matches: the partial first episodes are dropped at drain.
        self._acc[self._len_row] = math.nan
        self._acc[self._seg_row] = -1.0

    @staticmethod
    def _read_condition(condition_fn: Callable[[], ConditionLabel]) -> ConditionLabel:
        label = condition_fn()
        if not isinstance(label, ConditionLabel):
            raise TypeError(f"condition callable returned {type(label).__name__}, expected ConditionLabel")
        return label

    # ------------------------------------------------------------------ host side

    def num_pending(self) -> int:
        """Episodes completed since the last drain, capped at :attr:`capacity`. Synchronises with the device."""
        written = int(self._written_m1.item()) + 1
        return min(written - self._drained, self.capacity)

    def drain(self) -> EpisodeBatch:
        """Copy the episodes completed since the last drain to the host and clear them.

        This is the only method that synchronises with the device (one scalar read and one copy of the new
        records). Returns the current segment's episodes in completion order, stamped with :attr:`generation`
        and :attr:`condition`; :attr:`last_drain` says how many were returned and dropped.
        """
        written = int(self._written_m1.item()) + 1
        new = written - self._drained
        kept = min(new, self.capacity)
        overflow = new - kept
        self._drained = written
        if kept:
            slots = torch.arange(written - kept, written, device=self.device).remainder_(self.capacity)
            rows = self._ring.index_select(1, slots).cpu()
            rows = rows[:, rows[self._seg_row] == float(self._segment)]
        else:
            rows = torch.zeros(self.layout.num_rows, 0, dtype=self.dtype)
        in_segment = rows.shape[1]
        rows = rows[:, rows[self._settled_row] != 0]
        returned = rows.shape[1]
        unsettled = in_segment - returned
        stale = kept - in_segment
        batch = EpisodeBatch(
            returns=rows[self.layout.row["__return"]].tolist(),
            lengths=rows[self._len_row].to(torch.int64).tolist(),
            terms={name: rows[self.layout.row[name]].tolist() for name in self.term_names},
            truncated=(rows[self.layout.row["__truncated"]] != 0).tolist(),
            generation=self.generation,
            condition=self.condition,
            settled=self.settled(),
        )
        self.dropped_overflow += overflow
        self.dropped_stale += stale
        self.dropped_unsettled += unsettled
        self.last_drain = DrainStats(
            episodes=returned, dropped_overflow=overflow, dropped_stale=stale, dropped_unsettled=unsettled
        )
        return batch

    def settled(self) -> bool:
        """Whether the current segment has settled. Synchronises with the device (drain calls it)."""
        return self.gate.settled()

    def settle_progress(self) -> tuple[int, int]:
        """(envs that finished an episode begun in the current segment, num_envs). Synchronises."""
        return self.gate.progress()
