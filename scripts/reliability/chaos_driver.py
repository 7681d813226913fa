"""The driver of a chaos run: who may be killed, when, and what each kill hit.

A kill goes to the member's whole process group (the pid comes from the launcher's journal ``launcher.jsonl``,
checked against ``/proc/PID/cmdline``, so a recycled pid is never killed). The window's test (``chaos_windows``)
runs before the kill (a window already closed is not killed: that would cost a restart without testing it) and
after the process died (the kill counts only if the window was still open at death).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from chaos_death import AtDeath, examine, read_at_death
from chaos_windows import EXPLOIT_WINDOWS

from async_pbt_isaaclab.core.workspace.layout import member_dirname
from async_pbt_isaaclab.core.workspace.pause_points import MARKER_PREFIX, let_go, process_state

FREQUENT_WINDOWS = (
    "checkpoint_write",
    "background_write",
    "warning_busy",
    "write_failed",
    "ctrl_c_failing",
    "random",
)
"""Windows that open at any time; the others need an exploit decision."""
EXPLOIT_SEQUENCE = ("exploit_decided", *EXPLOIT_WINDOWS)
"""The windows of one exploit in the order they open (a run wants the restart path's or the in-process path's)."""


@dataclass
class Kill:
    time: float
    """Wall time of the SIGKILL."""
    member: int
    """The member whose process group was killed."""
    window: str
    """The window aimed at (one of ``chaos_windows.windows_for(mode)``)."""
    pid: int
    """The member's process id (its process group)."""
    detail: str
    """The event that opened the window."""
    landed: bool = False
    """The window was still open when the process died (only such kills count towards the quota)."""
    phase: str = ""
    """Where the kill landed, read from the files the process left (or why it missed)."""
    came_back: bool = False
    """The launcher started the member again after the kill (filled in by the checks)."""
    signal: str = "SIGKILL"
    """SIGKILL, or SIGINT (Ctrl-C: the member stops by itself)."""
    at_death: dict[int, AtDeath] = field(default_factory=dict)
    """What each member of the process left at death (``chaos_death``)."""


