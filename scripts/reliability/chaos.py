#!/usr/bin/env python
"""Chaos run: SIGKILL real CPU population members in the dangerous windows and at random, then audit.

A population of real rl_games PPO members (Pendulum-v1) runs under the local launcher, a separate process
(``chaos_members``). By default the members use the test fixture rule ``fixture_exploit_every_decision`` (every
decision exploits the best peer), so exploit windows keep coming at a steady rate whatever the returns;
``--rule dexpbt`` runs the production rule with no required gap instead. ``--exploit-mode`` picks the exploit
path the members take, and with it the windows aimed at (``chaos_windows``):

* both paths: ``checkpoint_write`` (a checkpoint, best list or retention in flight, ``state.json`` not yet
  saved), ``background_write`` (a publish on the member's background writer, checkpoint written, the rest to
  come, training going on beside it), ``donor_copy`` (a donor copy in ``incoming/``, partial or verified and
  not yet loaded), ``exploit_decided`` (the write-ahead exploit decision logged, nothing acted on yet) and
  ``random``;
* both paths, the member's writer held or failing (``chaos_faults``): ``warning_busy`` (the writer held after a
  publish's checkpoint, training going on until it logs the slow-write warning with that publish in flight),
  ``write_failed`` (a step of a publish failing with EIO from a fault the watcher planted, before the member rolled
  anything back) and ``ctrl_c_failing`` (Ctrl-C at that moment: the member rolls back, logs ``publish_failed``,
  writes its stop record and entry, exits, and the launcher starts it again);
* ``restart``: ``restart_pending`` (``pending_exploit`` saved; killed after a random delay up to the restart
  time seen so far, so the ``os.execv`` and the new image's start until ``exploit_applied`` are hit);
* ``inprocess`` / ``auto``: ``inprocess_pending`` (recipient checkpoint and ``pending_exploit`` saved, record
  being rewritten, the donor state being loaded into the live agent), ``inprocess_applied`` (the live agent
  holds the donor and ``exploit_applied`` is logged; ``state.json`` still names the exploit pending),
  ``inprocess_saved`` (``state.json`` saved with the exploit done, ``record.json`` not yet rewritten) and
  ``inprocess_done`` (record rewritten, the member trains the new generation).

The watcher (``chaos_watch``) follows the workspace with inotify (Linux; polling elsewhere) and reacts within
about a millisecond of the file event. The first three in-process windows are a few milliseconds wide, an
exploit's decision is acted on as soon as it is written (a long run's kills at the audit append missed nearly every
time), and the background writer's publish runs beside training: the members hold inside them at pause points
(``ASYNC_PBT_TEST_PAUSE_AT``, a test facility set through the launcher for the windows aimed at;
``async_pbt_isaaclab.core.workspace.pause_points``), and the driver (``chaos_driver``) kills a
held member or lets it go on with SIGCONT, so those kills land whatever the machine's load. After each SIGKILL it
waits for the process to die and reads what it left: a kill counts for its window only when the window was
still open at death; otherwise it is reported as missed and the driver waits for the next opportunity. A
member is killed again only after it came back (a new launcher start) and published a record. The launcher
sees the SIGKILL as a crash and restarts the member, which resumes from its own state.

Event-driven, no timing decides the result: the chaos phase lasts until every window has received its quota of
kills; then the driver stops the launcher (Ctrl-C), waits until every temp file left by a kill is past
``--temp-grace``, and launches every member again (one launcher each) with an epoch target
``--finish-iterations`` past where it stopped and no further exploit, so every member resumes and finishes. A
reader process (``chaos_reader``) reads every record, state, best list and referenced checkpoint all along.
``--deadline`` is a safety limit only (stops a hung run); a slow machine just takes longer. Afterwards
``chaos_checks.verify`` checks everything listed in docs/reliability.md (``async-pbt audit`` included).

    python scripts/reliability/chaos.py                             # 4 members, 40 kills, exec restarts
    python scripts/reliability/chaos.py --exploit-mode inprocess    # the in-process exploit's windows
    python scripts/reliability/chaos.py --members 2 --kills 5       # CI size (tests/integration/test_chaos.py)
    python scripts/reliability/chaos.py --rule dexpbt               # the production rule, no required gap
    python scripts/reliability/chaos.py --kills 500 --chaos-time 2700 --no-pace --aim-probability 1 --interval 1024
                                                                    # as many kills as 45 minutes allow

After each kill (or Ctrl-C), once the process is gone, the driver checks what every member of the process left
(``chaos_death``): ``state.json`` names only checkpoints on disk, with their sha256, and the audit log verifies
against its head; the checks then compare the checkpoint noted at death with the one the next start restored.

Exit status 0 when every check passes, 1 otherwise, 2 for a bad command line. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.workspace.layout import Workspace

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The harness's modules, next to this script.
import chaos_checks
from chaos_driver import Driver
from chaos_members import (
    FIXTURE_RULE,
    all_published,
    launch,
    process_firsts,
    slices,
    stop,
    wait_temp_files_past_grace,
)
from chaos_watch import Watcher
from chaos_windows import (  # noqa: F401  (the window tests, re-exported for tests/integration/test_chaos.py)
    aimed_windows,
    background_write_in_flight,
    decision_not_acted_on,
    donor_copy_in_flight,
    held_windows,
    inprocess_applied,
    inprocess_done,
    inprocess_pending,
    inprocess_saved,
    last_decision_not_acted_on,
    publish_in_progress,
    restart_in_flight,
    windows_for,
)

FRAMES_PER_EPOCH = chaos_checks.FRAMES_PER_EPOCH


def kill_quota(args: argparse.Namespace) -> dict[str, int]:
    """Landed kills wanted per window: ``--kills`` split evenly over the windows, the rest to the last one."""
    windows = aimed_windows(args)
    per_window = max(1, args.kills // len(windows))
    quota = {w: per_window for w in windows[:-1]}
    quota[windows[-1]] = max(1, args.kills - per_window * (len(windows) - 1))
    return quota


def log_tails(ws: Path, members: list[int], lines: int = 25) -> list[str]:
    """The last lines of each member's log: a member that exited on its own says why there (a traceback)."""
    tails = []
    for m in sorted(set(members)):
        path = ws / "logs" / f"member_{m:03d}.log"
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            text = [f"(no log: {e})"]
        tails.append(f"last lines of {path}:\n" + "\n".join(f"    {line}" for line in text))
    return tails


