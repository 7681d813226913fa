"""A pytest plugin that makes a skip an error where the run says every test must run (CI), and counts skips.

A skip is how a test says "this machine cannot show it": no network to fetch the real Isaac Lab wheels, no SLURM
daemons, no chromium. On a contributor's laptop that is the honest outcome. On CI it hides a promise that was never
checked, and a green run then means less than it says. With ``ASYNC_PBT_STRICT_SKIPS=1`` (``.ci/run`` sets it) a
skip whose reason is not in :data:`ALLOWED_REASONS` is reported as a failure (or, during collection, an error) with
its reason; the allowed ones are what CI's machine cannot have. Every run ends with one line counting the skips.

Why only when asked: the same suite runs on machines that legitimately lack SLURM, root or network, where failing
would only teach people to stop running it; CI is where "passed" has to mean "ran". Registered by tests/conftest.py.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

STRICT_ENV = "ASYNC_PBT_STRICT_SKIPS"
"""Set to ``1`` to turn every skip with a reason outside :data:`ALLOWED_REASONS` into a failure."""

ALLOWED_REASONS = ("needs a CUDA device",)
"""Skip reasons (prefixes) CI's machine cannot avoid: it has no GPU. Every other skip on CI is a test CI was meant to
run and did not."""


REFUSED = "a skip CI does not allow: "


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped report gives (pytest stores ``(path, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def allowed(reason: str) -> bool:
    return reason.startswith(ALLOWED_REASONS)


def _refuse(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skipped report into a failed one that says which skip CI refused and why."""
    reason = skip_reason(report)
    where = report.longrepr[:2] if isinstance(report.longrepr, tuple) else ("?", "?")
    report.outcome = "failed"
    report.longrepr = (
        f"{REFUSED}{reason}\n(skipped at {where[0]}:{where[1]}) {STRICT_ENV}=1 allows a skip only for: "
        f"{', '.join(ALLOWED_REASONS)}. CI is meant to run this test: give the machine what it needs, or make the test "
        "run without it."
    )


def refused_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The skip reason of a report :func:`_refuse` turned into a failure (also after xdist carried it over)."""
    text = str(report.longrepr) if report.failed else ""
    return text[len(REFUSED) :].split("\n", 1)[0] if text.startswith(REFUSED) else None


class SkipPolicy:
    """Refuses unlisted skips where each test runs (worker or single process); counts skips where reports meet."""

    def __init__(self, strict: bool):
        self.strict = strict
        self.skipped: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if self.strict and report.skipped and not hasattr(report, "wasxfail") and not allowed(skip_reason(report)):
            _refuse(report)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        report = outcome.get_result()
        if self.strict and report.skipped and not allowed(skip_reason(report)):
            _refuse(report)  # a whole module skipped at import (importorskip, a module-level skip)

    def _count(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped[skip_reason(report)] += 1
        reason = refused_reason(report)
        if reason is not None:
            self.refused[reason] += 1

    def pytest_runtest_logreport(self, report) -> None:
        self._count(report)

    def pytest_collectreport(self, report) -> None:
        self._count(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        def listed(counts: Counter[str]) -> str:
            return "".join(f"; {n} x {reason}" for reason, n in counts.most_common())

        mode = f"{STRICT_ENV}=1, allowed: {', '.join(ALLOWED_REASONS)}" if self.strict else f"{STRICT_ENV} unset"
        line = f"skips: {sum(self.skipped.values())} skipped ({mode}){listed(self.skipped)}"
        if self.refused:
            line += f"\nskips: {sum(self.refused.values())} refused as failures{listed(self.refused)}"
        terminalreporter.write_line(line, red=bool(self.refused), yellow=bool(self.skipped and not self.strict))


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipPolicy(os.environ.get(STRICT_ENV) == "1"), "async-pbt-skip-policy")
