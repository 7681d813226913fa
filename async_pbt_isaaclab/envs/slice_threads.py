"""The threads of a slices process: one per member, started, stopped and waited for with a bound.

``rl_games/slices.py`` and ``rsl_rl/slices.py`` set a process of ``M`` members up (:func:`start_sessions`, then
their trainers); here each member's training (rl_games' ``train()``, rsl_rl's ``learn``) runs in a thread of its own
while the main thread steps the shared env (``envs/slice_env.py``, :func:`run_slices`). Trainer-neutral: what a
thread runs and how its member ends is the trainer's (``slice_host.SliceMember``). What a thread can do to the
others is bounded:

* a thread that cannot start stops the members already started (:class:`MemberThreadError`, one line);
* after a stop (Ctrl-C, SIGTERM, a member's error) the main thread waits :func:`stop_wait_s` seconds at most for the
  member threads to end (each finishes its update in progress, then writes its record); a thread still running then,
  stuck in I/O say, is named with where it is (:class:`MembersStuck`) and the process ends without it
  (:func:`end_process`): that member resumes from its last checkpoint, as after a crash;
* each member's torch intra-op threads are its share of the cores (``core.slices.member_threads``): the members'
  PPO updates run at the same time, and each taking what a process member would oversubscribes them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, NoReturn

from async_pbt_isaaclab.core.slices import SliceLayout, member_threads
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv, SlicesStopped
from async_pbt_isaaclab.envs.slice_host import SliceHost, SliceMember

STOP_WAIT_ENV = "ASYNC_PBT_SLICES_STOP_WAIT_S"
"""Seconds the process waits for its member threads after a stop before it ends without them (default
:data:`STOP_WAIT_S`)."""

STOP_WAIT_S = 30.0
"""How long a stop waits for the member threads: a member ends its update in progress and writes its record in
that time; ``async-pbt launch`` sends SIGTERM 30 s after its SIGINT (``--stop-grace``)."""


def stop_wait_s() -> float:
    """Seconds a stop waits for the member threads (:data:`STOP_WAIT_ENV`, else :data:`STOP_WAIT_S`)."""
    value = os.environ.get(STOP_WAIT_ENV, "")
    try:
        return max(0.0, float(value)) if value else STOP_WAIT_S
    except ValueError:
        raise ValueError(f"{STOP_WAIT_ENV}={value!r}: give a number of seconds") from None


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which taskset and cgroup cpusets narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class MembersStuck(RuntimeError):
    """After a stop, member threads that did not end within :func:`stop_wait_s`: the process ends without them (a
    normal interpreter exit would wait for them, see :func:`end_process`). Their state on disk is their last
    checkpoint; the next start resumes them from it."""


class MemberThreadError(RuntimeError):
    """A member's training thread could not start: every member of the process stops (each resumable)."""