def run_chaos(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.workdir or tempfile.mkdtemp(prefix="pbt-chaos-")).absolute()
    ws = root / "ws"
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "members").mkdir(parents=True)
    rng = random.Random(args.seed)
    quota = kill_quota(args)
    driver = Driver(args, ws, rng, quota=dict(quota), wanted=dict(quota), held=held_windows(tuple(quota)))
    notes: list[str] = []

    reader_out, reader_stop = root / "reader.json", root / "reader.stop"
    reader_stop.unlink(missing_ok=True)
    reader = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve().parent / "chaos_reader.py"),
            str(ws),
            str(reader_stop),
            str(reader_out),
        ]
    )
    t0 = time.monotonic()
    deadline = t0 + args.deadline
    watcher = Watcher(driver, rng)
    # -- first launch: chaos until every window has its kills
    try:
        launcher = launch(args, ws, root, args.iterations)
        print(f"[chaos] workspace {ws}; launcher pid {launcher.pid}; landed kills wanted {quota}", flush=True)
        poll_last = 0.0
        chaos_started = None
        chaos_end = t0 + args.chaos_time if args.chaos_time else deadline
        while launcher.poll() is None and not driver.done() and time.monotonic() < min(deadline, chaos_end):
            now = time.monotonic()
            if now - poll_last > 0.5:
                poll_last = now
                watcher.scan_dirs()
                driver.update_pids()
                if driver.unexpected_exits:
                    notes.append(f"stopped early: a member exited without being killed: {driver.unexpected_exits}")
                    notes.extend(log_tails(ws, driver.unexpected_members))
                    break
            if chaos_started is None and all_published(ws, args.members):
                # Kills start once every member is training (published a record).
                chaos_started = now
                watcher.chaos_on = True
                driver.random_times = sorted(
                    now + rng.random() * args.random_spread for _ in range(quota.get("random", 0))
                )
                print(f"[chaos] every member published after {now - t0:.1f} s: kills start", flush=True)
            watcher.poll(0.05)
            watcher.fire_due()
        watcher.chaos_on = False
        watcher.faults.withdraw(ws / "members")
        chaos_s = time.monotonic() - t0
        if not driver.done() and args.chaos_time and time.monotonic() >= chaos_end and launcher.poll() is None:
            print(f"[chaos] --chaos-time {args.chaos_time:g} s reached: windows still wanting kills {driver.quota}")
        elif not driver.done():
            why = (
                "the safety deadline --deadline passed"
                if time.monotonic() >= deadline
                else f"the population ended first (launcher exit {launcher.poll()}; --iterations {args.iterations})"
                if launcher.poll() is not None
                else "a member exited without being killed"
            )
            notes.append(f"windows still wanting kills {driver.quota}: {why}")
        first_code = launcher.poll()
        if first_code is None:
            print(
                f"[chaos] {'every window received its kills' if driver.done() else 'chaos phase cut short'} after "
                f"{chaos_s:.1f} s: stopping the population",
                flush=True,
            )
            stop_at = time.monotonic()
            first_code = stop(launcher, deadline, tick=lambda: watcher.poll(0.05))
            print(f"[chaos] population stopped in {time.monotonic() - stop_at:.1f} s", flush=True)
    finally:
        watcher.release_all()  # never leave a member held at a pause point
        watcher.close()
    driver.update_pids()
    # -- second launch: every member resumes and finishes a few epochs past where it stopped. One launcher per
    # member, so a member that spent the chaos phase restarting need not catch up with the furthest one.
    records, _errors = Workspace(ws).read_records()
    targets = {
        m: (records[m].frame if m in records else 0) // FRAMES_PER_EPOCH + args.finish_iterations
        for m in range(args.members)
    }
    wait_temp_files_past_grace(ws, args.temp_grace, deadline)
    # With --slices a process's members share one epoch limit: the furthest of them sets it.
    count = slices(args)
    for first in process_firsts(args):
        for m in range(first, first + count):
            targets[m] = max(targets[k] for k in range(first, first + count))
    finishing = {m: launch(args, ws, root, targets[m], member=m) for m in process_firsts(args)}
    print(f"[chaos] finishing: members train to epochs {targets}", flush=True)
    finish_codes: dict[int, int | None] = {}
    for m, proc in finishing.items():
        try:
            finish_codes[m] = proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            notes.append(f"member {m}'s finishing launch passed the safety deadline --deadline")
            finish_codes[m] = stop(proc, time.monotonic() + 120)
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
    figures.update(
        workspace=str(ws),
        elapsed_s=round(elapsed, 1),
        chaos_s=round(chaos_s, 1),
        checks_s=round(time.monotonic() - checks_at, 1),
        kills_wanted=quota,
    )
    return figures


