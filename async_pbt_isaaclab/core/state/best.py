"""A member's historical best checkpoints: one entry of ``state.best`` and of ``best.json``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BestEntry:
    """One of a member's historical best checkpoints (``state.best`` and ``best.json``)."""

    objective: float
    """Window mean of the objective when the checkpoint was published."""
    checkpoint: str
    """Workspace-relative checkpoint (kept by retention while listed)."""
    sha256: str = ""
    """Its sha256."""
    frame: int = 0
    """Member frame of the checkpoint."""
    generation: int = 0
    """Policy generation."""
    episodes: int = 0
    """Episodes in the window."""
    time: float = 0.0
    """Wall-clock time of the publish (unix seconds)."""
    direction: str = "max"
    """``objective_direction``: ``min`` ranks smaller objectives first."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an item of ``best.json``)."""
        return {
            "objective": self.objective,
            "direction": self.direction,
            "checkpoint": self.checkpoint,
            "sha256": self.sha256,
            "frame": self.frame,
            "generation": self.generation,
            "episodes": self.episodes,
            "time": self.time,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> BestEntry:
        """Parse one best-list item; raises ``ValueError`` naming ``where`` and the key."""
        if not isinstance(data, dict) or not isinstance(data.get("checkpoint"), str):
            raise ValueError(f"{where}: expected an object with a checkpoint path, got {data!r:.80}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("frame", "generation", "episodes"):
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{where}.{key}: expected a non-negative integer, got {value!r:.40}")
        for key in ("sha256", "direction"):
            if not isinstance(data.get(key, ""), str):
                raise ValueError(f"{where}.{key}: expected a string, got {data.get(key)!r:.40}")
        return cls(
            objective=_number(data.get("objective"), f"{where}.objective"),
            checkpoint=data["checkpoint"],
            sha256=data.get("sha256", ""),
            frame=data.get("frame", 0),
            generation=data.get("generation", 0),
            episodes=data.get("episodes", 0),
            time=_number(data.get("time", 0.0), f"{where}.time"),
            direction=data.get("direction", "max"),
        )


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r:.40}")
    return float(value)
