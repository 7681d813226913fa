"""Nothing the package writes goes through a link planted in the workspace (symbolic or hard).

A real CPU population (``python -m async_pbt.examples.cpu_population``, 2 members, 2 epochs) runs once; every path
it left in its workspace is listed. A copy of the workspace outside it is the target of every planted link. Then,
one path at a time, a symbolic link (every path) or a hard link (every file) to that outside copy replaces the path,
and the population is started again through its two writers: the launcher (``launch_population``; its member program
does not matter for what the launcher itself writes, so a trivial one stands in) for the launcher's paths, the real
member entry point (``cpu_member.main``, in-process: the members have finished, so they claim, check, log their
start and stop, save and exit) for the members' paths. After each: no file outside changed (the copy is hashed),
and a refusal names the planted path. Paths written in place (appended, locked, truncated) refuse hard links too;
files replaced atomically cannot write through a hard link (the rename replaces the name), so those are planted all
at once and the population trains one epoch more, as a real run, which must succeed with nothing outside changed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.launch.arguments import LaunchError
from async_pbt_isaaclab.launch.local_backend import launch_population

pytestmark = pytest.mark.slow

POPULATION = "async_pbt.examples.cpu_population"
LAUNCHER_PATHS = ("launcher.jsonl", "logs", "launchers")
"""Top-level paths the launcher writes; everything else is the members'."""
IN_PLACE = ("launcher.jsonl", "lock", "audit.jsonl", "pbt_scalars.jsonl")
"""Files written in place (besides member logs, launcher locks and rl_games' nn/ and summaries/ files)."""


def _population(ws: Path, iterations: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", POPULATION, "--workspace", str(ws), "--members", "2", "--smoke"]
    cmd += ["--iterations", str(iterations), "--progress-interval", "600"]
    return subprocess.run(cmd, cwd=ws.parent, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> tuple[Path, list[list[str]]]:
    """The workspace of a finished 2-member run, and each member's argv (from the launcher's journal)."""
    base = tmp_path_factory.mktemp("links")
    ws = base / "ws"
    proc = _population(ws, iterations=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    starts = [json.loads(line) for line in (ws / "launcher.jsonl").read_text().splitlines()]
    commands = {e["member"]: e["command"] for e in starts if e["event"] == "start"}
    assert sorted(commands) == [0, 1] and all(
        c[1:3] == ["-m", "async_pbt.examples.cpu_member"] for c in commands.values()
    )
    shutil.copytree(ws, base / "pristine", symlinks=True)
    return ws, [commands[i][3:] for i in (0, 1)]


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_symlink():
            h.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _restore(ws: Path) -> None:
    shutil.rmtree(ws)
    shutil.copytree(ws.parent / "pristine", ws, symlinks=True)


def _plant(ws: Path, outside: Path, rel: Path, kind: str) -> None:
    path, target = ws / rel, outside / rel
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "symlink":
        path.symlink_to(target, target_is_directory=target.is_dir())
    else:
        os.link(target, path)


def _run_again(ws: Path, rel: Path, argvs: list[list[str]], capsys) -> tuple[bool, str]:
    """Start the population again through the writer of ``rel``: (all ran clean, what they said)."""
    if rel.parts[0] in LAUNCHER_PATHS:
        out = io.StringIO()
        try:
            result = launch_population(
                [sys.executable, "-c", "pass"], 2, ws, gpus=[], progress_interval_s=3600.0, output=out
            )
        except LaunchError as exc:
            return False, str(exc)
        return result.exit_code == 0, out.getvalue()
    from async_pbt_isaaclab.examples import cpu_member

    capsys.readouterr()
    codes = [cpu_member.main(list(argv)) for argv in argvs]
    said = capsys.readouterr()
    return codes == [0, 0], said.out + said.err


def _written_in_place(rel: Path) -> bool:
    return rel.name in IN_PLACE or rel.parts[0] in ("logs", "launchers") or rel.parent.name in ("nn", "summaries")


def test_no_file_outside_the_workspace_changes_through_a_planted_link(population, tmp_path, capsys):
    ws, argvs = population
    outside = tmp_path / "outside"
    shutil.copytree(ws.parent / "pristine", outside, symlinks=True)
    before = _tree_hash(outside)
    paths = sorted(p.relative_to(ws) for p in ws.rglob("*"))
    assert {"launcher.jsonl", "logs", "launchers", "population.json", "members", "runs"} <= {str(p) for p in paths}
    replaced_by_name: list[Path] = []
    cases = [(rel, "symlink") for rel in paths] + [(rel, "hardlink") for rel in paths if (ws / rel).is_file()]
    for rel, kind in cases:
        _restore(ws)
        _plant(ws, outside, rel, kind)
        clean, said = _run_again(ws, rel, argvs, capsys)
        assert _tree_hash(outside) == before, f"{kind} at {rel}: a file outside the workspace changed"
        if kind == "hardlink" and not _written_in_place(rel):
            # Replaced atomically: the rename replaces the name, the other file keeps its content.
            assert clean, f"hard link at {rel} (replaced atomically, harmless) was refused: {said[-2000:]}"
            replaced_by_name.append(rel)
            continue
        assert not clean, f"{kind} at {rel} was not refused:\n{said[-2000:]}"
        refusals = [line for line in said.splitlines() if f"refusing {ws / rel}:" in line]
        assert refusals, f"{kind} at {rel}: no line names it:\n{said[-2000:]}"
    assert {r.name for r in replaced_by_name} >= {"population.json", "record.json", "state.json", "target.json"}

    # All the harmless hard links at once, and one more epoch of real training through them.
    _restore(ws)
    for rel in replaced_by_name:
        _plant(ws, outside, rel, "hardlink")
    proc = _population(ws, iterations=3)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _tree_hash(outside) == before
    state = json.loads((ws / "members" / "000" / "state.json").read_text())
    assert state["finished"]["epoch"] == 3 and state["last_checkpoint"].endswith("6144.pth")
