#!/usr/bin/env python
"""Chaos run: SIGKILL real CPU population members in the dangerous windows and at random, then audit.

A population of real rl_games PPO members (``async_pbt_isaaclab.examples.cpu_member``, Pendulum-v1)
runs under the local launcher (``python -m async_pbt_isaaclab.launch.local``, a separate process). By
default the members use the test fixture rule ``fixture_exploit_every_decision`` (every decision exploits
the best peer), so exploit windows keep coming at a steady rate whatever the returns; ``--rule dexpbt``
runs the production rule with no required gap instead. This driver SIGKILLs members' process groups (the
pid comes from the launcher's journal ``launcher.jsonl``, checked against ``/proc/PID/cmdline``), aiming at:

* ``checkpoint_write``: a temp file (``fsio.TEMP_MARKER``) appears in ``members/NNN/checkpoints/``,
  ``best.json`` is replaced, or retention deletes an old checkpoint (a publish in progress: checkpoint,
  best list and retention done, ``state.json`` not yet saved);
* ``donor_copy``: a file appears in ``members/NNN/incoming/`` (the verified copy of a donor checkpoint);
* ``restart_decided``: an exploit ``decision`` is appended to ``audit.jsonl`` (write-ahead: nothing acted
  on yet);
* ``restart_pending``: ``state.json`` is replaced with ``pending_exploit`` set (the exploit restart is in
  flight: ``os.execv`` and the new image's start, until ``exploit_applied``); killed after a random
  delay of up to the restart time observed so far, so every phase of the restart is hit;
* ``random``: at random moments.

It watches the workspace with inotify (Linux; polling elsewhere), so it reacts within about a millisecond
of the file event. After each SIGKILL it waits for the process to die and looks at the files it left: a
kill counts for its window only when the window was still open at death (the temp file or donor copy is
still there, ``state.json`` is older than the newest checkpoint, the exploit is still pending, ...);
otherwise it is reported as missed and the driver waits for the next opportunity (it also looks
before killing, and does not kill when the window has already closed). A member is killed
again only after it came back (a new launcher start) and published a record. The launcher sees the
SIGKILL as a crash and restarts the member, which resumes from its own last checkpoint.

Event-driven, no timing decides the result: the chaos phase lasts until every window has received its
quota of kills (members train with a large epoch cap, ``--iterations``, and the fixture rule keeps
producing exploit windows); then the driver stops the launcher (Ctrl-C), waits until every temp file
left by a kill is past ``--temp-grace``, and launches every member again on the same workspace (one
launcher each, ``--indices``) with an epoch target ``--finish-iterations`` past where it stopped and no
further exploit, so every member resumes and finishes. A
reader process reads every record with ``Workspace.read_records``, every ``state.json`` and ``best.json``,
and the checkpoint each record points to (verifying its sha256) for the whole run. ``--deadline`` is a
safety limit only (stops a hung run); a slow machine just takes longer.

Afterwards ``chaos_checks.verify`` checks, and prints:

1. no reader ever saw a partial or mismatched record, state or checkpoint (atomic replace: zero);
2. every member came back after every kill and finished (record status ``finished``, frame >= target);
3. every audit chain verifies (``verify_log``: hash chain + every decision replayed) and every
   member's lineage (``state.json``) matches its audit log: one exploit decision and one
   ``exploit_applied`` per generation, donor checkpoint and sha as the decision saw them;
4. every checkpoint a record, ``state.json`` (last, best) or ``best.json`` refers to exists and matches
   its sha256; lineage donor checkpoints either match or were removed later by the donor's retention;
5. no temp file older than ``--temp-grace`` and no donor copy is left anywhere in the workspace;
6. exploits: decided, applied (the member verified the recipient checkpoint's sha256 before loading),
   aborted (with the reasons), and lost;
7. the RNG stream continues across kills (each decision's ``rng_before`` is the previous ``rng_after``).

    python scripts/reliability/chaos.py                             # 4 members, 40 kills
    python scripts/reliability/chaos.py --members 3 --kills 5       # CI size (tests/integration/test_chaos.py)
    python scripts/reliability/chaos.py --rule dexpbt               # the production rule, no required gap

Exit status 0 when every check passes, 1 otherwise. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import json
import os
import random
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.audit import read_entries
from async_pbt_isaaclab.core.config import TEST_FIXTURE_ENV
from async_pbt_isaaclab.core.member_state import load_state
from async_pbt_isaaclab.core.records import RecordError
from async_pbt_isaaclab.core.workspace import Workspace, member_dirname, parse_member_dirname

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chaos_checks

WINDOWS = chaos_checks.WINDOWS
FRAMES_PER_EPOCH = chaos_checks.FRAMES_PER_EPOCH
FREQUENT_WINDOWS = ("checkpoint_write", "random")
"""Windows that open at any time; the others need an exploit decision."""
FIXTURE_RULE = "fixture_exploit_every_decision"
"""The test fixture rule the members use unless ``--rule dexpbt``."""


# ============================================================================ member command


def member_command(args: argparse.Namespace, workspace: Path, iterations: int, finishing: bool = False) -> list[str]:
    """The cpu_member command (the launcher appends --pbt-workspace/--pbt-members/--pbt-index)."""
    if args.rule == "dexpbt":
        # The worst member exploits at nearly every decision: no gap required, no protection.
        rule = ["--pbt-rule", "dexpbt", "--pbt-gap-std-fraction", "0", "--pbt-gap-donor-fraction", "0",
                "--pbt-protect-interval-best", "false"]
    else:
        rule = ["--pbt-rule", FIXTURE_RULE]
    return [
        sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations", str(iterations), "--num_envs", "8", "--train-dir", str(workspace / "runs"),
        *rule,
        "--pbt-interval-steps", str(args.interval),
        # The finishing launch starts no further exploit (each would cost a process start).
        *(["--pbt-max-restarts", "0"] if finishing else []),
        "--pbt-start-grace-frames", "0", "--pbt-restart-grace-frames", str(args.interval // 2),
        "--pbt-min-episodes", "4", "--pbt-window", "16",
        # Kills make members progress at different rates: peers are compared at matching progress anyway; a
        # member that lags far behind must not drop out of the comparison either.
        "--pbt-max-frame-lag", "100000000",
        # The restart windows below need the exec path (in-process exploits open none of them).
        "--pbt-exploit-mode", args.exploit_mode,
        "--pbt-heartbeat-interval-s", "1", "--pbt-temp-grace-s", str(args.temp_grace),
        "--pbt-keep-last-checkpoints", str(args.keep_last), "--pbt-keep-best-checkpoints", str(args.keep_best),
        "agent.params.torch_threads=1",
        "agent.params.config.horizon_length=64", "agent.params.config.minibatch_size=256",
        "agent.params.config.mini_epochs=2",
        "agent.pbt.mutation_rate=1.0",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.pbt.mutation.entropy_coef=mutate_float",
        "agent.pbt.mutation.gamma=mutate_discount",
    ]


def launcher_command(
    args: argparse.Namespace, workspace: Path, iterations: int, member: int | None = None
) -> list[str]:
    """The launcher command: every member (the chaos phase), or only ``member`` (its finishing launch)."""
    env = ["--env", f"{TEST_FIXTURE_ENV}={FIXTURE_RULE}"] if args.rule != "dexpbt" else []
    finishing = member is not None
    return [
        sys.executable, "-m", "async_pbt_isaaclab.launch.local", "--members", str(args.members),
        "--workspace", str(workspace), "--gpus", "none", *env, *(["--indices", str(member)] if finishing else []),
        # A SIGKILL from outside is a crash to the launcher: restart quickly, and never give up on a
        # member killed a few times in a row (the driver kills a member again only after it published).
        # The stop graces are safety limits for a loaded machine: members stop on Ctrl-C long before.
        "--max-retries", "1000", "--retry-window", "60", "--backoff", "0.2",
        "--progress-interval", "30", "--stop-grace", "300", "--term-grace", "60",
        "--", *member_command(args, workspace, iterations, finishing),
    ]


# ============================================================================ inotify


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
            name = data[i + 16:i + 16 + length].split(b"\0", 1)[0].decode(errors="replace")
            out.append((wd, mask, name))
            i += 16 + length
        return out

    def close(self) -> None:
        os.close(self.fd)


# ============================================================================ reader process


def reader_main(root: str, stop_file: str, out_path: str, checkpoint_every: int = 5) -> None:
    """Read the population continuously as a peer / `async-pbt status` would; count what was seen.
    Runs in its own process (``chaos.py --reader-process ROOT STOP_FILE OUT``) until ``stop_file`` exists."""
    ws = Workspace(root)
    stop = Path(stop_file)
    c: Counter = Counter()
    samples: list[str] = []
    i = 0
    while not stop.exists():
        i += 1
        try:
            records, errors = ws.read_records()
        except Exception as exc:  # noqa: BLE001 - counted: read_records must never raise
            c["read_records_raised"] += 1
            samples.append(f"read_records raised {exc!r}")
            records, errors = {}, {}
        c["record_reads"] += len(records)
        c["record_errors"] += len(errors)
        samples += [f"record: {e}" for e in errors.values()][:3]
        for index in ws.member_indices():
            mdir = ws.member_dir(index)
            try:
                if load_state(mdir / "state.json") is not None:
                    c["state_reads"] += 1
            except RecordError as exc:
                c["state_errors"] += 1
                samples.append(f"state: {exc}")
            try:
                raw = (mdir / "best.json").read_bytes()
                json.loads(raw)
                c["best_reads"] += 1
            except FileNotFoundError:
                pass
            except ValueError as exc:
                c["best_errors"] += 1
                samples.append(f"best.json: {exc}")
        if i % checkpoint_every == 0:
            for rec in records.values():
                if not rec.checkpoint:
                    continue
                try:
                    data = ws.checkpoint_path(rec.checkpoint).read_bytes()
                except FileNotFoundError:
                    c["checkpoint_gone"] += 1  # replaced by a newer one since the record was read: reported, fine
                    continue
                if hashlib.sha256(data).hexdigest() == rec.checkpoint_sha256:
                    c["checkpoint_verified"] += 1
                else:
                    c["checkpoint_mismatch"] += 1  # refused (never used); reported
                    samples.append(f"checkpoint {rec.checkpoint}: content does not match the record's sha256")
        time.sleep(0.01)
    Path(out_path).write_text(json.dumps({"counts": dict(c), "samples": samples[:20]}))

# ============================================================================ driver


@dataclass
class Kill:
    time: float
    """Wall time of the SIGKILL."""
    member: int
    """The member whose process group was killed."""
    window: str
    """The window aimed at (one of ``WINDOWS``)."""
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
            if e.get("event") == "start":
                self.pids[m] = int(e["pid"])
                self.starts.setdefault(m, []).append(float(e["time"]))
            elif e.get("event") in ("exit", "give_up"):
                self.pids[m] = None
                ours = e.get("event") == "exit" and e.get("code") == -signal.SIGKILL and m in self.last_kill
                if not ours:
                    self.unexpected_exits.append(f"member {m}: {e.get('event')} code {e.get('code')} "
                                                 f"({e.get('reason', '')})")

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
        if b"--pbt-index" not in cmd or cmd[cmd.index(b"--pbt-index") + 1] != str(member).encode():
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

    def try_kill(self, member: int, window: str, detail: str, landed: Callable[[], str | None],
                 aimed: bool = True) -> bool:
        """Kill ``member``'s process group if the window still wants a kill; ``landed()`` (called once the
        process is dead) says where the kill landed, or ``None`` when the window had closed. ``aimed``: an
        event was just seen (counted; killed with probability ``--aim-probability``)."""
        if aimed:
            self.opportunities[window] += 1
        if self.quota.get(window, 0) <= 0 or not self.frequent_window_due(window) or not self.eligible(member):
            return False
        # Donor copies and restarts in flight are rare (one per exploit): always aim at those; the frequent
        # windows at --aim-probability.
        if aimed and window not in ("donor_copy", "restart_pending") and self.rng.random() > self.args.aim_probability:
            return False
        pid = self.alive_pid(member)
        if pid is None:
            return False
        if landed() is None:
            # Closed already (the driver was slow to wake up, e.g. on a loaded machine): a kill now would cost a
            # restart without testing the window. Wait for the next opportunity instead.
            self.closed_before_kill[window] += 1
            return False
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        kill = Kill(time.time(), member, window, pid, detail)
        self.last_kill[member] = kill.time
        if _wait_dead(pid, self.args.deadline):
            phase = landed()
            kill.landed, kill.phase = phase is not None, phase or "window already closed at death"
        else:
            kill.phase = "process did not die within the deadline"
        if kill.landed:
            self.quota[window] -= 1
        self.kills.append(kill)
        print(f"[chaos] SIGKILL member {member:03d} pid {pid} aiming at {window}: {detail}; "
              f"{'landed' if kill.landed else 'missed'}: {kill.phase}", flush=True)
        return True

    def frequent_window_due(self, window: str) -> bool:
        """Windows that open all the time (a checkpoint write, a random moment) keep pace with the rare exploit
        windows instead of running ahead: each kill there costs a member restart, and a restarting member
        neither exploits nor serves as a donor, which would delay the rare windows (and the whole run)."""
        if window not in FREQUENT_WINDOWS:
            return True

        def progress(windows: tuple[str, ...]) -> float:
            wanted = sum(self.wanted[w] for w in windows)
            return sum(self.wanted[w] - self.quota[w] for w in windows) / wanted if wanted else 1.0

        rare = progress(tuple(w for w in WINDOWS if w not in FREQUENT_WINDOWS))
        return rare >= 1.0 or progress(FREQUENT_WINDOWS) < rare

    def done(self) -> bool:
        return sum(self.quota.values()) <= 0

    def restart_delay_bound(self) -> float:
        """Delayed kills aim inside the restart: up to its median observed duration (``--restart-delay`` before
        any was observed)."""
        if not self.restart_durations:
            return self.args.restart_delay
        return statistics.median(self.restart_durations)


def _wait_dead(pid: int, deadline_s: float) -> bool:
    """Wait until ``pid`` is a zombie or reaped (SIGKILL is asynchronous); False past the safety deadline."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return True
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.0005)
    return False


