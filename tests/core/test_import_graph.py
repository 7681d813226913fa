"""The core's own import graph: no cycle, and no import placed late to get round one.

What is shown here:
1. the modules of ``async_pbt_isaaclab/core`` import each other without a cycle, counting every import
   statement that can run (at the top, inside a function, at the bottom of a module); only imports under
   ``if TYPE_CHECKING:`` are left out, as they never run;
2. every import of another core module is a statement at the top of its module, before the first function
   or class, so the order modules load in is the order the graph says;
3. the checker is not vacuous: on a planted package it finds a cycle closed by an import inside a
   function, and it reports that import as late, while an import under ``TYPE_CHECKING`` is ignored.
"""

from __future__ import annotations

import ast
import graphlib
import textwrap
from dataclasses import dataclass
from pathlib import Path

import async_pbt_isaaclab.core

CORE_DIR = Path(async_pbt_isaaclab.core.__file__).parent
CORE_PACKAGE = "async_pbt_isaaclab.core"


@dataclass(frozen=True)
class CoreImport:
    """One import statement of a core module that names another core module."""

    source: str
    """Importing module (file stem)."""
    target: str
    """Imported core module (file stem)."""
    line: int
    """Line of the import statement."""
    early: bool
    """At the top of the module, before its first function or class (or under ``TYPE_CHECKING``)."""


def _is_type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(dotted: str, modules: set[str]) -> str | None:
    """The core module ``dotted`` (relative to the core package) names, or the module it lies in."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _targets(node: ast.Import | ast.ImportFrom, package: str, source: str, modules: set[str]) -> list[str]:
    """The core modules ``node`` (in core module ``source``) imports, absolute or relative; names are dotted and
    relative to the core package (``decision.rules``)."""
    if isinstance(node, ast.Import):
        prefix = package + "."
        names = [a.name[len(prefix) :] for a in node.names if a.name.startswith(prefix)]
        return [t for t in (_resolve(n, modules) for n in names) if t]
    if node.level == 0:
        base = node.module or ""
        if base != package and not base.startswith(package + "."):
            return []
        base = base[len(package) + 1 :]
    else:
        if node.level > len(source.split(".")):
            return []  # above the core package: not a core module
        parts = source.split(".")[: -node.level]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    found = []
    for alias in node.names:  # ``from <core>.workspace import fsio`` names a module
        full = f"{base}.{alias.name}" if base else alias.name
        target = full if full in modules else _resolve(base, modules)
        if target:
            found.append(target)
    return found


def core_imports(core_dir: Path, package: str) -> list[CoreImport]:
    """Every runtime import between the modules of ``core_dir`` (``package`` is its dotted name), its subpackages
    included; a module is named by its dotted path below ``core_dir`` (``decision.rules``)."""
    paths = {".".join(p.relative_to(core_dir).with_suffix("").parts): p for p in sorted(core_dir.rglob("*.py"))}
    modules = {name for name in paths if name.rpartition(".")[2] != "__init__"}
    found: list[CoreImport] = []
    for name, path in sorted(paths.items()):
        tree = ast.parse(path.read_text(), str(path))
        type_only: set[int] = set()
        for node in ast.walk(tree):
            if _is_type_checking(node):
                assert isinstance(node, ast.If)
                type_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
        definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        first_definition = next((i for i, s in enumerate(tree.body) if isinstance(s, definitions)), len(tree.body))
        early_ids = {id(s) for s in tree.body[:first_definition] if isinstance(s, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in type_only:
                continue
            for target in _targets(node, package, name, modules):
                if target != name:
                    found.append(CoreImport(name, target, node.lineno, id(node) in early_ids))
    return found


def import_cycle(imports: list[CoreImport]) -> list[str] | None:
    """A cycle of the import graph (``[a, b, ..., a]``), or ``None`` when it has none."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def _describe(imports: list[CoreImport]) -> str:
    return "; ".join(f"core/{i.source.replace('.', '/')}.py:{i.line} imports {i.target}" for i in imports)


def test_the_core_import_graph_is_acyclic():
    imports = core_imports(CORE_DIR, CORE_PACKAGE)
    edges = {(i.source, i.target) for i in imports}
    # Guard against a vacuous pass: the graph holds the edges the layering is built on.
    assert {
        ("pbt_section", "decision.catalog"),
        ("pbt_section", "config"),
        ("pbt_section", "mutation_section"),
        ("decision.catalog", "decision.rules"),
        ("decision.catalog", "decision.fixture_rules"),
        ("decision.catalog", "decision.pb2"),
        ("decision.fixture_rules", "decision.rules"),
        ("decision.rules", "decision.selection"),
        ("decision.rules", "config"),
        ("decision.selection", "config"),
        ("decision.step", "decision.catalog"),
        ("workspace.audit_replay", "decision.step"),
        ("workspace.audit", "workspace.fsio"),
        ("state.lineage", "state.schedule"),
    } <= edges
    cycle = import_cycle(imports)
    assert cycle is None, "import cycle in the core: " + " -> ".join(cycle or [])


def test_core_modules_import_each_other_only_at_the_top():
    late = [i for i in core_imports(CORE_DIR, CORE_PACKAGE) if not i.early]
    assert late == [], "imports of core modules below the top of a module: " + _describe(late)


def test_the_checker_finds_a_planted_cycle_and_a_late_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n\n\ndef f():\n    return b\n")
    (pkg / "b.py").write_text(
        textwrap.dedent(
            """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from pkg.c import C


            def g():
                from .a import f

                return f
            """
        )
    )
    (pkg / "c.py").write_text("from pkg.b import g\n\n\nclass C:\n    pass\n")
    imports = core_imports(pkg, "pkg")
    assert {(i.source, i.target, i.early) for i in imports} == {
        ("a", "b", True),
        ("b", "a", False),
        ("c", "b", True),
    }, "the TYPE_CHECKING import of c is left out; the import inside g is late"
    cycle = import_cycle(imports)
    assert cycle is not None and set(cycle) == {"a", "b"} and cycle[0] == cycle[-1]
    assert import_cycle([i for i in imports if i.early]) is None
