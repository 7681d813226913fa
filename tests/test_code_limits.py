"""Size limits of the package's code: no function over 60 lines, no module over 450.

ruff holds the other two limits (C901 branches, PLR0915 statements; pyproject.toml); it has no rule for a
function's or a module's length, so this test walks the package with `ast` and names every one over its limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import async_pbt_isaaclab

PACKAGE = Path(async_pbt_isaaclab.__file__).resolve().parent
ROOT = PACKAGE.parent
MAX_FUNCTION_LINES = 60  # from the `def` line to the function's last line, docstring included
MAX_MODULE_LINES = 450


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _where(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


def long_functions(path: Path, root: Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function or method in `path` longer than `limit` lines, as `file:line name (N lines)`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{_where(path, root)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_the_walk_sees_the_whole_package():
    modules = {_where(p) for p in _modules()}
    # The walk reaches into subpackages, so a module moved one level down is still measured.
    assert "async_pbt_isaaclab/launch/cli.py" in modules
    assert "async_pbt_isaaclab/envs/isaaclab/wrapper.py" in modules
    assert len(modules) > 50


def test_no_function_is_over_60_lines():
    too_long = [entry for path in _modules() for entry in long_functions(path)]
    assert not too_long, "functions over 60 lines (split them by step):\n" + "\n".join(too_long)


def test_no_module_is_over_450_lines():
    too_long = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{_where(path)} ({lines} lines)")
    assert not too_long, "modules over 450 lines (split them by concern):\n" + "\n".join(too_long)


def test_a_long_function_is_named(tmp_path):
    # The measure can fail: of two functions, the one of 61 lines is reported with its line, the short one is not.
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    module = tmp_path / "sample.py"
    module.write_text(f"def short():\n    return 1\n\n\ndef long_one():\n{body}\n    return x0\n")
    assert long_functions(module, root=tmp_path) == ["sample.py:5 long_one (61 lines)"]