def _member_of(path: Path, ws: Path) -> int | None:
    try:
        rel = path.relative_to(ws / "members")
    except ValueError:
        return None
    return parse_member_dirname(rel.parts[0]) if rel.parts else None


# ------------------------------------------------------------ where a kill landed (read after death)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def publish_in_progress(mdir: Path) -> str | None:
    """A checkpoint being written, or published while ``state.json`` does not name it yet."""
    try:
        files = list((mdir / "checkpoints").iterdir())
    except FileNotFoundError:
        return None
    if any(fsio.is_temp_file(p) for p in files):
        return "checkpoint temp file being written"
    newest = max((_mtime_ns(p) for p in files if p.suffix == ".pth"), default=0)
    if newest and _mtime_ns(mdir / "state.json") < newest:
        best_after = _mtime_ns(mdir / "best.json") >= newest
        return ("checkpoint and best.json published, state.json not yet" if best_after
                else "checkpoint published, state.json not yet")
    return None


def donor_copy_in_flight(mdir: Path) -> str | None:
    copies = list((mdir / "incoming").glob("*")) if (mdir / "incoming").is_dir() else []
    if not copies:
        return None
    return ("donor copy in incoming/: being copied (temp file)" if any(fsio.is_temp_file(p) for p in copies)
            else "donor copy in incoming/: verified, not yet loaded")


