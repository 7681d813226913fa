"""Import boundary: the package root, the core and the CLI never import the heavy stacks.

What is shown here:
1. in a fresh interpreter where torch, rl_games, isaaclab, isaacsim, omni and pxr cannot be imported
   (a ``sys.meta_path`` finder raises ImportError for them), ``import async_pbt_isaaclab``, every module
   of ``async_pbt_isaaclab.core`` and ``async_pbt_isaaclab.cli`` import fine, a decision with every rule
   (welch pulls in scipy lazily) and a mutation run, and none of those names is in ``sys.modules``
   afterwards, nor was an import of them even attempted;
2. statically, no file in ``core/`` has an import statement naming them (lazy ones included);
3. statically, the layers under the ``async-pbt`` command (core, member, envs, rl_games, launch, the one-line
   parser) never import ``commands/`` or ``cli.py``, lazily or not: what both need lives below them;
4. statically, the decision part of the core (``core/decision/``) and the typed member state (``core/state/``) do no
   I/O: no module of theirs imports a module that reaches files, processes, sockets, the clock or the environment
   (``os``, ``pathlib``, ``io``, ``subprocess``, ``time`` ...), calls ``open``/``print``/``input``, or imports a
   core module outside ``decision/``, ``state/`` and ``config.py`` (the workspace's files and locks, the config
   readers); the checker finds each kind of offence in planted files;
5. mjlab (an optional extra) is imported only by ``async_pbt_isaaclab/mjlab/``, which nothing else imports: with mjlab
   blocked, the rsl_rl adapter, the CPU entries and the mjlab entry itself import without trying it, and the entry
   run without it ends in one line naming the extra.
"""

from __future__ import annotations

import ast
import pkgutil
import textwrap
from pathlib import Path

from blocked_imports import FORBIDDEN, run_blocked

import async_pbt_isaaclab
import async_pbt_isaaclab.core

CORE_DIR = Path(async_pbt_isaaclab.core.__file__).parent
PACKAGE_DIR = Path(async_pbt_isaaclab.__file__).parent
CORE_MODULES = sorted(m.name for m in pkgutil.walk_packages([str(CORE_DIR)], "async_pbt_isaaclab.core.") if not m.ispkg)

BLOCKED_BODY = textwrap.dedent(
    """
    import time
    for name in FORBIDDEN:  # make sure nothing is pre-imported (e.g. by a .pth hook)
        assert name not in sys.modules, name

    imported = []
    import async_pbt_isaaclab
    imported.append("async_pbt_isaaclab")
    for mod in {modules!r}:
        __import__(mod)
        imported.append(mod)

    # Exercise the lazily imported paths too: every selection rule and a mutation.
    from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
    from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
    from async_pbt_isaaclab.core.state.member_rng import MemberRng
    from async_pbt_isaaclab.core.decision.mutation import mutate
    from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
    from async_pbt_isaaclab.core.decision.step import decide
    now = time.time()
    recs = []
    for i in range(4):
        ev = EvidenceSummary("episode_return", 0, tuple(float(i * 10 + (k % 3)) for k in range(16)), 16, 0)
        entry = HistoryEntry(10_000, 0, ev.mean, ev.std, 16, ConditionLabel(task="t"),
                             f"members/{{i:03d}}/checkpoints/x.pth", "%064x" % (i + 1), {{"learning_rate": 3e-4}})
        recs.append(MemberRecord(member=i, generation=0, frame=10_000, generation_start_frame=0, restarts=0,
                                 heartbeat=now, evidence=ev, condition=ConditionLabel(task="t"),
                                 hyperparameters={{"learning_rate": 3e-4}}, history=(entry,),
                                 checkpoint=f"members/{{i:03d}}/checkpoints/x.pth", checkpoint_sha256="a" * 64))
    outcomes = []
    for rule in ("dexpbt", "isaaclab", "welch"):
        cfg = population_config_from_dict({{"rule": rule, "interval_steps": 1000, "min_episodes": 8, "window": 16,
                                           "mutation": {{"learning_rate": "mutate_float"}}}})
        d = decide(recs[0], recs, cfg, MemberRng(0), now)
        mutate(recs[0].hyperparameters, cfg.mutation, 1.0, cfg.change_range, MemberRng(0))
        outcomes.append(d.outcome.value)

    loaded = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
    print(json.dumps({{"imported": imported, "loaded": loaded, "attempts": attempts, "outcomes": outcomes}}))
    """
)


