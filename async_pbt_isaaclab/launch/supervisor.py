"""The local launcher's supervisor: keep the members of a population on this machine running, restart crashed
ones, stop them all on request (:class:`Supervisor`, a single-threaded state machine).

:func:`async_pbt_isaaclab.launch.local_backend.launch_population` checks the arguments, places the members on GPUs
(:mod:`~async_pbt_isaaclab.launch.gpus`) and hands them to the supervisor with its options
(:mod:`~async_pbt_isaaclab.launch.supervision`); the results are :mod:`~async_pbt_isaaclab.launch.results`;
the progress lines, crash tails and journal it writes are in :mod:`~async_pbt_isaaclab.launch.progress`; the
``async-pbt launch`` / ``python -m async_pbt_isaaclab.launch`` command line is :mod:`~async_pbt_isaaclab.launch.cli`.

Process model
-------------
* **One process per member.** Member ``i`` runs ``COMMAND --pbt-workspace WS --pbt-members N
  --pbt-index i``. When the machine has GPUs, member ``i`` gets ``gpus[i % len(gpus)]`` (round-robin,
  so members share GPUs when there are more members than GPUs), by ``--device cuda:<gpu>`` on Isaac Lab 2.x
  (masking breaks its renderer's GPU index, Isaac Lab issue #2756) or else by ``CUDA_VISIBLE_DEVICES``, so that the
  member sees exactly one GPU as ``cuda:0`` (:data:`~async_pbt_isaaclab.launch.gpus.GPU_PLACEMENTS`).
  ``ASYNC_PBT_MEMBER_INDEX=i`` is exported for log prefixes only.
  stdin is ``/dev/null``; stdout and stderr are appended to ``WORKSPACE/logs/member_NNN.log``.
* **Own process group, launcher death.** Each member leads its own session, so a Ctrl-C typed in the terminal
  reaches only the launcher, and signals go to the member's whole group; each member dies with the launcher
  (:mod:`~async_pbt_isaaclab.launch.member_process`, which starts and signals member processes). Re-running the
  same launch command after the launcher died resumes every member from its last checkpoint.
* **Exploit restarts are invisible here.** A member that copies a donor replaces its own image with
  ``os.execv``; the pid stays, so the launcher keeps supervising the same process.
* **Crash restarts.** A member that exits non-zero, or dies by a signal the launcher did not send,
  is started again with *exactly the same command and environment* after a backoff. The member then
  resumes from its own last checkpoint by reading ``WORKSPACE/members/NNN/state.json`` (member side).
  Retries are bounded per member over a **sliding window**: more than ``max_retries`` crashes within
  ``retry_window_s`` seconds and the member is given up (a crash loop), while a member that crashes
  once a day on a week-long run keeps being restarted. ``retry_window_s=None`` counts every crash of
  the run instead. Exit code 2 (a usage error: the same command fails the same way) and a command
  that cannot be started at all are given up at once. Other members continue either way.
* **Exit 0 is finished**; the member is not restarted.
* **Stopping.** SIGINT (Ctrl-C), SIGTERM and SIGHUP (terminal closed; not when started under
  ``nohup``) to the launcher stop the population: every member's group gets SIGINT (the graceful
  stop every Python program understands as ``KeyboardInterrupt``), then SIGTERM after
  ``stop_grace_s``, then SIGKILL after ``term_grace_s``. A second Ctrl-C skips to the next step.
  Nothing is restarted during a stop. The launcher exits ``128 + signal`` (130 for Ctrl-C).
* **Progress.** Every ``progress_interval_s`` one line per member: launcher state, frames,
  generation, objective mean over the evidence window (with its episode count), restarts, heartbeat
  age and the last decision, read from the members' published records. Missing or corrupt records
  are reported in the line, never fatal.
* **Journal.** Every start, exit, restart, give-up and stop is appended to ``WORKSPACE/launcher.jsonl``
  (one JSON object a line: ``time``, ``member``, ``event``, ``code``, ``reason``, ...) and printed.

Exit code of the launcher: 0 when every member finished; 1 when any member was given up;
``128 + signal`` when stopped by a signal; 2 for bad usage.

This module imports only the standard library and the pure core (no torch).
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from async_pbt_isaaclab.core.slices import process_members
from async_pbt_isaaclab.core.workspace.layout import member_dirname
from async_pbt_isaaclab.core.workspace.resume import describe_resume
from async_pbt_isaaclab.exit_codes import (
    EXIT_GAVE_UP,
    EXIT_OK,
    NO_RETRY_EXIT_CODES,
    exit_code_for_signal,
)
from async_pbt_isaaclab.launch.member_process import (
    MemberStartError,
    end_group,
    member_preexec,
    signal_group,
    spawn_member,
)
from async_pbt_isaaclab.launch.progress import (
    Journal,
    describe_exit,
    launcher_state,
    progress_lines,
    read_log_tail,
    record_status,
    resume_point,
    signal_name,
)
from async_pbt_isaaclab.launch.results import LaunchResult
from async_pbt_isaaclab.launch.supervision import SupervisedMember, SupervisionOptions

_TERMINAL = ("finished", "given_up", "stopped")


class Supervisor:
    """The launcher's single-threaded loop: poll members, restart crashed ones, report progress, and
    turn a recorded stop signal into the SIGINT -> SIGTERM -> SIGKILL sequence."""

    def __init__(
        self,
        members: dict[int, SupervisedMember],
        *,
        workspace: Path,
        num_members: int,
        options: SupervisionOptions,
        output: TextIO,
        base_command: list[str],
    ):
        self.members = members
        self.base_command = base_command
        self.workspace = workspace
        self.num_members = num_members
        self.options = options
        self.output = output
        self.preexec = member_preexec(options.die_with_launcher)
        self.journal = Journal(workspace / "launcher.jsonl", self.say, root=workspace)
        self.poll_s = 0.05
        # Signals are only recorded in the handler; the loop acts on them (a handler interrupting a
        # Popen call half-way would leave a member unsupervised).
        self.signals: list[int] = []
        self.stopping: int | None = None

    # ---------------------------------------------------------------- output
    def say(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        try:
            for line in text.splitlines() or [""]:
                print(f"[launch {stamp}] {line}", file=self.output, flush=True)
        except (OSError, ValueError):
            pass  # a closed terminal must not take the population down with it

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)

    # ---------------------------------------------------------------- members
    def start(self, m: SupervisedMember) -> None:
        o = m.outcome
        o.starts += 1
        header = (
            f"\n===== async-pbt launch: member {o.index} start {o.starts} at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')} gpu {o.gpu if o.gpu is not None else '-'} =====\n"
            f"$ {shlex.join(m.command)}\n"
        )
        try:
            m.popen, m.log_offset = spawn_member(
                m.command, m.env, Path(o.log_path), header, self.preexec, root=self.workspace
            )
        except MemberStartError as exc:
            self.give_up(m, str(exc))
            return
        o.pid = m.popen.pid
        o.status = "running"
        self.journal.write(
            "start",
            o.index,
            pid=o.pid,
            attempt=o.starts,
            gpu=o.gpu,
            log=o.log_path,
            command=m.command,
            # The members this process hosts (several with --pbt-slices: contiguous from its index).
            members=process_members(m.command, o.index),
        )
        if o.starts > 1:
            self.say(f"member {o.index:03d} restarted (pid {o.pid}, start {o.starts})")

    def give_up(self, m: SupervisedMember, reason: str) -> None:
        o = m.outcome
        o.status = "given_up"
        o.reasons.append(reason)
        self.journal.write("give_up", o.index, reason=reason, restarts=o.restarts)
        self.say(f"member {o.index:03d} GIVEN UP: {reason}; the other members continue")

    def reap_leftovers(self, m: SupervisedMember) -> None:
        # The member's leader has exited; anything still in its group (a python child of a wrapper
        # script) would hold the GPU and the member lock and make the restart fail as "claimed".
        signal_group(m.popen, signal.SIGKILL)

    def on_exit(self, m: SupervisedMember, code: int) -> None:
        o = m.outcome
        o.exit_codes.append(code)
        self.reap_leftovers(m)
        if code == 0:
            self._finished(m)
            return
        reason = describe_exit(code)
        tail = read_log_tail(o.log_path, m.log_offset)
        o.reasons.append(reason)
        self.journal.write(
            "exit",
            o.index,
            code=code,
            signal=signal_name(-code) if code < 0 else None,
            reason=reason,
            pid=o.pid,
            log_tail=tail,
        )
        shown = "\n".join(f"    | {line}" for line in tail) or "    | (no output)"
        self.say(f"member {o.index:03d} crashed: {reason}; last lines of {o.log_path}:\n{shown}")
        if code in NO_RETRY_EXIT_CODES:
            self.give_up(m, f"{reason}: a usage error, which the same command would repeat")
            return
        self._restart_or_give_up(m, code, reason)

    def _finished(self, m: SupervisedMember) -> None:
        o = m.outcome
        o.status = "finished"
        note = ""
        if record_status(self.workspace, o.index) == "stopped":
            # Someone stopped this member directly (kill -INT/-TERM on its pid); it says it can
            # resume, but a deliberate stop is not a crash, so it is not restarted.
            note = "; its record says 'stopped' (interrupted from outside the launcher), not restarted"
        self.journal.write("exit", o.index, code=0, reason="finished" + note, pid=o.pid)
        self.say(f"member {o.index:03d} finished (exit code 0){note}")

    def _restart_or_give_up(self, m: SupervisedMember, code: int, reason: str) -> None:
        """Count the crash in the retry window: over ``max_retries`` gives the member up, else it waits its
        backoff (doubled per crash in the window) before :meth:`run` starts it again."""
        o, window_s, max_retries = m.outcome, self.options.retry_window_s, self.options.max_retries
        now = time.monotonic()
        if window_s is not None:
            while m.crash_times and now - m.crash_times[0] > window_s:
                m.crash_times.popleft()
        m.crash_times.append(now)
        window = f"within {window_s:g} s" if window_s is not None else "in this run"
        if len(m.crash_times) > max_retries:
            self.give_up(m, f"{reason}; {len(m.crash_times)} crashes {window} exceed --max-retries {max_retries}")
            return
        backoff = min(self.options.restart_backoff_s * 2 ** (len(m.crash_times) - 1), self.options.max_backoff_s)
        m.next_start = now + backoff
        o.status = "backoff"
        o.restarts += 1
        resume = resume_point(self.workspace, o.index)
        self.journal.write(
            "restart",
            o.index,
            code=code,
            reason=reason,
            attempt=len(m.crash_times),
            max_retries=max_retries,
            retry_window_s=window_s,
            backoff_s=backoff,
            resume=resume,
        )
        self.say(
            f"member {o.index:03d} restarts in {backoff:.3g} s (retry {len(m.crash_times)} of "
            f"{max_retries} {window}); {resume}"
        )

    def poll(self) -> None:
        for m in self.members.values():
            if m.outcome.status == "running" and m.popen is not None:
                code = m.popen.poll()
                if code is not None:
                    if self.stopping is None:
                        self.on_exit(m, code)
                    else:
                        self.on_stopped(m, code)

    def on_stopped(self, m: SupervisedMember, code: int) -> None:
        o = m.outcome
        o.exit_codes.append(code)
        o.status = "stopped"
        self.reap_leftovers(m)
        self.journal.write(
            "exit", o.index, code=code, reason=f"stopped by the launcher ({describe_exit(code)})", pid=o.pid
        )

    # ---------------------------------------------------------------- progress
    def progress(self) -> None:
        # One line per member, also for the members a process hosts as slices (each with its process's state).
        states = {}
        for first in sorted(self.members):
            m = self.members[first]
            state = launcher_state(m.outcome, m.next_start)
            hosted = process_members(m.command, first)
            for i in hosted:
                states[i] = state if i == first else f"{state}, slice of {member_dirname(first)}"
        lines = progress_lines(self.workspace, sorted(states), states)
        if self.options.on_progress is not None:
            try:
                self.options.on_progress(lines)
            except Exception as exc:  # noqa: BLE001 - a broken callback must not orphan members
                self.say(f"warning: on_progress raised {exc!r}")
        else:
            self.say("progress:\n" + "\n".join("  " + line for line in lines))

    # ---------------------------------------------------------------- stop
    def stop(self, signum: int) -> None:
        """Forward a graceful stop to every member, then escalate; returns when all have exited."""
        self.stopping = signum
        pending = [m for m in self.members.values() if m.outcome.status in ("pending", "backoff")]
        for m in pending:
            m.outcome.status = "stopped"
        running = self._running()
        self.journal.write("stop", None, signal=signal_name(signum), running=[m.outcome.index for m in running])
        stages = [
            (signal.SIGINT, self.options.stop_grace_s),
            (signal.SIGTERM, self.options.term_grace_s),
            (signal.SIGKILL, 10.0),
        ]
        for sig, wait_s in stages:
            alive = self._running()
            if not alive:
                break
            self._signal_members(alive, sig, wait_s)
            self._wait_for_exits(wait_s)
        self.poll()
        for m in sorted(self.members.values(), key=lambda m: m.outcome.index):
            if m.outcome.status == "stopped":
                self.say(describe_resume(self.workspace, m.outcome.index))

    def _running(self) -> list[SupervisedMember]:
        return [m for m in self.members.values() if m.outcome.status == "running"]

    def _signal_members(self, alive: list[SupervisedMember], sig: signal.Signals, wait_s: float) -> None:
        """One stage of the stop: ``sig`` to every running member's group, journalled and said."""
        for m in alive:
            signal_group(m.popen, sig)
        self.journal.write("signal", None, signal=sig.name, members=[m.outcome.index for m in alive])
        if sig == signal.SIGKILL:
            self.say(f"sent SIGKILL to {len(alive)} member(s)")
        else:
            self.say(
                f"sent {sig.name} to {len(alive)} member(s); waiting up to {wait_s:g} s"
                + (" (Ctrl-C again to terminate now)" if sig == signal.SIGINT else "")
            )

    def _wait_for_exits(self, wait_s: float) -> None:
        """Poll until every member has exited, ``wait_s`` has passed, or another stop signal arrives."""
        seen = len(self.signals)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            self.poll()
            if not self._running():
                break
            if len(self.signals) > seen:  # impatient user: next step now
                break
            time.sleep(self.poll_s)

    # ---------------------------------------------------------------- main loop
    def run(self) -> LaunchResult:
        handlers = self._install_signal_handlers()
        try:
            self.journal.write(
                "launch", None, members=sorted(self.members), num_members=self.num_members, command=self.base_command
            )
            for m in self.members.values():
                self.start(m)
            self._supervise_until_done()
        finally:
            # Reached with members still running only through an unexpected exception: never leave
            # members behind without a supervisor.
            for m in self._running():
                if m.popen is not None and m.popen.poll() is None:
                    end_group(m.popen, self.options.term_grace_s)
            for sig, previous in handlers.items():
                signal.signal(sig, previous)
        return self.finish()

    def _install_signal_handlers(self) -> dict[signal.Signals, Any]:
        """Record SIGINT, SIGTERM and SIGHUP for the loop (main thread only); returns the handlers they replace."""
        handlers: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                previous = signal.getsignal(sig)
                if sig == signal.SIGHUP and previous == signal.SIG_IGN:
                    continue  # started under nohup: the user asked to survive the terminal closing
                handlers[sig] = previous
                signal.signal(sig, self._on_signal)
        return handlers

    def _supervise_until_done(self) -> None:
        """Poll, restart members whose backoff is over and report progress, until every member has ended or a
        stop (a signal, or the stop event) has been carried out."""
        next_progress = time.monotonic() + self.options.progress_interval_s
        while True:
            stop_event = self.options.stop_event
            if stop_event is not None and stop_event.is_set() and not self.signals:
                self.signals.append(signal.SIGINT)
            if self.signals:
                self.stop(self.signals[0])
                return
            self.poll()
            now = time.monotonic()
            for m in self.members.values():
                if m.outcome.status == "backoff" and now >= m.next_start:
                    self.start(m)
            if all(m.outcome.status in _TERMINAL for m in self.members.values()):
                return
            if now >= next_progress:
                self.progress()
                next_progress = now + self.options.progress_interval_s
            time.sleep(self.poll_s)

    def finish(self) -> LaunchResult:
        outcomes = {i: m.outcome for i, m in self.members.items()}
        stopped_by = signal_name(self.stopping) if self.stopping is not None else None
        if self.stopping is not None:
            code = exit_code_for_signal(self.stopping)
        elif any(o.status == "given_up" for o in outcomes.values()):
            code = EXIT_GAVE_UP
        else:
            code = EXIT_OK
        result = LaunchResult(exit_code=code, members=outcomes, stopped_by=stopped_by)
        self.progress()
        summary = ", ".join(
            f"{o.index:03d} {o.status}" + (f" ({o.restarts} restarts)" if o.restarts else "") for o in outcomes.values()
        )
        self.journal.write(
            "done", None, exit_code=code, stopped_by=stopped_by, given_up=result.given_up, finished=result.finished
        )
        self.say(f"done (exit code {code}): {summary}")
        return result
