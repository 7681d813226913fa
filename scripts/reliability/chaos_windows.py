"""Where a chaos kill landed: each window's test on the files a killed member left (read after its death).

Each function returns a phase (a short sentence: the window was open at death, and where in it the process
was) or ``None`` (the window had closed: the kill does not count). They read only the member's folder, so the
driver can call them before a kill (is the window still open?) and after it (did the kill land?).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.pause_points import FAULT_FILE, PAUSE_POINTS
from async_pbt_isaaclab.core.workspace.state_files import load_state

RESTART_WINDOWS = (
    "checkpoint_write",
    "background_write",
    "donor_copy",
    "exploit_decided",
    "restart_pending",
    "warning_busy",
    "write_failed",
    "ctrl_c_failing",
    "random",
)
"""Windows of a population exploiting through the exec restart (``--exploit-mode restart``)."""

INPROCESS_WINDOWS = (
    "checkpoint_write",
    "background_write",
    "donor_copy",
    "exploit_decided",
    "inprocess_pending",
    "inprocess_applied",
    "inprocess_saved",
    "inprocess_done",
    "warning_busy",
    "write_failed",
    "ctrl_c_failing",
    "random",
)
"""Windows of a population exploiting in the running process (``--exploit-mode inprocess`` or ``auto``)."""

EXPLOIT_WINDOWS = (
    "donor_copy",
    "restart_pending",
    "inprocess_pending",
    "inprocess_applied",
    "inprocess_saved",
    "inprocess_done",
)
"""Windows that open once per exploit, in the order they open: the driver always aims at them (the others at
--aim-probability)."""

FAULT_WINDOWS = ("write_failed", "ctrl_c_failing")
"""Windows of a publish the watcher makes fail (a planted ``fault.json``): the member holds at the ``write_failed``
pause point as the failure is raised, and is killed there or sent Ctrl-C (SIGINT) and let go."""

PAUSE_POINT_OF = {"ctrl_c_failing": "write_failed"}
"""The pause point a window holds at, where it is not named after it."""

HELD_WINDOWS = (*PAUSE_POINTS, *PAUSE_POINT_OF)
"""Windows a few milliseconds wide (one fsynced write each), too narrow for a driver woken by a file event on a
loaded machine, and the background writer's publish (beside training: no file event says where training is): the
members hold inside them at a pause point (``ASYNC_PBT_TEST_PAUSE_AT``, a test facility in
``async_pbt_isaaclab.core.workspace.pause_points``) and the driver kills the held process or lets it go on (SIGCONT)."""


def held_windows(windows: tuple[str, ...]) -> tuple[str, ...]:
    """Of the windows aimed at, those the members hold in at a pause point."""
    return tuple(w for w in windows if w in HELD_WINDOWS)


def pause_points_for(windows: tuple[str, ...]) -> tuple[str, ...]:
    """The pause points the members hold at for ``windows`` (``ASYNC_PBT_TEST_PAUSE_AT``)."""
    return tuple(dict.fromkeys(PAUSE_POINT_OF.get(w, w) for w in held_windows(windows)))


def windows_for(exploit_mode: str) -> tuple[str, ...]:
    """The windows a population with this ``--pbt-exploit-mode`` opens."""
    return RESTART_WINDOWS if exploit_mode == "restart" else INPROCESS_WINDOWS


def aimed_windows(args: argparse.Namespace) -> tuple[str, ...]:
    """The windows a run aims at: ``--windows``, or every window of its ``--exploit-mode``."""
    return tuple(args.windows.split(",")) if args.windows else windows_for(args.exploit_mode)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _state(mdir: Path) -> Any:
    try:
        return load_state(mdir / "state.json")
    except RecordError:
        return None


def _audit(mdir: Path) -> list[dict[str, Any]]:
    return [e for _, e, _ in read_entries(mdir / "audit.jsonl") if e is not None]


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
        return (
            "checkpoint and best.json published, state.json not yet"
            if best_after
            else "checkpoint published, state.json not yet"
        )
    return None


def background_write_in_flight(mdir: Path) -> str | None:
    """A publish on the background writer has written its checkpoint, and neither ``state.json`` nor ``record.json``
    names it yet (best list, retention, decision, state and record still to come; training went on meanwhile)."""
    try:
        files = [p for p in (mdir / "checkpoints").iterdir() if p.suffix == ".pth" and not fsio.is_temp_file(p)]
    except FileNotFoundError:
        return None
    if not files:
        return None
    newest = max(files, key=_mtime_ns).name
    state = _state(mdir)
    if state is None or Path(state.last_checkpoint).name == newest:
        return None
    try:
        named = json.loads(fsio.read_bytes_nofollow(mdir / "record.json")).get("checkpoint") or ""
    except (OSError, ValueError, AttributeError):
        named = ""
    if Path(named).name == newest:
        return None
    return "background publish in flight: checkpoint written, state.json and record.json name the one before"


def donor_copy_in_flight(mdir: Path) -> str | None:
    copies = list((mdir / "incoming").glob("*")) if (mdir / "incoming").is_dir() else []
    if not copies:
        return None
    return (
        "donor copy in incoming/: being copied (temp file)"
        if any(fsio.is_temp_file(p) for p in copies)
        else "donor copy in incoming/: verified, not yet loaded"
    )


def decision_not_acted_on(mdir: Path, seq: int, generation: int | None, rng_after: Any) -> str | None:
    """The exploit decision ``seq`` (taken at ``generation``) is logged; no donor copy, pending exploit, abort
    or any other audit entry has followed it."""
    if donor_copy_in_flight(mdir):
        return None
    state = _state(mdir)
    if state is None or state.pending_exploit or (generation is not None and state.generation != generation):
        return None
    if any(e.get("seq", -1) > seq for e in _audit(mdir)):
        return None
    if state.rng_state != rng_after:
        return "decision logged, state.json not yet saved after it"
    if publish_in_progress(mdir):
        return "decision logged, recipient checkpoint being written"
    return "decision logged and state.json saved, donor not yet fetched"


def last_decision_not_acted_on(mdir: Path) -> str | None:
    """:func:`decision_not_acted_on` for the member's last exploit decision (a member held at ``exploit_decided``)."""
    decisions = [
        e for e in _audit(mdir) if e.get("kind") == "decision" and (e.get("decision") or {}).get("outcome") == "exploit"
    ]
    if not decisions:
        return None
    e = decisions[-1]
    generation = ((e.get("inputs") or {}).get("me") or {}).get("generation")
    return decision_not_acted_on(mdir, e.get("seq", -1), generation, e.get("rng_after"))


