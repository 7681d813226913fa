"""A member's Weights & Biases run: one run per member for the whole population run.

:func:`assign_wandb_run_id` gives the member its run id at its first start (kept in ``state.json`` as
``MemberState.wandb_run_id``), and :func:`member_wandb_init_kwargs` reads it back from ``state.json`` in every
process of the member, which resumes the run (``resume="allow"``), grouped by the workspace's folder name. The
scalars written into that run are :mod:`async_pbt_isaaclab.rl_games.pbt_logging`'s.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any


def wandb_run_id(state: Any, workspace: str | os.PathLike, experiment_name: str) -> str:
    """The W&B run id ``state`` holds (``state.wandb_run_id``), else the one derived from the workspace path and the
    member's run name: the id members used before it was kept in their state."""
    held = getattr(state, "wandb_run_id", None) if state is not None else None
    if isinstance(held, str) and held:
        return held
    return hashlib.sha1(f"{os.path.abspath(workspace)}|{experiment_name}".encode()).hexdigest()[:16]


def assign_wandb_run_id(state: Any, workspace: str | os.PathLike, fresh: bool) -> str:
    """Give the member its W&B run id once (``state.wandb_run_id``, saved with the state) and return it.

    A new member (``fresh``) gets a random id, so a workspace deleted and created again at the same path starts new
    runs rather than appending to the old ones. A member whose state predates the stored id keeps the id derived
    from its workspace and run name, which its earlier processes used, so it goes on in the same run.
    """
    if not state.wandb_run_id:
        state.assign_wandb_run(secrets.token_hex(8) if fresh else wandb_run_id(None, workspace, state.experiment_name))
    return state.wandb_run_id


def wandb_init_kwargs(
    state: Any, workspace: str | os.PathLike, experiment_name: str, name: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``wandb.init`` that resume the member's run and group it with its population."""
    return {
        "id": wandb_run_id(state, workspace, experiment_name),
        "resume": "allow",
        "group": os.path.basename(os.path.abspath(workspace)) or "pbt",
        "name": name or experiment_name,
    }


def member_wandb_init_kwargs(workspace: str | os.PathLike, member: int, name: str | None = None) -> dict[str, Any]:
    """:func:`wandb_init_kwargs` of a started member, its run id read from its ``state.json``.

    Called by a member's process after :func:`~async_pbt_isaaclab.member.session.start_member` saved the state, so
    the id is there: the one given at the member's first start, whatever restarted the process.
    """
    from async_pbt_isaaclab.core.workspace.layout import Workspace
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    path = Workspace(workspace).member_dir(member) / "state.json"
    state = load_state(path)
    if state is None or not state.wandb_run_id:
        raise RuntimeError(f"{path}: no wandb_run_id; the member must be started (start_member) before W&B")
    return wandb_init_kwargs(state, workspace, state.experiment_name, name=name)
