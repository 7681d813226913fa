"""Which Isaac Lab release is installed, and whether this package supports it (without importing Isaac Lab).

Supported (the support matrix, also in ``docs/isaaclab.md``):

* Isaac Lab 2.0-2.3 from a source install (``./isaaclab.sh --install``): the ``isaaclab`` package carries its
  extension version, 0.33-0.54, not the release number;
* Isaac Lab 3.0 from a source install (extension version 28.x) or from the ``isaaclab`` wheel (``pip``/``uv``,
  version 3.0.x).

Not supported: the 2.x wheels (their ``isaaclab`` package only bootstraps Isaac Sim and exposes neither
``isaaclab_rl`` nor ``isaaclab_tasks`` as packages), releases before 2.0 and after 3.0.

Detection reads metadata only (``importlib.util.find_spec`` and files), so it is safe before the simulator starts:
the distribution version of ``isaaclab`` when one is installed, else the version file of a source tree on
``sys.path`` (``config/extension.toml`` on 2.x, ``pyproject.toml`` on 3.0).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

SUPPORTED = "Isaac Lab 2.0-2.3 (source install) or 3.0 (source, pip or uv install)"
"""The support matrix in one phrase (every refusal names it)."""

SERIES_2 = "2"
"""Release series key of Isaac Lab 2.0-2.3."""
SERIES_3 = "3"
"""Release series key of Isaac Lab 3.0."""


class UnsupportedIsaacLab(RuntimeError):
    """The installed Isaac Lab is not one this package runs on (the message is one line naming the matrix)."""


@dataclass(frozen=True)
class IsaacLabRelease:
    """An installed Isaac Lab, as far as this package needs to know it."""

    series: str
    """``"2"`` (2.0-2.3: ``hydra_task_config``, ``AppLauncher``, ids with ``-v0``) or ``"3"`` (3.0:
    ``resolve_task_config``, ``launch_simulation``, ids without a version suffix)."""
    version: str
    """The version found (a release number for a wheel, the extension version for a source install)."""
    source_install: bool
    """True when Isaac Lab runs from its source tree (``./isaaclab.sh``), False for a wheel."""

    @property
    def label(self) -> str:
        """Human-readable, e.g. ``Isaac Lab 2.x (source install, isaaclab 0.54.2)``."""
        kind = "source install" if self.source_install else "pip/uv install"
        name = "2.x" if self.series == SERIES_2 else "3.0"
        return f"Isaac Lab {name} ({kind}, isaaclab {self.version})"


def _numbers(version: str) -> tuple[int, ...]:
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if not match:
        return ()
    return tuple(int(g) for g in match.groups() if g is not None)


def classify(version: str, source_install: bool) -> IsaacLabRelease:
    """The release of an ``isaaclab`` of ``version`` (extension version when ``source_install``), or raise
    :class:`UnsupportedIsaacLab` with one line naming what is supported."""
    nums = _numbers(version)
    major, minor = (nums + (0, 0))[:2]
    if source_install and major == 0 and 33 <= minor <= 54:
        return IsaacLabRelease(SERIES_2, version, True)
    if source_install and major == 28:
        return IsaacLabRelease(SERIES_3, version, True)
    if not source_install and (major, minor) == (3, 0):
        return IsaacLabRelease(SERIES_3, version, False)
    how = "source install" if source_install else "installed wheel"
    if not source_install and major == 2:
        detail = "the 2.x wheels are not supported; install Isaac Lab 2.x from source or use 3.0"
    else:
        detail = "this release is not supported"
    raise UnsupportedIsaacLab(f"found isaaclab {version} ({how}): {detail}; supported: {SUPPORTED}")


def _source_tree_version(package_dir: Path) -> str | None:
    """The version recorded next to a source tree's ``isaaclab`` package (2.x extension.toml, 3.0 pyproject)."""
    root = package_dir.parent
    for name in ("config/extension.toml", "pyproject.toml"):
        path = root / name
        if path.is_file():
            match = re.search(r'^version\s*=\s*"([^"]+)"', path.read_text(encoding="utf-8"), re.MULTILINE)
            if match:
                return match.group(1)
    return None


def detect() -> IsaacLabRelease | None:
    """The installed Isaac Lab release, None when ``isaaclab`` is not importable; raises
    :class:`UnsupportedIsaacLab` for a release outside :data:`SUPPORTED`."""
    try:
        spec = importlib.util.find_spec("isaaclab")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    tree_version = _source_tree_version(package_dir)
    if tree_version is not None and (package_dir.parent / "config" / "extension.toml").is_file():
        return classify(tree_version, source_install=True)  # a 2.x source tree
    try:
        dist_version = importlib.metadata.version("isaaclab")
    except importlib.metadata.PackageNotFoundError:
        dist_version = None
    if dist_version is not None:
        # A source install is an editable install of the tree: its distribution carries the extension version.
        nums = _numbers(dist_version)
        return classify(dist_version, source_install=bool(nums) and nums[0] in (0, 28))
    if tree_version is not None:
        return classify(tree_version, source_install=True)
    raise UnsupportedIsaacLab(f"found an isaaclab package at {package_dir} without a version; supported: {SUPPORTED}")


def require() -> IsaacLabRelease:
    """:func:`detect`, raising ImportError when Isaac Lab is not importable."""
    release = detect()
    if release is None:
        raise ImportError("the Python package 'isaaclab' is not importable here")
    return release


__all__ = [
    "IsaacLabRelease",
    "SERIES_2",
    "SERIES_3",
    "SUPPORTED",
    "UnsupportedIsaacLab",
    "classify",
    "detect",
    "require",
]
