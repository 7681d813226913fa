"""Planted links and paths that leave the workspace (async_pbt_isaaclab.core.workspace.layout, core.fsio).

Anyone who can write the shared workspace can replace a member's folder, a subfolder or a file with a
symbolic link, or publish a record whose checkpoint path points elsewhere. What is shown here, one trick
per test, each with a folder *outside* the workspace holding files that must survive:
1. member start-up refuses a symlinked ``incoming/``, ``pins/``, ``checkpoints/``, member folder, ``state.json``
   or lock file with an error naming the link, before it opens, writes or deletes anything, and the
   outside files survive;
2. start-up clears only the donor copies it wrote in a real ``incoming/`` (other files stay);
3. a pin is never written through a symlinked ``pins/``; a symlinked pin file does not stop retention;
4. retention deletes only regular checkpoint files: a link in ``checkpoints/`` is not followed or counted,
   and a symlinked ``checkpoints/`` is skipped with a warning;
5. temp-file cleanup refuses a symlinked folder and never deletes a link's target;
6. a symlinked ``record.json`` or member folder is reported by ``read_records`` (naming the path), not read;
7. checkpoint paths with ``..``, absolute paths and paths through a link are refused;
8. a symlinked ``best.json``, ``audit.jsonl`` or ``population.json`` is refused or skipped with a warning.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError, checkpoint_name
from async_pbt_isaaclab.core.workspace.retention import active_pins, apply_retention, pin_checkpoint, population_best
from async_pbt_isaaclab.core.workspace.state_files import load_state

YAML = Path(__file__).resolve().parents[2] / "async_pbt_isaaclab" / "examples" / "pendulum_ppo.yaml"


@pytest.fixture
def outside(tmp_path):
    """A folder outside the workspace with files an attacker wants deleted or overwritten."""
    folder = tmp_path / "home" / "somedir"
    folder.mkdir(parents=True)
    for name in ("thesis.pdf", "donor001_g0002.pth", ".x.tmp-host-1-2", checkpoint_name(0, 1)):
        (folder / name).write_bytes(b"precious " + name.encode())
    old = time.time() - 10 * 24 * 3600  # old enough for every grace period
    for p in folder.iterdir():
        os.utime(p, (old, old))
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _start(tmp_path: Path, index: int = 1):
    """Claim member ``index`` of a 2-member workspace in this process (real start-up, no training)."""
    from async_pbt_isaaclab.member.session import start_member

    raw = load_yaml(YAML)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": index,
        "num_policies": 2,
        "workspace": str(tmp_path / "ws"),
        "interval_steps": 10**9,
        "mutation": {"learning_rate": "mutate_float"},
    }
    agent_cfg, cfg = load_population_config(raw)
    return start_member(agent_cfg, cfg, train_dir=str(tmp_path / "runs"), task="Pendulum-v1", lock_wait_s=0.0)


def _first_start(tmp_path: Path, index: int = 1) -> Workspace:
    session, _ = _start(tmp_path, index)
    session.close()
    return session.ws


# ----------------------------------------------------------------------------------- member start-up
@pytest.mark.parametrize(
    "planted", ["incoming", "pins", "checkpoints", "member", "state.json", "lock", "audit.jsonl", "best.json"]
)
def test_member_start_refuses_planted_links(tmp_path, outside, planted):
    ws = _first_start(tmp_path)
    mdir = ws.member_dir(1)
    if planted == "member":
        target = tmp_path / "moved"
        mdir.rename(target)
        mdir.symlink_to(outside)
        link = mdir
    else:
        link = mdir / planted
        if link.is_dir():
            link.rmdir()  # empty after the first start
        else:
            link.unlink(missing_ok=True)
        link.symlink_to(outside if planted in ("incoming", "pins", "checkpoints") else outside / "thesis.pdf")
    before = _snapshot(outside)
    with pytest.raises(WorkspaceError, match="symbolic link") as err:
        _start(tmp_path)
    assert str(link) in str(err.value)
    assert _snapshot(outside) == before  # nothing deleted, nothing written


def test_start_clears_only_its_own_donor_copies(tmp_path):
    ws = _first_start(tmp_path)
    incoming = ws.member_dir(1) / "incoming"
    incoming.mkdir()
    (incoming / "donor000_g0003.pth").write_bytes(b"left by a killed exploit")
    (incoming / ".donor000_g0003.pth.tmp-host-1-2").write_bytes(b"partial copy")
    (incoming / "notes.txt").write_bytes(b"not ours")
    (incoming / "sub").mkdir()
    session, _ = _start(tmp_path)
    session.close()
    assert sorted(p.name for p in incoming.iterdir()) == ["notes.txt", "sub"]


def test_start_does_not_follow_a_link_inside_incoming(tmp_path, outside):
    ws = _first_start(tmp_path)
    incoming = ws.member_dir(1) / "incoming"
    incoming.mkdir()
    (incoming / "donor001_g0002.pth").symlink_to(outside / "donor001_g0002.pth")
    before = _snapshot(outside)
    session, _ = _start(tmp_path)
    session.close()
    assert _snapshot(outside) == before
    assert (incoming / "donor001_g0002.pth").is_symlink()  # not a file we wrote: left alone


# ----------------------------------------------------------------------------------- pins
def test_pin_is_not_written_through_a_symlinked_pins_folder(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    (ws.member_dir(0) / "pins").symlink_to(outside)
    before = _snapshot(outside)
    with pytest.raises(WorkspaceError, match="symbolic link") as err:
        pin_checkpoint(ws, 0, "members/000/checkpoints/" + checkpoint_name(1, 5), by_member=1)
    assert str(ws.member_dir(0) / "pins") in str(err.value)
    assert _snapshot(outside) == before
    with pytest.warns(UserWarning, match="symbolic link"):
        assert active_pins(ws, 0) == {"*"}  # its content is not read; retention keeps everything meanwhile


def test_symlinked_pin_file_is_ignored_with_a_warning(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    real = pin_checkpoint(ws, 0, "members/000/checkpoints/" + checkpoint_name(1, 5), by_member=1)
    (real.parent / "002.pin").symlink_to(outside / "thesis.pdf")
    with pytest.warns(UserWarning, match="002.pin"):
        assert active_pins(ws, 0) == {"members/000/checkpoints/" + checkpoint_name(1, 5)}


# ----------------------------------------------------------------------------------- retention
def test_retention_deletes_only_regular_checkpoints(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    folder = ws.member_dir(0) / "checkpoints"
    for g in range(4):
        (folder / checkpoint_name(g, 10 + g)).write_bytes(b"w")
    # A link with a checkpoint's name, the oldest of all: must be neither followed nor deleted through.
    (folder / checkpoint_name(0, 1)).symlink_to(outside / checkpoint_name(0, 1))
    (folder / ".evil.tmp-host-1-2").symlink_to(outside / ".x.tmp-host-1-2")
    before = _snapshot(outside)
    removed = apply_retention(ws, 0, keep_last=1)
    assert sorted(p.name for p in removed) == [checkpoint_name(g, 10 + g) for g in range(3)]
    assert _snapshot(outside) == before
    assert (folder / checkpoint_name(0, 1)).is_symlink()


def test_retention_skips_a_symlinked_checkpoints_folder(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    folder = ws.member_dir(0) / "checkpoints"
    folder.rmdir()
    folder.symlink_to(outside)
    before = _snapshot(outside)
    with pytest.warns(UserWarning, match="retention skipped.*symbolic link"):
        assert apply_retention(ws, 0, keep_last=0) == []
    assert _snapshot(outside) == before


def test_temp_cleanup_refuses_a_symlinked_folder(tmp_path, outside):
    link = tmp_path / "folder"
    link.symlink_to(outside)
    before = _snapshot(outside)
    with pytest.raises(fsio.UnsafePathError, match=f"refusing {link}"):
        fsio.remove_stale_temp_files(link, older_than_s=0.0)
    assert _snapshot(outside) == before


# ----------------------------------------------------------------------------------- reading the workspace
def test_symlinked_record_or_member_folder_is_reported_not_read(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    (outside / "record.json").write_text("{}")
    (ws.member_dir(0) / "record.json").symlink_to(outside / "record.json")
    ws.members_dir.joinpath("001").symlink_to(outside)
    records, errors = ws.read_records(2)
    assert records == {}
    assert "symbolic link" in errors[0] and str(ws.member_dir(0) / "record.json") in errors[0]
    assert "symbolic link" in errors[1] and str(ws.member_dir(1)) in errors[1]


@pytest.mark.parametrize(
    "relative, message",
    [
        ("members/000/../../../home/somedir/thesis.pdf", "'..'"),
        ("members/001/../000/checkpoints/x.pth", "'..'"),
        ("/etc/passwd", "relative"),
        ("members/000/checkpoints/link.pth", "symbolic link"),
        ("members/000/linked/thesis.pdf", "symbolic link"),
    ],
)
def test_checkpoint_paths_leaving_the_workspace_are_refused(tmp_path, outside, relative, message):
    ws = _first_start(tmp_path, index=0)
    (ws.member_dir(0) / "checkpoints" / "link.pth").symlink_to(outside / "thesis.pdf")
    (ws.member_dir(0) / "linked").symlink_to(outside)
    with pytest.raises(WorkspaceError, match=message) as err:
        ws.checkpoint_path(relative)
    assert relative in str(err.value)


def test_symlinked_state_audit_best_and_population_files_are_refused(tmp_path, outside):
    ws = _first_start(tmp_path, index=0)
    mdir = ws.member_dir(0)
    for name in ("state.json", "audit.jsonl", "best.json"):
        (mdir / name).unlink(missing_ok=True)
        (mdir / name).symlink_to(outside / "thesis.pdf")
    with pytest.raises(fsio.UnsafePathError, match=f"refusing {mdir / 'state.json'}"):
        load_state(mdir / "state.json")
    with pytest.raises(fsio.UnsafePathError, match="symbolic link"):
        AuditLog.open(mdir / "audit.jsonl")
    with pytest.raises(fsio.UnsafePathError, match="symbolic link"):
        verify_log(mdir / "audit.jsonl")
    with pytest.warns(UserWarning, match="best.json"):
        assert population_best(ws) == []
    (ws.root / "population.json").unlink()
    (ws.root / "population.json").symlink_to(outside / "thesis.pdf")
    with pytest.raises(WorkspaceError, match=r"population\.json.*symbolic link"):
        ws.population_meta()
    assert _snapshot(outside)["thesis.pdf"] == b"precious thesis.pdf"


def test_audit_command_names_a_symlinked_log(tmp_path, outside, capsys):
    from async_pbt_isaaclab import cli

    ws = _first_start(tmp_path, index=0)
    log = ws.member_dir(0) / "audit.jsonl"
    log.unlink()
    log.symlink_to(outside / "thesis.pdf")
    assert cli.main(["audit", str(ws.root), "--member", "0"]) != 0
    out = capsys.readouterr().out
    assert f"refusing {log}" in out and "symbolic link" in out


def test_torn_tail_is_not_appended_through_a_symlinked_torn_file(tmp_path, outside):
    log_path = tmp_path / "audit.jsonl"
    log = AuditLog.open(log_path)
    log.append("stop", {"status": "stopped"})
    with open(log_path, "ab") as fh:
        fh.write(b'{"seq":1,"kind":"st')  # an interrupted append
    log_path.with_name("audit.jsonl.torn").symlink_to(outside / "thesis.pdf")
    before = _snapshot(outside)
    with pytest.raises(fsio.UnsafePathError, match=r"audit\.jsonl\.torn"):
        AuditLog.open(log_path)
    assert _snapshot(outside) == before
