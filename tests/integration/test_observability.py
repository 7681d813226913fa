"""What a user sees of a real population: the HTML report in a real headless Chromium, the PNGs, the status
table and the replay schedule, all from two real CPU members (rl_games PPO on Pendulum-v1) with one forced
exploit and a real exec restart, as in test_cpu_exploit.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from async_pbt_isaaclab.core.state.schedule import values_at
from async_pbt_isaaclab.core.workspace.state_files import load_schedule

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def population(forced_exploit_population):
    """The restart population test_cpu_exploit.py reads too (run once a session: tests/integration/conftest.py)."""
    root, ws, _ = forced_exploit_population("restart")
    return root, ws


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", *args], capture_output=True, text=True, timeout=1200
    )


@pytest.fixture(scope="module")
def report(population, tmp_path_factory):
    _, ws = population
    folder = tmp_path_factory.mktemp("report")  # the shared population's folders are only read
    out, png = folder / "report.html", folder / "png"
    proc = _cli("report", str(ws), "--out", str(out), "--png", str(png))
    assert proc.returncode == 0, proc.stderr
    return out, png


def test_report_is_one_self_contained_file(report):
    out, _ = report
    page = out.read_text()
    assert page.count("<svg") >= 3
    # Opens offline: every reference is inside the page (#id or data:), no script, stylesheet link or import.
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page)
    assert refs and all(r.startswith(("#", "data:")) for r in refs), [r for r in refs if not r.startswith("#")]
    for needle in ("<script", "<link", "@import", "url(http", "<iframe"):
        assert needle not in page, needle


def test_png_files_are_real_images_of_every_plot(report):
    import matplotlib.image as mpimg

    _, png = report
    for name in ("objective", "lineage", "hyperparameters"):
        img = mpimg.imread(png / f"{name}.png")
        assert img.shape[0] > 200 and img.shape[1] > 400, name
        assert img[..., :3].std() > 0.01, f"{name}.png is blank"


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it)",
)
def test_report_renders_in_headless_chromium_without_errors(report, population, tmp_path):
    from playwright import sync_api

    out, _ = report
    _, ws = population
    problems: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on(
            "console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(out.as_uri())
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        members = sorted(int(d.name) for d in (ws / "members").iterdir())
        for m in members:
            row = page.locator(f"#member-{m:03d}")
            assert row.count() == 1, f"member {m} is not in the members table"
            assert f"member {m:03d}" in row.inner_text()
        plots = page.locator(".plot svg")
        assert plots.count() == 3
        for i in range(3):
            box = plots.nth(i).bounding_box()
            assert box and box["width"] > 400 and box["height"] > 150, f"plot {i} has no size: {box}"
        # Member labels are text in the SVG (legend, lineage axis), not only pixels.
        svg_text = page.locator("#objective-over-frames svg").text_content()
        assert all(f"member {m:03d}" in svg_text for m in members)
        exploits = page.locator("#lineage table").inner_text()
        assert "exploit" in exploits and "member 0 gen 0" in exploits
        decisions = page.locator("#decisions table").inner_text()
        assert "forced exploit of member 0" in decisions
        summary = page.locator("#summary").inner_text()
        assert "exploits applied\t1" in summary and "no held-out evaluations" in summary
        browser.close()
    assert problems == []
    assert all(u.startswith("file://") for u in requests), requests
    assert shot.stat().st_size > 50_000


def test_status_shows_frames_reason_and_rate(population):
    _, ws = population
    proc = _cli("status", str(ws), "--watch", "--count", "2", "--interval", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("refresh ") == 2
    rows = [l for l in proc.stdout.splitlines() if l.startswith("000 ")]
    assert len(rows) == 2
    # Each member published its target (max_iterations x 2048 frames) and reached it.
    assert "28672/28672 (100%)" in rows[0] and "finished" in rows[0]
    assert "20480/20480 (100%)" in [l for l in proc.stdout.splitlines() if l.startswith("001 ")][0]
    # Member 0 decided with member 1 left out while 1 had no evidence after its restart; the reason is spelled out.
    proc = _cli("status", str(ws), "--json")
    data = json.loads(proc.stdout)
    by = {m["member"]: m for m in data["members"]}
    assert by[0]["frames_per_s"] > 0 and by[1]["decision"].startswith("keep")


def test_replay_schedule_follows_the_exploit_back_to_the_donor(population, tmp_path):
    _, ws = population
    out = tmp_path / "schedule.yaml"
    proc = _cli("replay", str(ws), "--member", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    schedule = load_schedule(out)
    applied = [
        json.loads(l)
        for l in (ws / "members/001/audit.jsonl").read_text().splitlines()
        if json.loads(l)["kind"] == "exploit_applied"
    ]
    # Member 0's first start entry (after its diverse start's initial_draw: the reference keeps the yaml).
    start0 = next(
        e for e in map(json.loads, (ws / "members/000/audit.jsonl").read_text().splitlines()) if e["kind"] == "start"
    )
    assert len(applied) == 1
    first, exploit = schedule.steps
    # Before the exploit, member 1's weights are member 0's: member 0's start values from frame 0 ...
    assert (first.frame, first.member, first.source) == (0, 0, "start")
    assert first.values == start0["hyperparameters"]
    # ... up to the donor checkpoint's frame, where member 1's mutated values take over.
    assert (exploit.frame, exploit.member, exploit.source) == (applied[0]["donor_frame"], 1, "exploit")
    assert exploit.values == applied[0]["hyperparameters"]
    assert values_at(schedule, exploit.frame - 1) == start0["hyperparameters"]
    assert values_at(schedule, exploit.frame) == applied[0]["hyperparameters"]
    proc = _cli("replay", str(ws), "--member", "1", "--frame", "0", "--json")
    assert json.loads(proc.stdout)["values"] == start0["hyperparameters"]


def test_member_logs_live_inside_the_workspace_by_default(population):
    # The population's members were started as docs/launch.md shows (no --train-dir), from the folder above the
    # workspace: rl_games' TensorBoard runs land in WORKSPACE/runs, not in the folder they were started from.
    root, ws = population
    for member in (0, 1):
        assert list((ws / "runs" / f"pendulum_ppo_pbt_{member:03d}" / "summaries").glob("events.out.tfevents.*"))
    assert not (root / "runs").exists()


def test_replayed_run_applies_every_change_at_the_recorded_frame(population, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleStep, dump_schedule

    _, ws = population
    exported = tmp_path / "exported.yaml"
    assert _cli("replay", str(ws), "--member", "1", "--out", str(exported)).returncode == 0
    lineage = load_schedule(exported)
    # The lineage's own steps, plus e_clip (which rl_games logs as info/e_clip every epoch) and a step that falls
    # inside an epoch (epochs start at multiples of 16 envs x 128 steps = 2048 frames).
    steps = [
        ScheduleStep(s.frame, dict(s.values, e_clip=0.2 + 0.05 * i), s.member, s.member_frame, s.generation, s.source)
        for i, s in enumerate(lineage.steps)
    ]
    inside = steps[-1].frame + 1000
    steps.append(ScheduleStep(inside, dict(steps[-1].values, e_clip=0.35), 1, 0, 1, "explore"))
    schedule = Schedule(1, tuple(steps))
    path = tmp_path / "schedule.yaml"
    path.write_text(dump_schedule(schedule))
    iterations = inside // 2048 + 2
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "async_pbt_isaaclab.examples.cpu_member",
            "--pbt-replay",
            str(path),
            "--max_iterations",
            str(iterations),
            "--num_envs",
            "16",
            "--train-dir",
            str(tmp_path / "runs"),
            "agent.params.config.horizon_length=128",
            "agent.params.config.mini_epochs=2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = tmp_path / "runs" / "pendulum_ppo_replay_001" / "summaries"
    acc = EventAccumulator(str(summaries))
    acc.Reload()
    scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
    epochs = sorted(scalars["info/e_clip"])
    assert epochs == [2048 * i for i in range(iterations)]
    # Each step governs the first epoch starting at or after its frame, and every later one until the next step.
    for frame in epochs:
        step = max((s for s in schedule.steps if s.frame <= frame), key=lambda s: s.frame)
        assert scalars["info/e_clip"][frame] == pytest.approx(step.values["e_clip"]), frame
    first_epoch_at = {s.frame: min(e for e in epochs if e >= s.frame) for s in schedule.steps}
    assert sorted(scalars["pbt/hp/e_clip"]) == sorted(set(first_epoch_at.values()))
    exploit = lineage.steps[1]
    for key, value in exploit.values.items():
        assert scalars[f"pbt/hp/{key}"][first_epoch_at[exploit.frame]] == pytest.approx(value)
    assert f"[async-pbt] replay: frame {first_epoch_at[exploit.frame]}:" in proc.stdout


def test_replay_refuses_a_schedule_it_cannot_follow(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: async-pbt-schedule/1\nmember: 0\nsteps:\n- {frame: 0, values: {warp_factor: 9}}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "async_pbt_isaaclab.examples.cpu_member",
            "--pbt-replay",
            str(bad),
            "--max_iterations",
            "1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 2
    assert "--pbt-replay" in proc.stderr and "warp_factor" in proc.stderr and str(bad) in proc.stderr


def test_members_write_pbt_scalars_continuous_across_the_exec_restart(population):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, ws = population
    summaries = ws / "runs" / "pendulum_ppo_pbt_001" / "summaries"
    assert len(list(summaries.glob("events.out.tfevents.*"))) == 2  # one per process image, one run folder
    acc = EventAccumulator(str(summaries))
    acc.Reload()
    s = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"] if t.startswith("pbt/")}
    applied = [
        json.loads(l)
        for l in (ws / "members/001/audit.jsonl").read_text().splitlines()
        if json.loads(l)["kind"] == "exploit_applied"
    ][0]
    assert s["pbt/exploit"] == [(applied["frame"], 0.0)]  # donor index 0, at the frame of the exploit
    gens = s["pbt/generation"]
    assert [f for f, _ in gens] == sorted(f for f, _ in gens), "frames never go backwards across the restart"
    # From the decision on (one epoch, 2,048 frames, before it is carried out) the record names the next
    # generation, so no peer copies the old one.
    assert {g for f, g in gens if f < applied["frame"] - 2048} == {0.0}
    assert {g for f, g in gens if f > applied["frame"]} == {1.0}
    record = json.loads((ws / "members/001/record.json").read_text())
    # The last interval's publish is logged (at most one interval, 4,096 frames, before the end); the final record
    # is written after training ends.
    assert record["frame"] - 4096 <= gens[-1][0] <= record["frame"] and gens[-1][1] == 1.0
    lr = dict(s["pbt/hp/learning_rate"])
    # The record publishes the live rate: the applied one first, then what the adaptive schedule makes of it.
    assert any(
        v == pytest.approx(applied["hyperparameters"]["learning_rate"]) for f, v in lr.items() if f >= applied["frame"]
    )
    # Before it, the rate member 1 started with: its diverse start's draw.
    start1 = next(
        e for e in map(json.loads, (ws / "members/001/audit.jsonl").read_text().splitlines()) if e["kind"] == "start"
    )
    assert min(lr) < applied["frame"] and lr[min(lr)] == pytest.approx(start1["hyperparameters"]["learning_rate"])
    assert all(n > 0 for _, n in s["pbt/objective_count"][-1:]) and s["pbt/objective_mean"]