def decision_not_acted_on(mdir: Path, seq: int, generation: int | None, rng_after: Any) -> str | None:
    """The exploit decision ``seq`` (taken at ``generation``) is logged; no donor copy, pending exploit, abort
    or any other audit entry has followed it."""
    if donor_copy_in_flight(mdir):
        return None
    try:
        state = load_state(mdir / "state.json")
    except RecordError:
        return None
    if state is None or state.pending_exploit or (generation is not None and state.generation != generation):
        return None
    later = [e for _, e, _ in read_entries(mdir / "audit.jsonl") if e is not None and e.get("seq", -1) > seq]
    if later:
        return None
    if state.rng_state != rng_after:
        return "decision logged, state.json not yet saved after it"
    if publish_in_progress(mdir):
        return "decision logged, recipient checkpoint being written"
    return "decision logged and state.json saved, donor not yet fetched"


def restart_in_flight(mdir: Path, checkpoint: str, execd: bool) -> str | None:
    """The exploit restart to ``checkpoint`` has not applied it yet (``execd``: the image after execv)."""
    try:
        state = load_state(mdir / "state.json")
    except RecordError:
        return None
    if state is None or not state.pending_exploit or state.pending_exploit.get("checkpoint") != checkpoint:
        return None
    return ("restart in flight: " + ("new image after execv" if execd else
                                     "process without --checkpoint (before execv, or a launcher restart)")
            + ", exploit not yet applied")


