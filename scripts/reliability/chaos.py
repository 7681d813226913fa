#!/usr/bin/env python
"""Chaos run: SIGKILL real CPU population members at random and in the dangerous windows, then audit.

A population of real rl_games PPO members (``async_pbt_isaaclab.examples.cpu_member``, Pendulum-v1)
runs under the local launcher (``python -m async_pbt_isaaclab.launch.local``, a separate process) with
a selection rule tuned for frequent exploits: ``dexpbt`` with no required gap, no interval-best
protection and no start grace, so the worst member copies the best at nearly every decision. While it
trains, this driver SIGKILLs members' process groups (the pid comes from the launcher's journal
``launcher.jsonl``, checked against ``/proc/PID/cmdline``), aiming at:

* ``checkpoint_write``: a temp file (``fsio.TEMP_MARKER``) appears in ``members/NNN/checkpoints/``,
  ``best.json`` is replaced, or retention deletes an old checkpoint (a publish in progress: checkpoint,
  best list and retention done, ``state.json`` not yet saved);
* ``donor_copy``: a file appears in ``members/NNN/incoming/`` (the verified copy of a donor checkpoint);
* ``restart_decided``: an exploit ``decision`` is appended to ``audit.jsonl`` (write-ahead: nothing acted
  on yet, ``state.json`` not yet saved with the RNG state after the decision);
* ``restart_pending``: ``state.json`` is replaced with ``pending_exploit`` set (the exploit restart is in
  flight: ``os.execv`` and the new image's start, until ``exploit_applied``); killed after a random
  delay of up to ``--restart-delay`` seconds so every phase of the restart is hit;
* ``random``: at random moments.

It watches the workspace with inotify (Linux; polling elsewhere), so it reacts within a millisecond
of the file appearing. The launcher sees the SIGKILL as a crash and restarts the member (backoff
0.2 s, retries within a 30 s sliding window), which resumes from its own last checkpoint.

A reader process meanwhile reads every record with ``Workspace.read_records``, every ``state.json``
and ``best.json``, and the checkpoint each record points to (verifying it against the record's sha256).

Afterwards it checks, and prints:

1. no reader ever saw a partial or mismatched record, state or checkpoint (atomic replace: zero);
2. every member came back after every kill and finished (record status ``finished``, frame >= target);
3. every audit chain verifies (``verify_log``: hash chain + every decision replayed) and every
   member's lineage (``state.json``) matches its audit log: one exploit decision and one
   ``exploit_applied`` per generation, donor checkpoint and sha as the decision saw them;
4. every checkpoint a record, ``state.json`` (last, best) or ``best.json`` refers to exists and matches
   its sha256; lineage donor checkpoints either match or were removed later by the donor's retention;
5. no temp file older than ``--temp-grace`` is left anywhere in the workspace;
6. exploits: decided, applied (the member verified the recipient checkpoint's sha256 before loading),
   aborted (with the reasons, and whether the donor file had been pinned), and lost;
7. the RNG stream continues across kills (each decision's ``rng_before`` is the previous ``rng_after``).

    python scripts/benchmarks/chaos.py                       # 4 members, 40 kills, about 3-7 minutes
    python scripts/benchmarks/chaos.py --members 3 --kills 4 --iterations 40    # CI size

Exit status 0 when every check passes, 1 otherwise. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.audit import read_entries, verify_log
from async_pbt_isaaclab.core.member_state import load_state
from async_pbt_isaaclab.core.records import RecordError
from async_pbt_isaaclab.core.workspace import Workspace, member_dirname, parse_member_dirname

WINDOWS = ("checkpoint_write", "donor_copy", "restart_decided", "restart_pending", "random")
"""Kill windows, in the order they are reported (the quota is split evenly, the rest goes to random)."""

FRAMES_PER_EPOCH = 8 * 64
"""num_envs x horizon_length of the member command below."""


# ============================================================================ member command


def member_command(args: argparse.Namespace, workspace: Path) -> list[str]:
    """The cpu_member command (the launcher appends --pbt-workspace/--pbt-members/--pbt-index)."""
    return [
        sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member",
        "--max_iterations", str(args.iterations), "--num_envs", "8", "--train-dir", str(workspace / "runs"),
        "--pbt-rule", "dexpbt",
        "--pbt-interval-steps", str(args.interval),
        # The worst member exploits at every decision: no gap required, no protection, no start grace.
        "--pbt-gap-std-fraction", "0", "--pbt-gap-leader-fraction", "0", "--pbt-protect-interval-best", "false",
        "--pbt-start-grace-frames", "0", "--pbt-restart-grace-frames", str(args.interval // 2),
        "--pbt-min-episodes", "4", "--pbt-window", "16",
        # Kills make members progress at different rates: compare them anyway.
        "--pbt-frame-tolerance", "100000000", "--pbt-max-frame-lag", "100000000",
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


def launcher_command(args: argparse.Namespace, workspace: Path) -> list[str]:
    return [
        sys.executable, "-m", "async_pbt_isaaclab.launch.local", "--members", str(args.members),
        "--workspace", str(workspace), "--gpus", "none",
        # A SIGKILL from outside is a crash to the launcher: restart quickly, and never give up on a
        # member killed a few times in a row (more than 20 crashes within 30 s would be a crash loop).
        "--max-retries", "20", "--retry-window", "30", "--backoff", "0.2",
        "--progress-interval", "30", "--stop-grace", "20", "--term-grace", "5",
        "--", *member_command(args, workspace),
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
    member: int
    window: str
    pid: int
    detail: str
    came_back: bool = False


@dataclass
class Driver:
    args: argparse.Namespace
    ws: Path
    rng: random.Random
    pids: dict[int, int | None] = field(default_factory=dict)
    started_at: dict[int, float] = field(default_factory=dict)
    journal_pos: int = 0
    kills: list[Kill] = field(default_factory=list)
    quota: dict[str, int] = field(default_factory=dict)
    opportunities: Counter = field(default_factory=Counter)
    last_kill: dict[int, float] = field(default_factory=dict)
    delayed: list[tuple[float, int, str, str]] = field(default_factory=list)
    random_times: list[float] = field(default_factory=list)

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
            if e.get("event") == "start" and isinstance(m, int):
                self.pids[m] = int(e["pid"])
                self.started_at[m] = time.monotonic()
            elif e.get("event") in ("exit", "give_up") and isinstance(m, int):
                self.pids[m] = None

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
        now = time.monotonic()
        # Let a restarted member get going again, and do not kill the same one back to back.
        return (now - self.last_kill.get(member, -1e9) >= self.args.min_gap
                and now - self.started_at.get(member, now) >= 0.0)

    def try_kill(self, member: int, window: str, detail: str, aimed: bool = True) -> bool:
        """Kill ``member``'s process group if the window's quota allows. ``aimed``: an event was just
        seen (counted; killed with probability ``--aim-probability``); otherwise a scheduled kill."""
        if aimed:
            self.opportunities[window] += 1
        if self.quota.get(window, 0) <= 0 or not self.eligible(member):
            return False
        # Donor copies and restarts in flight are rare (one per exploit, and other windows kill many exploits
        # before they get there): always aim at those; the frequent windows at --aim-probability.
        if aimed and window not in ("donor_copy", "restart_pending") and self.rng.random() > self.args.aim_probability:
            return False
        pid = self.alive_pid(member)
        if pid is None:
            return False
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.quota[window] -= 1
        self.last_kill[member] = time.monotonic()
        self.kills.append(Kill(time.time(), member, window, pid, detail))
        print(f"[chaos] SIGKILL member {member:03d} pid {pid} in window {window}: {detail}", flush=True)
        return True

    def done(self) -> bool:
        return sum(self.quota.values()) <= 0 and not self.delayed


def _member_of(path: Path, ws: Path) -> int | None:
    try:
        rel = path.relative_to(ws / "members")
    except ValueError:
        return None
    return parse_member_dirname(rel.parts[0]) if rel.parts else None


def run_chaos(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.workdir or tempfile.mkdtemp(prefix="pbt-chaos-")).absolute()
    ws = root / "ws"
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    (ws / "members").mkdir()
    rng = random.Random(args.seed)
    per_window = max(1, args.kills // len(WINDOWS))
    quota = {w: per_window for w in WINDOWS[:-1]}
    quota["random"] = max(0, args.kills - per_window * (len(WINDOWS) - 1))
    driver = Driver(args, ws, rng, quota=quota)

    reader_out, reader_stop = root / "reader.json", root / "reader.stop"
    reader_stop.unlink(missing_ok=True)
    reader = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--reader-process", str(ws),
                               str(reader_stop), str(reader_out)])

    log = open(root / "launcher.log", "wb")
    t0 = time.monotonic()
    launcher = subprocess.Popen(launcher_command(args, ws), stdout=log, stderr=subprocess.STDOUT,
                                cwd=root, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    print(f"[chaos] workspace {ws}; launcher pid {launcher.pid}; kills planned {quota}", flush=True)
    chaos_end = t0 + args.duration
    # Random kills in the first half of the chaos window, so they happen before members finish.
    driver.random_times = sorted(t0 + args.warmup + rng.random() * 0.5 * (args.duration - args.warmup)
                                 for _ in range(quota["random"]))

    try:
        ino: Inotify | None = Inotify()
    except (OSError, AttributeError):
        ino = None
    watched: dict[int, Path] = {}
    watched_paths: set[Path] = set()

    def watch(path: Path, mask: int) -> None:
        if ino is None or path in watched_paths or not path.is_dir():
            return
        try:
            watched[ino.add(path, mask)] = path
            watched_paths.add(path)
        except OSError:
            pass

    member_mask = Inotify.IN_CREATE | Inotify.IN_MOVED_TO | Inotify.IN_MODIFY
    audit_pos: dict[int, int] = {}
    watch(ws / "members", Inotify.IN_CREATE)
    seen_pending: dict[int, str] = {}

    def scan_dirs() -> None:
        for mdir in (ws / "members").iterdir():
            if parse_member_dirname(mdir.name) is None:
                continue
            watch(mdir, member_mask)
            watch(mdir / "checkpoints", Inotify.IN_CREATE | Inotify.IN_DELETE)
            watch(mdir / "incoming", Inotify.IN_CREATE)

    def on_file(path: Path, deleted: bool = False) -> None:
        member = _member_of(path, ws)
        if member is None or time.monotonic() < t0 + args.warmup:
            return
        parent = path.parent.name
        if deleted:
            if parent == "checkpoints" and not fsio.is_temp_file(path):
                driver.try_kill(member, "checkpoint_write", f"{path.name} deleted by retention, state.json not yet saved")
            return
        if parent == "checkpoints" and fsio.TEMP_MARKER in path.name:
            driver.try_kill(member, "checkpoint_write", f"{path.name} being written")
        elif parent == "incoming":
            driver.try_kill(member, "donor_copy", f"incoming/{path.name} being copied")
        elif path.name == "best.json":
            driver.try_kill(member, "checkpoint_write", "best.json published, state.json not yet")
        elif path.name == "audit.jsonl":
            try:
                with open(path, "rb") as fh:
                    fh.seek(audit_pos.get(member, 0))
                    data = fh.read()
            except FileNotFoundError:
                return
            end = data.rfind(b"\n") + 1
            audit_pos[member] = audit_pos.get(member, 0) + end
            for line in data[:end].splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                fresh = isinstance(e.get("time"), (int, float)) and time.time() - e["time"] < 0.5
                if fresh and e.get("kind") == "decision" and (e.get("decision") or {}).get("outcome") == "exploit":
                    driver.try_kill(member, "restart_decided", f"exploit decision seq {e.get('seq')} just logged")
        elif path.name == "state.json":
            try:
                state = load_state(path)
            except RecordError:
                return
            pending = state.pending_exploit if state else None
            if pending and seen_pending.get(member) != pending.get("checkpoint"):
                seen_pending[member] = pending["checkpoint"]
                driver.opportunities["restart_pending"] += 1
                if driver.quota["restart_pending"] > len(driver.delayed):
                    delay = rng.random() * args.restart_delay
                    driver.delayed.append((time.monotonic() + delay, member, "restart_pending",
                                           f"{delay:.2f} s after pending_exploit {pending['checkpoint']}"))

    poll_last = 0.0
    while launcher.poll() is None:
        now = time.monotonic()
        if now > chaos_end + args.finish_timeout:
            print("[chaos] timeout: stopping the launcher", flush=True)
            launcher.send_signal(signal.SIGINT)
            launcher.wait(60)
            break
        chaos_on = now < chaos_end and not driver.done()
        if now - poll_last > 0.5:
            poll_last = now
            scan_dirs()
            driver.update_pids()
        if not chaos_on:
            time.sleep(0.2)
            continue
        if ino is not None:
            for wd, mask, name in ino.read(0.05):
                base = watched.get(wd)
                if base is None or not name:
                    continue
                path = base / name
                if mask & Inotify.IN_ISDIR:
                    scan_dirs()
                    continue
                on_file(path, deleted=bool(mask & Inotify.IN_DELETE))
        else:  # polling fallback
            for mdir in (ws / "members").iterdir():
                for sub in ("checkpoints", "incoming"):
                    try:
                        for p in (mdir / sub).iterdir():
                            on_file(p)
                    except FileNotFoundError:
                        pass
                on_file(mdir / "state.json")
            time.sleep(0.005)
        # Delayed (restart window) and random kills.
        for item in list(driver.delayed):
            when, member, window, detail = item
            if now >= when:
                driver.delayed.remove(item)
                state = None
                try:
                    state = load_state(ws.joinpath("members", member_dirname(member), "state.json"))
                except RecordError:
                    pass
                phase = "exploit still pending" if state and state.pending_exploit else "exploit already applied"
                pid = driver.alive_pid(member)
                try:
                    execd = pid is not None and b"--checkpoint=" in Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    execd = False
                phase += ", new image after execv" if execd else ", before execv or a launcher restart"
                driver.try_kill(member, window, f"{detail} ({phase})", aimed=False)
        while driver.random_times and now >= driver.random_times[0]:
            driver.random_times.pop(0)
            live = [m for m in range(args.members) if driver.alive_pid(m) is not None and driver.eligible(m)]
            if not live or not driver.try_kill(rng.choice(live), "random", "random moment", aimed=False):
                driver.random_times.insert(0, now + 0.5)  # nobody to kill right now: try again shortly
                break
    code = launcher.wait()
    elapsed = time.monotonic() - t0
    log.close()
    reader_stop.write_text("stop")
    reader.wait(60)
    if ino is not None:
        ino.close()
    driver.update_pids()
    figures = verify(ws, args, driver, reader_out, code, elapsed)
    figures["workspace"] = str(ws)
    return figures


# ============================================================================ verification


def _entries(path: Path) -> list[dict[str, Any]]:
    return [e for _, e, _ in read_entries(path) if e is not None] if path.exists() else []


def _sha_ok(ws: Workspace, rel: str, sha: str) -> str:
    try:
        path = ws.checkpoint_path(rel)
        return "ok" if fsio.sha256_file(path) == sha else "mismatch"
    except FileNotFoundError:
        return "missing"
    except Exception as exc:  # noqa: BLE001
        return f"error {exc}"


def verify(root: Path, args: argparse.Namespace, driver: Driver, reader_out: Path, launcher_code: int,
           elapsed: float) -> dict[str, Any]:
    ws = Workspace(root)
    target = args.iterations * FRAMES_PER_EPOCH
    failures: list[str] = []
    f: dict[str, Any] = {"launcher_exit_code": launcher_code, "elapsed_s": round(elapsed, 1),
                         "members": args.members, "frame_target": target}

    # -- launcher journal: restarts after each kill
    journal = [json.loads(line) for line in (root / "launcher.jsonl").read_text().splitlines() if line.strip()]
    starts = defaultdict(list)
    exits = defaultdict(list)
    for e in journal:
        if e.get("event") == "start":
            starts[e["member"]].append(e)
        elif e.get("event") == "exit":
            exits[e["member"]].append(e)
    for k in driver.kills:
        k.came_back = any(s["time"] > k.time for s in starts[k.member])
    f["kills"] = {w: sum(1 for k in driver.kills if k.window == w) for w in WINDOWS}
    f["kills_survived"] = {w: sum(1 for k in driver.kills if k.window == w and k.came_back) for w in WINDOWS}
    f["kill_opportunities_seen"] = dict(driver.opportunities)
    phases: Counter = Counter()
    for k in driver.kills:
        if k.window == "restart_pending":
            phases["restart in flight: " + ("new image after execv" if "after execv" in k.detail
                                             else "process without --checkpoint (before execv, or a launcher restart)")
                   + ", "
                   + ("exploit not yet applied" if "still pending" in k.detail else "exploit applied")] += 1
            continue
        for marker, label in (("being written", "checkpoint temp file being written"),
                              ("best.json", "best.json written, state.json not yet"),
                              ("retention", "old checkpoint deleted, state.json not yet"),
                              ("being copied", "donor copy in incoming/"),
                              ("just logged", "exploit decision logged, nothing acted on"),
                              ("random moment", "random")):
            if marker in k.detail:
                phases[label] += 1
                break
    f["kill_phases"] = dict(phases)
    f["kills_total"] = len(driver.kills)
    f["crash_exits_sigkill"] = sum(1 for es in exits.values() for e in es if e.get("code") == -9)
    f["kill_log"] = [f"{k.member:03d} {k.window}: {k.detail}" for k in driver.kills]
    if launcher_code != 0:
        failures.append(f"launcher exited {launcher_code} (expected 0: every member finished)")
    for k in driver.kills:
        if not k.came_back:
            failures.append(f"member {k.member} did not come back after the kill in {k.window}")
    gave_up = [e for e in journal if e.get("event") == "give_up"]
    if gave_up:
        failures.append(f"launcher gave up members: {gave_up}")

    # -- records: parse, finished, frame target
    records, errors = ws.read_records()
    if errors:
        failures.append(f"unreadable records at the end: {errors}")
    f["final_frames"] = {}
    for m in range(args.members):
        rec = records.get(m)
        if rec is None:
            failures.append(f"member {m}: no record")
            continue
        f["final_frames"][m] = rec.frame
        if rec.status != "finished" or rec.frame < target:
            failures.append(f"member {m}: status {rec.status}, frame {rec.frame} (target {target})")

    # -- checkpoints referenced by records, states, best.json, lineage
    refs = Counter()
    exploits = Counter()
    abort_reasons: Counter = Counter()
    lost: list[str] = []
    rng_breaks: list[str] = []
    audit_problems: list[str] = []
    lineage_problems: list[str] = []
    starts_by_mode: Counter = Counter()
    for m in range(args.members):
        mdir = ws.member_dir(m)
        rec = records.get(m)
        if rec is not None and rec.checkpoint:
            r = _sha_ok(ws, rec.checkpoint, rec.checkpoint_sha256)
            refs[f"record {r}"] += 1
            if r != "ok":
                failures.append(f"member {m}: record checkpoint {rec.checkpoint} {r}")
        state = load_state(mdir / "state.json")
        if state is None:
            failures.append(f"member {m}: no state.json")
            continue
        r = _sha_ok(ws, state.last_checkpoint, state.last_checkpoint_sha256)
        refs[f"state.last {r}"] += 1
        if r != "ok":
            failures.append(f"member {m}: state.last_checkpoint {state.last_checkpoint} {r}")
        if state.pending_exploit:
            failures.append(f"member {m}: finished with an exploit still pending")
        best_file = json.loads((mdir / "best.json").read_text()) if (mdir / "best.json").exists() else []
        for src, entries in (("state.best", state.best), ("best.json", best_file)):
            for e in entries:
                r = _sha_ok(ws, e["checkpoint"], e["sha256"])
                refs[f"{src} {r}"] += 1
                if r != "ok":
                    failures.append(f"member {m}: {src} entry {e['checkpoint']} {r}")
        for e in state.lineage:
            if e.get("outcome") != "exploit":
                continue
            r = _sha_ok(ws, e["donor_checkpoint"], e["donor_sha256"])
            refs[f"lineage donor {r}"] += 1
            if r == "mismatch":
                failures.append(f"member {m}: lineage donor checkpoint {e['donor_checkpoint']} changed content")

        # -- audit: chain + replay
        count, problems = verify_log(mdir / "audit.jsonl")
        audit_problems += [str(p) for p in problems]
        entries = _entries(mdir / "audit.jsonl")
        decisions = [e for e in entries if e.get("kind") == "decision"]
        for prev, nxt in zip(decisions, decisions[1:]):
            if nxt["rng_before"] != prev["rng_after"]:
                rng_breaks.append(f"member {m}: decision seq {nxt['seq']} rng_before != rng_after of seq {prev['seq']}")
        # -- exploits: decided / applied / aborted, and the lineage they produced
        exploit_decisions = [e for e in decisions if e["decision"]["outcome"] == "exploit"]
        applied = {}
        for e in entries:
            if e.get("kind") == "exploit_applied":
                applied.setdefault(e["checkpoint"], e)  # a kill before pending was cleared re-applies it
            elif e.get("kind") == "exploit_aborted":
                reason = str(e.get("reason", ""))
                key = ("donor file vanished" if "No such file" in reason or "does not exist" in reason
                       else "checksum mismatch" if "does not match" in reason
                       else "recipient checkpoint failed verification" if "recipient checkpoint" in reason
                       else reason[:80])
                abort_reasons[key] += 1
        exploits["decided"] += len(exploit_decisions)
        exploits["applied"] += len(applied)
        exploits["applied_twice_after_kill"] += sum(1 for e in entries if e.get("kind") == "exploit_applied") - len(applied)
        # Lineage = state.json generations; each must come from an exploit decision and be applied.
        gens = [e["generation"] for e in state.lineage]
        if gens != list(range(1, len(gens) + 1)) or state.generation != len(gens):
            lineage_problems.append(f"member {m}: lineage generations {gens}, state generation {state.generation}")
        applied_gens = sorted(e["generation"] for e in applied.values())
        if applied_gens != gens:
            lineage_problems.append(f"member {m}: applied generations {applied_gens} != lineage {gens}")
        for e in state.lineage:
            if e.get("outcome") != "exploit":
                continue
            match = [d for d in exploit_decisions if d["decision"]["donor"] == e["donor"]
                     and d["inputs"]["me"]["frame"] == e["frame"]
                     and any(p["member"] == e["donor"] and p["checkpoint"] == e["donor_checkpoint"]
                             and p["checkpoint_sha256"] == e["donor_sha256"] for p in d["inputs"]["peers"])]
            if not match:
                lineage_problems.append(f"member {m}: lineage generation {e['generation']} has no matching decision")
        # A restart after a kill resumes from the member's own last checkpoint: never from scratch, and
        # never losing more than the interval in flight (a best-checkpoint fallback would).
        last_decision_frame = 0
        for i, e in enumerate(entries):
            if e.get("kind") == "decision":
                last_decision_frame = max(last_decision_frame, e["inputs"]["me"]["frame"])
            elif e.get("kind") == "start" and i > 0:
                # A kill before the first state.json with a checkpoint leaves nothing to resume from: a fresh
                # start then, at frame 0, loses at most the interval in flight like any other kill.
                restored = next((r for r in entries[i + 1:] if r.get("kind") in ("restored", "start")), None)
                frame = restored["frame"] if restored is not None and restored["kind"] == "restored" else 0
                if e.get("mode") == "fresh":
                    frame = 0
                if frame < last_decision_frame - args.interval:
                    lost.append(f"member {m}: start seq {e['seq']} ({e.get('mode')}) resumed at frame {frame}, but it "
                                f"had decided at frame {last_decision_frame}: more than one interval lost")
                starts_by_mode[e.get("mode")] += 1
        # Exploit decisions that were neither applied nor aborted: killed before the pending state was saved.
        exploits["not_acted_killed"] += max(0, len(exploit_decisions) - len(applied)
                                            - sum(1 for e in entries if e.get("kind") == "exploit_aborted"))
    f["checkpoint_refs"] = dict(refs)
    f["exploits"] = dict(exploits)
    f["exploit_aborts"] = dict(abort_reasons)
    f["rng_continuity_breaks"] = rng_breaks
    f["audit_problems"] = audit_problems[:20]
    f["lineage_problems"] = lineage_problems
    if audit_problems:
        failures.append(f"{len(audit_problems)} audit problems, e.g. {audit_problems[:3]}")
    if lineage_problems:
        failures.append(f"lineage problems: {lineage_problems[:5]}")
    if rng_breaks:
        failures.append(f"RNG continuity broken: {rng_breaks[:5]}")
    if exploits["applied"] == 0:
        failures.append("no exploit was completed: the run did not exercise the exploit path")

    # -- temp files
    now = time.time()
    temps = []
    for dirpath, _dirs, files in os.walk(ws.root):
        for name in files:
            p = Path(dirpath) / name
            if fsio.is_temp_file(p):
                try:
                    age = now - p.stat().st_mtime
                except FileNotFoundError:
                    continue
                temps.append((str(p.relative_to(ws.root)), round(age, 1)))
    stale = [t for t in temps if t[1] > args.temp_grace]
    f["temp_files_left"] = temps
    if stale:
        failures.append(f"temp files older than the {args.temp_grace} s grace left behind: {stale}")
    leftovers = [str(p.relative_to(ws.root)) for p in ws.members_dir.glob("*/incoming/*")]
    f["incoming_leftovers"] = leftovers
    if leftovers:
        failures.append(f"donor copies left in incoming/: {leftovers}")

    # -- reader
    try:
        reader = json.loads(reader_out.read_text())
    except (OSError, ValueError):
        reader = {"counts": {}, "samples": ["reader produced no result"]}
        failures.append("the reader process produced no result")
    rc = reader["counts"]
    f["reader"] = rc
    f["reader_samples"] = reader["samples"]
    for key in ("record_errors", "state_errors", "best_errors", "read_records_raised", "checkpoint_mismatch"):
        if rc.get(key, 0):
            failures.append(f"reader: {key} = {rc[key]}: {reader['samples'][:3]}")
    if not rc.get("record_reads"):
        failures.append("reader read no record")
    f["restarts_by_mode"] = dict(starts_by_mode)
    f["lost"] = lost
    if lost:
        failures.append(f"lost: {lost}")
    f["failures"] = failures
    return f


def report(f: dict[str, Any]) -> list[str]:
    lines = [
        f"chaos run: {f['members']} members, {f['elapsed_s']} s, launcher exit {f['launcher_exit_code']}",
        f"kills: {f['kills_total']} (SIGKILL exits seen by the launcher: {f['crash_exits_sigkill']})",
    ]
    for w in WINDOWS:
        lines.append(f"  {w:<17} killed {f['kills'][w]:>3}, came back {f['kills_survived'][w]:>3} "
                     f"(opportunities seen {f['kill_opportunities_seen'].get(w, 0)})")
    lines.append(f"kill phases: {f['kill_phases']}")
    lines.append(f"final frames {f['final_frames']} (target {f['frame_target']})")
    lines.append(f"exploits: {f['exploits']}; aborted: {f['exploit_aborts'] or 'none'}")
    lines.append(f"checkpoint references checked: {f['checkpoint_refs']}")
    r = f["reader"]
    lines.append(f"reader: {r.get('record_reads', 0)} records, {r.get('state_reads', 0)} states, "
                 f"{r.get('best_reads', 0)} best.json read; errors: records {r.get('record_errors', 0)}, "
                 f"states {r.get('state_errors', 0)}, best {r.get('best_errors', 0)}; checkpoints verified "
                 f"{r.get('checkpoint_verified', 0)}, gone {r.get('checkpoint_gone', 0)}, "
                 f"mismatched {r.get('checkpoint_mismatch', 0)}")
    lines.append(f"audit problems: {len(f['audit_problems'])}; lineage problems: {len(f['lineage_problems'])}; "
                 f"RNG continuity breaks: {len(f['rng_continuity_breaks'])}")
    lines.append(f"temp files at the end: {f['temp_files_left'] or 'none'}; incoming leftovers: "
                 f"{f['incoming_leftovers'] or 'none'}")
    lines.append(f"process starts after the first, by mode: {f['restarts_by_mode']}")
    lines.append(f"lost: {len(f['lost'])}")
    lines.append("RESULT: " + ("PASS" if not f["failures"] else "FAIL"))
    lines += [f"  - {x}" for x in f["failures"]]
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--kills", type=int, default=40, help="SIGKILLs in total (a fifth per aimed window, rest random)")
    p.add_argument("--iterations", type=int, default=200, help="rl_games epochs per member (512 frames each)")
    p.add_argument("--interval", type=int, default=2048, help="--pbt-interval-steps (frames between decisions)")
    p.add_argument("--duration", type=float, default=240.0, help="seconds during which kills happen")
    p.add_argument("--warmup", type=float, default=8.0, help="no kills during the first seconds")
    p.add_argument("--finish-timeout", type=float, default=600.0, help="seconds after the chaos window to finish")
    p.add_argument("--min-gap", type=float, default=4.0, help="seconds between two kills of the same member")
    p.add_argument("--aim-probability", type=float, default=0.35, help="chance to kill at an aimed window event")
    p.add_argument("--restart-delay", type=float, default=6.0, help="max delay of a restart-window kill")
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
    for line in report(figures):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 0 if not figures["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
