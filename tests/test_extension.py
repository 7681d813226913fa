"""The Kit extension metadata: one extension.toml, found by Kit as config/extension.toml, versioned with the package.

Shown here: the top-level ``extension.toml`` and Kit's ``config/extension.toml`` are the same file (a relative
symlink, so it survives moving or copying the checkout with ``cp -a``/``git``), parse to the same metadata, and carry
the version of ``async_pbt_isaaclab._version`` (which pyproject reads dynamically) and of the installed distribution;
the declared dependencies and Python module are the ones Isaac Lab and Kit need.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from pathlib import Path

import tomllib

import async_pbt_isaaclab

ROOT = Path(__file__).resolve().parents[1]
TOP = ROOT / "extension.toml"
KIT = ROOT / "config" / "extension.toml"


def _load(path: Path) -> dict:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def test_config_extension_toml_is_a_relative_link_to_the_top_level_file():
    assert KIT.is_symlink(), "config/extension.toml must link to ../extension.toml (one source of truth)"
    target = os.readlink(KIT)
    assert not os.path.isabs(target) and Path(target) == Path("..") / "extension.toml"
    assert KIT.resolve() == TOP.resolve()
    assert KIT.read_bytes() == TOP.read_bytes()
    assert _load(KIT) == _load(TOP)


def test_versions_agree():
    meta = _load(TOP)
    version = meta["package"]["version"]
    assert version == async_pbt_isaaclab.__version__
    assert version == importlib.metadata.version("async-pbt-isaaclab")
    pyproject = _load(ROOT / "pyproject.toml")
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "async_pbt_isaaclab._version.__version__"}


def test_package_metadata_dependencies_and_module():
    meta = _load(TOP)
    package = meta["package"]
    for key in ("title", "description", "keywords", "category", "author"):
        assert package.get(key), key
    assert "isaaclab" in package["keywords"] and "pbt" in package["keywords"]
    assert (ROOT / package["readme"]).is_file()
    assert {"isaaclab", "isaaclab_rl", "isaaclab_tasks"} <= set(meta["dependencies"])
    modules = [m["name"] for m in meta["python"]["module"]]
    assert modules == ["async_pbt_isaaclab"]
    for name in modules:
        importlib.import_module(name)
    assert "isaac_lab_settings" in meta
