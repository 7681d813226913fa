"""The hooks the scripts launch Isaac Lab with (the public face of :mod:`async_pbt_isaaclab.envs.isaaclab`).

With :mod:`~async_pbt_isaaclab.envs.isaaclab.api`, this is the only module of the package that imports ``isaaclab``,
``isaaclab_rl`` or ``isaaclab_tasks``, and it does so lazily, inside the functions that need them
(:class:`IsaacLabHooks`). Importing it pulls in neither Isaac Lab, torch nor gymnasium (named in annotations only),
so the scripts can build their command line before the simulator starts, and the launcher and the task registry
can read :mod:`~async_pbt_isaaclab.envs.isaaclab.release` through this package.

What is here: :class:`ScriptHooks`, the points where ``scripts/train_pbt.py`` and ``scripts/play_pbt.py`` touch Isaac
Lab (simulator flags, the simulator session with the task configs, ``gym.make``, the RL-Games vec-env wrapper,
checkpoint paths), and :class:`IsaacLabHooks`, their default implementation;
:func:`parse_script_args`, :func:`register_rl_games_env`, :func:`rl_games_wrapper_options`, :func:`plain_config`
and :func:`require_isaaclab`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping, Protocol, Sequence

from async_pbt_isaaclab.envs.isaaclab import api as isaaclab_api
from async_pbt_isaaclab.envs.isaaclab.release import SUPPORTED, UnsupportedIsaacLab

if TYPE_CHECKING:
    import gymnasium

ISAACLAB_INSTALL_HINT = (
    "install Isaac Lab (https://isaac-sim.github.io/IsaacLab; supported: " + SUPPORTED + ") and this package into "
    "its Python without touching Isaac Lab's own packages: `./isaaclab.sh -p -m pip install -e "
    "/path/to/async-pbt-isaaclab` (source install) or `pip install -e /path/to/async-pbt-isaaclab` in the "
    "environment of a pip/uv-installed Isaac Lab 3.0"
)
"""How to get Isaac Lab, appended to every ImportError raised here."""


def require_isaaclab(what: str, module: str = "isaaclab") -> Any:
    """Import ``module`` or raise an ImportError that says what needed it and how to install Isaac Lab."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"Isaac Lab is needed for {what}: the Python package {module!r} is not importable "
            f"here ({exc}); {ISAACLAB_INSTALL_HINT}"
        ) from exc


# ============================================================================ hooks for the scripts


def _default_add_launcher_args(parser: argparse.ArgumentParser, script: str = "train") -> None:
    try:
        isaaclab_api.add_launcher_args(parser, script)
    except ImportError as exc:
        raise ImportError(f"Isaac Lab is needed for the simulator flags ({exc}); {ISAACLAB_INSTALL_HINT}") from exc


def _default_vec_env_wrapper(
    env: gymnasium.Env, rl_device: str, clip_obs: float, clip_actions: float, **kwargs: Any
) -> Any:
    rl = require_isaaclab("the RL-Games vec-env wrapper", "isaaclab_rl.rl_games")
    wrapper_cls = rl.RlGamesVecEnvWrapper
    accepted = inspect.signature(wrapper_cls.__init__).parameters
    # Isaac Lab 2.0 takes (env, rl_device, clip_obs, clip_actions); later versions add obs_groups and
    # concate_obs_group(s). Pass only what this version accepts.
    extra = {k: v for k, v in kwargs.items() if k in accepted}
    dropped = sorted(set(kwargs) - set(extra))
    if dropped:
        warnings.warn(f"RlGamesVecEnvWrapper of this Isaac Lab version ignores {dropped}", stacklevel=2)
    return wrapper_cls(env, rl_device, clip_obs, clip_actions, **extra)


def _default_gpu_env(config_name: str, num_actors: int, **kwargs: Any) -> Any:
    rl = require_isaaclab("the RL-Games vec-env", "isaaclab_rl.rl_games")
    return rl.RlGamesGpuEnv(config_name, num_actors, **kwargs)


def _default_resolve_checkpoint(path: str) -> str:
    if os.path.exists(path):
        return os.path.abspath(path)
    assets = require_isaaclab(f"resolving checkpoint {path!r}", "isaaclab.utils.assets")
    return assets.retrieve_file_path(path)


def _default_dump_env_cfg(path: str, env_cfg: Any) -> None:
    io = require_isaaclab("writing the env configuration", "isaaclab.utils.io")
    io.dump_yaml(path, env_cfg)


class ScriptHooks(Protocol):
    """The points where ``scripts/train_pbt.py`` and ``scripts/play_pbt.py`` touch Isaac Lab.

    :class:`IsaacLabHooks` is the implementation the scripts use; any object with these callables (a test's
    stand-ins, a fork's own launcher) can be passed in its place.
    """

    def add_launcher_args(self, parser: argparse.ArgumentParser, script: str = "train") -> None:
        """Add the installed release's simulator flags to ``parser`` (``script``: ``"train"`` or ``"play"``)."""
        ...

    def open_session(
        self, args: argparse.Namespace, task: str, agent_key: str, hydra_args: Sequence[str]
    ) -> ContextManager[isaaclab_api.Session]:
        """A context in which the simulator runs with ``task``'s env and agent configs loaded."""
        ...

    def make_env(
        self,
        session: isaaclab_api.Session,
        task: str,
        env_cfg: Any,
        args: argparse.Namespace,
        log_dir: str,
        video_trigger: Callable[[int], bool] | None = None,
    ) -> gymnasium.Env:
        """The task's env, built as the release's own RL-Games script builds it."""
        ...

    def vec_env_wrapper(
        self, env: gymnasium.Env, rl_device: str, clip_obs: float, clip_actions: float, **options: Any
    ) -> Any:
        """The rl_games vec-env around ``env`` (``RlGamesVecEnvWrapper``)."""
        ...

    def gpu_env(self, config_name: str, num_actors: int, **kwargs: Any) -> Any:
        """The ``IVecEnv`` rl_games builds for env type ``IsaacRlgWrapper`` (``RlGamesGpuEnv``)."""
        ...

    def resolve_checkpoint(self, path: str) -> str:
        """A local path for a checkpoint argument."""
        ...

    def dump_env_cfg(self, path: str, env_cfg: Any) -> None:
        """Write the env config to ``path``."""
        ...


