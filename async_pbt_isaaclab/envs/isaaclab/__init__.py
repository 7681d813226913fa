"""The Isaac Lab layer: script hooks, the evidence wrapper and its configuration, the releases supported.

* :mod:`~async_pbt_isaaclab.envs.isaaclab.hooks`: the hooks ``scripts/train_pbt.py`` and ``scripts/play_pbt.py``
  launch Isaac Lab with (:class:`ScriptHooks`, :class:`IsaacLabHooks`, :func:`parse_script_args` ...), handed on
  here: ``from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks``;
* :mod:`~async_pbt_isaaclab.envs.isaaclab.api`: the calls that differ between Isaac Lab 2.x and 3.0;
* :mod:`~async_pbt_isaaclab.envs.isaaclab.release`: which release is installed, and the support matrix;
* :mod:`~async_pbt_isaaclab.envs.isaaclab.wrapper`: :class:`PbtIsaacLabEnv`, an env's steps -> episode evidence;
* :mod:`~async_pbt_isaaclab.envs.isaaclab.terms`: its ``pbt_summary:`` section and term sources;
* :mod:`~async_pbt_isaaclab.envs.isaaclab.condition`: the curriculum stage and reward fingerprint of the
  condition label.

Only ``hooks`` and ``api`` import Isaac Lab, lazily; importing this package imports neither Isaac Lab, torch nor
gymnasium.
"""

from async_pbt_isaaclab.envs.isaaclab.hooks import (
    ISAACLAB_INSTALL_HINT,
    IsaacLabHooks,
    ScriptHooks,
    UnsupportedIsaacLab,
    parse_script_args,
    plain_config,
    register_rl_games_env,
    require_isaaclab,
    rl_games_wrapper_options,
)

__all__ = [
    "ISAACLAB_INSTALL_HINT",
    "IsaacLabHooks",
    "ScriptHooks",
    "UnsupportedIsaacLab",
    "parse_script_args",
    "plain_config",
    "register_rl_games_env",
    "require_isaaclab",
    "rl_games_wrapper_options",
]
