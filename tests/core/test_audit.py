"""Audit log and verifier (async_pbt_isaaclab.core.workspace.audit).

The log is built from real decisions: records -> pbt_step -> audit_body -> append, as a
member does it. What is shown here:
1. a chain of keep / exploit / explore decisions (and the facts around them) verifies clean;
2. an edited entry (a number changed, JSON still valid) is caught as a hash mismatch; if the forger
   also recomputes every hash, the verifier still catches it because the decision does not reproduce;
3. the verifier replays the exploit's mutation: edited new hyperparameters, changes or RNG after-state
   are caught;
4. a deleted middle entry and reordered entries are caught;
5. a torn last line (crash mid-append) is reported, moved to ``.torn`` on open, and appending continues
   with a clean chain.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from async_pbt_isaaclab.core.decision.selection import Outcome
from async_pbt_isaaclab.core.decision.step import PopulationView, pbt_step
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.workspace.audit import GENESIS, AuditLog, entry_hash, genesis_hash
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log

NOW = 1_700_000_000.0


def _cfg(rule="dexpbt", policy_idx=0):
    return population_config_from_dict(
        {
            "enabled": True,
            "num_policies": 4,
            "policy_idx": policy_idx,
            "interval_steps": 1000,
            "rule": rule,
            "min_episodes": 8,
            "window": 16,
            "mutation_rate": 0.8,
            "mutation": {
                "agent.params.config.learning_rate": "mutate_float",
                "gamma": "mutate_discount",
                "mini_epochs": {"kind": "int", "low": 1, "high": 8, "step": 2},
            },
        }
    )


def _population(make_record, means, now=NOW):
    hps = [
        {"learning_rate": 3e-4 * (i + 1), "gamma": 0.99 - 0.001 * i, "mini_epochs": 4 + i} for i in range(len(means))
    ]
    return [
        make_record(i, [m + (0.5 if k % 2 else -0.5) for k in range(16)], now=now, frame=10_000, hyperparameters=hps[i])
        for i, m in enumerate(means)
    ]


def _log_step(log, me, recs, cfg, rng, now):
    """What a member does at a decision point: one PBT step, written ahead."""
    view = PopulationView(me, tuple(recs), now, {3: "bad json"})
    step = pbt_step(view, cfg, rng.get_state())
    rng.set_state(step.rng_after)
    log.append("decision", step.audit_body(view, cfg), now=now)
    return step


def _log_decision(log, me, recs, cfg, rng, now):
    return _log_step(log, me, recs, cfg, rng, now).decision


def _applied_body(step, me):
    """The ``exploit_applied`` body a member writes when it carries out ``step`` (rl_games/observer.py)."""
    d = step.decision
    source = d.donor_entry if d.donor is not None else None
    donor = (
        {
            "donor": d.donor,
            "donor_generation": source.generation,
            "donor_checkpoint": source.checkpoint,
            "donor_sha256": source.checkpoint_sha256,
            "donor_frame": source.frame,
        }
        if source
        else {
            "donor": me.member,
            "donor_generation": me.generation,
            "donor_checkpoint": me.checkpoint,
            "donor_sha256": me.checkpoint_sha256,
            "donor_frame": me.frame,
        }
    )
    return {
        "checkpoint": f"members/{me.member:03d}/checkpoints/g{me.generation + 1:04d}_f{me.frame:012d}.pth",
        "sha256": "ab" * 32,
        "generation": me.generation + 1,
        "frame": me.frame,
        "hyperparameters": dict(step.new_hyperparameters),
        "changes": [c.to_dict() for c in step.changes],
        "last_lr": step.new_hyperparameters.get("learning_rate", 3e-4),
        "path": "restart",
        "path_reason": "exploit_mode: restart",
        "pid": 4242,
        "process_starts": 2,
        **donor,
    }


@pytest.fixture
def chain(tmp_path, make_record):
    """A member-0 log with start, keep, exploit (+ applied), and an isaaclab explore, in the workspace ``tmp_path``
    (its chain begins at member 0's genesis there)."""
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    ws = Workspace(tmp_path)
    population = ws.population_id(ws.ensure(4, "episode_return"))
    path = tmp_path / "members" / "000" / "audit.jsonl"
    log = AuditLog.open(path, genesis=genesis_hash(population, 0))
    rng = MemberRng(1_000_003)
    log.append("start", {"argv": ["train.py", "--pbt-index", "0"], "generation": 0}, now=NOW - 100)

    recs = _population(make_record, [20.0, 10.0, 30.0, 25.0])
    d_keep = _log_decision(log, recs[0], recs, _cfg(), rng, NOW)

    recs = _population(make_record, [0.0, 10.0, 30.0, 25.0], now=NOW + 60)
    s_exploit = _log_step(log, recs[0], recs, _cfg(), rng, NOW + 60)
    d_exploit = s_exploit.decision
    log.append("exploit_applied", _applied_body(s_exploit, recs[0]), now=NOW + 61)

    recs = _population(make_record, [0.0, 10.0, 10.0, 10.0], now=NOW + 120)
    cfg_il = population_config_from_dict(dict(_cfg("isaaclab").selection_dict(), threshold_abs=3.0))
    d_explore = _log_decision(log, recs[0], recs, cfg_il, rng, NOW + 120)

    outcomes = [d_keep.outcome, d_exploit.outcome, d_explore.outcome]
    assert outcomes == [Outcome.KEEP, Outcome.EXPLOIT, Outcome.EXPLORE], outcomes
    return path


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path, entries, rehash=False):
    if rehash:  # a forger who recomputes the whole chain
        prev = entries[0]["prev_hash"]
        for e in entries:
            e["prev_hash"] = prev
            e["hash"] = entry_hash(prev, e)
            prev = e["hash"]
    path.write_text("".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n" for e in entries))


def _problems_at(problems, seq):
    return [p.problem for p in problems if p.seq == seq]


def test_chain_of_real_decisions_verifies(chain):
    count, problems = verify_log(chain)
    assert count == 5 and problems == []
    entries = _lines(chain)
    assert [e["seq"] for e in entries] == [0, 1, 2, 3, 4]
    assert entries[0]["prev_hash"] == genesis_hash(
        json.loads((chain.parents[2] / "population.json").read_text())["id"], 0
    )
    assert entries[0]["prev_hash"] != GENESIS
    exploit = entries[2]
    assert exploit["decision"]["outcome"] == "exploit" and exploit["decision"]["donor"] == 2
    assert exploit["changes"], "the exploit mutated something (mutation_rate 0.8, three keys)"
    assert exploit["rng_before"] != exploit["rng_after"]
    assert exploit["inputs"]["unreadable_peers"] == {"3": "bad json"}


def test_appending_after_reopen_continues_the_chain(chain, make_record):
    log = AuditLog.open(chain)
    assert log.last_seq == 4
    log.append("stop", {"reason": "max_epochs"})
    count, problems = verify_log(chain)
    assert count == 6 and problems == []


def test_edited_number_is_a_hash_mismatch(chain):
    text = chain.read_text().splitlines()
    # Change one digit of the donor's published mean evidence in the exploit entry; JSON stays valid.
    entry = json.loads(text[2])
    entry["inputs"]["peers"][2]["evidence"]["values"][0] = 29.0
    text[2] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    chain.write_text("\n".join(text) + "\n")
    count, problems = verify_log(chain)
    assert count == 5
    assert any("hash mismatch" in p for p in _problems_at(problems, 2))
    assert all(p.seq == 2 for p in problems)  # the rest of the chain is intact


def test_forged_and_rehashed_decision_does_not_reproduce(chain):
    entries = _lines(chain)
    # Pretend member 2 (the donor) was the worst: the recorded exploit no longer follows from the inputs.
    for rec in entries[2]["inputs"]["peers"]:
        if rec["member"] == 2:
            rec["history"][-1]["mean"] = -50.0
    _write(chain, entries, rehash=True)
    _, problems = verify_log(chain)
    texts = _problems_at(problems, 2)
    assert texts and all("decision does not reproduce" in p for p in texts)
    assert any("decision.donor" in p or "decision.outcome" in p for p in texts)
    assert not any("hash" in p for p in texts)  # the forger fixed the hashes; replay still caught it


@pytest.mark.parametrize(
    "field, expected",
    [
        ("new_hyperparameters", "new_hyperparameters"),
        ("changes", "changes"),
        ("rng_after", "rng_after"),
        ("rng_before", "rng_after"),
        ("start_hyperparameters", "_hyperparameters"),
    ],
)
def test_verifier_replays_mutation_and_rng(chain, field, expected):
    entries = _lines(chain)
    e = entries[2]
    if field in ("new_hyperparameters", "start_hyperparameters"):
        e[field]["learning_rate"] = e[field]["learning_rate"] * 1.5
    elif field == "changes":
        e[field][0]["new"] = 123.0
    else:
        e[field]["state"] += 1
    _write(chain, entries, rehash=True)
    _, problems = verify_log(chain)
    texts = _problems_at(problems, 2)
    assert any(expected in p for p in texts), texts


def test_forged_explore_is_caught(chain):
    entries = _lines(chain)
    e = entries[4]
    assert e["decision"]["outcome"] == "explore"
    e["decision"]["outcome"] = "keep"
    _write(chain, entries, rehash=True)
    _, problems = verify_log(chain)
    assert any("decision.outcome" in p for p in _problems_at(problems, 4))


def test_deleted_middle_entry_is_caught(chain):
    lines = chain.read_text().splitlines(keepends=True)
    del lines[2]
    chain.write_text("".join(lines))
    count, problems = verify_log(chain)
    assert count == 4
    texts = _problems_at(problems, 3)
    assert any("sequence number 3, expected 2" in p for p in texts)
    assert any("chain broken" in p for p in texts)


def test_reordered_entries_are_caught(chain):
    lines = chain.read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    chain.write_text("".join(lines))
    _, problems = verify_log(chain)
    assert any("chain broken" in p.problem for p in problems)
    assert any("sequence number" in p.problem for p in problems)


def test_torn_last_line_is_moved_aside_and_appending_continues(chain):
    good = chain.read_bytes()
    half = good.splitlines(keepends=True)[2][:150]
    chain.write_bytes(good + half)  # crash in the middle of appending a sixth entry

    _, problems = verify_log(chain)
    assert any("torn line" in p.problem for p in problems)

    log = AuditLog.open(chain)
    assert log.last_seq == 4
    torn = chain.with_name("audit.jsonl.torn")
    assert torn.read_bytes() == half + b"\n"
    assert chain.read_bytes() == good
    log.append("stop", {"generation": 1})
    count, problems = verify_log(chain)
    assert count == 6 and problems == []


def test_unknown_entry_kind_is_refused(chain):
    log = AuditLog.open(chain)
    with pytest.raises(ValueError, match="kind"):
        log.append("oops", {})
    assert verify_log(chain) == (5, [])


def test_unreplayable_decision_is_reported(chain):
    entries = _lines(chain)
    entries[1]["config"]["rule"] = "no_such_rule"
    _write(chain, entries, rehash=True)
    _, problems = verify_log(chain)
    assert any("cannot be replayed" in p for p in _problems_at(problems, 1))


def test_a_decision_with_unsettled_peers_in_the_worst_group_replays(tmp_path, make_record):
    """``unsettled_fill_worst`` is recorded with the decision and replayed: the keep it decided reproduces, and the
    same entry read with the key off (what the member would have decided without it) does not."""
    log = AuditLog.open(tmp_path / "audit.jsonl")
    recs = _population(make_record, [0.0, 10.0, 30.0, 25.0])
    for i in (1, 3):  # just changed generation: their newest entries are of generation 0
        recs[i] = dataclasses.replace(recs[i], generation=1, generation_start_frame=9_000)
    cfg = population_config_from_dict(dict(_cfg().selection_dict(), unsettled_fill_worst=True))
    decision = _log_decision(log, recs[0], recs, cfg, MemberRng(7), NOW)
    assert decision.outcome is Outcome.KEEP and "unsettled peers [1, 3]" in decision.reasons[-1]
    assert verify_log(log.path) == (1, [])
    entries = _lines(log.path)
    assert entries[0]["config"]["unsettled_fill_worst"] is True
    entries[0]["config"]["unsettled_fill_worst"] = False
    _write(log.path, entries, rehash=True)
    _, problems = verify_log(log.path)
    assert any("decision does not reproduce" in p for p in _problems_at(problems, 0)), problems


def test_a_decision_recorded_before_unsettled_fill_worst_replays_with_it_off(tmp_path, make_record):
    """Entries written before the key existed were decided with the worst group a fraction of the compared members
    alone: read without the key they replay with it off, though the default is now on (which would keep here)."""
    log = AuditLog.open(tmp_path / "audit.jsonl")
    recs = _population(make_record, [0.0, 10.0, 30.0, 25.0])
    for i in (1, 3):
        recs[i] = dataclasses.replace(recs[i], generation=1, generation_start_frame=9_000)
    cfg = population_config_from_dict(dict(_cfg().selection_dict(), unsettled_fill_worst=False))
    decision = _log_decision(log, recs[0], recs, cfg, MemberRng(7), NOW)
    assert decision.outcome is not Outcome.KEEP and "worst 1 of 2" in decision.reasons[-1]
    entries = _lines(log.path)
    del entries[0]["config"]["unsettled_fill_worst"]
    _write(log.path, entries, rehash=True)
    assert verify_log(log.path) == (1, [])


@pytest.mark.parametrize("key, value", [("protect_reference", True), ("freeze_at_frame", 10_000)])
def test_a_member_kept_by_a_later_key_replays_with_the_key_only(tmp_path, make_record, key, value):
    """Member 0, the worst, keeps under ``protect_reference`` (it is the reference) or ``freeze_at_frame`` (it has
    reached it, at frame 10,000): its entry replays, and read as an entry written before the key (which replays
    with it off) it does not."""
    log = AuditLog.open(tmp_path / "audit.jsonl")
    recs = _population(make_record, [0.0, 10.0, 30.0, 25.0])
    cfg = population_config_from_dict(dict(_cfg().selection_dict(), **{key: value}))
    decision = _log_decision(log, recs[0], recs, cfg, MemberRng(7), NOW)
    assert decision.outcome is Outcome.KEEP and decision.reasons[-1].startswith(key), decision.reasons
    assert verify_log(log.path) == (1, [])
    entries = _lines(log.path)
    del entries[0]["config"][key]
    _write(log.path, entries, rehash=True)
    assert any("decision does not reproduce" in p for p in _problems_at(verify_log(log.path)[1], 0))


def _out_of_restarts(make_record):
    """Member 3 has used its ``max_restarts`` and ranks last: under ``mutation_semantics`` 4 it holds no slot of the
    worst group, so member 0 (second last) acts; under 3 it held the slot and member 0 kept."""
    recs = _population(make_record, [5.0, 30.0, 25.0, 0.0])
    recs[3] = dataclasses.replace(recs[3], restarts=2)
    return recs, dict(max_restarts=2), 4


def _finished_long_ago(make_record):
    """Member 1 finished long ago (heartbeat 10,000 s old): under 5 member 0 compares with it and copies it; under 4
    it was stale and member 0, alone, kept."""
    recs = _population(make_record, [0.0, 30.0])
    recs[1] = dataclasses.replace(recs[1], status="finished", heartbeat=NOW - 10_000.0)
    return recs, {}, 5


@pytest.mark.parametrize("population", [_out_of_restarts, _finished_long_ago], ids=lambda f: f.__name__.strip("_"))
def test_a_decision_replays_under_the_rules_it_was_written_with(tmp_path, make_record, population):
    """A change of selection rules is a new ``mutation_semantics``: an entry written under the new one replays as
    the act it was, one written before as the keep it was, and neither reproduces read under the other's."""
    recs, overrides, version = population(make_record)
    cfg = population_config_from_dict(dict(_cfg().selection_dict(), **overrides))
    view = PopulationView(recs[0], tuple(recs), NOW, {})
    for semantics, other, acts in ((version, version - 1, True), (version - 1, version, False)):
        step = pbt_step(view, cfg, MemberRng(7).get_state(), semantics=semantics)
        assert step.acts is acts, (semantics, step.decision.reasons)
        body = step.audit_body(view, cfg)
        body["mutation_semantics"] = semantics
        log = AuditLog.open(tmp_path / f"audit{semantics}.jsonl")
        log.append("decision", body, now=NOW)
        assert verify_log(log.path) == (1, []), semantics
        # Read under the other version's rules, the same entry does not reproduce.
        entries = _lines(log.path)
        entries[0]["mutation_semantics"] = other
        _write(log.path, entries, rehash=True)
        assert any("decision does not reproduce" in p for p in _problems_at(verify_log(log.path)[1], 0)), semantics


def test_json_garbage_line_is_reported(chain):
    with open(chain, "ab") as fh:
        fh.write(b"not json\n")
    count, problems = verify_log(chain)
    assert count == 5 and any("not valid JSON" in p.problem and p.line == 6 for p in problems)


def test_fixture_rule_decision_replays_without_the_env_var(tmp_path, make_record, monkeypatch):
    monkeypatch.setenv("ASYNC_PBT_TEST_FIXTURE", "fixture_forced_exploit")
    cfg = population_config_from_dict(dict(_cfg().selection_dict(), rule="fixture_forced_exploit", policy_idx=1))
    recs = _population(make_record, [5.0, 1.0, 2.0, 3.0])
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(path)
    d = _log_decision(log, recs[1], recs, cfg, MemberRng(5), NOW)
    assert d.outcome is Outcome.EXPLOIT and d.donor == 0
    monkeypatch.delenv("ASYNC_PBT_TEST_FIXTURE")
    assert verify_log(path) == (1, [])


def test_decision_record_holds_every_input(chain):
    e = _lines(chain)[2]
    assert set(e) >= {
        "inputs",
        "config",
        "rng_before",
        "decision",
        "start_hyperparameters",
        "new_hyperparameters",
        "changes",
        "rng_after",
        "hash",
        "prev_hash",
        "seq",
        "time",
        "kind",
    }
    assert {p["member"] for p in e["inputs"]["peers"]} == {0, 1, 2, 3}
    assert e["config"]["rule"] == "dexpbt" and e["config"]["mutation"]["gamma"]["kind"] == "discount"
    assert e["start_hyperparameters"] == e["inputs"]["peers"][2]["hyperparameters"]  # from the donor


def test_verifier_follows_the_rng_stream_across_entries(chain):
    """A member whose state.json was deleted restarts its RNG: its next start does not continue the stream."""
    entries = _lines(chain)
    last_rng = next(e for e in reversed(entries) if e["kind"] == "decision")["rng_after"]
    log = AuditLog.open(chain)
    log.append("start", {"argv": [], "generation": 1, "rng_state": last_rng}, now=NOW + 500)
    assert verify_log(chain)[1] == []
    log.append("start", {"argv": [], "generation": 1, "rng_state": MemberRng(1_000_003).get_state()}, now=NOW + 600)
    _, problems = verify_log(chain)
    assert len(problems) == 1 and "RNG stream broken" in problems[0].problem


def test_initial_mutation_is_replayed(tmp_path):
    from async_pbt_isaaclab.core.decision.step import initial_step

    cfg = _cfg(policy_idx=2)
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(path)
    start = {"learning_rate": 3e-4, "gamma": 0.99, "mini_epochs": 4}
    step = initial_step(2, start, cfg, MemberRng(7).get_state())
    assert step.new_hyperparameters != start and {c.key for c in step.changes} <= set(start)
    assert initial_step(0, start, cfg, MemberRng(7).get_state()).new_hyperparameters == start  # member 0 keeps
    log.append("initial_mutation", step.audit_body(2, cfg))
    log.append("start", {"rng_state": step.rng_after})
    assert verify_log(path)[1] == []
    entries = _lines(path)
    entries[0]["new_hyperparameters"]["gamma"] = 0.5
    _write(path, entries, rehash=True)
    assert any("initial mutation does not reproduce" in p.problem for p in verify_log(path)[1])


# ----------------------------------------------------------------------------- applied exploits match decisions
@pytest.mark.parametrize(
    "field, forged",
    [
        ("donor", 3),
        ("donor_checkpoint", "members/003/checkpoints/g0000_f000000010000.pth"),
        ("donor_sha256", "cd" * 32),
        ("donor_generation", 7),
        ("generation", 5),
        ("hyperparameters", {"learning_rate": 1.0, "gamma": 0.9, "mini_epochs": 2}),
    ],
)
def test_applied_exploit_must_match_its_decision(chain, field, forged):
    entries = _lines(chain)
    applied = entries[3]
    assert applied["kind"] == "exploit_applied" and applied[field] != forged
    applied[field] = forged
    _write(chain, entries, rehash=True)  # a consistent chain: only the match with the decision can catch it
    _, problems = verify_log(chain)
    texts = _problems_at(problems, 3)
    assert len(problems) == 1 and texts[0].startswith(f"applied exploit does not match its decision: {field}:"), (
        problems
    )
    assert "seq 2" in texts[0]


def test_applied_explore_matches_and_applied_without_decision_is_caught(chain, make_record):
    entries = _lines(chain)
    explore = entries[4]
    recs = _population(make_record, [0.0, 10.0, 10.0, 10.0], now=NOW + 120)
    cfg_il = population_config_from_dict(dict(_cfg("isaaclab").selection_dict(), threshold_abs=3.0))
    step = pbt_step(PopulationView(recs[0], tuple(recs), NOW + 120, {3: "bad json"}), cfg_il, explore["rng_before"])
    assert step.rng_after == explore["rng_after"] and step.decision.outcome is Outcome.EXPLORE
    log = AuditLog.open(chain)
    body = _applied_body(step, recs[0])
    assert body["donor"] == 0 and body["donor_checkpoint"] == recs[0].checkpoint  # its own weights
    log.append("exploit_applied", body)
    log.append("exploit_applied", body)  # killed before state.json was saved: applied again at the next start
    assert verify_log(chain)[1] == []
    log.append("exploit_aborted", {"donor": None, "reason": "training ends this epoch"})
    log.append("exploit_applied", body)  # nothing decided it any more
    _, problems = verify_log(chain)
    assert [p.seq for p in problems] == [8] and "no exploit or explore decision precedes it" in problems[0].problem


def test_applied_exploit_after_a_keep_is_caught(chain, make_record):
    recs = _population(make_record, [20.0, 10.0, 30.0, 25.0], now=NOW + 200)
    log = AuditLog.open(chain)
    rng = MemberRng(0)
    rng.set_state(_lines(chain)[-1]["rng_after"])
    keep = _log_step(log, recs[0], recs, _cfg(), rng, NOW + 200)
    assert keep.decision.outcome is Outcome.KEEP
    applied = {k: v for k, v in _lines(chain)[3].items() if k not in ("seq", "time", "kind", "prev_hash", "hash")}
    log.append("exploit_applied", applied)  # the earlier exploit's body, replayed after a keep
    _, problems = verify_log(chain)
    assert [p.seq for p in problems] == [6] and "no exploit or explore decision" in problems[0].problem


# ----------------------------------------------------------------------------- chain head kept in state.json
def _head(path):
    log = AuditLog.open(path)
    return {"seq": log.last_seq, "hash": log.last_hash}


def test_entries_cut_from_the_end_are_caught_by_the_recorded_head(chain):
    head = _head(chain)
    assert verify_log(chain, head) == (5, [])
    lines = chain.read_text().splitlines(keepends=True)
    chain.write_text("".join(lines[:3]))  # the explore decision and the applied exploit... gone
    count, problems = verify_log(chain)
    assert count == 3 and problems == []  # the chain alone is intact: a shorter valid chain
    _, problems = verify_log(chain, head)
    assert len(problems) == 1 and "log ends at seq 2 but state.json records seq 4" in problems[0].problem
    assert "removed from the end" in problems[0].problem


def test_rewritten_tail_is_caught_by_the_recorded_head(chain):
    head = _head(chain)
    entries = _lines(chain)
    entries[4]["time"] += 1.0  # the forger rehashes, so the chain is consistent again
    _write(chain, entries, rehash=True)
    assert verify_log(chain)[1] == []
    _, problems = verify_log(chain, head)
    assert [p.seq for p in problems] == [4] and "the log was rewritten" in problems[0].problem


def test_audit_command_reports_truncation_against_state_json(tmp_path, chain, capsys):
    from async_pbt_isaaclab import cli
    from async_pbt_isaaclab.core.state.member_state import AuditHead, MemberState
    from async_pbt_isaaclab.core.workspace.layout import Workspace
    from async_pbt_isaaclab.core.workspace.state_files import load_state, save_state

    ws = Workspace(tmp_path)
    ws.ensure(4, "episode_return")
    state_path = ws.member_dir(0) / "state.json"
    save_state(state_path, MemberState(member=0, audit_head=AuditHead(**_head(chain))))
    assert load_state(state_path).audit_head.seq == 4
    assert cli.main(["audit", str(ws.root)]) == 0
    capsys.readouterr()
    chain.write_text("".join(chain.read_text().splitlines(keepends=True)[:4]))
    assert cli.main(["audit", str(ws.root)]) == 1
    out = capsys.readouterr().out
    assert "log ends at seq 3 but state.json records seq 4" in out and "FAILED for member(s) 000" in out
    chain.unlink()
    assert cli.main(["audit", str(ws.root)]) == 1
    out = capsys.readouterr().out
    assert "log missing" in out and "records seq 4" in out


def test_state_without_audit_head_still_loads(tmp_path):
    """A state.json written before the head was recorded (same schema version) loads, with no head."""
    from async_pbt_isaaclab.core.state.member_state import MemberState
    from async_pbt_isaaclab.core.state.records import RecordError
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    data = MemberState(member=2).to_dict()
    del data["audit_head"]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    assert load_state(path).audit_head is None
    path.write_text(json.dumps(dict(data, audit_head={"seq": "4", "hash": "x"})))
    with pytest.raises(RecordError, match="audit_head"):
        load_state(path)


def test_member_start_records_the_head_and_truncation_is_reported(tmp_path, capsys, start_pendulum_member):
    """Real member starts (claim, start entry, state.json saved): the head follows the log; cutting the last
    start entry is what `async-pbt audit` then reports."""
    from async_pbt_isaaclab import cli
    from async_pbt_isaaclab.core.workspace.state_files import load_state

    for _ in range(2):
        session = start_pendulum_member(tmp_path, {"learning_rate": "mutate_float"})
    log = session.dir / "audit.jsonl"
    entries = _lines(log)
    # The diverse start is drawn at the first start only; the second start (a resume) draws nothing.
    assert [e["kind"] for e in entries] == ["initial_draw", "start", "start"]
    assert load_state(session.dir / "state.json").audit_head.to_dict() == {"seq": 2, "hash": entries[-1]["hash"]}
    assert cli.main(["audit", str(session.ws.root)]) == 0
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:2]))
    capsys.readouterr()
    assert cli.main(["audit", str(session.ws.root)]) == 1
    assert "log ends at seq 1 but state.json records seq 2" in capsys.readouterr().out


