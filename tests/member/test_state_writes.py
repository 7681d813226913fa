"""A member's state changes only through ``MemberState``'s methods (``core/state/member_state.py``).

The package's source is scanned (``ast``) for writes to a field of a member's state anywhere but in
``core/state/member_state.py``: an assignment or augmented assignment to ``<state>.<field>`` (tuple targets included),
an item assignment or deletion inside one (``state.hyperparameters[k] = v``), a mutating call on one
(``state.lineage.append(...)``, ``state.hyperparameters.update(...)``) and ``setattr(<state>, "<field>", ...)``.
``<state>`` is an expression naming a member's state: a name or attribute called ``state`` or ending in ``_state``
(``state``, ``self.state``, ``session.state``), or a name annotated ``MemberState``. A checker that finds nothing
proves nothing, so it is first run on planted code with one write of each kind.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

import async_pbt_isaaclab
from async_pbt_isaaclab.core.state.member_state import MemberState

PACKAGE = Path(async_pbt_isaaclab.__file__).parent
FIELDS = frozenset(f.name for f in dataclasses.fields(MemberState))
MUTATORS = frozenset(
    {"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "sort", "reverse"}
)
HOME = PACKAGE / "core" / "state" / "member_state.py"


def _state_names(tree: ast.AST) -> set[str]:
    """Names annotated ``MemberState`` (arguments and annotated assignments) in ``tree``."""
    names = set()
    for node in ast.walk(tree):
        annotation = getattr(node, "annotation", None)
        target = node.arg if isinstance(node, ast.arg) else getattr(getattr(node, "target", None), "id", None)
        if annotation is not None and target and "MemberState" in ast.unparse(annotation):
            names.add(target)
    return names


def _names_state(node: ast.AST, annotated: set[str]) -> bool:
    """``node`` is an expression that names a member's state."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and (name == "state" or name.endswith("_state") or name in annotated)


def _field_of_state(node: ast.AST, annotated: set[str]) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in FIELDS and _names_state(node.value, annotated)


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    else:
        return []
    flat = []
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        else:
            flat.append(target)
    return flat


def _writes(node: ast.AST, annotated: set[str]) -> bool:
    for target in _targets(node):
        inner = target.value if isinstance(target, ast.Subscript) else target
        if _field_of_state(inner, annotated):
            return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in MUTATORS and _field_of_state(func.value, annotated):
        return True
    return (
        isinstance(func, ast.Name)
        and func.id == "setattr"
        and len(node.args) >= 2
        and _names_state(node.args[0], annotated)
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in FIELDS
    )


def state_writes(source: str, where: str) -> list[str]:
    """``where:line: code`` of every write to a member state's field in ``source``."""
    tree = ast.parse(source)
    annotated = _state_names(tree)
    writes = [n for n in ast.walk(tree) if isinstance(n, (ast.stmt, ast.Call)) and _writes(n, annotated)]
    return [f"{where}:{n.lineno}: {ast.unparse(n)[:120]}" for n in sorted(writes, key=lambda n: n.lineno)]


def test_the_scan_finds_every_kind_of_write():
    planted = textwrap.dedent(
        """
        def f(session, record, mine: MemberState, donor_state):
            session.state.generation = 3
            state.rng_state, x = {}, 1
            self.state.restarts += 1
            state.hyperparameters["learning_rate"] = 1e-3
            del state.history[0]
            state.lineage.append(entry)
            setattr(state, "pending_exploit", None)
            mine.best = []
            member_state.evidence = None
            record.generation = 4            # not a member state
            donor_state["epoch"] = 1          # a checkpoint dict, not a field
            state.published("x", "y")         # a transition: allowed
        """
    )
    found = state_writes(planted, "planted.py")
    assert [int(f.split(":")[1]) for f in found] == [3, 4, 5, 6, 7, 8, 9, 10, 11], found


def test_member_state_changes_only_through_its_methods():
    files = sorted(p for p in PACKAGE.rglob("*.py") if p != HOME)
    assert len(files) > 80 and PACKAGE / "member" / "executor.py" in files  # the scan covers the package
    found = [w for p in files for w in state_writes(p.read_text(), str(p.relative_to(PACKAGE)))]
    assert found == [], "write these through a MemberState method:\n" + "\n".join(found)
