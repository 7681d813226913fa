"""The member's files read and written: ``state.json``, ``record.json`` and a schedule yaml (the typed contents and
their strict parsers are :mod:`async_pbt_isaaclab.core.state`'s)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.state.records import MemberRecord, RecordError, parse_record_bytes
from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleError, check_replayable, schedule_from_dict
from async_pbt_isaaclab.core.workspace import fsio


def load_state(path: Path) -> MemberState | None:
    """The member's state, ``None`` when it never ran. A corrupt file raises :class:`RecordError`."""
    try:
        raw = fsio.read_bytes_nofollow(path)  # a symbolic link here is refused (UnsafePathError), not followed
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # ValueError covers UnicodeDecodeError
        raise RecordError(
            f"{path}: corrupt member state ({exc}); restore it from a backup or start a new workspace"
        ) from None
    return MemberState.from_dict(data, str(path))


def save_state(path: Path, state: MemberState) -> None:
    """Write ``state`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    fsio.atomic_write_json(path, state.to_dict())


def read_record(path: Path) -> MemberRecord:
    """The record in ``path``; :class:`RecordError` naming the file when it cannot be read or parsed."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_record_bytes(data, str(path))


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule yaml written by ``async-pbt replay``."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ScheduleError(f"{path}: not valid yaml ({str(exc).splitlines()[0]})") from None
    return schedule_from_dict(data, str(path))


def load_replay_schedule(path: str | Path) -> Schedule:
    """Read a schedule for ``--pbt-replay`` and check one run can follow it (pure, so an entry point refuses a bad
    file before it starts a simulator); :class:`ScheduleError` names the file and key."""
    return check_replayable(load_schedule(path), str(path))