@dataclass
class IsaacLabHooks:
    """The :class:`ScriptHooks` the scripts use, one swappable callable each, so a CPU test drives the same code path.

    The defaults import Isaac Lab lazily and do what the installed release's own RL-Games scripts do
    (:mod:`async_pbt_isaaclab.envs.isaaclab.api` holds the calls that differ between 2.x and 3.0).
    """

    # Callable[..., X] where a default or **kwargs cannot be spelled as a Callable; ScriptHooks has the signatures.
    add_launcher_args: Callable[..., None] = _default_add_launcher_args
    """``(parser, script="train")``: add the installed release's simulator flags to an argparse parser."""
    open_session: Callable[[argparse.Namespace, str, str, Sequence[str]], ContextManager[isaaclab_api.Session]] = (
        isaaclab_api.open_session
    )
    """``(args, task, agent entry-point key, hydra overrides) -> context of a Session`` (simulator running, env and
    agent configs loaded, in the order the installed release needs; closed on exit)."""
    make_env: Callable[..., gymnasium.Env] = isaaclab_api.make_env
    """``(session, task, env_cfg, args, log_dir, video_trigger) -> env`` (``gym.make`` as the release's script does it:
    multi-agent tasks converted to one agent, video recording)."""
    vec_env_wrapper: Callable[..., Any] = _default_vec_env_wrapper
    """``(env, rl_device, clip_obs, clip_actions, **opts) -> rl_games vec-env`` (``RlGamesVecEnvWrapper``)."""
    gpu_env: Callable[..., Any] = _default_gpu_env
    """``(config_name, num_actors, **kwargs) -> IVecEnv`` registered as ``IsaacRlgWrapper`` (``RlGamesGpuEnv``)."""
    resolve_checkpoint: Callable[[str], str] = _default_resolve_checkpoint
    """A local path for a checkpoint argument (``retrieve_file_path`` for remote ones)."""
    dump_env_cfg: Callable[[str, Any], None] = _default_dump_env_cfg
    """Write the env config next to the run's logs (``isaaclab.utils.io.dump_yaml``)."""


def parse_script_args(
    parser: argparse.ArgumentParser, hooks: ScriptHooks, argv: Sequence[str] | None = None, script: str = "train"
) -> tuple[argparse.Namespace, list[str]]:
    """Add the simulator flags to ``parser`` and parse ``argv``: ``(args, Hydra overrides)``.

    Without Isaac Lab (or with an unsupported one), ``--help`` still prints the script's own flags (and exits); any
    other command line raises the ImportError with the install hint (:class:`UnsupportedIsaacLab` naming the support
    matrix). An unknown ``--flag`` is a usage error (exit 2), as Hydra would refuse it later anyway.
    """
    missing: Exception | None = None
    try:
        hooks.add_launcher_args(parser, script)
    except (ImportError, UnsupportedIsaacLab) as exc:
        missing = exc
    args, hydra_args = parser.parse_known_args(argv)
    if missing is not None:
        raise missing
    flags = [a for a in hydra_args if a.startswith("-") and "=" not in a]
    if "--headless" in flags:
        parser.error(
            "--headless: this Isaac Lab (3.0) has no such flag; it runs headless unless a viewer is asked "
            "for (--viz kit): drop --headless"
        )
    if flags:
        parser.error(f"unrecognized arguments: {' '.join(flags)}")
    return args, list(hydra_args)


def plain_config(obj: Any) -> Any:
    """A config as plain dicts and lists (OmegaConf containers, tuples from loaders), safe for ``yaml.safe_dump``."""
    if isinstance(obj, Mapping) or hasattr(obj, "items"):
        return {k: plain_config(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain_config(v) for v in obj]
    return obj


def register_rl_games_env(vec_env: Any, hooks: ScriptHooks) -> None:
    """Register ``vec_env`` with rl_games as env ``rlgpu`` of type ``IsaacRlgWrapper`` (as Isaac Lab's scripts do)."""
    from rl_games.common import env_configurations, vecenv

    vecenv.register(
        "IsaacRlgWrapper", lambda config_name, num_actors, **kwargs: hooks.gpu_env(config_name, num_actors, **kwargs)
    )
    env_configurations.register("rlgpu", {"vecenv_type": "IsaacRlgWrapper", "env_creator": lambda **kwargs: vec_env})


def rl_games_wrapper_options(agent_cfg: Mapping[str, Any]) -> tuple[str, float, float, dict[str, Any]]:
    """``(rl_device, clip_obs, clip_actions, extra options)`` for the vec-env wrapper, read from ``params``."""
    params = agent_cfg["params"]
    env_section = params.get("env") or {}
    extra: dict[str, Any] = {}
    if env_section.get("obs_groups") is not None:
        extra["obs_groups"] = env_section["obs_groups"]
    if "concate_obs_groups" in env_section:
        extra["concate_obs_group"] = env_section["concate_obs_groups"]
    return (
        params["config"]["device"],
        env_section.get("clip_observations", math.inf),
        env_section.get("clip_actions", math.inf),
        extra,
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
