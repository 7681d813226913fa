"""PBT scalars for TensorBoard (and W&B, which mirrors them).

:class:`PbtScalars` writes, into the rl_games agent's own ``SummaryWriter`` (``algo.writer``, the member's
``summaries/`` folder), at the member's frame counter:

* ``pbt/objective_mean`` and ``pbt/objective_count``: the evidence window of the current generation;
* ``pbt/generation``;
* ``pbt/hp/<name>``: each mutated hyperparameter (numbers and booleans; a ``choice`` of strings is logged as
  the index of the value among its sorted choices seen so far, so the step plot still shows when it changed);
* ``pbt/exploit``: the donor's member index at the frame of an exploit (``-1`` marks an explore of own
  weights), so the changes appear as spikes on TensorBoard's step axis.

The member's frame counter continues across exploit restarts (the recipient keeps its counters) and every
process of a member writes into the same run folder, so the curves are continuous across restarts.

The member's Weights & Biases run (one per member for the whole population run) is
:mod:`async_pbt_isaaclab.member.wandb_run`.
"""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

from async_pbt_isaaclab.core.generation import LineageEntry
from async_pbt_isaaclab.member.session import MemberSession

TAG_PREFIX = "pbt/"
"""Every scalar written here starts with this."""


class PbtScalars:
    """Writes ``pbt/*`` scalars for one member into an rl_games ``SummaryWriter`` (``add_scalar(tag, v, step)``)."""

    def __init__(self, writer: Any):
        self.writer = writer
        """The agent's writer (``algo.writer``); ``None`` turns every call into a no-op (writer disabled)."""
        self._choices: dict[str, list[Any]] = {}

    def _scalar(self, tag: str, value: float, frame: int) -> None:
        self.writer.add_scalar(TAG_PREFIX + tag, value, int(frame))

    def record(self, record: Any, frame: int | None = None) -> None:
        """Objective window, generation and hyperparameters of a :class:`MemberRecord` (at its ``frame``)."""
        if self.writer is None:
            return
        step = record.frame if frame is None else frame
        ev = record.evidence
        self._scalar("objective_count", float(ev.count), step)
        if ev.count and ev.generation == record.generation and math.isfinite(ev.mean):
            self._scalar("objective_mean", float(ev.mean), step)
        self._scalar("generation", float(record.generation), step)
        self.hyperparameters(record.hyperparameters, step)

    def hyperparameters(self, values: Mapping[str, Any], frame: int) -> None:
        if self.writer is None:
            return
        for name, value in sorted(values.items()):
            number = self._number(name, value)
            if number is not None:
                self._scalar(f"hp/{name}", number, frame)

    def _number(self, name: str, value: Any) -> float | None:
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, (int, float)):
            return float(value) if math.isfinite(value) else None
        if isinstance(value, str):
            seen = self._choices.setdefault(name, [])
            if value not in seen:
                seen.append(value)
                seen.sort()
            return float(seen.index(value))
        return None

    def exploit(self, frame: int, donor: int | None, member: int | None = None) -> None:
        """Mark a change of generation at ``frame``: the donor's index, ``-1`` for an explore of own weights."""
        if self.writer is None:
            return
        # An explore of own weights: no donor, or the member itself (member None matches no donor index).
        self._scalar("exploit", -1.0 if donor is None or donor == member else float(donor), frame)

    def flush(self) -> None:
        if self.writer is not None and hasattr(self.writer, "flush"):
            self.writer.flush()


class PbtScalarsObserver:
    """An rl_games observer that writes :class:`PbtScalars` for one population member (and, at start, the
    member's frame target to ``members/NNN/target.json`` for the status views).

    It reads what the member publishes, not the PBT observer's internals: after every epoch (``after_steps``,
    listed after the PBT observer so the epoch's publish has happened) it re-reads ``record.json`` when the file
    changed and logs the record at its frame; a change of generation is logged as ``pbt/exploit`` from the
    member's lineage, once by the process that starts right after an exploit restart and once by a process that
    sees its generation change in place.
    """

    def __init__(self, session: MemberSession):
        self.session = session
        """The claimed member (:class:`~async_pbt_isaaclab.member.session.MemberSession`)."""
        self.scalars = PbtScalars(None)
        """Writer wrapper, bound to the agent's writer in ``after_init``."""
        self._stamp: tuple[int, int] | None = None
        self._frame: int | None = None
        self._generation: int | None = None

    def before_init(self, base_name, config, experiment_name) -> None:
        pass

    def after_init(self, algo: Any) -> None:
        from async_pbt_isaaclab.core.member_progress import target_frames, write_target

        self.scalars = PbtScalars(getattr(algo, "writer", None))
        # Where this member stops, for `async-pbt status` (frames/target, ETA) and the launcher's progress lines.
        try:
            write_target(
                self.session.dir,
                target_frames(
                    getattr(algo, "max_epochs", None),
                    getattr(algo, "max_frames", None),
                    getattr(algo, "batch_size_envs", None),
                ),
            )
        except OSError:
            pass  # a display aid: never stop training over it
        lineage = self.session.state.lineage
        self._generation = self.session.state.generation
        if self.session.start_mode == "exploit_applied" and lineage:
            self._log_change(lineage[-1])

    def _log_change(self, entry: LineageEntry) -> None:
        self.scalars.exploit(entry.frame, entry.source.member, self.session.member)

    def process_infos(self, infos, done_indices) -> None:
        pass

    def after_clear_stats(self) -> None:
        pass

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        pass

    def after_steps(self) -> None:
        from async_pbt_isaaclab.core.records import RecordError, read_record

        path = self.session.dir / "record.json"
        try:
            st = os.stat(path)
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            record = read_record(path)
        except RecordError:
            return  # our own record is written atomically; a failure here is a full disk, reported elsewhere
        if record.frame == self._frame:
            return
        self._frame = record.frame
        if self._generation is not None and record.generation > self._generation:
            for entry in self.session.state.lineage:
                if entry.generation > self._generation:
                    self._log_change(entry)
        self._generation = record.generation
        self.scalars.record(record)