def restart_in_flight(mdir: Path, checkpoint: str, execd: bool) -> str | None:
    """The exploit restart to ``checkpoint`` has not applied it yet (``execd``: the image after execv)."""
    state = _state(mdir)
    if state is None or not state.pending_exploit or state.pending_exploit.checkpoint != checkpoint:
        return None
    return (
        "restart in flight: "
        + ("new image after execv" if execd else "process without --checkpoint (before execv, or a launcher restart)")
        + ", exploit not yet applied"
    )


# ------------------------------------------------------------ the in-process exploit, step by step
#
# The observer's in-process exploit writes, in this order (after the decision and the donor copy): the recipient
# checkpoint; state.json with pending_exploit (path inprocess); record.json (the new generation); then loads the
# recipient state into the live agent; appends exploit_applied and restored to audit.jsonl; saves state.json with
# pending_exploit cleared; rewrites record.json. Each window below is the stretch between two of those writes.


def _applied(entries: list[dict[str, Any]], checkpoint: str) -> list[dict[str, Any]]:
    return [e for e in entries if e.get("kind") == "exploit_applied" and e.get("checkpoint") == checkpoint]


def inprocess_pending(mdir: Path, checkpoint: str) -> str | None:
    """``state.json`` names the in-process exploit to ``checkpoint`` as pending; ``exploit_applied`` not logged."""
    state = _state(mdir)
    pending = state.pending_exploit if state is not None else None
    if not pending or pending.checkpoint != checkpoint or pending.path != "inprocess":
        return None
    if _applied(_audit(mdir), checkpoint):
        return None
    if _mtime_ns(mdir / "record.json") < _mtime_ns(mdir / "state.json"):
        return "in-process exploit pending in state.json, record.json not yet rewritten"
    return "in-process exploit pending, record.json rewritten: loading into the live agent, not yet logged"