# ============================================================================ the run


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
        self.pending_seen: dict[int, tuple[str, float]] = {}
        self.chaos_on = False
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
        if not self.chaos_on:
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
            if (
                not self.chaos_on
                or e.get("kind") != "decision"
                or (e.get("decision") or {}).get("outcome") != "exploit"
            ):
                continue
            seq, rng_after = e.get("seq", -1), e.get("rng_after")
            generation = ((e.get("inputs") or {}).get("me") or {}).get("generation")
            self.driver.try_kill(member, "restart_decided", f"exploit decision seq {seq} logged",
                                 functools.partial(decision_not_acted_on, mdir, seq, generation, rng_after))

    def _on_state(self, member: int, path: Path) -> None:
        try:
            state = load_state(path)
        except RecordError:
            return
        pending = state.pending_exploit if state else None
        seen = self.pending_seen.get(member)
        now = time.monotonic()
        if seen is not None and (pending is None or pending.get("checkpoint") != seen[0]):
            self.driver.restart_durations.append(now - seen[1])
            del self.pending_seen[member]
        if not pending or (seen is not None and seen[0] == pending.get("checkpoint")):
            return
        self.pending_seen[member] = (pending["checkpoint"], now)
        d = self.driver
        if not self.chaos_on:
            return
        d.opportunities["restart_pending"] += 1
        if d.quota["restart_pending"] > len(d.delayed):
            delay = self.rng.random() * d.restart_delay_bound()
            checkpoint = pending["checkpoint"]
            d.delayed.append((now + delay, member, "restart_pending",
                              f"{delay:.2f} s after pending_exploit {checkpoint}", checkpoint))

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
            if not live or not d.try_kill(self.rng.choice(live), "random", "random moment",
                                          lambda: "random moment", aimed=False):
                d.random_times.insert(0, now + 0.5)  # nobody to kill right now: try again shortly
                break

    def close(self) -> None:
        if self.ino is not None:
            self.ino.close()


