"""The members of one slices process, as the process's threads see them: each member's slot, session, observer,
agent and thread and how its training ended, and what they share (the kept states recipients copy in memory).
Apart from ``slices.py``, which sets them up, and ``slice_threads.py``, which runs them, so that neither imports the
other."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from async_pbt_isaaclab.core.slices import SliceLayout
from async_pbt_isaaclab.member.donors import KeptStates
from async_pbt_isaaclab.rl_games.observer import PbtObserver


@dataclass
class SliceMember:
    """One member of the process: its slot, session and observer, and how its training ended."""

    slot: int
    session: Any
    observer: PbtObserver | None = None
    agent: Any = None
    status: str = "running"
    """``running``, ``finished``, ``stopped``, ``failed`` or ``stuck`` (its thread did not end after a stop)."""
    error: BaseException | None = None
    thread: threading.Thread | None = None
    """Its training thread, once started."""


class SliceHost:
    """The members of one process (``rl_games/slices.py`` sets them up)."""

    def __init__(self, layout: SliceLayout, torch_threads: int, stop_wait: float):
        self.layout = layout
        self.members: dict[int, SliceMember] = {}
        """By member index."""
        self.torch_threads = torch_threads
        """Torch intra-op threads of each member's training thread (``core.slices.member_threads``)."""
        self.stop_wait = stop_wait
        """Seconds a stop waits for the member threads (``slice_threads.stop_wait_s``)."""
        self.kept = KeptStates(layout.members)
        """The states the members published, where recipients in this process take their donors from."""
