"""Where a recipient gets its donor's weights: a copy of the donor's checkpoint file, or a state kept in memory.

:func:`fetch_donor` pins the donor's checkpoint (the donor's retention keeps it while it is copied), copies it into
``members/<me>/incoming/`` hashing while it copies, checks the copy against the sha256 the donor published, loads it
through the trainer's safe loader and checks that it fits the recipient's model.

Members that share a process (slices) also keep the states they published in memory (:class:`KeptStates`, one per
process, handed to each member's executor as its :class:`DonorLookup`): a recipient whose decision names one of
them (by checksum) takes a copy instead of reading the file, once the copy's model fingerprint still matches.
"""

from __future__ import annotations

import copy
import errno
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from async_pbt_isaaclab.core.decision.generation import DonorSource
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.layout import WorkspaceError
from async_pbt_isaaclab.core.workspace.retention import pin_checkpoint, retiring_name
from async_pbt_isaaclab.member.session import MemberSession
from async_pbt_isaaclab.member.trainer import Trainer, UnreadableCheckpoint

KEEP_PUBLISHED = 2
"""Published states a member keeps in memory: the donor of a decision at matching progress is the newest one, or the
one before when the donor has not published at this interval yet (slices step in lockstep). With the background
writer, a donor whose writes lag a whole interval offers peers the one before that: it is then copied from its file
(the audit log's warning says so), which costs a read, not a third copy of every member's state in memory."""

DONOR_ERRORS = (OSError, fsio.ChecksumMismatch, WorkspaceError, UnreadableCheckpoint, ValueError)
"""What makes a donor's checkpoint unusable (the exploit is then aborted and the member keeps training)."""


@dataclass(frozen=True)
class KeptState:
    """A checkpoint a member published, kept in memory for recipients in the same process."""

    checkpoint: str
    """Workspace-relative path of the published file."""
    sha256: str
    """Its checksum (what a decision's donor source names)."""
    model_sha256: str
    """Fingerprint of the model saved in it, taken when it was saved."""
    state: dict[str, Any] = field(repr=False)
    """The saved state (tensors that share no storage with the live trainer)."""


