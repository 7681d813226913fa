"""Holding Ctrl-C / SIGTERM while a member writes one step of its files.

A member's publish-decide step and its exploit step each write several files (checkpoint, best list,
decision, state, record, the recipient checkpoint). A stop landing between two of those writes would leave
``record.json`` advertising a checkpoint that ``state.json`` (the resume point) does not name, or an
in-memory state half updated; so the signal is held and delivered once the step is written.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Literal


class HeldStop:
    """Context manager: holds SIGINT / SIGTERM for its body, then delivers the held one to the handler that
    was installed before (Python's default turns SIGINT into ``KeyboardInterrupt``). Main thread only (where
    Python runs signal handlers); elsewhere it holds nothing."""

    def __init__(self) -> None:
        self.requested: int | None = None
        """The signal that arrived inside the body (the last one, if several), or None."""
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "HeldStop":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(sig)
                if previous in (signal.SIG_IGN, None):
                    continue
                self._previous[sig] = previous
                signal.signal(sig, self._hold)
        return self

    def _hold(self, signum: int, frame: Any) -> None:
        self.requested = signum

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self.requested is not None and exc_type is None:
            signal.raise_signal(self.requested)  # now, to the handler that was there (KeyboardInterrupt)
        return False


class StopOnSignal:
    """SIGTERM (a scheduler or the launcher stopping a member) handled like Ctrl-C while it trains: a
    ``KeyboardInterrupt``, so the member finishes cleanly and resumably. :meth:`restore` puts the old handler back."""

    def __init__(self) -> None:
        self.previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._raise)

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self.previous)
