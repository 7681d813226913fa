"""The install command an error message names for an optional extra, written the way the README installs.

The README installs from a clone with ``pip install -e ".[extra]"``; the package is not on a package index, so a
hint such as ``pip install 'async-pbt-isaaclab[report]'`` would send the user to a registry that does not have it.
Imports only the standard library (the core stays pure)."""

from __future__ import annotations

from pathlib import Path

PLACEHOLDER = "/path/to/async-pbt-isaaclab"
"""Where the clone is, when this copy was not installed from one (a wheel)."""


def extra_install_command(extra: str) -> str:
    """``pip install -e "<clone>[extra]"``: the clone this package runs from when it is an editable install."""
    root = Path(__file__).resolve().parents[2]
    where = str(root) if (root / "pyproject.toml").is_file() else PLACEHOLDER
    return f'pip install -e "{where}[{extra}]"'