@dataclass
class Driver:
    """Who may be killed, when, and what each kill hit."""

    args: argparse.Namespace
    """The command line of the run."""
    ws: Path
    """The population workspace."""
    rng: random.Random
    """Draws kills at --aim-probability, delays and random moments (seeded: --seed)."""
    quota: dict[str, int] = field(default_factory=dict)
    """Landed kills still wanted per window."""
    wanted: dict[str, int] = field(default_factory=dict)
    """Landed kills wanted per window in all."""
    pids: dict[int, int | None] = field(default_factory=dict)
    """Each member's current pid from the launcher's journal (None while not running)."""
    starts: dict[int, list[float]] = field(default_factory=dict)
    """Wall times of the launcher's starts of each member (from its journal)."""
    unexpected_exits: list[str] = field(default_factory=list)
    """Exits the driver did not cause (a crash of its own, or a finish at the epoch cap)."""
    unexpected_members: list[int] = field(default_factory=list)
    """The members (first of their process) of ``unexpected_exits``."""
    expected_exits: set[int] = field(default_factory=set)
    """Processes (first member) the watcher made a publish fail in: their next exit other than a SIGKILL is
    expected (a Ctrl-C, or the member stopping on the failure), not a crash of its own."""
    journal_pos: int = 0
    """Bytes of the launcher's journal read so far."""
    kills: list[Kill] = field(default_factory=list)
    """Every SIGKILL sent, landed or missed."""
    opportunities: Counter = field(default_factory=Counter)
    """Window events seen per window while the chaos phase was on."""
    closed_before_kill: Counter = field(default_factory=Counter)
    """Opportunities whose window had closed by the time the driver could kill (nothing killed)."""
    last_kill: dict[int, float] = field(default_factory=dict)
    """Wall time of each member's latest kill."""
    delayed: list[tuple[float, int, str, str, str]] = field(default_factory=list)
    """Restart-window kills to come: (monotonic time, member, window, detail, pending checkpoint)."""
    random_times: list[float] = field(default_factory=list)
    """Monotonic times of the random kills to come."""
    restart_durations: list[float] = field(default_factory=list)
    """Seconds from ``pending_exploit`` seen to the exploit applied, as observed (bounds the delayed kills)."""
    at_sigkill: list[Callable[[int], None]] = field(default_factory=list)
    """Called with a member once its process died of a SIGKILL the driver sent (``chaos_faults`` forgets the
    process's plant there, before the launcher's next start could take it)."""
    held: tuple[str, ...] = ()
    """Windows the members hold in at a pause point (``chaos_windows.HELD_WINDOWS`` aimed at): the members'
    ``ASYNC_PBT_TEST_PAUSE_AT``; their file events are not aimed at, the members' pause markers are."""

    def process_members(self, member: int) -> range:
        """The members that share ``member``'s process (``--slices``; itself alone without slices)."""
        count = int(getattr(self.args, "slices", 1) or 1)
        first = member - member % count
        return range(first, first + count)

    def mdir(self, member: int) -> Path:
        return self.ws / "members" / member_dirname(member)

    def update_pids(self) -> None:
        path = self.ws / "launcher.jsonl"
        try:
            with open(path, "rb") as fh:
                fh.seek(self.journal_pos)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self.journal_pos += end
        for line in data[:end].splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            m = e.get("member")
            if not isinstance(m, int):
                continue
            # The journal names a process by its first member; every member of the process shares its pid.
            sharing = self.process_members(m)
            if e.get("event") == "start":
                for k in sharing:
                    self.pids[k] = int(e["pid"])
                    self.starts.setdefault(k, []).append(float(e["time"]))
            elif e.get("event") in ("exit", "give_up"):
                for k in sharing:
                    self.pids[k] = None
                killed = any(k in self.last_kill for k in sharing)
                sigkilled = e.get("code") == -signal.SIGKILL
                expected = e.get("event") == "exit" and not sigkilled and sharing[0] in self.expected_exits
                if expected:
                    self.expected_exits.discard(sharing[0])
                ours = expected or (e.get("event") == "exit" and sigkilled and killed)
                if not ours:
                    self.unexpected_members.append(m)
                    self.unexpected_exits.append(
                        f"member {m}: {e.get('event')} code {e.get('code')} ({e.get('reason', '')})"
                    )

    def alive_pid(self, member: int) -> int | None:
        self.update_pids()
        pid = self.pids.get(member)
        if pid is None:
            return None
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        # Same process (exec restarts keep the pid), still this member: never kill a recycled pid.
        first = self.process_members(member)[0]
        if b"--pbt-index" not in cmd or cmd[cmd.index(b"--pbt-index") + 1] != str(first).encode():
            return None
        return pid

    def eligible(self, member: int) -> bool:
        """Not killed yet, or came back since the last kill (a launcher start) and published a record since."""
        killed = self.last_kill.get(member)
        if killed is None:
            return True
        self.update_pids()
        restarted = [t for t in self.starts.get(member, []) if t > killed]
        if not restarted:
            return False
        try:
            published = (self.mdir(member) / "record.json").stat().st_mtime
        except FileNotFoundError:
            return False
        return published > restarted[0]

    def try_kill(
        self,
        member: int,
        window: str,
        detail: str,
        landed: Callable[[], str | None],
        aimed: bool = True,
        held_pid: int | None = None,
        interrupt: Path | None = None,
        open_now: Callable[[], str | None] | None = None,
        paced: bool = True,
    ) -> bool:
        """Kill ``member``'s process group if the window still wants a kill; ``landed()`` (called once the
        process is dead) says where the kill landed, or ``None`` when the window had closed. ``aimed``: an
        event was just seen (counted; killed with probability ``--aim-probability``). ``held_pid``: the member
        process stopped itself at the window's pause point (the caller lets it go on unless this returns True).
        ``interrupt``: the held process's pause marker; it gets Ctrl-C (SIGINT) and is let go instead, and stops by
        itself. ``open_now``: the window's test before the kill, where it differs from ``landed``. ``paced=False``:
        the window was due when its opportunity was prepared (a planted fault), it need not be due again."""
        if aimed:
            self.opportunities[window] += 1
        due = (not paced or self.frequent_window_due(window)) and self.exploit_window_due(window)
        if self.quota.get(window, 0) <= 0 or not due or not self.eligible(member):
            return False
        # Exploit windows are rare (one per exploit): always aim at those; the frequent ones at --aim-probability.
        if aimed and window not in EXPLOIT_WINDOWS and self.rng.random() > self.args.aim_probability:
            return False
        pid = self.alive_pid(member)
        if pid is None or (held_pid is not None and pid != held_pid):
            return False
        if (open_now or landed)() is None:
            # Closed already (the driver was slow to wake up, e.g. on a loaded machine): a kill now would cost
            # a restart without testing the window. Wait for the next opportunity instead. (A member held at a
            # pause point is inside its window: closed there would be a bug, reported by the count.)
            self.closed_before_kill[window] += 1
            return False
        sig = signal.SIGINT if interrupt is not None else signal.SIGKILL
        if not _signal_group(pid, sig):
            return False
        if interrupt is not None:
            let_go(interrupt, pid)  # Ctrl-C is handled once the process runs again
        kill = Kill(time.time(), member, window, pid, detail, signal=sig.name)
        for k in self.process_members(member):  # a slice process takes all its members down
            self.last_kill[k] = kill.time
        # A process sent Ctrl-C goes on to its stop, and may reach a pause point on the way (another member of a
        # slices process, an exploit the stop waits for): it is let go there until it has exited.
        markers = [self.mdir(k) for k in self.process_members(member)] if interrupt is not None else []
        if _wait_dead(pid, self.args.deadline, markers):
            # First, before the launcher's next start can append to them (chaos_death): what the process left.
            left = {k: read_at_death(self.mdir(k)) for k in self.process_members(member)}
            for call in self.at_sigkill if sig == signal.SIGKILL else ():
                call(member)
            phase = landed()
            kill.landed, kill.phase = phase is not None, phase or "window already closed at death"
            kill.at_death = {k: examine(self.ws, k, self.mdir(k), left[k]) for k in self.process_members(member)}
        else:
            kill.phase = "process did not die within the deadline"
        if kill.landed:
            self.quota[window] -= 1
        self.kills.append(kill)
        problems = [p for d in kill.at_death.values() for p in d.problems]
        print(
            f"[chaos] {sig.name} member {member:03d} pid {pid} aiming at {window}: {detail}; "
            f"{'landed' if kill.landed else 'missed'}: {kill.phase}" + (f"; AT DEATH: {problems}" if problems else ""),
            flush=True,
        )
        return True

    def frequent_window_due(self, window: str) -> bool:
        """Windows that open all the time (a checkpoint write, a random moment) keep pace with the rare exploit
        windows instead of running ahead: each kill there costs a member restart, and a restarting member
        neither exploits nor serves as a donor, which would delay the rare windows (and the whole run)."""
        if window not in FREQUENT_WINDOWS:
            return True
        if getattr(self.args, "no_pace", False):
            # Not held back by the exploit windows, but level with the other frequent ones that still want kills:
            # the first event of a publish (its checkpoint's temp file) would otherwise take every kill, and no
            # member would ever reach the writer's windows or an exploit. A window that has all its kills holds no
            # other back (levelled with those too, `random`, which wants more, stopped one past their quota).
            wanting = [w for w in FREQUENT_WINDOWS if self.quota.get(w, 0) > 0]
            landed = {w: self.wanted[w] - self.quota[w] for w in wanting}
            return window not in landed or landed[window] <= min(landed.values())

        def progress(windows: tuple[str, ...]) -> float:
            wanted = sum(self.wanted.get(w, 0) for w in windows)
            return sum(self.wanted.get(w, 0) - self.quota.get(w, 0) for w in windows) / wanted if wanted else 1.0

        rare = progress(tuple(w for w in self.wanted if w not in FREQUENT_WINDOWS))
        return rare >= 1.0 or progress(FREQUENT_WINDOWS) < rare

    def exploit_window_due(self, window: str) -> bool:
        """An exploit's windows open one after another, so a kill in an earlier one ends the exploit before the later
        ones open: aimed at every time, the decision would take every exploit's kill. An earlier window takes a kill
        only while it is not ahead of a later one that still wants kills; a later window this run's path never opens
        (one after it opened and it did not, e.g. no donor copy for a donor in memory) holds nothing back."""
        if window not in EXPLOIT_SEQUENCE:
            return True

        def landed(w: str) -> int:
            return self.wanted.get(w, 0) - self.quota.get(w, 0)

        def opens(w: str) -> bool:
            after = EXPLOIT_SEQUENCE[EXPLOIT_SEQUENCE.index(w) + 1 :]
            return self.opportunities[w] > 0 or not any(self.opportunities[a] > 0 for a in after)

        later = EXPLOIT_SEQUENCE[EXPLOIT_SEQUENCE.index(window) + 1 :]
        return all(landed(window) <= landed(w) for w in later if self.quota.get(w, 0) > 0 and opens(w))

    def done(self) -> bool:
        return sum(self.quota.values()) <= 0

    def restart_delay_bound(self) -> float:
        """Delayed kills aim inside the restart: up to its median observed duration (``--restart-delay`` before
        any was observed)."""
        if not self.restart_durations:
            return self.args.restart_delay
        return statistics.median(self.restart_durations)


def _signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the member's process group (False when it is gone already)."""
    try:
        os.killpg(pid, sig)
        return True
    except ProcessLookupError:
        return False


def threads_alive(pid: int) -> bool:
    """Whether any thread of ``pid`` has yet to exit. The leader thread turns zombie (``Z`` in ``/proc/PID/stat``)
    while another thread may still be inside a system call it completes before it dies: a writer's ``rename`` of
    ``state.json`` can land after the leader is gone, so a death is read only once every thread has exited."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
            return True
    return False


def _wait_dead(pid: int, deadline_s: float, let_go_in: list[Path] | None = None) -> bool:
    """Wait until every thread of ``pid`` has exited (SIGKILL is asynchronous, see :func:`threads_alive`); False past
    the safety deadline. Where it stops itself at a pause point with its marker in one of the folders ``let_go_in``,
    it is let go."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not threads_alive(pid):
            return True
        state = process_state(pid)
        if let_go_in and state in ("T", "t"):
            for marker in (m for folder in let_go_in for m in folder.glob(f"{MARKER_PREFIX}*.{pid}.json")):
                let_go(marker, pid)
        time.sleep(0.0005)
    return False