def _launch(
    args: argparse.Namespace, ws: Path, root: Path, iterations: int, member: int | None = None
) -> subprocess.Popen:
    log = open(root / ("launcher.log" if member is None else f"launcher_finish_{member:03d}.log"), "wb")
    proc = subprocess.Popen(launcher_command(args, ws, iterations, member), stdout=log, stderr=subprocess.STDOUT,
                            cwd=root, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    log.close()  # the child holds its own descriptor
    return proc


def _stop(launcher: subprocess.Popen, deadline: float) -> int:
    """Ctrl-C to the launcher (it stops every member gracefully); wait for it up to the safety deadline."""
    launcher.send_signal(signal.SIGINT)
    try:
        return launcher.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        launcher.kill()
        return launcher.wait()


def _all_published(ws: Path, members: int) -> bool:
    return all((ws / "members" / member_dirname(m) / "record.json").exists() for m in range(members))


def _wait_temp_files_past_grace(ws: Path, grace: float, deadline: float) -> None:
    """Members remove a killed writer's temp file at start only once it is past the grace period: wait until
    every temp file in the workspace is, so the second launch cleans them up whatever the timing."""
    while time.monotonic() < deadline:
        ages = []
        for dirpath, _dirs, files in os.walk(ws):
            for name in files:
                p = Path(dirpath) / name
                if fsio.is_temp_file(p):
                    try:
                        ages.append(time.time() - p.stat().st_mtime)
                    except FileNotFoundError:
                        pass
        if not ages or min(ages) > grace:
            return
        time.sleep(grace - min(ages) + 0.05)


def run_chaos(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.workdir or tempfile.mkdtemp(prefix="pbt-chaos-")).absolute()
    ws = root / "ws"
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "members").mkdir(parents=True)
    rng = random.Random(args.seed)
    per_window = max(1, args.kills // len(WINDOWS))
    quota = {w: per_window for w in WINDOWS[:-1]}
    quota["random"] = max(1, args.kills - per_window * (len(WINDOWS) - 1))
    driver = Driver(args, ws, rng, quota=dict(quota), wanted=dict(quota))
    notes: list[str] = []

    reader_out, reader_stop = root / "reader.json", root / "reader.stop"
    reader_stop.unlink(missing_ok=True)
    reader = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--reader-process", str(ws),
                               str(reader_stop), str(reader_out)])
    t0 = time.monotonic()
    deadline = t0 + args.deadline
    watcher = Watcher(driver, rng)
    # -- first launch: chaos until every window has its kills
    launcher = _launch(args, ws, root, args.iterations)
    print(f"[chaos] workspace {ws}; launcher pid {launcher.pid}; landed kills wanted {quota}", flush=True)
    poll_last = 0.0
    chaos_started = None
    while launcher.poll() is None and not driver.done() and time.monotonic() < deadline:
        now = time.monotonic()
        if now - poll_last > 0.5:
            poll_last = now
            watcher.scan_dirs()
            driver.update_pids()
            if driver.unexpected_exits:
                notes.append(f"stopped early: a member exited without being killed: {driver.unexpected_exits}")
                break
        if chaos_started is None and _all_published(ws, args.members):
            # Kills start once every member is training (published a record).
            chaos_started = now
            watcher.chaos_on = True
            driver.random_times = sorted(now + rng.random() * args.random_spread for _ in range(quota["random"]))
            print(f"[chaos] every member published after {now - t0:.1f} s: kills start", flush=True)
        watcher.poll(0.05)
        watcher.fire_due()
    watcher.chaos_on = False
    chaos_s = time.monotonic() - t0
    if not driver.done():
        why = ("the safety deadline --deadline passed" if time.monotonic() >= deadline
               else f"the population ended first (launcher exit {launcher.poll()}; --iterations {args.iterations})"
               if launcher.poll() is not None else "a member exited without being killed")
        notes.append(f"windows still wanting kills {driver.quota}: {why}")
    first_code = launcher.poll()
    if first_code is None:
        print(f"[chaos] {'every window received its kills' if driver.done() else 'chaos phase cut short'} after "
              f"{chaos_s:.1f} s: stopping the population", flush=True)
        stop_at = time.monotonic()
        first_code = _stop(launcher, deadline)
        print(f"[chaos] population stopped in {time.monotonic() - stop_at:.1f} s", flush=True)
    watcher.close()
    driver.update_pids()
    # -- second launch: every member resumes and finishes a few epochs past where it stopped. One launcher per
    # member, so a member that spent the chaos phase restarting need not catch up with the furthest one.
    records, _errors = Workspace(ws).read_records()
    targets = {m: (records[m].frame if m in records else 0) // FRAMES_PER_EPOCH + args.finish_iterations
               for m in range(args.members)}
    _wait_temp_files_past_grace(ws, args.temp_grace, deadline)
    finishing = {m: _launch(args, ws, root, targets[m], member=m) for m in range(args.members)}
    print(f"[chaos] finishing: members train to epochs {targets}", flush=True)
    finish_codes: dict[int, int | None] = {}
    for m, proc in finishing.items():
        try:
            finish_codes[m] = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            notes.append(f"member {m}'s finishing launch passed the safety deadline --deadline")
            finish_codes[m] = _stop(proc, time.monotonic() + 120)
    print(f"[chaos] finished: launcher exits {finish_codes} after {time.monotonic() - t0:.1f} s", flush=True)
    elapsed = time.monotonic() - t0
    reader_stop.write_text("stop")
    try:
        reader.wait(120)
    except subprocess.TimeoutExpired:
        reader.kill()
    driver.update_pids()
    checks_at = time.monotonic()
    figures = chaos_checks.verify(ws, args, driver, reader_out, first_code, finish_codes, targets, notes)
    figures.update(workspace=str(ws), elapsed_s=round(elapsed, 1), chaos_s=round(chaos_s, 1),
                   checks_s=round(time.monotonic() - checks_at, 1), kills_wanted=quota)
    return figures


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--kills", type=int, default=40,
                   help="landed SIGKILLs wanted in total (a fifth per aimed window, the rest random)")
    p.add_argument("--rule", choices=("fixture", "dexpbt"), default="fixture",
                   help=f"selection rule of the members: the test fixture {FIXTURE_RULE} (default) or dexpbt")
    p.add_argument("--exploit-mode", choices=("restart", "inprocess", "auto"), default="restart",
                   help="--pbt-exploit-mode of the members; the restart-in-flight window needs 'restart'")
    p.add_argument("--iterations", type=int, default=2000,
                   help="epoch cap of the first launch (512 frames each); the chaos phase normally ends long before")
    p.add_argument("--finish-iterations", type=int, default=4,
                   help="epochs past the furthest member that the second launch trains every member to")
    p.add_argument("--interval", type=int, default=2048, help="--pbt-interval-steps (frames between decisions)")
    p.add_argument("--deadline", type=float, default=3600.0,
                   help="safety limit in seconds for the whole run (a hung run fails instead of waiting forever)")
    p.add_argument("--random-spread", type=float, default=30.0,
                   help="random kills happen within this many seconds after every member has published")
    p.add_argument("--aim-probability", type=float, default=0.35, help="chance to kill at an aimed window event")
    p.add_argument("--restart-delay", type=float, default=6.0,
                   help="bound of the delay of a restart-window kill until a restart has been observed")
    p.add_argument("--temp-grace", type=float, default=2.0, help="--pbt-temp-grace-s of the members")
    p.add_argument("--keep-last", type=int, default=2, help="--pbt-keep-last-checkpoints of the members")
    p.add_argument("--keep-best", type=int, default=2, help="--pbt-keep-best-checkpoints of the members")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="folder for the workspace and logs (default: a temp folder)")
    p.add_argument("--json", default=None, help="write the figures to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--reader-process"]:
        reader_main(*argv[1:4])
        return 0
    args = build_parser().parse_args(argv)
    figures = run_chaos(args)
    for line in chaos_checks.report(figures):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 0 if not figures["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
