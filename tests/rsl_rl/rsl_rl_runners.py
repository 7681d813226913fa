"""Small real ``OnPolicyRunner``s of the installed rsl-rl-lib line on Pendulum, for tests/rsl_rl (imported by name:
a ``from conftest import`` would find whichever test folder's conftest was imported first)."""

from __future__ import annotations

import contextlib
import io
from typing import Any


def small_config(**algorithm: Any) -> dict[str, Any]:
    """The packaged Pendulum config, shrunk to 4 envs x 8 steps (one iteration is 32 frames), with ``algorithm``
    values changed."""
    from async_pbt_isaaclab.examples.rsl_rl_train import packaged_config

    cfg = packaged_config("Pendulum-v1")
    cfg["env"]["num_envs"] = 4
    cfg["runner"]["num_steps_per_env"] = 8
    cfg["runner"]["algorithm"].update(algorithm)
    return cfg


def runner(cfg: dict[str, Any], seed: int, log_dir: Any) -> Any:
    """A real runner of the installed line (rsl_rl's model printout silenced). Always with a log folder: rsl-rl-lib
    3.1's ``learn`` writes its code state there even when it has none (5.x skips it)."""
    from async_pbt_isaaclab.examples.rsl_rl_train import build_runner

    with contextlib.redirect_stdout(io.StringIO()):
        return build_runner(cfg, seed, str(log_dir))


def learn(runner: Any, iterations: int) -> None:
    """``runner.learn`` with rsl_rl's console output silenced."""
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(num_learning_iterations=iterations)