def _run_blocked(modules: list[str]) -> dict:
    return run_blocked(BLOCKED_BODY.format(modules=modules))


def test_core_modules_found():
    # Guard against a vacuous pass: the list must hold the modules the core is made of.
    assert {
        "async_pbt_isaaclab.core.config",
        "async_pbt_isaaclab.core.decision.selection",
        "async_pbt_isaaclab.core.workspace.audit",
        "async_pbt_isaaclab.core.workspace.layout",
        "async_pbt_isaaclab.core.decision.mutation",
    } <= set(CORE_MODULES)


def test_package_and_core_import_without_heavy_stacks():
    out = _run_blocked(CORE_MODULES)
    assert out["imported"] == ["async_pbt_isaaclab"] + CORE_MODULES
    assert out["loaded"] == [] and out["attempts"] == []
    assert out["outcomes"] == ["exploit", "exploit", "exploit"]


def test_cli_imports_without_heavy_stacks():
    out = _run_blocked(CORE_MODULES + ["async_pbt_isaaclab.cli"])
    assert "async_pbt_isaaclab.cli" in out["imported"]
    assert out["loaded"] == [] and out["attempts"] == []


def test_the_blocker_really_blocks():
    # The same harness must fail loudly when something does import a forbidden package.
    body = BLOCKED_BODY.format(modules=["json"]).replace(
        "imported = []", "imported = []\ntry:\n    import torch.nn\nexcept ImportError:\n    pass"
    )
    out = run_blocked(body, check=False)
    assert out["attempts"] == ["torch"] and out["loaded"] == []


def _imported_names(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call):
            # importlib.import_module("torch") / __import__("torch") with a literal name.
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                found.append((node.lineno, str(node.args[0].value)))
    return found


