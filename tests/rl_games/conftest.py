"""Fixtures shared by the rl_games-layer tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from async_pbt_isaaclab.core.workspace import fsio


@pytest.fixture
def publish_donor(make_record) -> Callable[..., tuple[Path, dict]]:
    """``publish_donor(ws_root, frame, model=None)``: member 0's record (far better evidence than any Pendulum
    policy) naming a real checkpoint file of ``model`` (default: a network that fits no Pendulum agent); returns
    the checkpoint's path and the record written."""

    def publish(ws_root: Path, frame: int, model: dict[str, Any] | None = None) -> tuple[Path, dict]:
        import torch

        from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint

        ckpt_dir = ws_root / "members" / "000" / "checkpoints"
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        path = ckpt_dir / f"g0000_f{frame:012d}.pth"
        state = {
            "model": model
            if model is not None
            else {"a2c_network.sigma": torch.zeros(1), "w": torch.arange(4096, dtype=torch.float32)},
            "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
            "epoch": 2,
            "frame": frame,
            "last_mean_rewards": -150.0,
            "env_state": None,
        }
        sha = save_checkpoint(path, state)
        rec = make_record(
            0, [0.0] * 16, frame=frame, heartbeat_age=0.0, task="Pendulum-v1", hyperparameters={"learning_rate": 1e-3}
        )
        data = rec.to_dict()
        data.update(checkpoint=str(path.relative_to(ws_root)), checkpoint_sha256=sha)
        data["history"][-1].update(checkpoint=str(path.relative_to(ws_root)), checkpoint_sha256=sha)
        fsio.atomic_write_json(ws_root / "members" / "000" / "record.json", data)
        return path, data

    return publish
