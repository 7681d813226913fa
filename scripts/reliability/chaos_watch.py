"""The watcher of a chaos run: workspace file events (inotify, polling elsewhere) turned into aimed kills.

Each event that opens a window calls ``Driver.try_kill`` with that window's test from ``chaos_windows``:

* a temp file in ``checkpoints/``, ``best.json`` replaced or retention deleting a checkpoint: ``checkpoint_write``;
* a file in ``incoming/``: ``donor_copy``;
* an exploit ``decision`` appended to ``audit.jsonl``: ``exploit_decided`` (a run aiming at it holds the member
  at its pause point instead: a driver woken by the append came too late nearly every time);
* ``state.json`` with ``pending_exploit`` by the exec path: ``restart_pending`` (a kill after a random delay up to
  the restart time seen so far, so every phase of the restart is hit);
* the in-process exploit's writes, each opening the stretch up to its next write: ``state.json`` with an
  in-process ``pending_exploit`` (``inprocess_pending``), ``exploit_applied`` by the running process
  (``inprocess_applied``), ``state.json`` with that exploit done (``inprocess_saved``), ``record.json`` rewritten
  after it (``inprocess_done``).

The exploit decision, the three narrow in-process windows and the background writer's publish
(``chaos_windows.HELD_WINDOWS``) are not aimed at through file events when the run aims at them: the members hold
inside them at a pause point and leave a marker ``pause.<point>.<pid>.json`` in their folder; the watcher waits
until the process has stopped, then kills it or removes the marker and lets it
go on. Every marker is handled, chaos phase or not, and ``release_all`` lets go any member still held.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import random
import select
import struct
import time
from pathlib import Path
from typing import Callable

from chaos_driver import Driver
from chaos_faults import Faults
from chaos_windows import (
    background_write_in_flight,
    decision_not_acted_on,
    donor_copy_in_flight,
    inprocess_applied,
    inprocess_done,
    inprocess_finished_last,
    inprocess_pending,
    inprocess_saved,
    last_decision_not_acted_on,
    pause_points_for,
    publish_in_progress,
    restart_in_flight,
)

from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import parse_member_dirname
from async_pbt_isaaclab.core.workspace.pause_points import MARKER_PREFIX, let_go, release_held, wait_stopped
from async_pbt_isaaclab.core.workspace.state_files import load_state


class Inotify:
    """Minimal inotify through ctypes (Linux). ``read(timeout)`` returns ``[(wd, mask, name), ...]``."""

    IN_MODIFY = 0x002
    IN_MOVED_TO = 0x080
    IN_DELETE = 0x200
    IN_CREATE = 0x100
    IN_ISDIR = 0x40000000

    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")

    def add(self, path: Path, mask: int) -> int:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        return wd

    def read(self, timeout: float) -> list[tuple[int, int, str]]:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        out, i = [], 0
        while i + 16 <= len(data):
            wd, mask, _cookie, length = struct.unpack_from("iIII", data, i)
            name = data[i + 16 : i + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
            out.append((wd, mask, name))
            i += 16 + length
        return out

    def close(self) -> None:
        os.close(self.fd)


def _member_of(path: Path, ws: Path) -> int | None:
    try:
        rel = path.relative_to(ws / "members")
    except ValueError:
        return None
    return parse_member_dirname(rel.parts[0]) if rel.parts else None


WRITER_POINTS = ("warning_busy", "write_failed")
"""Pause points in the member's writer: handled by ``chaos_faults``."""


