"""Fixtures of the rsl_rl-layer tests: small real ``OnPolicyRunner``s of the installed rsl-rl-lib line on Pendulum.

The main CI job runs these with rsl-rl-lib 5.5.1 (Isaac Lab 3.0's); ``.ci/side-jobs`` runs the tests marked
``rslrl_compat`` again with 3.1.2 (Isaac Lab 2.3's), so every test here holds on both lines.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, Callable

import pytest

pytest.importorskip("rsl_rl")


def small_config(**algorithm: Any) -> dict[str, Any]:
    """The packaged Pendulum config, shrunk to 4 envs x 8 steps (one iteration is 32 frames), with ``algorithm``
    values changed."""
    from async_pbt_isaaclab.examples.rsl_rl_train import packaged_config

    cfg = packaged_config("pendulum")
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


@pytest.fixture
def make_runner(tmp_path_factory) -> Callable[..., Any]:
    """``make_runner(seed=0, cfg=None, log_dir=None, **algorithm)``: a real runner of the installed line on the small
    config, logging to ``log_dir`` (default: a fresh temporary folder)."""

    def make(seed: int = 0, cfg: dict[str, Any] | None = None, log_dir: Any = None, **algorithm: Any) -> Any:
        return runner(cfg or small_config(**algorithm), seed, log_dir or tmp_path_factory.mktemp("run"))

    return make


def learn(runner: Any, iterations: int) -> None:
    """``runner.learn`` with rsl_rl's console output silenced."""
    with contextlib.redirect_stdout(io.StringIO()):
        runner.learn(num_learning_iterations=iterations)
