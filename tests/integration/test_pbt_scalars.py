"""The ``pbt/*`` TensorBoard scalars docs/observability.md promises, read back from the event files of a real
four-member CPU population with every way a generation changes: an in-process exploit (member 1), an exploit by exec
restart (member 2), explores of own weights (member 3), and a resume of member 1 after the population finished
(``run_mixed_population``). Every value and frame is checked against the members' audit logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from async_pbt_isaaclab.testing.forced_exploit import MIXED_PATHS

pytestmark = pytest.mark.slow

EPOCH_FRAMES = 16 * 128
"""Frames of one epoch (16 envs x horizon 128)."""
KEYS = ("entropy_coef", "gamma", "learning_rate")
"""The mutated keys (tests/integration/conftest.py MUTATIONS)."""


def _audit(ws: Path, member: int) -> list[dict]:
    return [json.loads(line) for line in (ws / "members" / f"{member:03d}" / "audit.jsonl").read_text().splitlines()]


def _scalars(ws: Path, member: int) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(ws / "runs" / f"pendulum_ppo_pbt_{member:03d}" / "summaries"))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"] if t.startswith("pbt/")}


@pytest.fixture(scope="module")
def population(mixed_population):
    _, ws = mixed_population
    return ws, {m: _audit(ws, m) for m in MIXED_PATHS}, {m: _scalars(ws, m) for m in MIXED_PATHS}


def test_the_population_went_every_way(population):
    _, audits, _ = population
    applied = {m: [e for e in audit if e["kind"] == "exploit_applied"] for m, audit in audits.items()}
    assert applied[0] == []
    assert [(e["donor"], e["path"]) for e in applied[1]] == [(0, "inprocess")]
    assert [(e["donor"], e["path"], e["planned_path"]) for e in applied[2]] == [(0, "restart", "restart")]
    assert applied[3] and all(e["donor"] == 3 and e["path"] == "inprocess" for e in applied[3])
    assert [e["mode"] for e in audits[1] if e["kind"] == "start"] == ["fresh", "resume"]


@pytest.mark.parametrize("member", sorted(MIXED_PATHS))
def test_exploit_and_generation_at_the_frame_each_change_took_effect(population, member):
    _, audits, scalars = population
    s = scalars[member]
    applied = [e for e in audits[member] if e["kind"] == "exploit_applied"]
    # One pbt/exploit per change, on every path (also after the resume, which must not log it again): the donor,
    # -1 for an explore of own weights, at the lineage frame (the first frame the new generation trains).
    expected = [(e["frame"], float(-1 if e["donor"] == member else e["donor"])) for e in applied]
    assert s.get("pbt/exploit", []) == expected
    lineage = json.loads((population[0] / "members" / f"{member:03d}" / "state.json").read_text())["lineage"]
    assert [(e["frame"], e["generation"]) for e in lineage] == [(e["frame"], e["generation"]) for e in applied]
    gens = s["pbt/generation"]
    assert [f for f, _ in gens] == sorted(f for f, _ in gens)
    for frame, value in gens:
        assert value == sum(1 for e in applied if e["frame"] <= frame), (frame, value)
    for e in applied:
        assert (e["frame"], float(e["generation"])) in gens


@pytest.mark.parametrize("member", sorted(MIXED_PATHS))
def test_hyperparameters_every_epoch_as_the_agent_trains_with_them(population, member):
    _, audits, scalars = population
    s = scalars[member]
    end = max(e["frame"] for e in audits[member] if e["kind"] == "stop")
    epochs = list(range(0, end, EPOCH_FRAMES))
    start = next(e for e in audits[member] if e["kind"] == "start")
    applied = [e for e in audits[member] if e["kind"] == "exploit_applied"]
    for key in KEYS:
        values = dict(s[f"pbt/hp/{key}"])
        # Once per epoch at its start frame, where rl_games writes its own info/* of that epoch; resumed epochs too.
        assert [f for f, _ in s[f"pbt/hp/{key}"]] == epochs, key
        if key != "learning_rate":  # not moved by a schedule: the start value until the first change, then each
            for frame in epochs:
                in_force = [e["hyperparameters"] for e in applied if e["frame"] <= frame]
                want = in_force[-1][key] if in_force else start["hyperparameters"][key]
                assert values[frame] == pytest.approx(want, rel=1e-6), (key, frame)
    lr = dict(s["pbt/hp/learning_rate"])
    # The adaptive schedule moves the rate every epoch; at every start, change and resume it is the restored rate.
    assert lr[0] == pytest.approx(start["hyperparameters"]["learning_rate"], rel=1e-6)
    for e in audits[member]:
        if e["kind"] == "restored":
            assert lr[e["frame"]] == pytest.approx(e["last_lr"], rel=1e-6), e["mode"]
    for e in applied:
        assert lr[e["frame"]] == pytest.approx(e["last_lr"], rel=1e-6)


@pytest.mark.parametrize("member", sorted(MIXED_PATHS))
def test_objective_window_at_every_decision_is_the_one_decided_on(population, member):
    _, audits, scalars = population
    s = scalars[member]
    count, mean = dict(s["pbt/objective_count"]), dict(s["pbt/objective_mean"])
    decisions = [e for e in audits[member] if e["kind"] == "decision"]
    assert decisions
    for d in decisions:
        me = d["inputs"]["me"]
        values = me["evidence"]["values"]
        assert count[me["frame"]] == len(values), me["frame"]
        if values and me["evidence"]["generation"] == me["generation"]:
            assert mean[me["frame"]] == pytest.approx(sum(values) / len(values), rel=1e-5)


@pytest.mark.parametrize("member", sorted(MIXED_PATHS))
def test_the_workspace_copy_the_report_reads_equals_tensorboard(population, member):
    from async_pbt_isaaclab.commands.population_history import read_member_scalars
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws, _, scalars = population
    copy = read_member_scalars(Workspace(ws), member)
    tb = scalars[member]
    assert sorted(copy) == sorted(tb)
    for tag, points in tb.items():
        # TensorBoard keeps float32; one point per (frame, tag) write in both.
        assert [f for f, _ in copy[tag]] == [f for f, _ in points], tag
        assert [v for _, v in copy[tag]] == pytest.approx([v for _, v in points], rel=1e-6), tag


def test_report_draws_live_values_and_puts_every_marker_on_its_curve(population):
    from async_pbt_isaaclab.commands import report_objective, report_plots
    from async_pbt_isaaclab.commands.population_history import population_history
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws, audits, scalars = population
    data = population_history(Workspace(ws), 0.0)
    names, unchanged = report_plots.split_hyperparameters(data["members"])
    # entropy_coef is 0 in every member and stays 0 (a mutation keeps 0): one line of text, no panel.
    assert unchanged == {"entropy_coef": 0.0} and names == ["gamma", "learning_rate"]
    gamma_markers = 0
    for m in data["members"]:
        index = m["member"]
        live = report_plots.live_hyperparameters(m)
        # What the report plots is what the member trained with, every epoch (the adaptive rate's own moves too).
        assert [f for f, _ in live["learning_rate"]] == [f for f, _ in scalars[index]["pbt/hp/learning_rate"]]
        curve = report_objective.training_curve(m)
        # The curve is the member's own objective scalars (every publish and heartbeat: how many heartbeats fall
        # between two decisions depends on the machine's speed), so each decision's window is a point of it.
        logged = sorted(dict(scalars[index]["pbt/objective_mean"]).items())
        assert [p["frame"] for p in curve] == [f for f, _ in logged]
        assert [p["mean"] for p in curve] == pytest.approx([v for _, v in logged], rel=1e-6)
        decided = {d["inputs"]["me"]["frame"] for d in audits[index] if d["kind"] == "decision"}
        assert decided & {p["frame"] for p in curve}
        applied = [e for e in audits[index] if e["kind"] == "exploit_applied"]
        events = [e for e in m["events"] if e["state"] == "applied"]
        assert [(e["applied_frame"], e["generation"]) for e in events] == [
            (a["frame"], a["generation"]) for a in applied
        ]
        for e in events:
            decision = next(d for d in audits[index] if d.get("seq") == e["decision_seq"])
            assert e["decided_frame"] == decision["inputs"]["me"]["frame"] < e["applied_frame"]
            # The marker's height is the curve's at the applied frame: linear between the curve's own points.
            y = report_objective.on_curve(curve, e["applied_frame"])
            before = [p for p in curve if p["frame"] <= e["applied_frame"]][-1]
            after = next((p for p in curve if p["frame"] >= e["applied_frame"]), before)  # past the end: its last
            assert min(before["mean"], after["mean"]) <= y <= max(before["mean"], after["mean"])
            # A change marks gamma where gamma moved (a change may mutate other keys only: then it has no marker),
            # filled when the explore mutated it, hollow when it came with the donor.
            markers = {f: (v, mut) for f, v, mut in report_plots._change_markers(m, "gamma", live["gamma"])}
            earlier = [v for f, v in live["gamma"] if f < e["applied_frame"]]
            moved = not earlier or earlier[-1] != pytest.approx(e["hyperparameters"]["gamma"])
            mutated = any(c.get("key") == "gamma" for c in e.get("changes") or [])
            if moved:
                assert markers.get(e["applied_frame"]) == (pytest.approx(e["hyperparameters"]["gamma"]), mutated)
                gamma_markers += 1
            else:
                assert e["applied_frame"] not in markers
    # The members start diverse, so an exploit brings a donor's other gamma: markers were checked, not skipped.
    assert gamma_markers > 0


@pytest.mark.parametrize("member", sorted(MIXED_PATHS))
def test_the_last_objective_logged_is_the_final_record(population, member):
    """The member's last record (status finished) is logged too: TensorBoard and the workspace copy end where
    record.json does, not one publish earlier (member 3 explores at every decision: its last window may be empty)."""
    from async_pbt_isaaclab.commands.population_history import read_member_scalars
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws, _, scalars = population
    record = json.loads((ws / "members" / f"{member:03d}" / "record.json").read_text())
    assert record["status"] == "finished"
    copy = read_member_scalars(Workspace(ws), member)
    values = record["evidence"]["values"]
    for logged in (scalars[member], copy):
        assert logged["pbt/objective_count"][-1] == (record["frame"], len(values))
        if values and record["evidence"]["generation"] == record["generation"]:
            final = (record["frame"], pytest.approx(sum(values) / len(values), rel=1e-5))
            assert logged["pbt/objective_mean"][-1] == final
    assert member == 3 or values  # every other member ends with evidence
