"""Run Python in a fresh interpreter where the heavy stacks cannot be imported, and read back what it reports.

Shared by the tests of the import boundary, the public ``async_pbt`` API and the task registrations: each runs
its own body after a ``sys.meta_path`` finder that refuses :data:`FORBIDDEN` and records every attempt.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Sequence

FORBIDDEN = ("torch", "rl_games", "isaaclab", "isaacsim", "omni", "pxr", "mjlab")
"""The packages the pure core, the CLI and the public API must never import."""

PRELUDE = textwrap.dedent(
    """
    import importlib.abc, json, sys
    FORBIDDEN = {forbidden!r}
    attempts = []

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in FORBIDDEN:
                attempts.append(name)
                raise ImportError(name + " is blocked by the test")
            return None

    sys.meta_path.insert(0, Block())
    """
)
"""Defines ``FORBIDDEN`` and ``attempts`` (every blocked import, in order) for the body that follows."""


def run_blocked(body: str, *, forbidden: Sequence[str] = FORBIDDEN, check: bool = True, timeout: float = 120) -> dict:
    """Run ``PRELUDE`` + ``body`` (dedented) with ``python -c``, ``forbidden`` (top-level names) blocked; the
    JSON object the body prints last. ``check``: fail on a non-zero exit, with its stderr."""
    code = PRELUDE.format(forbidden=tuple(forbidden)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])
