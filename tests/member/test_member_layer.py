"""The member layer (claim, start point, restart, W&B run id) imports neither torch, rl_games nor Isaac Lab: it sits
between the core and the rl_games layer, so a member's start-up can be read, tested and replayed without them."""

from __future__ import annotations

import pkgutil
from pathlib import Path

from blocked_imports import run_blocked

import async_pbt_isaaclab.member

MEMBER_MODULES = sorted(
    f"async_pbt_isaaclab.member.{m.name}"
    for m in pkgutil.iter_modules([str(Path(async_pbt_isaaclab.member.__file__).parent)])
)


def test_member_modules_import_without_torch_or_rl_games():
    assert {"async_pbt_isaaclab.member.session", "async_pbt_isaaclab.member.restart"} <= set(MEMBER_MODULES)
    out = run_blocked(
        f"""
        for mod in {MEMBER_MODULES!r}:
            __import__(mod)
        from async_pbt_isaaclab.member.restart import restart_argv
        argv = restart_argv(["python", "train.py", "--checkpoint", "old.pth"], "new.pth", {{"learning_rate": 1e-4}})
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
        layers_above = ("async_pbt_isaaclab.rl_games", "async_pbt_isaaclab.envs")
        above = sorted(m for m in sys.modules if m.startswith(layers_above))
        print(json.dumps({{"attempts": attempts, "loaded": loaded, "above": above, "argv": argv}}))
        """
    )
    assert out["attempts"] == [] and out["loaded"] == [] and out["above"] == []
    assert out["argv"] == ["python", "train.py", "--checkpoint=new.pth", "agent.learning_rate=0.0001"]
