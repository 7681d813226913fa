"""``scripts/benchmarks/replaced_draws.py``: the changes selection made to generation-0 draws (copies and explores in
place), read from a study's population audit logs (entries written by the real decision code) beside its sweep's
hand-over."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from async_pbt_isaaclab.core.decision.step import PopulationView, pbt_step
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace.audit import AuditLog

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmarks" / "replaced_draws.py"
NOW = 1_700_000_000.0
INTERVAL = 1000
CONDITION = ConditionLabel(task="t", objective="episode_return")  # make_record's default condition
HP = {"learning_rate": 1e-3}


def _record(make_record, member: int, means: list[float], spread: float, generation: int = 0) -> MemberRecord:
    """A record (the ``make_record`` fixture's) with window means at frames 1000, 2000, ...; the newest window's 16
    episodes alternate ``mean -/+ spread``."""
    history = tuple(
        HistoryEntry(
            (i + 1) * INTERVAL,
            generation,
            mean,
            1.0,
            16,
            CONDITION,
            f"members/{member:03d}/checkpoints/g{generation:04d}_f{(i + 1) * INTERVAL:012d}.pth",
            "%064x" % (100 * member + i),
            dict(HP),
        )
        for i, mean in enumerate(means)
    )
    values = [means[-1] + spread * (1 if i % 2 else -1) for i in range(16)]
    return make_record(
        member, values, now=NOW, generation=generation, frame=history[-1].frame, hyperparameters=HP, history=history
    )


def _decide(me: MemberRecord, peers: list[MemberRecord], log: Path, rule: str = "dexpbt") -> str:
    """Runs the real decision for ``me`` under ``rule`` and appends its audit entry to ``log``; returns its outcome."""
    cfg = population_config_from_dict(
        {
            "rule": rule,
            "num_policies": 4,
            "interval_steps": INTERVAL,
            "min_episodes": 8,
            "window": 16,
            "mutation": {"learning_rate": "mutate_float"},
        }
    )
    view = PopulationView(me, tuple(peers), NOW)
    body = pbt_step(view, cfg, MemberRng(5).get_state()).audit_body(view, cfg)
    log.parent.mkdir(parents=True, exist_ok=True)
    AuditLog.open(log).append("decision", body, now=NOW)
    return body["decision"]["outcome"]


def _handover(sweep_finals: list[float], population: float) -> dict:
    members = {str(m): {"report": r} for m, r in enumerate(sweep_finals)}
    best = max(members, key=lambda m: members[m]["report"])
    return {
        "population": {"report": population},
        "sweep": {"members": members, "picked": best, "report": members[best]["report"], "episodes": 64},
    }


@pytest.fixture
def study(tmp_path, make_record) -> Path:
    """A study folder of one seed: member 0, at its draw and climbing 100 a window, copies a flat donor 600 ahead;
    member 1, ahead, keeps; member 2, already a generation on, copies too (not a draw, so not counted); member 3, at
    its draw 10 behind, explores in place (too small a gap to copy)."""
    out = tmp_path / "study"
    members = out / "seed0" / "population" / "members"
    ahead = [_record(make_record, m, [-100.0] * 4, 1.0) for m in (1, 2, 3)]
    climbing = _record(make_record, 0, [-1000.0, -900.0, -800.0, -700.0], 50.0)
    assert _decide(climbing, ahead, members / "000" / "audit.jsonl") == "exploit"
    assert _decide(ahead[0], [climbing, *ahead[1:]], members / "001" / "audit.jsonl") == "keep"
    copied_before = _record(make_record, 2, [-1000.0, -900.0, -800.0, -700.0], 50.0, generation=1)
    assert _decide(copied_before, [ahead[0], ahead[2], climbing], members / "002" / "audit.jsonl") == "exploit"
    close = _record(make_record, 3, [-110.0] * 4, 50.0)
    assert _decide(close, ahead[:2], members / "003" / "audit.jsonl") == "explore"
    # Member 0's twin in the sweep ended best of four; the population ended below it.
    results = {"seeds": {"0": {"final_handover": _handover([-150.0, -200.0, -250.0, -400.0], -300.0)}}}
    (out / "results.json").write_text(json.dumps(results))
    return out


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_changes_of_draws_are_read_with_their_twins_their_gaps_and_their_climb(study):
    proc = _run(study, "--verbose")
    assert proc.returncode == 0, proc.stderr
    # The gaps in standard errors from the windows built above: the gap over sqrt(s_me^2/16 + s_donor^2/16), s_me the
    # sample std of 16 values at -/+ 50, s_donor the donor's recorded 1.0.
    copy_z, explore_z = (gap / math.sqrt(50.0**2 * 16 / 15 / 16 + 1.0 / 16) for gap in (600.0, 10.0))
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{study}: 2 changes of a generation-0 draw"
    assert lines[1].strip() == (
        f"seed 0 member 0 frame 4000: copied from 1, gap {copy_z:.1f} standard errors, faster True; twin rank 1, "
        "seed missed"
    )
    assert lines[2].strip() == (
        f"seed 0 member 3 frame 4000: explored in place, gap {explore_z:.1f} standard errors, faster None; twin "
        "rank 4, seed missed"
    )
    assert lines[3].strip() == (
        f"sweep rank 1: 1 copies, 0 explores in place (1 in seeds the population missed); gap of the copies "
        f"{copy_z:.1f}-{copy_z:.1f} standard errors (median {copy_z:.1f}); improving faster than the donor 1 of 1"
    )
    assert lines[4].strip() == (
        "sweep rank 4: 0 copies, 1 explores in place (1 in seeds the population missed); gap of the copies -; "
        "improving faster than the donor 0 of 0"
    )


def test_a_copy_under_welch_is_read_with_its_p_value(study, make_record):
    """``rule: welch`` records the test's p-value, not a gap: that is what is printed for its copies."""
    log = study / "seed0" / "population" / "members" / "000" / "audit.jsonl"
    log.unlink()
    ahead = [_record(make_record, m, [-100.0] * 4, 1.0) for m in (1, 2, 3)]
    assert (
        _decide(_record(make_record, 0, [-1000.0, -900.0, -800.0, -700.0], 50.0), ahead, log, rule="welch") == "exploit"
    )
    s_me = 50.0 * math.sqrt(16 / 15)
    p = stats.ttest_ind_from_stats(-100.0, 1.0, 16, -700.0, s_me, 16, equal_var=False, alternative="greater").pvalue
    proc = _run(study, "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert f"seed 0 member 0 frame 4000: copied from 1, Welch p {p:.2g}, faster True; twin rank 1" in proc.stdout


def test_a_later_handover_is_read_where_its_episodes_are_given(study):
    """``--episodes 64`` takes the figures of ``study_handover.py``'s ``handover_64.json``: there member 0's twin
    ended last, member 3's first, and the population above the sweep."""
    later = {"episodes": 64, "seeds": {"0": _handover([-400.0, -200.0, -250.0, -150.0], -100.0)}}
    (study / "handover_64.json").write_text(json.dumps(later))
    proc = _run(study, "--episodes", 64, "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert "faster True; twin rank 4\n" in proc.stdout and "faster None; twin rank 1\n" in proc.stdout
    assert "sweep rank 4: 1 copies, 0 explores in place (0 in seeds" in proc.stdout


def test_what_it_cannot_read_is_named(study, tmp_path):
    for args, said in (
        ((tmp_path / "absent",), "absent: not a folder"),
        ((tmp_path,), f"{tmp_path / 'results.json'}: a finished study's file is needed"),
        ((study, "--episodes", 8), "seed 0's hand-over played 64 episodes, not 8, and there is no handover_8.json"),
        ((study, "--slope-points", 1), "--slope-points 1: a slope needs at least 2"),
    ):
        proc = _run(*args)
        assert proc.returncode != 0 and said in proc.stderr, (args, proc.stderr)
    assert _run(study, "--episodes", 64).returncode == 0  # the study's own hand-over played 64
    results = json.loads((study / "results.json").read_text())
    del results["seeds"]["0"]["final_handover"]["sweep"]
    (study / "results.json").write_text(json.dumps(results))
    proc = _run(study)
    assert proc.returncode != 0 and f"{study}: seed 0 has no final hand-over of the sweep" in proc.stderr
    results["seeds"]["0"]["final_handover"] = _handover([-150.0, -200.0, -250.0, -400.0], -300.0)
    del results["seeds"]["0"]["final_handover"]["sweep"]["members"]["2"]["report"]
    (study / "results.json").write_text(json.dumps(results))
    proc = _run(study)
    assert proc.returncode != 0 and f"{study}: seed 0's final hand-over cannot be read (KeyError('report'))" in (
        proc.stderr
    )


def test_a_planted_link_is_not_followed(study, tmp_path):
    log = study / "seed0" / "population" / "members" / "000" / "audit.jsonl"
    target = tmp_path / "elsewhere.jsonl"
    log.rename(target)
    log.symlink_to(target)
    proc = _run(study)
    assert proc.returncode != 0 and f"{log}: cannot read it" in proc.stderr, proc.stderr