def inprocess_applied(mdir: Path, checkpoint: str) -> str | None:
    """``exploit_applied`` (path inprocess) is logged for ``checkpoint``, ``state.json`` still names it pending."""
    state = _state(mdir)
    pending = state.pending_exploit if state is not None else None
    if not pending or pending.checkpoint != checkpoint:
        return None
    entries = _audit(mdir)
    applied = _applied(entries, checkpoint)
    if not applied or applied[-1].get("path") != "inprocess":
        return None
    restored = [
        e
        for e in entries
        if e.get("kind") == "restored"
        and e.get("mode") == "exploit_inprocess"
        and e.get("seq", -1) > applied[-1].get("seq", -1)
    ]
    return (
        "live agent holds the donor, exploit_applied logged, restored entry not yet"
        if not restored
        else "exploit_applied and restored logged, state.json still names the exploit pending"
    )


def inprocess_finished_last(mdir: Path, checkpoint: str, generation: int) -> bool:
    """``state.json`` holds the in-process exploit to ``checkpoint`` as done, and the last audit entry is that
    exploit's ``restored`` (nothing since: not a new process, which would have logged its start)."""
    state = _state(mdir)
    if state is None or state.pending_exploit or state.generation != generation or state.last_checkpoint != checkpoint:
        return False
    entries = _audit(mdir)
    return (
        bool(entries)
        and entries[-1].get("kind") == "restored"
        and entries[-1].get("mode") == "exploit_inprocess"
        and str(entries[-1].get("checkpoint", "")).endswith(checkpoint)
    )


def inprocess_saved(mdir: Path, checkpoint: str, generation: int) -> str | None:
    """``state.json`` saved with the in-process exploit to ``checkpoint`` done; ``record.json`` not yet rewritten."""
    if not inprocess_finished_last(mdir, checkpoint, generation):
        return None
    if _mtime_ns(mdir / "record.json") >= _mtime_ns(mdir / "state.json"):
        return None
    return "in-process exploit done in state.json, record.json not yet rewritten"


def inprocess_done(mdir: Path, checkpoint: str, generation: int) -> str | None:
    """The in-process exploit to ``checkpoint`` is complete (record rewritten after ``state.json``) and the member
    trains the new generation; nothing has been logged since (no next decision)."""
    if not inprocess_finished_last(mdir, checkpoint, generation):
        return None
    if _mtime_ns(mdir / "record.json") < _mtime_ns(mdir / "state.json"):
        return None
    return "in-process exploit complete, record rewritten, training the new generation"


# ------------------------------------------------------------ the writer busy or failing


def warning_logged_busy(mdir: Path) -> str | None:
    """The slow-write warning is the last audit entry, logged by the training thread while the publish it names is
    in flight (its checkpoint written, ``state.json`` and ``record.json`` naming the one before)."""
    if background_write_in_flight(mdir) is None:
        return None
    entries = _audit(mdir)
    if not entries or entries[-1].get("kind") != "warning" or "training goes on" not in entries[-1].get("message", ""):
        return None
    return "slow-write warning logged by the training thread, the publish held in the writer"


def _after(mdir: Path, seq: int, kind: str) -> list[dict[str, Any]]:
    return [e for e in _audit(mdir) if e.get("kind") == kind and e.get("seq", -1) > seq]


def write_failing(mdir: Path, seq: int) -> str | None:
    """The planted fault was taken (a step of a publish failed on the writer) and nothing was rolled back or logged
    for it yet: no ``publish_failed`` entry after audit entry ``seq`` (the last one when the fault was planted)."""
    if (mdir / FAULT_FILE).exists() or _after(mdir, seq, "publish_failed"):
        return None
    return "a step of the publish failed on the writer (EIO), nothing rolled back or logged yet"


def stopped_after_failure(mdir: Path, seq: int) -> str | None:
    """After Ctrl-C during the failing write: ``publish_failed`` and then ``stop`` logged after entry ``seq``, and
    the record says stopped."""
    failed = _after(mdir, seq, "publish_failed")
    stops = _after(mdir, failed[0]["seq"] if failed else 1 << 62, "stop")
    try:
        status = json.loads(fsio.read_bytes_nofollow(mdir / "record.json")).get("status")
    except (OSError, ValueError, AttributeError):
        status = None
    if not failed or not stops or status != "stopped":
        return None
    return "Ctrl-C during the failing write: publish_failed, then the stop record and entry"