def test_an_explore_that_changes_nothing_is_a_keep_and_replays(tmp_path, make_record, monkeypatch):
    """mutation_rate 0, min_mutated_keys 0: the proposal changes nothing, so no new generation: a keep whose reason says
    so, its draws consumed and recorded; the verifier replays it; an entry without ``mutation_semantics`` (0.1.x)
    replays as the explore it was then."""
    monkeypatch.setenv("ASYNC_PBT_TEST_FIXTURE", "fixture_explore_every_decision")
    raw = dict(
        _cfg().selection_dict(),
        rule="fixture_explore_every_decision",
        policy_idx=1,
        mutation_rate=0.0,
        min_mutated_keys=0,
    )
    cfg = population_config_from_dict(raw)
    recs = _population(make_record, [5.0, 1.0, 2.0, 3.0])
    path = tmp_path / "audit.jsonl"
    log = AuditLog.open(path)
    rng = MemberRng(5)
    before = rng.get_state()
    step = _log_step(log, recs[1], recs, cfg, rng, NOW)
    assert step.decision.outcome is Outcome.KEEP and not step.acts
    assert step.decision.reasons[-1].startswith("the explore changed nothing")
    assert step.changes == () and step.new_hyperparameters is None
    assert step.rng_after != before  # the mutation's draws stay consumed
    monkeypatch.delenv("ASYNC_PBT_TEST_FIXTURE")
    assert verify_log(path) == (1, [])

    # The same inputs written by 0.1.x (an explore with no changes): replayed with 0.1.x's semantics.
    old = pbt_step(PopulationView(recs[1], tuple(recs), NOW, {3: "bad json"}), cfg, before, semantics=1)
    assert old.decision.outcome is Outcome.EXPLORE and old.changes == ()
    body = old.audit_body(PopulationView(recs[1], tuple(recs), NOW, {3: "bad json"}), cfg)
    del body["mutation_semantics"]
    legacy_log = AuditLog.open(tmp_path / "legacy.jsonl")
    legacy_log.append("decision", body, now=NOW)
    assert verify_log(tmp_path / "legacy.jsonl") == (1, [])


def test_a_publish_failed_entry_verifies_with_its_error_and_is_reported_without_one(chain):
    log = AuditLog.open(chain)
    log.append("publish_failed", {"error": "BackgroundWriteError: writing state.json: disk full", "lost": []})
    log.append("stop", {"status": "stopped", "frame": 0})
    assert verify_log(chain)[1] == []
    log.append("publish_failed", {"error": "", "lost": []})
    assert _problems_at(verify_log(chain)[1], 7) == ["publish_failed entry without the error that failed the write"]
