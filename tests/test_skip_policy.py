"""The skip policy (tests/skip_policy.py): under ASYNC_PBT_STRICT_SKIPS=1 a skip CI does not allow fails the run."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

SKIPPING = """
import pytest

def test_runs():
    assert True

def test_needs_network():
    pytest.skip("Isaac Lab 3.0.0 could not be fetched from PyPI: no network")

@pytest.mark.skipif(True, reason="needs a CUDA device")
def test_on_a_gpu():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A small suite with one passing test, one allowed skip, one unlisted skip, and one module skipped at import."""
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nimport skip_policy\n\n"
        "def pytest_configure(config):\n    skip_policy.register(config)\n"
    )
    pytester.makepyfile(test_skips=SKIPPING, test_import="import pytest\npytest.importorskip('no_such_module_here')\n")
    return pytester


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["in-process", "xdist"])
def test_strict_mode_fails_the_run_on_an_unlisted_skip_and_keeps_the_allowed_one(suite, monkeypatch, workers):
    monkeypatch.setenv("ASYNC_PBT_STRICT_SKIPS", "1")
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", *workers, "test_skips.py")
    result.assert_outcomes(passed=1, skipped=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*a skip CI does not allow: Isaac Lab 3.0.0 could not be fetched from PyPI: no network*",
            "skips: 1 skipped (ASYNC_PBT_STRICT_SKIPS=1, allowed: needs a CUDA device); 1 x needs a CUDA device",
            "skips: 1 refused as failures; 1 x Isaac Lab 3.0.0 could not be fetched from PyPI: no network",
        ]
    )


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["in-process", "xdist"])
def test_strict_mode_makes_a_module_skipped_at_import_a_collection_error(suite, monkeypatch, workers):
    monkeypatch.setenv("ASYNC_PBT_STRICT_SKIPS", "1")
    result = suite.runpytest_subprocess("-p", "no:cacheprovider", *workers)
    assert result.parseoutcomes().get("errors") == 1
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)
    result.stdout.fnmatch_lines(["*a skip CI does not allow: could not import 'no_such_module_here'*"])


def test_without_strict_mode_a_skip_is_a_skip_and_counted(suite, monkeypatch):
    monkeypatch.delenv("ASYNC_PBT_STRICT_SKIPS", raising=False)
    result = suite.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["skips: 3 skipped (ASYNC_PBT_STRICT_SKIPS unset); *"])
    assert "refused" not in result.stdout.str()
