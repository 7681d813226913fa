"""Fixtures of the rsl_rl-layer tests: small real ``OnPolicyRunner``s of the installed rsl-rl-lib line on Pendulum.

The main CI job runs these with rsl-rl-lib 5.5.1 (Isaac Lab 3.0's); ``.ci/side-jobs`` runs the tests marked
``rslrl_compat`` again with 3.1.2 (Isaac Lab 2.3's), so every test here holds on both lines.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from rsl_rl_runners import runner, small_config

pytest.importorskip("rsl_rl")


@pytest.fixture
def make_runner(tmp_path_factory) -> Callable[..., Any]:
    """``make_runner(seed=0, cfg=None, log_dir=None, **algorithm)``: a real runner of the installed line on the small
    config, logging to ``log_dir`` (default: a fresh temporary folder)."""

    def make(seed: int = 0, cfg: dict[str, Any] | None = None, log_dir: Any = None, **algorithm: Any) -> Any:
        return runner(cfg or small_config(**algorithm), seed, log_dir or tmp_path_factory.mktemp("run"))

    return make
