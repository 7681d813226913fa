"""One member's process on this machine: started in its own session with its output appended to its log, signalled
as a whole process group, and told to die with the launcher.

The :class:`~async_pbt_isaaclab.launch.supervisor.Supervisor` decides *when* a member starts, restarts or stops;
this module is *how* a member process is started and signalled:

* **Own process group.** Each member starts in a new session (``start_new_session=True``), so a Ctrl-C typed in
  the terminal reaches only the launcher and the launcher decides what the members get. Signals are sent to the
  member's whole process group, so wrapper scripts (``isaaclab.sh`` -> python) are reached too.
* **Its log.** stdin is ``/dev/null``; stdout and stderr are appended to the member's log after a header line
  naming the start, so a crash tail can be read from where this start's output begins.
* **Launcher death.** On Linux each member asks the kernel for SIGTERM when the launcher dies
  (``PR_SET_PDEATHSIG``), so a ``kill -9``'d or OOM-killed launcher leaves no member holding a GPU.

Imports only the standard library and the pure core.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from async_pbt_isaaclab.core.workspace import fsio


class MemberStartError(Exception):
    """A member process could not be started (its log cannot be opened, its command cannot be run). Starting it
    again would fail the same way; the message says what went wrong."""


def member_preexec(die_with_launcher: bool) -> Callable[[], None] | None:
    """Runs in the child between fork and exec. Resets SIGINT/SIGTERM to their defaults and unblocks them (a
    launcher started in the background inherits SIGINT ignored; a Ray worker, which runs a member's task, blocks
    SIGINT in its threads; the member would inherit either across exec and never see the graceful stop, only the
    SIGTERM after the grace period) and, on Linux, asks for SIGTERM when the launcher dies."""
    if os.name != "posix":
        return None
    prctl = None
    if die_with_launcher and sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: no dlopen in the child
        except (OSError, AttributeError):
            prctl = None
    parent = os.getpid()

    def preexec() -> None:
        # A caught signal is reset by exec anyway; this matters when the launcher runs off the main
        # thread (no handler of its own) with SIGINT ignored. Never fail the start over it.
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        # The signal mask survives exec, unlike a handler.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
        if prctl is not None:
            prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the launcher died before prctl took effect
                os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def spawn_member(
    command: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    header: str,
    preexec: Callable[[], None] | None,
    cwd: str | None = None,
    root: Path | None = None,
) -> tuple[subprocess.Popen, int]:
    """Append ``header`` to ``log_path`` and start ``command`` (in ``cwd``, default this process's) as the leader of
    a new session, its output appended to the log. Returns the process and the log's size where its output begins
    (its crash tail is read from there).

    The log is never opened through a symbolic or hard link, nor, when it lies in the workspace ``root``, through a
    linked folder: a planted link would send the member's output into a file outside the workspace.

    Raises :class:`MemberStartError` when the log cannot be opened or the command cannot be started.
    """
    try:
        if root is not None and log_path.is_relative_to(root):
            fsio.check_no_links(root, log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = os.fdopen(fsio.open_in_place(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), "ab")
    except fsio.UnsafePathError as exc:
        raise MemberStartError(f"its log file: {exc}") from None
    except OSError as exc:
        raise MemberStartError(f"cannot open its log file {log_path}: {exc}") from exc
    try:
        log.write(header.encode())
        log.flush()
        offset = log.tell()
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
        )
    except OSError as exc:
        # Command not found / not executable: a restart would fail the same way.
        raise MemberStartError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from exc
    finally:
        log.close()  # the child holds its own descriptor
    return process, offset


def signal_group(process: subprocess.Popen | None, signum: int) -> None:
    """Send ``signum`` to the member's whole process group (nothing when it has gone already)."""
    if process is None:
        return
    try:
        os.killpg(process.pid, signum)  # the member is its session's and group's leader
    except (ProcessLookupError, PermissionError):
        pass


def end_group(process: subprocess.Popen, term_grace_s: float) -> None:
    """Terminate a member's group and wait for its leader: SIGTERM, then SIGKILL after ``term_grace_s``."""
    signal_group(process, signal.SIGTERM)
    try:
        process.wait(timeout=term_grace_s)
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
        process.wait()
