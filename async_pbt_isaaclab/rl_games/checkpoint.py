"""rl_games checkpoints: what rl_games' dict holds, read and written through the trainer-independent
:mod:`async_pbt_isaaclab.checkpoint_io` (atomic saves with a checksum, safe loads, PBT metadata).

**Format.** A checkpoint is exactly what rl_games writes (``agent.get_full_state_weights()``:
``model``, ``epoch``, ``frame``, ``optimizer``, ``last_mean_rewards``, ``env_state`` and, depending on
the agent, ``assymetric_vf_nets``, ``scaler``...) saved with ``torch.save``, plus one optional key
``"pbt"``. rl_games ignores unknown keys, so a PBT checkpoint stays loadable by a plain
``agent.restore(path)``. (rl_games' own ``torch_ext.safe_load`` calls ``torch.load(weights_only=False)``
explicitly, so it reads our files whatever torch's default is; torch >= 2.6 defaults to
``weights_only=True``.)

**Safe loading.** :func:`load_checkpoint` uses ``torch.load(weights_only=True)`` plus the explicit allowlist
:func:`rl_games_safe_globals`, the few numpy globals rl_games checkpoints contain (``last_mean_rewards`` is a
numpy float32); see :mod:`async_pbt_isaaclab.checkpoint_io`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab import checkpoint_io
from async_pbt_isaaclab.checkpoint_io import (
    PBT_KEY,
    TRUSTED_HINT,
    CheckpointError,
    CheckpointKind,
    DisallowedGlobalError,
    read_pbt_metadata,
    with_pbt_metadata,
)
from async_pbt_isaaclab.checkpoint_io import numpy_scalar_globals as rl_games_safe_globals

#: Keys every rl_games checkpoint has; loading a dict without them is refused.
REQUIRED_KEYS = ("model",)
#: Keys rl_games' ``get_full_state_weights`` writes (informational; only REQUIRED_KEYS are enforced).
RL_GAMES_KEYS = ("model", "epoch", "frame", "optimizer", "last_mean_rewards", "env_state")
#: What an rl_games checkpoint holds (the structure check of every load and save).
RL_GAMES_CHECKPOINT = CheckpointKind("rl_games", REQUIRED_KEYS, RL_GAMES_KEYS)


def save_checkpoint(path: Path | str, state: Mapping[str, Any]) -> str:
    """Write an rl_games checkpoint dict atomically to ``path``; return the file's sha256."""
    return checkpoint_io.save_checkpoint(path, state, RL_GAMES_CHECKPOINT)


def checkpoint_bytes(path: Path | str, state: Mapping[str, Any]) -> tuple[bytes, str]:
    """The bytes :func:`save_checkpoint` would write to ``path`` for ``state``, and their sha256."""
    return checkpoint_io.checkpoint_bytes(path, state, RL_GAMES_CHECKPOINT)


def load_checkpoint(
    path: Path | str,
    *,
    trusted: bool = False,
    map_location: Any = "cpu",
    expected_sha256: str | None = None,
) -> dict[str, Any]:
    """Load an rl_games checkpoint safely (:func:`async_pbt_isaaclab.checkpoint_io.load_checkpoint`)."""
    return checkpoint_io.load_checkpoint(
        path, RL_GAMES_CHECKPOINT, trusted=trusted, map_location=map_location, expected_sha256=expected_sha256
    )


def is_raw_rl_games_checkpoint(state: Any) -> bool:
    """True for an rl_games checkpoint dict (has ``model``) that carries no PBT metadata.

    A raw checkpoint comes from plain rl_games training (or another tool); it can seed a member but
    says nothing about lineage, generation or hyperparameters.
    """
    return isinstance(state, Mapping) and all(k in state for k in REQUIRED_KEYS) and state.get(PBT_KEY) is None


__all__ = [
    "CheckpointError",
    "DisallowedGlobalError",
    "PBT_KEY",
    "REQUIRED_KEYS",
    "RL_GAMES_CHECKPOINT",
    "RL_GAMES_KEYS",
    "TRUSTED_HINT",
    "checkpoint_bytes",
    "is_raw_rl_games_checkpoint",
    "load_checkpoint",
    "read_pbt_metadata",
    "rl_games_safe_globals",
    "save_checkpoint",
    "with_pbt_metadata",
]
