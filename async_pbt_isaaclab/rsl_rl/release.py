"""Which rsl-rl-lib is installed, and whether a member can train with it (the support matrix, checked at start).

Two checkpoint and algorithm layouts are supported, each tested against the real package (``layout.py``): line 3
(3.1.x; Isaac Lab 2.3 pins 3.1.2) and line 5 (5.4.x and 5.5.x; mjlab 1.6 pins 5.4.2, Isaac Lab 3.0 pins 5.5.1).
Anything else is refused with one line naming this matrix: a member must not train on an unchecked layout.
"""

from __future__ import annotations

import re
from importlib import metadata

DISTRIBUTION = "rsl-rl-lib"
"""The PyPI name of rsl_rl."""

SUPPORTED = {(3, 1): "Isaac Lab 2.3", (5, 4): "mjlab 1.6", (5, 5): "Isaac Lab 3.0"}
"""(major, minor) -> who pins that line."""

SUPPORTED_TEXT = "rsl-rl-lib 3.1 (Isaac Lab 2.3), 5.4 (mjlab 1.6) or 5.5 (Isaac Lab 3.0)"


class UnsupportedRslRl(RuntimeError):
    """The installed rsl-rl-lib is not a supported line (the message is one line and names the matrix)."""


def installed_version() -> str:
    """The installed rsl-rl-lib version (``UnsupportedRslRl`` when it is not installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise UnsupportedRslRl(f"rsl-rl-lib is not installed; rsl_rl members need {SUPPORTED_TEXT}") from None


def line_of(version: str) -> int:
    """The layout line (3 or 5) of ``version``; ``UnsupportedRslRl`` for any version outside :data:`SUPPORTED`."""
    numbers = re.match(r"(\d+)\.(\d+)", version)
    key = (int(numbers.group(1)), int(numbers.group(2))) if numbers else (0, 0)
    if key not in SUPPORTED:
        raise UnsupportedRslRl(f"rsl-rl-lib {version} is not supported; rsl_rl members need {SUPPORTED_TEXT}")
    return key[0]


def installed_line() -> int:
    """The layout line of the installed rsl-rl-lib (checked at every member start)."""
    return line_of(installed_version())