def test_no_core_file_imports_heavy_stacks_statically():
    files = sorted(CORE_DIR.rglob("*.py"))
    assert len(files) >= 8
    offenders = [
        f"{path.name}:{line}: {name}"
        for path in files
        for line, name in _imported_names(path)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_static_check_would_catch_an_import(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text(
        "def f():\n    import torch.nn as nn\n    from isaaclab.envs import X\n"
        "    importlib.import_module('omni.kit')\n"
    )
    assert [n for _, n in _imported_names(sample)] == ["torch.nn", "isaaclab.envs", "omni.kit"]


LAYERS_UNDER_THE_COMMANDS = ("core", "member", "envs", "rl_games", "launch", "console.py")
"""Rooms of the package that ``commands/`` and ``cli.py`` import, and so must not import back."""


def test_layers_under_the_commands_never_import_them():
    files = sorted(
        path
        for layer in LAYERS_UNDER_THE_COMMANDS
        for path in ([PACKAGE_DIR / layer] if layer.endswith(".py") else (PACKAGE_DIR / layer).rglob("*.py"))
    )
    assert {p.parent.name for p in files} >= {"core", "member", "envs", "isaaclab", "rl_games", "launch"}
    offenders = [
        f"{path.relative_to(PACKAGE_DIR)}:{line}: {name}"
        for path in files
        for line, name in _imported_names(path)
        if name.startswith(("async_pbt_isaaclab.commands", "async_pbt_isaaclab.cli"))
    ]
    assert offenders == []


IO_MODULES = frozenset(
    {
        "os",
        "pathlib",
        "io",
        "shutil",
        "tempfile",
        "glob",
        "fcntl",
        "mmap",
        "select",
        "selectors",
        "socket",
        "ssl",
        "subprocess",
        "multiprocessing",
        "threading",
        "signal",
        "time",
        "sys",
        "logging",
        "sqlite3",
        "urllib",
        "http",
        "asyncio",
        "builtins",
    }
)
"""Standard modules a pure decision never needs: files, processes, sockets, threads, the clock, the environment."""

IO_CALLS = frozenset({"open", "print", "input", "breakpoint", "exec", "eval"})
"""Built-in calls that read or write outside the function's arguments."""

PURE_PARTS = ("decision", "state")
"""The parts of the core that do no I/O."""

PURE_IMPORTS = ("async_pbt_isaaclab.core.decision", "async_pbt_isaaclab.core.state", "async_pbt_isaaclab.core.config")
"""What a pure part may import of the package: itself, the other pure part, and the config value it is handed."""


def io_offences(path: Path) -> list[str]:
    """Every import or call of ``path`` that would let a pure module do I/O (``line: what``)."""
    found = []
    for line, name in _imported_names(path):
        top = name.split(".")[0]
        if top in IO_MODULES:
            found.append(f"{line}: imports {name}")
        elif top == "async_pbt_isaaclab" and not name.startswith(PURE_IMPORTS):
            found.append(f"{line}: imports {name}, outside the pure parts")
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append(f"{node.lineno}: relative import (name the part it comes from)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
            found.append(f"{node.lineno}: calls {node.func.id}()")
    return found


def test_the_decision_and_the_member_state_do_no_io():
    files = sorted(path for part in PURE_PARTS for path in (CORE_DIR / part).rglob("*.py"))
    # Guard against a vacuous pass: the parts hold the modules the audit replays and the state it reads.
    names = {f"{p.parent.name}/{p.name}" for p in files}
    assert {
        "decision/step.py",
        "decision/selection.py",
        "decision/mutation.py",
        "decision/exploit_plan.py",
        "decision/catalog.py",
        "state/member_state.py",
        "state/records.py",
        "state/member_rng.py",
    } <= names
    offences = [f"core/{p.relative_to(CORE_DIR)}:{o}" for p in files for o in io_offences(p)]
    assert offences == []


def test_the_io_rule_catches_each_offence(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text(
        "import os.path\n"
        "from pathlib import Path\n"
        "from async_pbt_isaaclab.core.workspace import fsio\n"
        "from async_pbt_isaaclab.core import pbt_section\n"
        "from . import sibling\n"
        "from async_pbt_isaaclab.core.state.records import MemberRecord\n"
        "def f(rng):\n"
        "    import time\n"
        "    print(open('x').read())\n"
        "    time.sleep(1)\n"
    )
    assert io_offences(sample) == [
        "1: imports os.path",
        "2: imports pathlib",
        "3: imports async_pbt_isaaclab.core.workspace, outside the pure parts",
        "4: imports async_pbt_isaaclab.core, outside the pure parts",
        "8: imports time",
        "5: relative import (name the part it comes from)",
        "9: calls print()",
        "9: calls open()",
    ]


def test_only_the_mjlab_entry_imports_mjlab():
    mjlab_dir = PACKAGE_DIR / "mjlab"
    files = sorted(PACKAGE_DIR.rglob("*.py"))
    assert mjlab_dir / "train.py" in files
    naming = {
        f"{path.relative_to(PACKAGE_DIR)}: {name}"
        for path in files
        for _, name in _imported_names(path)
        if name.split(".")[0] in ("mjlab", "tyro") or name.startswith("async_pbt_isaaclab.mjlab")
    }
    outside = sorted(n for n in naming if not n.startswith("mjlab/"))
    assert outside == [] and any(n.endswith(": mjlab.rl") for n in naming)


def test_without_mjlab_its_entry_ends_in_one_line_and_nothing_else_tries_it(tmp_path):
    body = f"""
    import contextlib, io
    for mod in ("async_pbt_isaaclab.rsl_rl.member", "async_pbt_isaaclab.examples.rsl_rl_member",
                "async_pbt_isaaclab.examples.cpu_population", "async_pbt_isaaclab.mjlab.train"):
        __import__(mod)
    before = list(attempts)
    from async_pbt_isaaclab.mjlab import train
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = train.main(["Mjlab-Cartpole-Balance", "--pbt-workspace", {str(tmp_path / "ws")!r}, "--pbt-members", "2"])
    print(json.dumps({{"before": before, "attempts": attempts, "code": code, "err": err.getvalue()}}))
    """
    out = run_blocked(body, forbidden=("mjlab",))
    assert out["before"] == [] and out["attempts"] == ["mjlab"] and out["code"] == 2
    (line,) = out["err"].splitlines()
    assert "mjlab members need mjlab" in line and "async-pbt-isaaclab[mjlab]" in line
    assert not (tmp_path / "ws").exists()