def check_windows(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--windows must name windows the chosen exploit path opens (exit 2 otherwise)."""
    if args.windows is None:
        return
    opened = windows_for(args.exploit_mode)
    unknown = [w for w in args.windows.split(",") if w not in opened]
    if unknown or not args.windows:
        parser.error(
            f"--windows {args.windows!r}: {', '.join(unknown) or 'empty'} not among the windows of "
            f"--exploit-mode {args.exploit_mode}: {', '.join(opened)}"
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=4)
    p.add_argument(
        "--slices",
        type=int,
        default=1,
        help="members per process, on slices of one env (docs/slices.md); a kill takes the process's members down",
    )
    p.add_argument(
        "--kills",
        type=int,
        default=40,
        help="landed SIGKILLs wanted in total (split evenly over the windows, the rest to the last one)",
    )
    p.add_argument(
        "--rule",
        choices=("fixture", "dexpbt"),
        default="fixture",
        help=f"selection rule of the members: the test fixture {FIXTURE_RULE} (default) or dexpbt",
    )
    p.add_argument(
        "--exploit-mode",
        choices=("restart", "inprocess", "auto"),
        default="restart",
        help="--pbt-exploit-mode of the members, and with it the windows aimed at: 'restart' (the default) "
        "the exec restart's, 'inprocess' or 'auto' the in-process exploit's",
    )
    p.add_argument(
        "--windows", default=None, help="comma-separated windows to aim at (default: every window of --exploit-mode)"
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=2000,
        help="epoch cap of the first launch (512 frames each); the chaos phase normally ends long before",
    )
    p.add_argument(
        "--finish-iterations",
        type=int,
        default=4,
        help="epochs past where it stopped that the second launch trains each member to",
    )
    p.add_argument("--interval", type=int, default=2048, help="--pbt-interval-steps (frames between decisions)")
    p.add_argument(
        "--deadline",
        type=float,
        default=3600.0,
        help="safety limit in seconds for the whole run (a hung run fails instead of waiting forever)",
    )
    p.add_argument(
        "--chaos-time",
        type=float,
        default=None,
        help="end the chaos phase after this many seconds even if windows still want kills (a long run sized to the "
        "time there is): every window must then have at least one landed kill; the rest is checked as always",
    )
    p.add_argument(
        "--no-pace",
        action="store_true",
        help="kill in the windows that open all the time as fast as they come (level with each other), instead of "
        "keeping pace with the exploit windows (more kills per minute; the exploit windows take every kill they can)",
    )
    p.add_argument(
        "--random-spread",
        type=float,
        default=30.0,
        help="random kills happen within this many seconds after every member has published",
    )
    p.add_argument("--aim-probability", type=float, default=0.35, help="chance to kill at an aimed window event")
    p.add_argument(
        "--restart-delay",
        type=float,
        default=6.0,
        help="bound of the delay of a restart-window kill until a restart has been observed",
    )
    p.add_argument("--temp-grace", type=float, default=2.0, help="--pbt-temp-grace-s of the members")
    p.add_argument("--keep-last", type=int, default=2, help="--pbt-keep-last-checkpoints of the members")
    p.add_argument("--keep-best", type=int, default=2, help="--pbt-keep-best-checkpoints of the members")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="folder for the workspace and logs (default: a temp folder)")
    p.add_argument("--json", default=None, help="write the figures to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    check_windows(parser, args)
    figures = run_chaos(args)
    for line in chaos_checks.report(figures):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 0 if not figures["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
