"""``async-pbt doctor``: filesystem checks of a workspace, and the launcher refusing to start on a failure.

Clock skew between nodes is measured from member records: the heartbeat a member's node wrote into its
record against the record file's mtime, which a network filesystem's server stamps. Here the records
are real files; their mtimes are set with ``os.utime`` the way a file server with another clock would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.core.workspace.filesystem_checks import SKEW_FAIL_S, run_checks
from async_pbt_isaaclab.core.workspace.fsio import atomic_write_json


def _write_record(ws, record, host: str, server_offset_s: float) -> None:
    """A member record written by ``host``; the file server's clock is ``server_offset_s`` off that host's."""
    path = ws / "members" / f"{record.member:03d}" / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = record.to_dict()
    data["host"] = host
    atomic_write_json(path, data)
    stamp = record.heartbeat + server_offset_s
    os.utime(path, (stamp, stamp))


def test_doctor_passes_on_a_local_filesystem(tmp_path, capsys):
    assert main(["doctor", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("atomic-replace", "fsync", "lock", "clock", "node-clocks", "free-space"):
        assert f"ok    {name}:" in out
    assert "all required checks passed" in out
    assert list(tmp_path.iterdir()) == [], "the probe files must be removed"


def test_doctor_json(tmp_path, capsys):
    assert main(["doctor", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["failed"] == [] and {c["name"] for c in data["checks"]} >= {"lock", "atomic-replace", "node-clocks"}


def test_doctor_reports_skew_between_nodes_from_member_records(tmp_path, make_record, capsys):
    now = time.time()
    _write_record(tmp_path, make_record(0, [1.0], now=now), "node-a", 0.0)
    _write_record(tmp_path, make_record(1, [1.0], now=now), "node-b", -10.0)
    checks = {c.name: c for c in run_checks(tmp_path)}
    assert checks["node-clocks"].status == "warn"
    assert "node-a +0.0 s" in checks["node-clocks"].detail and "node-b +10.0 s" in checks["node-clocks"].detail

    _write_record(tmp_path, make_record(1, [1.0], now=now), "node-b", -(SKEW_FAIL_S + 60))
    assert main(["doctor", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  node-clocks:" in out and "max_clock_skew_s" in out and "1 check(s) failed" in out


def test_old_records_are_not_taken_for_clock_skew(tmp_path, make_record):
    # A stopped population, or a workspace copied without keeping mtimes: nothing says the clocks are off now.
    now = time.time()
    _write_record(tmp_path, make_record(0, [1.0], now=now - 86400), "node-a", 0.0)
    _write_record(tmp_path, make_record(1, [1.0], now=now), "node-b", -86400.0)
    check = {c.name: c for c in run_checks(tmp_path, now=now)}["node-clocks"]
    assert check.status == "ok" and "nothing to compare" in check.detail


def test_doctor_flags_a_heartbeat_from_the_future(tmp_path, make_record):
    now = time.time()
    _write_record(tmp_path, make_record(0, [1.0], now=now + 30, heartbeat_age=0), "fast-node", -30.0)
    check = {c.name: c for c in run_checks(tmp_path, now=now)}["node-clocks"]
    assert check.status == "warn" and "fast-node" in check.detail and "ahead of this node" in check.detail


def test_doctor_on_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    assert main(["doctor", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_launch_refuses_on_a_failing_check_and_no_doctor_overrides(tmp_path, make_record):
    ws = tmp_path / "ws"
    now = time.time()
    _write_record(ws, make_record(0, [1.0], now=now), "node-a", 0.0)
    _write_record(ws, make_record(1, [1.0], now=now), "node-b", -(SKEW_FAIL_S + 60))
    member = [sys.executable, "-c", "import sys; open(sys.argv[-1] + '.ran', 'w')"]
    base = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.cli",
        "launch",
        "--members",
        "2",
        "--workspace",
        str(ws),
        "--gpus",
        "none",
        "--progress-interval",
        "60",
    ]
    refused = subprocess.run([*base, "--", *member], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert refused.returncode == 1, refused.stderr
    assert "fails node-clocks; nothing launched" in refused.stderr
    assert not (ws / "logs").exists() and not list(tmp_path.glob("*.ran"))

    forced = subprocess.run(
        [*base, "--no-doctor", "--", *member], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert (tmp_path / "0.ran").exists() and (tmp_path / "1.ran").exists()


def test_stop_without_a_cluster_launch_says_so(tmp_path, make_record, capsys):
    _write_record(tmp_path, make_record(0, [1.0]), "node-a", 0.0)
    assert main(["stop", str(tmp_path)]) == 2
    assert "no SLURM job or Ray driver is recorded" in capsys.readouterr().err