class Watcher:
    """Turns workspace file events into aimed kills; runs for the whole first launch."""

    def __init__(self, driver: Driver, rng: random.Random) -> None:
        self.driver, self.ws, self.rng = driver, driver.ws, rng
        try:
            self.ino: Inotify | None = Inotify()
        except (OSError, AttributeError):
            self.ino = None
        self.watched: dict[int, Path] = {}
        self.audit_pos: dict[int, int] = {}
        self.pending_seen: dict[int, tuple[str, float, str]] = {}
        """Each member's pending exploit as last seen in its state.json: (checkpoint, monotonic time, path)."""
        self.inprocess_done: dict[int, tuple[str, int]] = {}
        """In-process exploits saved as done whose record rewrite is awaited: (checkpoint, generation)."""
        self.chaos_on = False
        self.faults = Faults(driver, rng)
        """The writer's windows: faults planted, members held at ``warning_busy`` and ``write_failed``."""
        self._watch(self.ws / "members", Inotify.IN_CREATE)

    def _watch(self, path: Path, mask: int) -> None:
        if self.ino is None or path in self.watched.values() or not path.is_dir():
            return
        try:
            self.watched[self.ino.add(path, mask)] = path
        except OSError:
            pass

    def scan_dirs(self) -> None:
        member_mask = Inotify.IN_CREATE | Inotify.IN_MOVED_TO | Inotify.IN_MODIFY
        for mdir in (self.ws / "members").iterdir():
            if parse_member_dirname(mdir.name) is None:
                continue
            self._watch(mdir, member_mask)
            self._watch(mdir / "checkpoints", Inotify.IN_CREATE | Inotify.IN_DELETE)
            self._watch(mdir / "incoming", Inotify.IN_CREATE)

    def poll(self, timeout: float) -> None:
        """Handle the file events of up to ``timeout`` seconds."""
        if self.ino is None:  # polling fallback
            for mdir in (self.ws / "members").iterdir():
                for sub in ("checkpoints", "incoming"):
                    try:
                        for p in (mdir / sub).iterdir():
                            self.on_file(p)
                    except FileNotFoundError:
                        pass
                self.on_file(mdir / "state.json")
                self.on_file(mdir / "audit.jsonl")
                self.on_file(mdir / "record.json")
                for marker in mdir.glob(f"{MARKER_PREFIX}*"):
                    self.on_file(marker)
            time.sleep(0.005)
            return
        for wd, mask, name in self.ino.read(timeout):
            base = self.watched.get(wd)
            if base is None or not name:
                continue
            if mask & Inotify.IN_ISDIR:
                self.scan_dirs()
                continue
            self.on_file(base / name, deleted=bool(mask & Inotify.IN_DELETE))

    def on_file(self, path: Path, deleted: bool = False) -> None:
        member = _member_of(path, self.ws)
        if member is None:
            return
        d, mdir, parent = self.driver, self.driver.mdir(member), path.parent.name
        # The audit log and state.json are followed all along, so "new" means new since the last event.
        if path.name == "audit.jsonl" and parent != "incoming":
            self._on_audit(member, path)
            return
        if path.name == "state.json":
            self._on_state(member, path)
            return
        if parent == mdir.name and path.name.startswith(MARKER_PREFIX) and not deleted and not fsio.is_temp_file(path):
            self._on_marker(member, path)
            return
        if not self.chaos_on:
            return
        if path.name == "record.json":
            self.faults.plant(member)
        if path.name == "record.json" and member in self.inprocess_done:
            checkpoint, generation = self.inprocess_done.pop(member)
            d.try_kill(
                member,
                "inprocess_done",
                f"record.json rewritten after the in-process exploit to {checkpoint}",
                lambda: inprocess_done(mdir, checkpoint, generation),
            )
            return
        if parent == "checkpoints" and ((deleted and not fsio.is_temp_file(path)) or fsio.TEMP_MARKER in path.name):
            what = f"{path.name} deleted by retention" if deleted else f"{path.name} being written"
            d.try_kill(member, "checkpoint_write", what, lambda: publish_in_progress(mdir))
        elif parent == "incoming" and not deleted:
            d.try_kill(member, "donor_copy", f"incoming/{path.name} being copied", lambda: donor_copy_in_flight(mdir))
        elif path.name == "best.json":
            d.try_kill(member, "checkpoint_write", "best.json published", lambda: publish_in_progress(mdir))

    def _on_audit(self, member: int, path: Path) -> None:
        try:
            with open(path, "rb") as fh:
                fh.seek(self.audit_pos.get(member, 0))
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.audit_pos[member] = self.audit_pos.get(member, 0) + end
        mdir = self.driver.mdir(member)
        for line in data[:end].splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if not self.chaos_on:
                continue
            if e.get("kind") == "exploit_applied" and e.get("path") == "inprocess":
                if "inprocess_applied" in self.driver.held:
                    continue  # the member holds in this window at its pause point: aimed at through the marker
                checkpoint = e.get("checkpoint")
                self.driver.try_kill(
                    member,
                    "inprocess_applied",
                    f"exploit_applied (inprocess) seq {e.get('seq')}",
                    functools.partial(inprocess_applied, mdir, checkpoint),
                )
                continue
            if e.get("kind") != "decision" or (e.get("decision") or {}).get("outcome") != "exploit":
                continue
            if "exploit_decided" in self.driver.held:
                continue  # the member holds in this window at its pause point: aimed at through the marker
            seq, rng_after = e.get("seq", -1), e.get("rng_after")
            generation = ((e.get("inputs") or {}).get("me") or {}).get("generation")
            self.driver.try_kill(
                member,
                "exploit_decided",
                f"exploit decision seq {seq} logged",
                functools.partial(decision_not_acted_on, mdir, seq, generation, rng_after),
            )

    def _on_state(self, member: int, path: Path) -> None:
        try:
            state = load_state(path)
        except RecordError:
            return
        pending = state.pending_exploit if state else None
        seen = self.pending_seen.get(member)
        now = time.monotonic()
        d, mdir = self.driver, self.driver.mdir(member)
        if seen is not None and (pending is None or pending.checkpoint != seen[0]):
            del self.pending_seen[member]
            if seen[2] == "inprocess":
                if pending is None and state.last_checkpoint == seen[0] and self.chaos_on:
                    checkpoint, generation = seen[0], state.generation
                    if inprocess_finished_last(mdir, checkpoint, generation):  # not re-applied by a new process
                        self.inprocess_done[member] = (checkpoint, generation)
                    if "inprocess_saved" not in d.held:
                        d.try_kill(
                            member,
                            "inprocess_saved",
                            f"state.json saved after the in-process exploit to {checkpoint}",
                            lambda: inprocess_saved(mdir, checkpoint, generation),
                        )
            else:
                d.restart_durations.append(now - seen[1])
        if not pending or (seen is not None and seen[0] == pending.checkpoint):
            return
        checkpoint, path_taken = pending.checkpoint, pending.path
        self.pending_seen[member] = (checkpoint, now, path_taken)
        if not self.chaos_on:
            return
        if path_taken == "inprocess":
            if "inprocess_pending" in d.held:
                return  # the member holds in this window at its pause point: aimed at through the marker
            d.try_kill(
                member,
                "inprocess_pending",
                f"state.json names the in-process exploit to {checkpoint}",
                lambda: inprocess_pending(mdir, checkpoint),
            )
            return
        d.opportunities["restart_pending"] += 1
        if d.quota.get("restart_pending", 0) > len(d.delayed):
            delay = self.rng.random() * d.restart_delay_bound()
            d.delayed.append(
                (
                    now + delay,
                    member,
                    "restart_pending",
                    f"{delay:.2f} s after pending_exploit {checkpoint}",
                    checkpoint,
                )
            )

    def _on_marker(self, member: int, marker: Path) -> None:
        """A member stopped itself at a pause point: kill it there (the window is certainly open) if the window
        wants a kill, else remove the marker and let it go on."""
        try:
            info = json.loads(marker.read_text())
            point, pid = str(info["point"]), int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # removed already (handled through an earlier event)
        if not wait_stopped(pid, self.driver.args.deadline):
            marker.unlink(missing_ok=True)  # the process is gone (killed while writing its marker)
            return
        killed = False
        try:
            if self.chaos_on and point in pause_points_for(self.driver.held) and point in WRITER_POINTS:
                killed = self.faults.on_marker(member, point, pid, marker)
            elif self.chaos_on and point in self.driver.held:
                killed = self.driver.try_kill(member, point, *self._held_window(member, point), held_pid=pid)
        finally:
            if killed:
                marker.unlink(missing_ok=True)  # try_kill returned once the process was dead
            else:
                let_go(marker, pid)

    def _held_window(self, member: int, point: str) -> tuple[str, Callable[[], str | None]]:
        """What a member held at ``point`` is doing, and that window's test, from its ``state.json`` (the
        process is stopped: the files say exactly where)."""
        mdir = self.driver.mdir(member)
        try:
            state = load_state(mdir / "state.json")
        except RecordError:
            state = None
        pending = state.pending_exploit if state is not None else None
        checkpoint = pending.checkpoint if pending is not None else ""
        if point == "exploit_decided":
            detail = "held at its pause point: exploit decision and its publish on disk, donor not yet fetched"
            return detail, functools.partial(last_decision_not_acted_on, mdir)
        if point == "inprocess_pending":
            detail = f"held at its pause point: state.json names the in-process exploit to {checkpoint}"
            return detail, functools.partial(inprocess_pending, mdir, checkpoint)
        if point == "background_write":
            detail = "held in the background writer: checkpoint written, state.json and record.json not yet"
            return detail, functools.partial(background_write_in_flight, mdir)
        if point == "inprocess_applied":
            detail = f"held at its pause point: exploit_applied (inprocess) logged for {checkpoint}"
            return detail, functools.partial(inprocess_applied, mdir, checkpoint)
        done = str(state.last_checkpoint) if state is not None else ""
        generation = state.generation if state is not None else -1
        detail = f"held at its pause point: state.json saved after the in-process exploit to {done}"
        return detail, functools.partial(inprocess_saved, mdir, done, generation)

    def release_all(self) -> None:
        """Let go every member still held at a pause point (the end of the run, or the driver failing)."""
        for mdir in (self.ws / "members").iterdir():
            if mdir.is_dir():
                release_held(mdir, self.driver.args.deadline)

    def fire_due(self) -> None:
        """Delayed (restart window) and random kills whose time has come."""
        d, now = self.driver, time.monotonic()
        for item in list(d.delayed):
            when, member, window, detail, checkpoint = item
            if now < when:
                continue
            d.delayed.remove(item)
            pid = d.alive_pid(member)
            try:
                execd = pid is not None and b"--checkpoint=" in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                execd = False
            mdir = d.mdir(member)
            d.try_kill(
                member, window, detail, functools.partial(restart_in_flight, mdir, checkpoint, execd), aimed=False
            )
        while d.random_times and now >= d.random_times[0] and d.quota.get("random", 0) > 0:
            d.random_times.pop(0)
            live = [m for m in range(self.driver.args.members) if d.alive_pid(m) is not None and d.eligible(m)]
            if not d.frequent_window_due("random"):
                live = []
            if not live or not d.try_kill(
                self.rng.choice(live), "random", "random moment", lambda: "random moment", aimed=False
            ):
                d.random_times.insert(0, now + 0.5)  # nobody to kill right now: try again shortly
                break

    def close(self) -> None:
        if self.ino is not None:
            self.ino.close()
