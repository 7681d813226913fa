"""The members of one slices process, as the process's threads see them: each member's slot, session, driver,
what it trains and its thread, how its training ended, and what they share (the kept states recipients copy in
memory). Trainer-neutral: ``rl_games/slices.py`` and ``rsl_rl/slices.py`` set the members up, ``slice_threads.py``
runs them."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from async_pbt_isaaclab.core.slices import SliceLayout
from async_pbt_isaaclab.member.donors import KeptStates


class MemberDriver(Protocol):
    """What turns a slice member's trainer events into the member loop's (rl_games' ``PbtObserver``, rsl_rl's
    ``MemberEvents``), as the threads end it."""

    @property
    def started(self) -> bool:
        """The member's start checkpoint is restored: a stop from here on publishes its state."""
        ...

    def finish(self, status: str) -> None:
        """End the member: ``finished`` publishes a final checkpoint, ``stopped`` does not."""
        ...


@dataclass
class SliceMember:
    """One member of the process: its slot, session and driver, what trains it, and how its training ended."""

    slot: int
    session: Any
    observer: MemberDriver | None = None
    """Its driver, once built."""
    agent: Any = None
    """The trainer's own object (the rl_games agent, rsl_rl's runner)."""
    train: Callable[[], Any] | None = None
    """Runs the member's training to its end (in its thread); ``None``: it has nothing to train."""
    status: str = "running"
    """``running``, ``finished``, ``stopped``, ``failed`` or ``stuck`` (its thread did not end after a stop)."""
    error: BaseException | None = None
    thread: threading.Thread | None = None
    """Its training thread, once started."""


class SliceHost:
    """The members of one process."""

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
