"""The install command an error message names for an optional extra, written the way the README installs.

The README installs from a clone with ``pip install -e ".[extra]"``; the package is not on a package index, so a
hint such as ``pip install 'async-pbt-isaaclab[report]'`` would send the user to a registry that does not have it.
Imports only the standard library and the core's own types."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

from async_pbt_isaaclab.core.decision.registry import OptionalExtra

PLACEHOLDER = "/path/to/async-pbt-isaaclab"
"""Where the clone is, when this copy was not installed from one (a wheel)."""


def extra_install_command(extra: str, keep: tuple[str, ...] = ()) -> str:
    """``pip install -e "<clone>[extra]"``: the clone this package runs from when it is an editable install; each
    distribution of ``keep`` that is installed here is pinned at its version in the same command."""
    root = Path(__file__).resolve().parents[2]
    where = str(root) if (root / "pyproject.toml").is_file() else PLACEHOLDER
    pins = "".join(f' "{name}=={version}"' for name, version in _installed(keep))
    return f'pip install -e "{where}[{extra}]"{pins}'


def _installed(names: tuple[str, ...]) -> list[tuple[str, str]]:
    found = []
    for name in names:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def import_failure(*modules: str) -> str | None:
    """Why ``modules`` cannot be imported here, in a few words (``ImportError: No module named 'scipy'``), or
    ``None``: a config that needs an optional extra is refused with this when it is read, not at first use."""
    try:
        for module in modules:
            importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install: refuse before training starts
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return f"{type(exc).__name__}: {first_line:.200}"
    return None


def missing_dependency(needs: OptionalExtra | None) -> str | None:
    """Why an entry of the catalog (a rule or an explore strategy) that ``needs`` an optional extra cannot run here,
    in one line with the extra's install command; ``None`` when it needs none or what it needs imports."""
    if needs is None:
        return None
    why = import_failure(*needs.modules)
    if why is None:
        return None
    pinned = f" (the {', '.join(needs.keep)} installed here pinned, so that pip keeps it)" if needs.keep else ""
    install = extra_install_command(needs.extra, needs.keep)
    refusal = f"{needs.needs}, which cannot be imported here ({why}); install the extra{pinned}: {install}"
    return f"{refusal}; {needs.otherwise}" if needs.otherwise else refusal
