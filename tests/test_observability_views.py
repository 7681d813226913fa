"""The status table and its --watch mode, decision reasons in words, frame rate and ETA, the launcher's progress
lines, and the HTML report's escaping and empty-workspace handling, on workspaces written by the real writers."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.commands.status_view import render_status, watch
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_name
from async_pbt_isaaclab.core.workspace.member_progress import (
    TAIL_CHUNK,
    decision_in_words,
    eta_seconds,
    last_decision_entry,
    read_target,
    recent_frame_rate,
    target_frames,
    write_target,
)
from async_pbt_isaaclab.launch.progress import progress_lines


def _decision(
    outcome="keep",
    donor=None,
    reasons=("1 compatible live members with evidence < min_members=2",),
    excluded=None,
    me=None,
    unreadable=None,
    **extra,
):
    return {
        "inputs": {"me": me or {}, "peers": [], "now": 0.0, "unreadable_peers": unreadable or {}},
        "decision": {
            "outcome": outcome,
            "donor": donor,
            "reasons": list(reasons),
            "excluded": excluded or {},
            "compared": [0],
            "rule": "dexpbt",
            "thresholds": {},
            "objectives": {},
        },
        "changes": [],
        **extra,
    }


@pytest.fixture
def ws(tmp_path, make_record):
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=2, objective="episode_return", task="Pendulum-v1")
    now = time.time()
    for i in (0, 1):
        ws.member_dir(i).mkdir(parents=True, exist_ok=True)
        rec = make_record(
            i,
            [-100.0 - i, -110.0 - i, -90.0 - i],
            now=now,
            frame=3000,
            heartbeat_age=0.0,
            task="Pendulum-v1",
            last_decision="keep: 1 compatible live members",
        )
        fsio.atomic_write_json(ws.member_dir(i) / "record.json", rec.to_dict())
    log = AuditLog.open(ws.member_dir(0) / "audit.jsonl")
    log.append("start", {"mode": "fresh", "generation": 0, "frame": 0, "hyperparameters": {"learning_rate": 3e-4}})
    log.append(
        "decision",
        _decision(
            excluded={"1": "window has 0 episodes < min_episodes=8"},
            me=make_record(0, [-100.0] * 8, frame=2000).to_dict(),
        ),
    )
    return ws


def test_last_decision_entry_scans_back_over_big_entries_and_a_torn_tail(tmp_path):
    log = AuditLog.open(tmp_path / "audit.jsonl")
    log.append("decision", _decision(reasons=("first",)))
    log.append("decision", _decision(reasons=("newest",), padding="x" * (3 * TAIL_CHUNK)))
    for _ in range(20):
        log.append("warning", {"message": "y" * 5000})
    with open(tmp_path / "audit.jsonl", "ab") as fh:
        fh.write(b'{"kind":"decision","decision":{"outcome":"exploit"')  # a crash mid-append
    entry = last_decision_entry(tmp_path / "audit.jsonl")
    assert entry["decision"]["reasons"] == ["newest"]
    assert last_decision_entry(tmp_path / "missing.jsonl") is None


def test_decision_in_words_names_left_out_and_unreadable_peers():
    words = decision_in_words(
        _decision(
            excluded={"2": "stale heartbeat 900s", "10": "window has 0 episodes"},
            unreadable={"3": "record.json: not valid JSON"},
        )
    )
    assert words == (
        "keep: 1 compatible live members with evidence < min_members=2; "
        "left out 010: window has 0 episodes; left out 002: stale heartbeat 900s; "
        "unreadable 003: record.json: not valid JSON"
    )
    assert decision_in_words(_decision("exploit", donor=4, reasons=("bottom 25%",))) == "exploit <- 004: bottom 25%"
    assert decision_in_words(None, "keep: warm-up") == "keep: warm-up"


def test_frame_rate_from_checkpoint_times_and_heartbeat_and_eta(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for frame, t in ((1000, 100.0), (2000, 110.0), (2000, 110.5)):  # the last: an exploit's recipient copy
        p = folder / checkpoint_name(1 if t > 110 else 0, frame)
        p.write_bytes(b"x")
        os.utime(p, (t, t))
    assert recent_frame_rate(tmp_path) == pytest.approx(1000 / 10.5)
    assert recent_frame_rate(tmp_path, 3000, 120.0) == pytest.approx(100.0)
    assert recent_frame_rate(tmp_path / "nothing") is None
    assert recent_frame_rate(tmp_path / "nothing", 10, 5.0) is None
    assert eta_seconds(3000, 5000, 100.0) == pytest.approx(20.0)
    assert eta_seconds(6000, 5000, 100.0) == 0.0
    assert eta_seconds(3000, 5000, None) is None and eta_seconds(3000, None, 100.0) is None


def test_target_is_where_rl_games_stops_and_round_trips(tmp_path):
    assert target_frames(100, -1, 2048) == 204800
    assert target_frames(-1, 50000, 2048) == 50000
    assert target_frames(100, 50000, 2048) == 50000
    assert target_frames(-1, -1, 2048) is None and target_frames(None, None, None) is None
    assert read_target(tmp_path) is None
    write_target(tmp_path, 204800)
    assert read_target(tmp_path) == 204800
    (tmp_path / "target.json").write_text('{"target_frames": "lots"}')
    assert read_target(tmp_path) is None
    write_target(tmp_path, None)
    assert not (tmp_path / "target.json").exists()


def _member(**kw):
    m = {
        "member": 0,
        "state": "ok",
        "frame": 3000,
        "generation": 1,
        "objective_mean": -100.0,
        "objective_std": 8.2,
        "episodes": 3,
        "evidence_generation": 1,
        "heartbeat_age_s": 4.0,
        "status": "running",
        "stale": False,
        "last_decision": "keep: x",
        "target_frames": 12000,
        "frames_per_s": 150.0,
        "eta_s": 60.0,
        "decision": "keep: x; left out 001: window has 0 episodes",
    }
    m.update(kw)
    return m


def test_render_status_is_a_pure_table_with_target_rate_eta_and_reasons():
    data = {
        "workspace": "/ws",
        "population": {"num_policies": 2, "objective": "episode_return", "task": "T"},
        "members": [
            _member(),
            _member(member=1, target_frames=None, frames_per_s=None, eta_s=None, status="finished", decision=""),
            {"member": 2, "state": "unreadable", "error": "record.json: not valid JSON"},
        ],
    }
    lines = render_status(data)
    assert lines[0] == "workspace /ws: 2 members, objective episode_return, task T"
    assert lines[1].split()[:2] == ["member", "frames"] and "ETA" in lines[1] and "frames/s" in lines[1]
    assert lines[2].split()[:3] == ["000", "3000/12000", "(25%)"]
    assert "1m00s" in lines[2] and "150" in lines[2] and lines[2].endswith("left out 001: window has 0 episodes")
    assert lines[3].split()[1] == "3000" and lines[3].endswith("keep: x")
    assert lines[4] == "002  unreadable: record.json: not valid JSON"
    assert render_status(data) == lines
    assert all(len(l) <= 60 for l in render_status(data, width=60)[1:4])


def test_watch_refreshes_count_times_with_the_interval_between(ws):
    calls: list[float] = []
    built = []

    def make_data():
        built.append(1)
        return {
            "workspace": str(ws.root),
            "population": None,
            "now": 1000.0 + len(built),
            "members": [_member(frame=1000 * len(built))],
        }

    out = io.StringIO()
    assert watch(ws, make_data, 2.5, 3, stream=out, sleep=calls.append) == 0
    assert calls == [2.5, 2.5] and len(built) == 3
    text = out.getvalue()
    assert [l.split()[1] for l in text.splitlines() if l.startswith("000 ")] == [
        "1000/12000",
        "2000/12000",
        "3000/12000",
    ]
    assert "refresh 3/3" in text and "\x1b[" not in text  # not a terminal: no screen clearing


def test_status_watch_cli_reads_the_workspace_each_refresh(ws, capsys):
    code = cli.main(["status", str(ws.root), "--watch", "--count", "2", "--interval", "0", "--target-frames", "6000"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = [l for l in out.splitlines() if l.startswith("000 ")]
    assert len(rows) == 2 and "3000/6000 (50%)" in rows[0]
    write_target(ws.member_dir(1), 4000)  # a member's own target wins over --target-frames
    cli.main(["status", str(ws.root), "--target-frames", "6000"])
    assert "3000/4000 (75%)" in [l for l in capsys.readouterr().out.splitlines() if l.startswith("001 ")][0]
    assert "left out 001: window has 0 episodes < min_episodes=8" in rows[0]
    code = cli.main(["status", str(ws.root), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["members"][0]["decision"].startswith("keep: 1 compatible") and data["members"][1]["eta_s"] is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--watch", "--count", "0"], "--count must be >= 1"),
        (["--count", "2"], "only apply with --watch"),
        (["--watch", "--interval", "-1"], "--interval must be >= 0"),
        (["--watch", "--json"], "do not combine"),
        (["--target-frames", "0"], "--target-frames must be >= 1"),
    ],
)
def test_status_watch_bad_options_exit_2(ws, capsys, argv, message):
    assert cli.main(["status", str(ws.root), *argv]) == 2
    assert message in capsys.readouterr().err


def test_progress_lines_show_target_and_reason_with_excluded_peers(ws):
    write_target(ws.member_dir(0), 12000)  # what the member publishes at start
    lines = progress_lines(ws.root, [0, 1], target_frames=6000)
    assert lines[0].startswith("member 000 frames 3k/12k | gen 0")
    assert "left out 001: window has 0 episodes < min_episodes=8" in lines[0]
    assert lines[1].startswith("member 001 frames 3k/6k") and lines[1].endswith("last: keep: 1 compatible live members")


# ----------------------------------------------------------------------------- report


def test_report_escapes_every_workspace_text(tmp_path, make_record, capsys):
    ws = Workspace(tmp_path / "ws")
    evil = "<script>alert(1)</script>"
    ws.ensure(num_policies=2, objective="episode_return", task=evil)
    ws.member_dir(0).mkdir(parents=True)
    rec = make_record(0, [-1.0, -2.0], hyperparameters={"lr<b>$x$": 1e-3})
    fsio.atomic_write_json(ws.member_dir(0) / "record.json", rec.to_dict())
    ws.member_dir(1).mkdir(parents=True)  # no audit log: the report shows the record's own last decision
    fsio.atomic_write_json(
        ws.member_dir(1) / "record.json",
        make_record(1, [-3.0], last_decision='keep: <img src=x onerror="alert(2)">').to_dict(),
    )
    log = AuditLog.open(ws.member_dir(0) / "audit.jsonl")
    log.append("start", {"mode": "fresh", "generation": 0, "frame": 0, "hyperparameters": {"lr<b>$x$": 1e-3}})
    log.append(
        "decision", _decision(reasons=("</td><script>alert(3)</script>",), excluded={"1": "<b>&"}, me=rec.to_dict())
    )
    (ws.root / "evaluations.jsonl").write_text(
        json.dumps({"objective": 5.5, "member": 0, "checkpoint": evil}) + "\nnot json\n"
    )
    out = tmp_path / "r.html"
    assert cli.main(["report", str(ws.root), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "evaluations.jsonl:2: not valid JSON" in err
    page = out.read_text()
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page
    assert "&lt;/td&gt;&lt;script&gt;alert(3)" in page and "1: &lt;b&gt;&amp;" in page
    assert "5.5" in page and "1 evaluation(s)" in page  # the best held-out result is in the summary


def test_report_of_a_workspace_without_logs_or_records(tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=3, objective="episode_return")
    ws.member_dir(0).mkdir(parents=True)
    (ws.member_dir(1)).mkdir(parents=True)
    (ws.member_dir(1) / "record.json").write_text("{trunc")
    out = tmp_path / "r.html"
    png = tmp_path / "png"
    assert cli.main(["report", str(ws.root), "--out", str(out), "--png", str(png)]) == 0
    page = out.read_text()
    assert 'id="member-000"' in page and 'id="member-001"' in page and "not valid JSON" in page
    assert "no completed-episode evidence recorded yet" in page and "No decisions yet." in page
    assert sorted(p.name for p in png.iterdir()) == ["hyperparameters.png", "lineage.png", "objective.png"]


def test_report_bad_arguments_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=1, objective="episode_return")
    assert cli.main(["report", str(ws.root), "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert cli.main(["report", str(ws.root), "--max-decisions", "-1"]) == 2


def test_replay_bad_member_exit_2(tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=1, objective="episode_return")
    ws.member_dir(0).mkdir(parents=True)
    assert cli.main(["replay", str(ws.root), "--member", "5"]) == 2
    assert "member 5 has no folder" in capsys.readouterr().err
    assert cli.main(["replay", str(ws.root), "--member", "0"]) == 2
    assert "has not started yet" in capsys.readouterr().err


def test_diverse_start_is_shown_by_lineage_status_and_the_report(tmp_path, capsys):
    """An ``initial_draw`` entry (the diverse start) is generation 0's row in ``lineage``, the decision column of
    ``status`` until the first decision, and a row of the report's decision table (not counted as a decision)."""
    import dataclasses

    from async_pbt_isaaclab.commands.lineage_view import lineage_data
    from async_pbt_isaaclab.commands.population_history import member_history
    from async_pbt_isaaclab.commands.status_view import start_draw_in_words
    from async_pbt_isaaclab.core.config import PopulationConfig
    from async_pbt_isaaclab.core.decision.mutation import default_spec
    from async_pbt_isaaclab.core.decision.start import initial_draw
    from async_pbt_isaaclab.core.state.member_rng import MemberRng

    ws = Workspace(tmp_path / "ws")
    ws.ensure(2, "episode_return")
    spec = dataclasses.replace(default_spec("entropy_coef"), from_zero=1e-3)
    cfg = dataclasses.replace(
        PopulationConfig(), mutation={"learning_rate": default_spec("learning_rate"), "entropy_coef": spec}
    )
    for member in (0, 1):
        step = initial_draw(
            member, {"learning_rate": 3e-4, "entropy_coef": 0.0}, cfg, MemberRng.for_member(1, member).get_state()
        )
        log = AuditLog.open(ws.member_dir(member) / "audit.jsonl")
        log.append("initial_draw", step.audit_body(member, cfg))
        log.append("start", {"mode": "fresh", "generation": 0, "hyperparameters": step.new_hyperparameters})
    assert start_draw_in_words(ws.member_dir(0) / "audit.jsonl") == "diverse start: yaml values kept (reference member)"
    words = start_draw_in_words(ws.member_dir(1) / "audit.jsonl")
    assert words.startswith("diverse start: entropy_coef 0 -> ") and "(from 0)" in words and "learning_rate" in words
    assert [m["initial"]["kind"] for m in lineage_data(ws)] == ["initial_draw", "initial_draw"]
    assert cli.main(["lineage", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert out.count("diverse start (drawn)") == 2 and "(from 0)" in out and "reference member" in out
    rows = member_history(ws, 1)["decisions"]
    assert [r["outcome"] for r in rows] == ["diverse start"] and rows[0]["changes"]
    page = tmp_path / "r.html"
    assert cli.main(["report", str(ws.root), "--out", str(page)]) == 0
    html = page.read_text()
    assert html.count("diverse start") >= 2 and "reference member" in html


def test_report_against_independent_runs_and_mutations_told_apart(tmp_path):
    """Real workspaces (tests/data: written by release 0.1.0 members): a population and a set of independent runs
    at equal frames; the hyperparameter steps say which keys the explore strategy mutated."""
    from async_pbt_isaaclab.commands.population_history import population_history
    from async_pbt_isaaclab.commands.report_plots import _curve

    data = Path(__file__).resolve().parent / "data" / "workspace_0_1_0"
    out, png = tmp_path / "r.html", tmp_path / "png"
    argv = ["report", str(data / "inprocess"), "--independent", str(data / "restart"), "--out", str(out)]
    assert cli.main([*argv, "--png", str(png)]) == 0
    page = out.read_text()
    assert 'id="against-independent-runs"' in page and "independent: best of 2 runs" in page
    assert "baseline.png" in {p.name for p in png.iterdir()}
    # The curves: at each frame, the best (or median) member's latest window mean at or before it.
    members = [
        {"objective": [{"frame": 10, "mean": -5.0}, {"frame": 30, "mean": -1.0}]},
        {"objective": [{"frame": 20, "mean": -3.0}]},
        {"objective": [{"frame": 20, "mean": -9.0}]},
    ]
    assert _curve(members, [5, 10, 20, 30], "best")[1:] == [-5.0, -3.0, -1.0]
    assert _curve(members, [20, 30], "median") == [-5.0, -3.0]
    # Member 1 exploited member 0: its generation change lists exactly the keys its decision mutated.
    history = population_history(Workspace(data / "inprocess"), 0.0)
    recipient = next(m for m in history["members"] if m["member"] == 1)
    change = next(s for s in recipient["hyperparameters"] if s["generation"] == 1)
    decided = [e for e in recipient["events"] if e.get("state") == "applied"][0]["changes"]
    assert change["mutated"] == sorted(c["key"] for c in decided) and change["mutated"]


def test_generation_changes_count_what_they_name_and_read_only_what_was_appended(tmp_path):
    from async_pbt_isaaclab.core.workspace.member_progress import generation_changes

    path = tmp_path / "audit.jsonl"
    assert generation_changes(2, path).words() == "generations: 0 (no exploit or explore yet)"
    log = AuditLog.open(path)
    log.append("decision", {"decision": {"outcome": "exploit", "donor": 0}})  # decided, not applied: not counted
    log.append("exploit_applied", {"donor": 0, "path": "inprocess", "generation": 1, "frame": 10})
    assert generation_changes(2, path).words() == "generations: 1 (1 exploit, 0 explores; 1 in-process, 0 by restart)"
    log.append("exploit_applied", {"donor": 2, "path": "restart", "generation": 2, "frame": 20})
    with open(path, "a") as fh:
        fh.write('{"kind": "exploit_applied", "donor": 1, "pa')  # a line still being written
    changes = generation_changes(2, path)
    assert (changes.exploits_inprocess, changes.explores_restart, changes.total, changes.restarts) == (1, 1, 2, 1)
    assert changes.breakdown() == "1 exploit, 1 explore; 1 in-process, 1 by restart"


def test_report_counts_changes_decided_while_a_peer_had_not_settled(tmp_path, make_record):
    """The cascade the study found in its audit logs, counted where a user looks: a member compared with one peer
    because two others had just changed generation exploits as "the worst 1 of 2". The decision is the real step's
    audit body; with ``unsettled_fill_worst`` the same view keeps, and nothing is counted."""
    from dataclasses import replace

    from async_pbt_isaaclab.commands.population_history import population_history
    from async_pbt_isaaclab.core.decision.step import PopulationView, pbt_step
    from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
    from async_pbt_isaaclab.core.state.member_rng import MemberRng

    now = time.time()

    def rec(member, mean, unsettled=False):
        r = make_record(member, [mean - 0.5, mean + 0.5] * 8, now=now, frame=100_000)
        return replace(r, generation=1, generation_start_frame=99_500) if unsettled else r

    records = [rec(0, 500.0), rec(1, 300.0, True), rec(2, 1100.0), rec(3, 400.0, True)]
    view = PopulationView(me=records[0], peers=tuple(records[1:]), now=now)
    for fill, expected in ((False, "1 of 1 exploits and explores decided (those peers"), (True, "0 of 0 exploits")):
        cfg = population_config_from_dict(
            {"interval_steps": 1000, "min_episodes": 8, "window": 16, "unsettled_fill_worst": fill}
        )
        ws = Workspace(tmp_path / f"ws{fill}")
        ws.ensure(num_policies=4, objective="episode_return", task="t")
        ws.member_dir(0).mkdir(parents=True)
        step = pbt_step(view, cfg, MemberRng(0).get_state())
        AuditLog.open(ws.member_dir(0) / "audit.jsonl").append("decision", step.audit_body(view, cfg))
        summary = population_history(ws, now)["summary"]
        decided = (summary["changes_decided"], summary["changes_decided_with_unsettled_peers"])
        assert decided == ((1, 1) if not fill else (0, 0)), (fill, step.decision.reasons)
        out = tmp_path / f"r{fill}.html"
        assert cli.main(["report", str(ws.root), "--out", str(out)]) == 0
        page = out.read_text()
        assert f"decided while a peer's new generation had not settled</td><td>{expected}" in page
