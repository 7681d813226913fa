"""PBT scalars for TensorBoard (and W&B, which mirrors them).

:class:`PbtScalars` writes, into the rl_games agent's own ``SummaryWriter`` (``algo.writer``, the member's
``summaries/`` folder), at the member's frame counter:

* ``pbt/objective_mean`` and ``pbt/objective_count``: the evidence window of the current generation;
* ``pbt/generation``;
* ``pbt/hp/<name>``: each mutated hyperparameter as the agent trains with it, once per epoch at the epoch's
  start frame (numbers and booleans; a ``choice`` of strings is logged as the index of the value among its
  sorted choices seen so far, so the step plot still shows when it changed);
* ``pbt/exploit``: the donor's member index at the frame of an exploit (``-1`` marks an explore of own
  weights), so the changes appear as spikes on TensorBoard's step axis. That frame is the lineage entry's: the
  first frame the new generation trains, one epoch after the decision frame the decision table shows.

The member's frame counter continues across exploit restarts (the recipient keeps its counters) and every
process of a member writes into the same run folder, so the curves are continuous across restarts.

The member's Weights & Biases run (one per member for the whole population run) is
:mod:`async_pbt_isaaclab.member.wandb_run`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.member.session import MemberSession

TAG_PREFIX = "pbt/"
"""Every scalar written here starts with this."""


SCALARS_FILE = "pbt_scalars.jsonl"
"""In a member's folder: every ``pbt/*`` scalar written to TensorBoard, one JSON line per frame
(``{"frame": F, "scalars": {"pbt/hp/gamma": 0.99, ...}}``): what ``async-pbt report`` plots, read from the workspace
wherever the TensorBoard runs are."""


class ScalarFile:
    """Appends the scalars of one hook to ``members/NNN/pbt_scalars.jsonl``: one line per frame, one ``write`` each
    (no fsync: a display aid; a line lost in a crash is one epoch's values)."""

    def __init__(self, path: Path):
        self.path = path
        self._pending: dict[int, dict[str, float]] = {}
        self._failed = False

    def add(self, tag: str, value: float, frame: int) -> None:
        self._pending.setdefault(int(frame), {})[tag] = float(value)

    def flush(self) -> None:
        """Write what was added since the last flush (a failed write is reported once; training goes on)."""
        pending, self._pending = self._pending, {}
        if not pending or self._failed:
            return
        data = "".join(json.dumps({"frame": f, "scalars": s}, sort_keys=True) + "\n" for f, s in pending.items())
        try:
            fsio.append_line(self.path, data.encode())  # refuses a planted symbolic or hard link
        except OSError as exc:
            self._failed = True
            print(f"[async-pbt] WARNING: cannot append to {self.path} ({exc}); the report lacks its values", flush=True)


class PbtScalars:
    """Writes ``pbt/*`` scalars for one member into an rl_games ``SummaryWriter`` (``add_scalar(tag, v, step)``)
    and, when given, a :class:`ScalarFile`."""

    def __init__(self, writer: Any, file: ScalarFile | None = None):
        self.writer = writer
        """The agent's writer (``algo.writer``); ``None`` (writer disabled) writes to :attr:`file` only."""
        self.file = file
        """The member's ``pbt_scalars.jsonl`` (``None``: TensorBoard only); with no writer either, calls do nothing."""
        self._choices: dict[str, list[Any]] = {}
        self._last_generation: tuple[int, int] | None = None

    @property
    def active(self) -> bool:
        """Something is written."""
        return self.writer is not None or self.file is not None

    def _scalar(self, tag: str, value: float, frame: int) -> None:
        if self.writer is not None:
            self.writer.add_scalar(TAG_PREFIX + tag, value, int(frame))
        if self.file is not None:
            self.file.add(TAG_PREFIX + tag, value, frame)

    def record(
        self,
        record: Any,
        frame: int | None = None,
        *,
        with_hyperparameters: bool = True,
    ) -> None:
        """Objective window, generation and (``with_hyperparameters``) hyperparameters of a :class:`MemberRecord`
        at its ``frame``."""
        if not self.active:
            return
        step = record.frame if frame is None else frame
        ev = record.evidence
        self._scalar("objective_count", float(ev.count), step)
        if ev.count and ev.generation == record.generation and math.isfinite(ev.mean):
            self._scalar("objective_mean", float(ev.mean), step)
        self.generation(record.generation, step)
        if with_hyperparameters:
            self.hyperparameters(record.hyperparameters, step)

    def generation(self, generation: int, frame: int) -> None:
        """``pbt/generation`` at ``frame`` (once: the change and the record written right after it share a frame)."""
        if self.active and self._last_generation != (int(frame), int(generation)):
            self._last_generation = (int(frame), int(generation))
            self._scalar("generation", float(generation), frame)

    def hyperparameters(self, values: Mapping[str, Any], frame: int) -> None:
        if not self.active:
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
        if not self.active:
            return
        # An explore of own weights: no donor, or the member itself (member None matches no donor index).
        self._scalar("exploit", -1.0 if donor is None or donor == member else float(donor), frame)

    def flush(self) -> None:
        if self.writer is not None and hasattr(self.writer, "flush"):
            self.writer.flush()
        if self.file is not None:
            self.file.flush()


class PbtScalarsObserver:
    """An rl_games observer that writes :class:`PbtScalars` for one population member (and, at start, the
    member's frame target to ``members/NNN/target.json`` for the status views).

    It reads what the member publishes and what the agent trains with, not the PBT observer's internals
    (it is listed after the PBT observer, so each hook sees what that one did in the same hook):

    * every epoch (``after_steps``, rollout done, update not run yet, at the epoch's start frame, where rl_games
      writes its own ``info/*`` scalars of that epoch): ``pbt/hp/<name>`` of every mutated key, read from the live
      agent, so a schedule's own moves (the adaptive learning rate) show at epoch resolution;
    * every record the member's publisher hands to its writer (heard through ``record_listeners``: with the
      background writer, ``record.json`` may already hold a newer one when a reader gets to it): the evidence
      window (``pbt/objective_*``) at the record's frame, logged at the next epoch, or at once for the member's last
      record (``finished`` or ``stopped``), after which no epoch comes;
    * every new lineage entry (in-process exploit or explore in ``after_print_stats``, a restart or a resume
      through a pending exploit in ``after_init``): ``pbt/exploit`` and ``pbt/generation`` at the entry's frame,
      the first frame the new generation trains (the decision was taken one epoch earlier, on the evidence up to
      the decision frame; docs/observability.md, "Two frames per generation change").
    """

    def __init__(self, session: MemberSession, publisher: Any):
        self.session = session
        """The claimed member (:class:`~async_pbt_isaaclab.member.session.MemberSession`)."""
        self.scalars = PbtScalars(None)
        """Writer wrapper, bound to the agent's writer in ``after_init``."""
        self.algo: Any = None
        """The rl_games agent (live hyperparameters are read from it)."""
        self._logged: tuple[int, int, float | None] | None = None
        """(frame, count, mean) of the last record logged."""
        self._logged_generation = 0
        """Lineage entries up to this generation are in the run already (by this process or an earlier one)."""
        self._handed: list[Any] = []
        """Records the member's publication (a :class:`~async_pbt_isaaclab.member.publication.Publication`)
        handed to its writer since the last epoch."""
        publisher.record_listeners.append(self._hear)

    def before_init(self, base_name, config, experiment_name) -> None:
        pass

    def after_init(self, algo: Any) -> None:
        from async_pbt_isaaclab.core.workspace.member_progress import target_frames, write_target

        self.algo = algo
        self.scalars = PbtScalars(getattr(algo, "writer", None), ScalarFile(self.session.dir / SCALARS_FILE))
        self._handed.clear()  # records of the start (before training) are not logged, only those it trains to
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
        state = self.session.state
        # A process started by an exploit restart (or a resume through a pending exploit) logs the change it
        # applied; every earlier change was logged by the process that applied it.
        applied_here = self.session.start_mode == "exploit_applied" and bool(state.lineage)
        self._logged_generation = state.generation - (1 if applied_here else 0)
        self._log_new_changes()
        self._flush_file()

    def _flush_file(self) -> None:
        if self.scalars.file is not None:
            self.scalars.file.flush()

    def _log_new_changes(self) -> None:
        state = self.session.state
        for entry in state.lineage:
            if entry.generation > self._logged_generation:
                self.scalars.exploit(entry.frame, entry.source.member, self.session.member)
                self.scalars.generation(entry.generation, entry.frame)
                self._logged_generation = entry.generation

    def _log_live_hyperparameters(self) -> None:
        if self.algo is None or not self.scalars.active:
            return
        from async_pbt_isaaclab.rl_games.live import live_values

        state = self.session.state
        values: dict[str, Any] = {}
        for key in self.session.cfg.mutation:
            try:
                values.update(live_values(self.algo, [key]))
            except (AttributeError, IndexError, KeyError, TypeError, ValueError):
                if key in state.hyperparameters:
                    values[key] = state.hyperparameters[key]  # not held by the agent: what the member recorded
        self.scalars.hyperparameters(values, int(self.algo.frame))

    def process_infos(self, infos, done_indices) -> None:
        pass

    def after_clear_stats(self) -> None:
        pass

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        # An in-process exploit or explore has just been applied (by the PBT observer's same hook).
        self._log_new_changes()
        self._flush_file()

    def after_steps(self) -> None:
        self._log_new_changes()
        self._log_live_hyperparameters()
        try:
            self._log_record()
        finally:
            self._flush_file()

    def _hear(self, record: Any) -> None:
        self._handed.append(record)
        if record.status != "running":
            # The member's last record (finished or stopped): no epoch follows to log it at, and the report's curve
            # and TensorBoard must end where record.json does.
            try:
                self._log_record()
            finally:
                self._flush_file()

    def _log_record(self) -> None:
        handed, self._handed[:] = list(self._handed), []
        for record in handed:
            self._log_one_record(record)

    def _log_one_record(self, record: Any) -> None:
        # A record is logged once per frame, unless a later one at that frame holds another window (a stop's last
        # record after the epoch's heartbeat).
        ev = record.evidence
        logged = (record.frame, ev.count, ev.mean if ev.count else None)  # an empty window's mean is NaN
        same_frame = self._logged is not None and self._logged[0] == record.frame
        if same_frame and (record.status == "running" or logged == self._logged):
            return
        self._logged = logged
        state = self.session.state
        if record.generation > state.generation:
            # A decided exploit or explore: the record already names the next generation with an empty window (so
            # no peer copies the old one), but the old generation trains until the change takes effect, one epoch
            # later at its lineage frame. Logged here: the window the decision was taken on (saved at the publish).
            saved = state.evidence
            evidence = saved.summary if saved is not None else record.evidence
            record = dataclasses.replace(record, generation=state.generation, evidence=evidence)
        self.scalars.record(record, with_hyperparameters=False)