def clone_state(value: Any, to: str | None = None) -> Any:
    """A copy of a checkpoint dict whose tensors share no storage with the live trainer (later updates cannot change
    it: what a kept state must be); on a GPU the clones stay on the device (no host synchronisation) unless ``to``
    names another."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone() if to is None else value.detach().to(to, copy=True)
    if isinstance(value, dict):
        return {k: clone_state(v, to) for k, v in value.items()}
    if isinstance(value, list):
        return [clone_state(v, to) for v in value]
    if isinstance(value, tuple):
        return tuple(clone_state(v, to) for v in value)
    return copy.deepcopy(value)


def tensors_finite(*state_dicts: Any) -> bool:
    """Every floating tensor of the state dicts is finite (one device read): a slice member's weights after an
    update, before the next rollout acts with them."""
    import torch

    flags = [torch.isfinite(t).all() for sd in state_dicts for t in sd.values() if t.is_floating_point()]
    return bool(torch.stack(flags).all().item()) if flags else True


class ClonesItsStates:
    """A slice member's trainer (mixed in before the trainer's class): every full state it hands out is a clone, so
    a published state can be kept in memory for recipients in its process while training goes on; it cannot restart
    (that would restart every slice of the process)."""

    def full_state(self) -> dict[str, Any]:
        return clone_state(super().full_state())  # type: ignore[misc]

    def abilities(self) -> Any:
        import dataclasses

        return dataclasses.replace(super().abilities(), restarts=False)  # type: ignore[misc]


class DonorLookup(Protocol):
    """Donor states a member can take from memory (the members of its own process)."""

    def hosts(self, member: int) -> bool:
        """``member`` lives in this process (its published states may be kept here)."""
        ...

    def keep(self, member: int, kept: KeptState) -> None:
        """``member`` published ``kept``; recipients in this process may take it."""
        ...

    def find(self, member: int, checkpoint: str) -> KeptState | None:
        """The state ``member`` published as ``checkpoint``, if it is still kept (``None``: read the file)."""
        ...


class KeptStates:
    """The newest :data:`KEEP_PUBLISHED` states each member of this process published (a :class:`DonorLookup`)."""

    def __init__(self, members: Any) -> None:
        self._members = frozenset(members)
        self._kept: dict[int, list[KeptState]] = {}
        self._lock = threading.Lock()  # members publish and look up from their own threads

    def hosts(self, member: int) -> bool:
        return member in self._members

    def keep(self, member: int, kept: KeptState) -> None:
        with self._lock:
            others = [k for k in self._kept.get(member, []) if k.checkpoint != kept.checkpoint]
            self._kept[member] = [*others, kept][-KEEP_PUBLISHED:]

    def find(self, member: int, checkpoint: str) -> KeptState | None:
        with self._lock:
            return next((k for k in self._kept.get(member, []) if k.checkpoint == checkpoint), None)


def in_memory(donors: DonorLookup, trainer: Trainer, source: DonorSource) -> tuple[dict[str, Any] | None, str]:
    """The donor state ``source`` names, taken from memory: ``(a copy, "")``, or ``(None, why not)`` when it is not
    kept here as published (``why`` is empty when the donor is not a member of this process, or its state does not
    fit: the file is fetched and says so in the usual words)."""
    if not donors.hosts(source.member):
        return None, ""
    kept = donors.find(source.member, source.checkpoint)
    if kept is None:
        return None, "not kept in memory (older than the last two it published)"
    if kept.sha256 != source.sha256:
        return None, f"kept checksum {kept.sha256[:12]} is not the decision's {source.sha256[:12]}"
    fingerprint = trainer.fingerprint(kept.state)
    if fingerprint != kept.model_sha256:
        return None, f"model fingerprint {fingerprint[:12]} changed since it was published ({kept.model_sha256[:12]})"
    try:
        trainer.check_fits(kept.state)
    except ValueError:
        return None, ""
    return copy.deepcopy(kept.state), ""


def fetch_donor(session: MemberSession, trainer: Trainer, source: DonorSource) -> dict[str, Any]:
    """Pin, copy, verify, load and fit-check the donor's checkpoint ``source``; raises one of :data:`DONOR_ERRORS`
    naming what is wrong. The pin and the copy are removed either way."""
    local = session.dir / "incoming" / f"donor{source.member:03d}_g{source.generation:04d}.pth"
    pin = None
    incoming_checked = False
    try:
        session.ws.checked_member_dir(session.member, "incoming", create=True)  # refuses a planted link
        incoming_checked = True
        pin = pin_checkpoint(session.ws, source.member, source.checkpoint, session.member)
        _copy_pinned(session.ws.checkpoint_path(source.checkpoint), local, source.sha256)
        state = trainer.read_checkpoint(local, source.sha256, session.cfg.trusted_workspace)
        trainer.check_fits(state)
        return state
    finally:
        if pin is not None:
            pin.unlink(missing_ok=True)
        if incoming_checked:
            local.unlink(missing_ok=True)


def _copy_pinned(path: Path, local: Path, sha256: str) -> None:
    """Copy a pinned checkpoint: retention may have set it aside just before the pin was read (it then puts it back),
    so it is looked for under both names, twice (``core/workspace/retention.py``)."""
    for candidate in (path, retiring_name(path), path, retiring_name(path)):
        try:
            fsio.atomic_copy_verified(candidate, local, sha256)
            return
        except FileNotFoundError:
            continue
    # errno and the OS's own words, as the copy of a vanished file says them elsewhere, with why it is gone.
    why = f"{os.strerror(errno.ENOENT)}: donor checkpoint deleted before it was pinned (not set aside by retention)"
    raise FileNotFoundError(errno.ENOENT, why, str(path))
