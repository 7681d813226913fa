"""The audit verifier: walks one member's log, checks the hash chain, its anchor in ``state.json``, the RNG stream
from entry to entry, and replays every decision, initial draw and exploit plan (:mod:`.audit_replay`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from async_pbt_isaaclab.core.workspace.audit import GENESIS, entry_hash, read_entries
from async_pbt_isaaclab.core.workspace.audit_replay import (
    aborted_exploit_mismatches,
    applied_exploit_mismatches,
    recompute_decision,
    recompute_initial_mutation,
)


@dataclass(frozen=True)
class VerifyProblem:
    """One entry that failed verification."""

    path: str
    line: int
    seq: int | None
    problem: str

    def __str__(self) -> str:
        seq = "" if self.seq is None else f" (seq {self.seq})"
        return f"{self.path}:{self.line}{seq}: {self.problem}"


def verify_log(
    path: str | os.PathLike[str],
    head: dict[str, Any] | None = None,
    *,
    genesis: Sequence[str] | None = None,
    final: bool = False,
) -> tuple[int, list[VerifyProblem]]:
    """Check the chain, replay every decision and check every applied exploit against its decision. Returns
    (entries checked, problems).

    ``head`` (``{seq, hash}``, what the member's ``state.json`` recorded as its last entry when it last saved)
    catches what the chain alone cannot: whole entries cut from the end leave a valid, shorter chain. With
    ``final`` (the member is not running, so its last save followed its last entry) an entry after the head is
    reported too: nothing anchors it. ``genesis`` (:func:`genesis_hash`) lists the ``prev_hash`` values the first
    entry may have: a log copied from another member or workspace starts elsewhere (``None``: not checked)."""
    walk = _LogWalk(str(path), head, genesis=None if genesis is None else tuple(genesis), final=final)
    for lineno, entry, err in read_entries(Path(path)):
        if entry is None:
            walk.problems.append(VerifyProblem(walk.path, lineno, None, err or "unreadable"))
            continue
        walk.count += 1
        walk.check_chain(lineno, entry)
        walk.check_content(lineno, entry)
        walk.check_head(lineno, entry)
        walk.check_rng_stream(lineno, entry)
        walk.advance(entry)
    walk.check_head_reached()
    return walk.count, walk.problems


@dataclass
class _LogWalk:
    """What :func:`verify_log` carries from one entry to the next."""

    path: str
    head: dict[str, Any] | None
    problems: list[VerifyProblem] = field(default_factory=list)
    count: int = 0
    prev_hash: str = GENESIS
    expected_seq: int = 0
    rng_stream: Any = None
    """``rng_after`` of the newest entry that drew from the member's RNG."""
    acting: dict[str, Any] | None = None
    """The newest exploit/explore decision not yet aborted or superseded."""
    head_found: bool = False
    last_seq: Any = None
    genesis: tuple[str, ...] | None = None
    """Accepted ``prev_hash`` values of the first entry (``None``: any)."""
    final: bool = False
    """The member is not running: its head must be the log's last entry."""
    unanchored: tuple[int, Any] | None = None
    """(line, seq) of the first entry after the head."""

    def problem(self, lineno: int, seq: Any, text: str) -> None:
        self.problems.append(VerifyProblem(self.path, lineno, seq, text))

    def check_chain(self, lineno: int, entry: dict[str, Any]) -> None:
        """Sequence number, link to the previous entry, and the entry's own hash."""
        seq = entry.get("seq")
        if seq != self.expected_seq:
            self.problem(
                lineno,
                seq,
                f"sequence number {seq!r}, expected {self.expected_seq} (entry missing, duplicated or reordered)",
            )
        if self.count == 1:
            self.check_genesis(lineno, entry)
        elif entry.get("prev_hash") != self.prev_hash:
            self.problem(lineno, seq, "chain broken: prev_hash does not match the previous entry's hash")
        try:
            recomputed: str | None = entry_hash(str(entry.get("prev_hash")), entry)
        except ValueError:  # NaN / Infinity: no writer of this log produces them
            recomputed = None
            self.problem(lineno, seq, "entry holds NaN or Infinity, which no member writes")
        if recomputed is not None and entry.get("hash") != recomputed:
            self.problem(lineno, seq, "hash mismatch: the entry was edited after it was written")

    def check_genesis(self, lineno: int, entry: dict[str, Any]) -> None:
        """The first entry links to this member's genesis in this workspace (:func:`genesis_hash`)."""
        if self.genesis is None or entry.get("prev_hash") in self.genesis:
            return
        self.problem(
            lineno,
            entry.get("seq"),
            "the log does not begin this member's chain in this workspace (its first entry links to "
            f"{str(entry.get('prev_hash'))[:16]}...): it was copied from another member or another workspace, "
            "or its first entries were removed",
        )

    def check_content(self, lineno: int, entry: dict[str, Any]) -> None:
        """Replay what can be replayed: decisions, the exploits applied for them, initial mutations."""
        kind, seq = entry.get("kind"), entry.get("seq")
        if kind == "decision":
            for p in recompute_decision(entry):
                self.problem(lineno, seq, f"decision does not reproduce: {p}")
            decided = entry.get("decision")
            outcome = decided.get("outcome") if isinstance(decided, dict) else None
            self.acting = entry if outcome in ("exploit", "explore") else None
        elif kind == "exploit_applied":
            for p in applied_exploit_mismatches(entry, self.acting):
                self.problem(lineno, seq, f"applied exploit does not match its decision: {p}")
        elif kind == "exploit_aborted":
            for p in aborted_exploit_mismatches(entry, self.acting):
                self.problem(lineno, seq, f"aborted exploit does not match its decision's plan: {p}")
            self.acting = None
        elif kind == "publish_failed":
            self.check_publish_failed(lineno, entry)
        elif kind in ("initial_mutation", "initial_draw"):
            what = "initial mutation" if kind == "initial_mutation" else "initial draw (diverse start)"
            for p in recompute_initial_mutation(entry):
                self.problem(lineno, seq, f"{what} does not reproduce: {p}")

    def check_publish_failed(self, lineno: int, entry: dict[str, Any]) -> None:
        """A failed write names its error; the member stopped on it, so a decision it had taken is never acted on."""
        if not isinstance(entry.get("error"), str) or not entry["error"]:
            self.problem(lineno, entry.get("seq"), "publish_failed entry without the error that failed the write")
        self.acting = None

    def check_head(self, lineno: int, entry: dict[str, Any]) -> None:
        """The entry state.json named as the last one must still be the one at that seq."""
        seq = entry.get("seq")
        if self.head is None:
            return
        head_seq = self.head.get("seq")
        if self.unanchored is None and isinstance(seq, int) and isinstance(head_seq, int) and seq > head_seq:
            self.unanchored = (lineno, seq)
        if seq != head_seq:
            return
        self.head_found = True
        if entry.get("hash") != self.head.get("hash"):
            self.problem(
                lineno,
                seq,
                f"this entry's hash {str(entry.get('hash'))[:16]}... is not the "
                f"{str(self.head.get('hash'))[:16]}... "
                f"state.json recorded for seq {seq}: the log was rewritten after the member saved its state",
            )

    def check_rng_stream(self, lineno: int, entry: dict[str, Any]) -> None:
        """Every entry that draws continues the member's random stream where the previous one left it."""
        kind = entry.get("kind")
        rng_in = entry.get("rng_state") if kind == "start" else entry.get("rng_before")
        if kind not in ("start", "decision", "initial_mutation", "initial_draw") or rng_in is None:
            return
        if self.rng_stream is not None and rng_in != self.rng_stream:
            self.problem(
                lineno,
                entry.get("seq"),
                "RNG stream broken: this entry's RNG state does not continue the previous decision's "
                "rng_after (was the member's state.json replaced or deleted?)",
            )
        self.rng_stream = entry.get("rng_after", rng_in) if kind != "start" else rng_in

    def advance(self, entry: dict[str, Any]) -> None:
        seq = entry.get("seq")
        self.last_seq = seq
        self.prev_hash = str(entry.get("hash"))
        self.expected_seq = (seq if isinstance(seq, int) else self.expected_seq) + 1

    def check_head_reached(self) -> None:
        """Entries cut from the end leave a valid, shorter chain: only the saved head shows it. And when the member
        is not running, no entry may follow the head: nothing would show it cut."""
        if self.head is not None and self.final and self.unanchored is not None:
            lineno, seq = self.unanchored
            self.problem(
                lineno,
                seq,
                f"not anchored: state.json's last save records seq {self.head.get('seq')!r} as the member's last "
                f"entry, so this entry and any after it could be cut unnoticed (the member was killed between "
                f"writing it and saving its state, or state.json was replaced by an older copy); starting the "
                f"member again anchors it",
            )
        if self.head is None or self.head_found:
            return
        self.problem(
            self.count + 1,
            self.head.get("seq"),
            f"log ends at seq {self.last_seq!r} but state.json records seq {self.head.get('seq')!r} as the member's "
            f"last entry: entries were removed from the end of the log",
        )
