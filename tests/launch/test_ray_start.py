"""Starting a local Ray on a loaded machine: a start that timed out is made again (launch/ray_backend.start_ray)."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.launch.ray_backend import RAY_START_TRIES, start_ray

TIMED_OUT = (
    "The current node timed out during startup. This could happen because some of the raylet failed to startup or "
    "the GCS has become overloaded."
)
"""What Ray 2.x raises (a plain Exception) when its raylet did not register within Ray's fixed 30 s."""


class FakeRay:
    """``ray.init`` fails with each of ``failures`` in turn, then starts; every call is noted."""

    def __init__(self, *failures: Exception):
        self.failures = list(failures)
        self.calls: list[str] = []

    def init(self, **kwargs):
        self.calls.append("init")
        if self.failures:
            raise self.failures.pop(0)

    def shutdown(self):
        self.calls.append("shutdown")


def test_a_start_that_timed_out_is_made_again(capsys):
    ray = FakeRay(Exception(TIMED_OUT))
    start_ray(ray, {"include_dashboard": False})
    assert ray.calls == ["init", "shutdown", "init"]
    assert "[launch ray] Ray timed out while starting" in capsys.readouterr().out


def test_the_last_timeout_and_any_other_error_are_raised():
    ray = FakeRay(*[Exception(TIMED_OUT)] * RAY_START_TRIES)
    with pytest.raises(Exception, match="timed out during startup"):
        start_ray(ray, {})
    assert ray.calls.count("init") == RAY_START_TRIES
    other = FakeRay(ConnectionError("no cluster at 10.0.0.1:6379"))
    with pytest.raises(ConnectionError):
        start_ray(other, {"address": "10.0.0.1:6379"})
    assert other.calls == ["init"]
