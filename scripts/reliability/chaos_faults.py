"""The writer busy or failing: the chaos windows held at the ``warning_busy`` and ``write_failed`` pause points.

* ``warning_busy``: every publish holds the member's background writer (its thread only) once the checkpoint is
  written; training goes on to its next heartbeat, which finds the writer busy and logs the slow-write warning; the
  process stops itself there and is killed (or let go, which lets the writer go on too).
* ``write_failed`` and ``ctrl_c_failing``: the watcher plants ``fault.json`` in a member's folder (a step of its next
  publish fails with EIO, before or after it wrote: ``core/workspace/pause_points.py``) when the member is eligible
  for a kill; the process stops itself as the failure is raised, before anything is rolled back, and is killed
  there (``write_failed``) or gets Ctrl-C (SIGINT) and is let go (``ctrl_c_failing``): it must roll back, log
  ``publish_failed``, write its stop record and entry, and exit; the launcher starts it again. A process with a
  fault planted may exit by itself (the member stops on the failure): that exit is expected, not a crash.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from chaos_driver import Driver
from chaos_windows import (
    FAULT_WINDOWS,
    _audit,
    stopped_after_failure,
    warning_logged_busy,
    write_failing,
)

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.pause_points import FAULT_FILE

FAULT_STEPS = ("checkpoint", "decision", "state.json", "best.json")
"""The publish steps a planted fault fails (a failed record or retention write is warned about, not failed)."""


class Faults:
    """Plants faults and handles the members held at the writer's pause points."""

    def __init__(self, driver: Driver, rng: random.Random) -> None:
        self.driver, self.rng = driver, rng
        self.planted: dict[int, tuple[str, int, str]] = {}
        """Faults planted and not yet met, per member: (window, last audit seq when planted, step and when)."""
        driver.at_sigkill.append(self.forget)

    def plant(self, member: int) -> None:
        """Plant a fault in ``member``'s folder if a fault window wants a kill and the member may be killed."""
        d = self.driver
        first = d.process_members(member)[0]
        if first in d.expected_exits or any(m in self.planted for m in d.process_members(member)):
            return  # one fault per process at a time
        wanted = [
            w
            for w in FAULT_WINDOWS
            if d.quota.get(w, 0) > sum(1 for f in self.planted.values() if f[0] == w) and d.frequent_window_due(w)
        ]
        if not wanted or not d.eligible(member) or d.alive_pid(member) is None:
            return
        window, step, when = self.rng.choice(wanted), self.rng.choice(FAULT_STEPS), self.rng.choice(("before", "after"))
        entries = _audit(d.mdir(member))
        fsio.atomic_write_json(d.mdir(member) / FAULT_FILE, {"step": step, "when": when})
        self.planted[member] = (window, entries[-1]["seq"] if entries else -1, f"{step} ({when} writing)")
        d.expected_exits.add(first)

    def forget(self, member: int) -> None:
        """``member``'s process died of a SIGKILL: forget its plant, met or not, and remove the fault file before
        the launcher's next start could take it. Kept, a plant never met (a slice process goes down with any of
        its members, often after a member took its fault and before it stopped at ``write_failed``) barred the
        process from every later fault: an 80-minute slices run stopped killing in the writer's windows after its
        64th kill of 274. Forgotten later, at the next plant (the first fix), it could already have been taken by
        the restarted process, whose stop on the failure was then no longer expected: a 14-minute process run
        failed so."""
        d = self.driver
        for m in d.process_members(member):
            self.planted.pop(m, None)
            (d.mdir(m) / FAULT_FILE).unlink(missing_ok=True)
        d.expected_exits.discard(d.process_members(member)[0])

    def on_marker(self, member: int, point: str, pid: int, marker: Path) -> bool:
        """A member held at ``warning_busy`` or ``write_failed``: kill it (or Ctrl-C) if its window wants it.
        Returns whether the process is gone or going (else the caller lets it go on)."""
        d, mdir = self.driver, self.driver.mdir(member)
        if point == "warning_busy":
            detail = "slow-write warning logged with the publish held in the writer"
            return d.try_kill(member, point, detail, functools.partial(warning_logged_busy, mdir), held_pid=pid)
        window, seq, fault = self.planted.pop(member, ("write_failed", -1, "unplanned"))
        if window == "ctrl_c_failing":
            detail = f"Ctrl-C while {fault} fails"
            landed = functools.partial(stopped_after_failure, mdir, seq)
            failing = functools.partial(write_failing, mdir, seq)
            held = {"held_pid": pid, "interrupt": marker, "open_now": failing}
            return d.try_kill(member, window, detail, landed, aimed=False, paced=False, **held)
        detail = f"held as {fault} fails"
        # Not paced again: the fault was planted when its window was due, and a member let go stops on it anyway.
        killed = d.try_kill(
            member, window, detail, functools.partial(write_failing, mdir, seq), aimed=False, held_pid=pid, paced=False
        )
        return killed  # killed: forgotten at death (``forget``), not stopped by the failure

    def withdraw(self, members_dir: Path) -> None:
        """Remove faults not met yet (the end of the chaos phase: the stop and the finishing launch write freely)."""
        for path in members_dir.glob(f"*/{FAULT_FILE}"):
            path.unlink(missing_ok=True)
        self.planted.clear()
