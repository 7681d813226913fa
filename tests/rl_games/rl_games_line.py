"""Which rl-games line and numpy these tests run on: .ci/run also runs the rlgames_compat subset with rl-games
1.6.1 + gym + numpy 1 (what Isaac Lab 2.x pins), where a few facts of the 1.6.5 line do not hold."""

from __future__ import annotations

import re


def _versions() -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    from importlib import metadata

    def v(name: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in re.findall(r"\d+", metadata.version(name))[:3])
        except metadata.PackageNotFoundError:
            return ()

    return v("rl-games"), v("torch"), v("numpy")


RL_GAMES_VERSION, TORCH_VERSION, NUMPY_VERSION = _versions()
"""Installed versions, for tests that only hold on one rl-games line (.ci/run also runs rl-games 1.6.1)."""

PLAIN_RESTORE_REFUSES_NUMPY = (
    RL_GAMES_VERSION[:2] == (1, 6) and RL_GAMES_VERSION < (1, 6, 5) and TORCH_VERSION >= (2, 6)
)
"""rl-games 1.6.1's own restore calls ``torch.load`` with torch's default ``weights_only``, True from torch 2.6,
which refuses the numpy scalar every rl_games checkpoint holds; Isaac Lab 2.x pairs 1.6.1 with an older torch."""
