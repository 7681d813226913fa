"""What a killed process of a member leaves behind, repaired when the member starts again (it holds the member's
lock, so nothing of its own is in flight): temp files and donor copies (:func:`clear_leftovers`), and the files a
kill between two writes of one step leaves out of step with ``state.json`` (:func:`recover_after_crash`).

Called by :func:`~async_pbt_isaaclab.member.session.start_member`; imports only the core.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import Workspace


def clear_leftovers(ws: Workspace, cfg: PopulationConfig) -> None:
    """Remove what killed processes of this member left: temp files, donor copies of exploits in flight."""
    mdir = ws.member_dir(cfg.policy_idx)
    ws.clear_temp_files(cfg.temp_grace_s)  # e.g. a population.json half-published by a member killed at creation
    ws.checked_member_dir(cfg.policy_idx, "checkpoints", create=True)
    fsio.remove_stale_temp_files(mdir, cfg.temp_grace_s)
    fsio.remove_stale_temp_files(mdir / "checkpoints", cfg.temp_grace_s)
    # pins/ is written by other members (a recipient killed while pinning leaves a temp file there).
    fsio.remove_stale_temp_files(mdir / "pins", cfg.temp_grace_s)
    # incoming/ holds donor copies of this member's own exploits in flight. We hold the lock, so none is in
    # flight now: whatever is there (a partial temp copy, a verified copy) was left by a killed process.
    _clear_incoming(mdir / "incoming")


INCOMING_NAME = re.compile(r"^donor\d{3,6}_g\d{4,}\.pth$")
"""Names of the donor copies the observer writes in ``incoming/`` (the only files start-up deletes there)."""


def _clear_incoming(folder: Path) -> None:
    def ours(name: str) -> bool:
        return bool(INCOMING_NAME.match(name)) or (
            fsio.is_temp_name(name) and bool(INCOMING_NAME.match(name[1 : name.index(fsio.TEMP_MARKER)]))
        )

    fsio.remove_files(folder, ours)


def recover_after_crash(state: MemberState, mdir: Path) -> None:
    """Repair what a kill between two writes of one step leaves behind (state.json is the truth).

    * The audit log is written ahead: a decision is appended, then ``state.json`` saved with the RNG state
      after it. Killed in between, the state still holds the RNG state from *before* the logged decision;
      replaying those draws would repeat the decision's random choices. Take the logged decision's
      ``rng_after`` so the sequence continues.
    * ``best.json`` is written before ``state.json`` in a publish. Killed in between, ``best.json`` may list a
      checkpoint the state does not know (and so does not protect from retention, and that the resumed
      member may overwrite with other content under the same name). Rewrite it from ``state.best``.
    """
    from async_pbt_isaaclab.core.workspace.audit import read_entries

    last = None
    try:
        for _, entry, _ in read_entries(mdir / "audit.jsonl"):
            if entry is not None and entry.get("kind") == "decision":
                last = entry
    except OSError:
        last = None
    if last is not None and last.get("rng_before") == state.rng_state and isinstance(last.get("rng_after"), dict):
        state.decided(last["rng_after"])
    best_path = mdir / "best.json"
    try:
        on_disk = json.loads(fsio.read_bytes_nofollow(best_path))
    except FileNotFoundError:
        on_disk = None
    except ValueError:
        on_disk = "corrupt"
    best = [b.to_dict() for b in state.best]
    if on_disk != best and (on_disk is not None or best):
        fsio.atomic_write_json(best_path, best)
