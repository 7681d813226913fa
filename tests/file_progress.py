"""A pytest plugin for runs with xdist workers: one line per test file once all its tests have run, instead of one
dot per test (what xdist prints otherwise, minutes of bare dots on a 2-core machine).

    tests/core/test_audit.py: 34 passed in 12.3s  [17/108 files, 3m05s]

Failures still print their letter as they happen and their report at the end; ``-v`` (one line per test) and
``-n 0`` (pytest's own per-file lines) are left as they are. Registered by tests/conftest.py."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest


class FileProgress:
    """Counts each file's finished tests on the xdist controller and writes a line when a file is done."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.expected: Counter[str] | None = None
        self.finished: Counter[str] = Counter()
        self.outcomes: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.seconds: Counter[str] = Counter()
        self.files_done = 0
        self.t0 = time.monotonic()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        if self.expected is None:
            self.expected = Counter(nodeid.split("::")[0] for nodeid in ids)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        # No dot for a test that passed or was skipped; failures and errors keep their letter.
        if report.passed and report.when == "call":
            return "passed", "", "PASSED"
        if report.skipped and report.when in ("setup", "call") and not hasattr(report, "wasxfail"):
            return "skipped", "", "SKIPPED"
        return None

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::")[0]
        now = time.monotonic()
        self.seconds[path] += report.duration  # setup (fixtures: populations), call and teardown
        if report.when == "call" or report.outcome != "passed":
            outcome = report.outcome if report.when == "call" or report.skipped else "error"
            self.outcomes[path][outcome] += 1
        if report.when != "teardown":
            return
        self.finished[path] += 1
        if self.expected is None or self.finished[path] != self.expected.get(path):
            return
        self.files_done += 1
        counts = ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes[path].items()))
        elapsed = _duration(now - self.t0)
        line = (
            f"{path}: {counts or 'nothing ran'} in {self.seconds[path]:.1f}s  "
            f"[{self.files_done}/{len(self.expected)} files, {elapsed}]"
        )
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(line)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def register(config: pytest.Config) -> None:
    """Add :class:`FileProgress` on the controller of an xdist run at default verbosity."""
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not workers or config.option.verbose != 0:
        return
    if not config.pluginmanager.hasplugin("xdist"):
        return
    config.pluginmanager.register(FileProgress(config), "async-pbt-file-progress")
