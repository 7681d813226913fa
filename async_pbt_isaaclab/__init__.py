"""Asynchronous population-based training (PBT) for RL-Games, shipped as an Isaac Lab extension.

Importing this package (and :mod:`async_pbt_isaaclab.core`) never imports torch, rl_games, isaaclab,
isaacsim, omni or pxr: those live in :mod:`async_pbt_isaaclab.rl_games` and :mod:`async_pbt_isaaclab.envs`.
"""

from async_pbt_isaaclab._version import __version__

__all__ = ["__version__"]
