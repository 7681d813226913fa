"""Fixtures shared by the tests against the real Isaac Lab releases (``isaaclab_real.py`` fetches them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isaaclab_real

RELEASES = isaaclab_real.releases_under_test()
POPULATION_RELEASE = RELEASES[-1]
"""The release the two-member population of test_real_isaaclab_population.py (three Isaac Lab starts, an exec
restart, two plays) runs on: the newest one under test. .ci/run's main job (rl-games 1.6.5) runs it on 3.0.0, its
rl-games 1.6.1 job (what 2.x pins) on 2.3.2, so each release has its population run, with the rl-games its users
have. Every lighter check, a real train_pbt.py run included, runs on every release under test."""


@pytest.fixture(scope="session", params=RELEASES)
def release(request) -> str:
    """Each release asked for, fetched (skipped when PyPI cannot be reached)."""
    return isaaclab_real.fetched_or_skip(request.param)


@pytest.fixture(scope="session", params=[POPULATION_RELEASE])
def population_release(request) -> str:
    """The release the population runs on, fetched."""
    return isaaclab_real.fetched_or_skip(request.param)