def end_process(exc: MembersStuck, code: int = 1) -> NoReturn:
    """Say why and end the process now: a thread stuck in I/O would keep a normal exit waiting (a member's
    background writer is not a daemon thread, so that a normal exit finishes its checkpoint)."""
    print(f"error: {exc}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)


def run_slices(host: SliceHost, build: Callable[[], SharedVecEnv], close_env: bool = True) -> None:
    """Build the shared env and the members' trainers (``build``), train every member in its thread while this
    (main) thread steps the env, wait for them, end the ones that never trained; then raise the process's error
    (:func:`raise_for_members`). A stop (Ctrl-C, SIGTERM) returns after every member has stopped and said where it
    resumes."""
    from async_pbt_isaaclab.member.held_stop import StopOnSignal

    stop_signal = StopOnSignal()
    shared: SharedVecEnv | None = None
    try:
        shared = build()
        run_members(host, shared)
    except KeyboardInterrupt:
        if shared is not None:
            shared.stop("stopped (Ctrl-C or SIGTERM)")
    finally:
        try:
            join_members(host, shared)  # a SIGTERM meanwhile is a KeyboardInterrupt too, not the default's kill
        finally:
            stop_signal.restore()
        end_unstarted(host)
        if shared is not None and close_env:
            close = getattr(shared.env, "close", None)
            if close is not None:
                close()
    raise_for_members(host)


def slices_exit_code(layout: SliceLayout, train: Callable[[], Any]) -> int:
    """``train()`` (a trainer's ``train_slices``) as the process's exit code: a problem the user must fix (a claimed
    index, an unwritable workspace, an unloadable checkpoint, a setting the slices refuse once the env or a member's
    trainer is built: an env value the shared env holds once for all, a recurrent policy) is one line on stderr and
    2, a member thread that did not start 1; members stuck after a stop end the process here (:func:`end_process`)."""
    from async_pbt_isaaclab.checkpoint_io import CheckpointError
    from async_pbt_isaaclab.core.workspace.layout import WorkspaceError
    from async_pbt_isaaclab.exit_codes import EXIT_USAGE

    try:
        train()
    except (WorkspaceError, CheckpointError, ValueError) as exc:
        print(f"error: members {layout.first}..{layout.first + layout.count - 1}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MemberThreadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except MembersStuck as exc:
        end_process(exc)
    return 0


def open_slices(
    layout: SliceLayout,
    problems: list[str],
    torch_threads: Any,
    cfg: Any,
    member_view: Callable[[int], Any],
    **start: Any,
) -> tuple[SliceHost, dict[int, dict[str, Any]]]:
    """The host of ``layout``'s members, each claimed, resumed or started (:func:`start_sessions`), with its share
    of the cores (``torch_threads``: the config's setting, ``core.slices.member_threads``); ``ValueError`` naming
    ``problems`` (the slice checks' lines) when there are any, before anything is claimed."""
    if problems:
        raise ValueError("; ".join(problems))
    host = SliceHost(layout, member_threads(torch_threads, layout.count, available_cores()), stop_wait_s())
    return host, start_sessions(host, cfg, member_view, **start)


def start_sessions(
    host: SliceHost, cfg: Any, member_view: Callable[[int], Any], **start: Any
) -> dict[int, dict[str, Any]]:
    """Claim, resume or start every member of the process (as a process member starts, ``start``: the keywords of
    ``member.session.start_member``); each member's view of the trainer config with its values, by member.
    ``member_view(member)``: the view it starts from. Exploits are carried out in memory: a restart would restart
    every slice (the slice checks make it possible)."""
    import dataclasses

    from async_pbt_isaaclab.member.session import start_member

    member_cfg = dataclasses.replace(cfg, exploit_mode="inprocess")
    views: dict[int, dict[str, Any]] = {}
    try:
        for slot, member in enumerate(host.layout.members):
            info = {"slices": host.layout.to_dict(), "slot": slot, "torch_threads": host.torch_threads}
            session, views[member] = start_member(
                member_view(member), dataclasses.replace(member_cfg, policy_idx=member), start_info=info, **start
            )
            host.members[member] = SliceMember(slot, session)
    except BaseException:
        for m in host.members.values():
            m.session.close()
        raise
    return views


def leave_if_finished(m: SliceMember, shared: SharedVecEnv) -> bool:
    """A member that had already finished trains nothing: it says so, logs its stop and leaves the shared env."""
    if not m.session.already_finished:
        return False
    m.status = "finished"
    print(f"[async-pbt] member {m.session.member}: nothing to train: {m.session.already_finished}", flush=True)
    m.session.log("stop", {"status": "finished", "reason": m.session.already_finished})
    m.session.close()
    shared.leave(m.slot)
    return True


def run_members(host: SliceHost, shared: SharedVecEnv) -> None:
    """One thread per member trains it; the main thread steps the shared env for all of them. A thread that cannot
    start stops the members already started (:class:`MemberThreadError`)."""
    for m in host.members.values():
        if m.train is None:
            continue
        name = f"member-{m.session.member:03d}"
        thread = threading.Thread(target=_train_one, args=(m, shared, host.torch_threads), name=name, daemon=True)
        try:
            thread.start()
        except Exception as exc:  # RuntimeError (no thread left), MemoryError: say it, stop all
            why = f"member {m.session.member:03d}: its training thread did not start ({type(exc).__name__}: {exc})"
            shared.stop(why)
            raise MemberThreadError(
                f"{why}; every member of this process stops: run the same command again to resume each from its "
                f"own checkpoint"
            ) from exc
        m.thread = thread
    shared.run()


def _train_one(m: SliceMember, shared: SharedVecEnv, torch_threads: int) -> None:
    """A member's thread: its trainer's own training loop on its slice; ends like a process member's training."""
    import torch

    from async_pbt_isaaclab.member.executor import MemberFault
    from async_pbt_isaaclab.member.session import say_where_it_resumes

    observer, train = m.observer, m.train
    assert observer is not None and train is not None
    # This thread's intra-op pool (torch keeps one per thread): the members' updates run at the same time.
    torch.set_num_threads(torch_threads)
    try:
        train()
        m.status = "finished"
    except (SlicesStopped, KeyboardInterrupt):
        m.status = "stopped"
    except MemberFault as exc:  # said and logged where it was found; the others go on
        m.status, m.error = "failed", exc
    except BaseException as exc:  # noqa: BLE001 - one member's error must not leave the others waiting
        m.status, m.error = "failed", exc
        print(f"[async-pbt] member {m.session.member}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        shared.stop(f"member {m.session.member} failed: {type(exc).__name__}: {exc}")
    finally:
        shared.leave(m.slot)
        try:
            if observer.started:
                observer.finish("finished" if m.status == "finished" else "stopped")
            else:
                m.session.close()
        except BaseException as exc:  # noqa: BLE001 - a publish that failed, found by the stop: the member failed
            if m.error is None:  # (its stop record and entry are written; the process exits with the error)
                m.status, m.error = "failed", exc
                print(f"[async-pbt] member {m.session.member}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            if m.status != "finished":
                # A stop writes no checkpoint (it may land inside an optimizer step): say what it costs.
                say_where_it_resumes(m.session)


def join_members(host: SliceHost, shared: SharedVecEnv | None) -> None:
    """Wait until every member thread has ended (each writes its record and audit entry as it stops). Once the
    process is stopping, wait :func:`stop_wait_s` seconds at most: a thread still running then (stuck, e.g. in I/O)
    is marked ``stuck``, said where it is and where its member resumes, and left behind."""
    pending = [m for m in host.members.values() if m.thread is not None]
    deadline: float | None = None
    while pending:
        if deadline is None and shared is not None and shared.stopping is not None:
            deadline = time.monotonic() + host.stop_wait
        if deadline is not None and time.monotonic() >= deadline:
            break
        thread = pending[0].thread
        assert thread is not None
        try:
            thread.join(timeout=0.2)
        except KeyboardInterrupt:
            if shared is not None:
                shared.stop("stopped (Ctrl-C or SIGTERM)")
        pending = [m for m in pending if m.thread is not None and m.thread.is_alive()]
    for m in pending:
        _leave_stuck(m, host.stop_wait)


def _leave_stuck(m: SliceMember, waited: float) -> None:
    """Mark a member whose thread did not end after a stop as stuck, and say where its thread is and where it
    resumes (its state on disk is what it last published)."""
    from async_pbt_isaaclab.member.session import say_where_it_resumes

    frame = sys._current_frames().get(m.thread.ident) if m.thread is not None and m.thread.ident else None
    where = f"in {frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})" if frame else "still running"
    m.status = "stuck"
    m.error = RuntimeError(
        f"member {m.session.member:03d} did not stop within {waited:g} s of the stop (its thread is {where})"
    )
    print(f"[async-pbt] {m.error}", file=sys.stderr, flush=True)
    say_where_it_resumes(m.session)


def end_unstarted(host: SliceHost) -> None:
    """Members that never trained (a stop or an error while the env, the trainers or the threads were built): a
    started one ends like a process member's (record and audit say stopped), another just releases the member."""
    from async_pbt_isaaclab.member.session import say_where_it_resumes

    for m in host.members.values():
        if m.status != "running":
            continue
        m.status = "stopped"
        if m.observer is not None and m.observer.started:
            m.observer.finish("stopped")
        else:
            m.session.close()
        say_where_it_resumes(m.session)


def raise_for_members(host: SliceHost) -> None:
    """The process's error, when a member's thread is stuck or a member failed (not a fault it stopped on)."""
    from async_pbt_isaaclab.member.executor import MemberFault

    stuck = [m for m in host.members.values() if m.status == "stuck"]
    if stuck:
        them = "it; it resumes" if len(stuck) == 1 else "them; they resume"
        raise MembersStuck(
            "; ".join(str(m.error) for m in stuck)
            + f": the process ends without {them} from the last checkpoint when the command runs again"
        )
    failed = [m for m in host.members.values() if m.status == "failed" and not isinstance(m.error, MemberFault)]
    if failed:
        raise RuntimeError(
            "; ".join(f"member {m.session.member} failed: {type(m.error).__name__}: {m.error}" for m in failed)
        ) from failed[0].error
