"""The ``async-pbt`` command line: check-config, status, audit, best, lineage; and the config doc."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from async_pbt_isaaclab import cli
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import SUPPORTED_HYPERPARAMETERS
from async_pbt_isaaclab.core.decision.selection import Outcome
from async_pbt_isaaclab.core.decision.step import PopulationView, pbt_step
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.layout import Workspace, checkpoint_name

REPO = Path(__file__).resolve().parents[1]
SHA = "ab" * 32


# ----------------------------------------------------------------------------- helpers


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_module(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("ASYNC_PBT_TEST_FIXTURE", None)
    return subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=120,
    )


def agent_cfg(**pbt) -> dict:
    return {
        "params": {
            "network": {"name": "actor_critic"},
            "config": {
                "name": "pendulum_ppo",
                "learning_rate": 1e-3,
                "lr_schedule": "adaptive",
                "kl_threshold": 0.016,
                "gamma": 0.95,
                "entropy_coef": 0.0,
                "mini_epochs": 6,
                "train_dir": "runs",
            },
        },
        "pbt": {
            "enabled": True,
            "policy_idx": 1,
            "num_policies": 4,
            "interval_steps": 2048,
            "mutation": {
                "agent.params.config.learning_rate": "mutate_float",
                "agent.params.config.gamma": "mutate_discount",
                "mini_epochs": {"kind": "int", "low": 2, "high": 8, "step": 2},
            },
            **pbt,
        },
    }


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def record(
    member: int,
    mean: float,
    *,
    generation: int = 0,
    frame: int = 10_000,
    heartbeat: float | None = None,
    n: int = 8,
    last_decision: str = "",
    gen_start: int = 0,
) -> MemberRecord:
    values = tuple(mean + d for d in ([-1.0, 1.0] * (n // 2)))
    evidence = EvidenceSummary("episode_return", generation, values, n, 0)
    hparams = {"learning_rate": 1e-3 * (member + 1), "gamma": 0.95}
    ckpt = f"members/{member:03d}/checkpoints/{checkpoint_name(generation, frame)}"
    history = (
        HistoryEntry(
            frame, generation, evidence.mean, evidence.std, n, ConditionLabel(task="Pendulum-v1"), ckpt, SHA, hparams
        ),
    )
    return MemberRecord(
        member=member,
        generation=generation,
        frame=frame,
        generation_start_frame=gen_start,
        restarts=generation,
        heartbeat=time.time() if heartbeat is None else heartbeat,
        evidence=evidence,
        condition=ConditionLabel(task="Pendulum-v1"),
        hyperparameters=hparams,
        checkpoint=ckpt,
        checkpoint_sha256=SHA,
        last_decision=last_decision,
        history=history,
    )


def make_workspace(root: Path, means=(-200.0, -900.0, -300.0, -250.0)) -> Workspace:
    ws = Workspace(root)
    ws.ensure(num_policies=len(means), objective="episode_return", task="Pendulum-v1")
    for i, m in enumerate(means):
        ws.member_dir(i).mkdir(parents=True, exist_ok=True)
        fsio.atomic_write_json(ws.member_dir(i) / "record.json", record(i, m, last_decision="keep: warm-up").to_dict())
    return ws


def selection_cfg() -> PopulationConfig:
    return population_config_from_dict(
        {
            "enabled": True,
            "policy_idx": 1,
            "num_policies": 4,
            "interval_steps": 1000,
            "window": 8,
            "min_episodes": 4,
            "mutation_rate": 1.0,
            "mutation": {"learning_rate": "mutate_float", "gamma": "mutate_discount"},
        }
    )


def write_audit_chain(ws: Workspace, member: int = 1) -> Path:
    """start, a real exploit decision (replayable), then exploit_applied; the member is the worst. As a member writes
    it: the chain begins at the member's genesis in this workspace, and state.json records its head."""
    from async_pbt_isaaclab.core.state.member_state import AuditHead, MemberState
    from async_pbt_isaaclab.core.workspace.audit import genesis_hash
    from async_pbt_isaaclab.core.workspace.state_files import save_state

    cfg = selection_cfg()
    now = 1_700_000_000.0
    peers = [record(i, m, heartbeat=now - 5) for i, m in enumerate((-200.0, -900.0, -300.0, -250.0))]
    me = peers[member]
    view = PopulationView(me, tuple(peers), now)
    step = pbt_step(view, cfg, MemberRng(seed=cfg.resolved_mutation_seed()).get_state())
    decision, new, changes = step.decision, step.new_hyperparameters, step.changes
    assert decision.outcome is Outcome.EXPLOIT, decision
    assert changes
    path = ws.member_dir(member) / "audit.jsonl"
    population = ws.population_id(ws.population_meta())
    log = AuditLog.open(path, genesis=genesis_hash(population, member))
    log.append("start", {"mode": "fresh", "generation": 0, "pid": 1, "argv": ["train.py"]}, now=now - 100)
    log.append("decision", step.audit_body(view, cfg), now=now)
    log.append(
        "exploit_applied",
        {
            "generation": 1,
            "donor": decision.donor,
            "donor_generation": 0,
            "donor_checkpoint": peers[decision.donor].checkpoint,
            "donor_sha256": SHA,
            "donor_frame": decision.donor_entry.frame,
            "frame": me.frame,
            "hyperparameters": new,
            "changes": [c.to_dict() for c in changes],
        },
        now=now + 1,
    )
    head = AuditHead(log.last_seq, log.last_hash)
    save_state(ws.member_dir(member) / "state.json", MemberState(member=member, audit_head=head, population=population))
    return path


# ----------------------------------------------------------------------------- check-config


def test_check_config_shows_which_keys_the_diverse_start_draws(tmp_path, capsys):
    """A per-key ``diverse_start: false`` keeps the yaml value for every member; a value set on the command line is
    kept too (not replaced silently), unless its spec asks for the draw; the others are drawn."""
    data = agent_cfg()
    data["pbt"]["mutation"]["mini_epochs"]["diverse_start"] = False
    path = write_yaml(tmp_path / "agent.yaml", data)
    code, out, err = run_main(
        capsys, "check-config", str(path), "agent.params.config.learning_rate=3e-4", "--train-dir", str(tmp_path)
    )
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and "agent.params" in line}
    assert rows["mini_epochs"].endswith("kept (pbt.mutation.mini_epochs.diverse_start is false)")
    assert "kept (set on the command line" in rows["learning_rate"] and "3e-4" in out.replace("0.0003", "3e-4")
    assert rows["gamma"].endswith("drawn")
    forced, tmp = "pbt.mutation.learning_rate={kind: mutate_float, diverse_start: true}", tmp_path
    code, out, _ = run_main(
        capsys, "check-config", str(path), "agent.params.config.learning_rate=3e-4", forced, "--train-dir", str(tmp)
    )
    assert code == 0 and re.search(r"^  learning_rate .*drawn$", out, re.M)
    code, _, err = run_main(
        capsys, "check-config", str(path), "pbt.mutation.gamma={kind: discount, diverse_start: maybe}"
    )
    assert code == 2 and "pbt.mutation.gamma.diverse_start: expected true or false, got 'maybe'" in err


def test_check_config_valid_prints_effective_values(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg())
    code, out, err = run_main(capsys, "check-config", str(path), "--train-dir", str(tmp_path / "logs"))
    assert code == 0, err
    assert "population config is valid" in out
    for f in dataclasses.fields(PopulationConfig):
        assert re.search(rf"^  {f.name}\s", out, re.M), f"{f.name} missing from check-config output"
    # resolved defaults
    assert re.search(r"^  settle_max_steps\s+-1  -> no cap", out, re.M)
    assert re.search(r"^  max_frame_lag\s+-1  -> 16384 \(8 x interval_steps=2048", out, re.M)
    assert re.search(r"^  start_grace_frames\s+-1  -> 4096", out, re.M)
    assert "max_restarts" in out and "no limit" in out
    # resolved workspace path
    assert f"workspace: {tmp_path / 'logs' / 'pbt_workspace'}" in out
    # mutated hyperparameters with kind, bounds and the current value
    assert re.search(
        r"learning_rate\s+log_float\s+1e-06\s+0\.01\s+x\[1\.1, 2\]\s+0\.001\s+agent\.params\.config\.learning_rate", out
    )
    assert re.search(r"gamma\s+discount\s+0\.9\s+0\.9999\s+x\[1\.1, 1\.2\]\s+0\.95", out)
    assert re.search(r"mini_epochs\s+int\s+2\s+8\s+\+-1\.\.2\s+6", out)


def test_check_config_overrides_and_json(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg())
    code, out, err = run_main(
        capsys,
        "check-config",
        str(path),
        "agent.pbt.policy_idx=3",
        "pbt.workspace=/abs/ws",
        "agent.params.config.learning_rate=3e-4",
        "pbt.objective=episode.Episode_Reward/success",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["valid"] and data["config"]["policy_idx"] == 3
    assert data["workspace"] == "/abs/ws"
    assert data["resolved"]["mutation_seed"]["why"] == "the population seed with policy_idx=3"
    assert "population.json" in data["resolved"]["seed"]["why"]
    assert data["resolved"]["objective"]["value"] == "Episode_Reward/success"
    lr = next(h for h in data["hyperparameters"] if h["name"] == "learning_rate")
    assert lr["current"] == 3e-4 and lr["kind"] == "log_float" and lr["low"] == 1e-6


def test_check_config_workspace_default_train_dir(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg(directory=str(tmp_path / "root")))
    code, out, _ = run_main(capsys, "check-config", str(path))
    assert code == 0
    assert f"workspace: {tmp_path / 'root' / 'pbt_workspace'}" in out


def test_check_config_warns_out_of_bounds_start_value(tmp_path, capsys):
    cfg = agent_cfg()
    cfg["params"]["config"]["learning_rate"] = 0.5
    code, _, err = run_main(capsys, "check-config", str(write_yaml(tmp_path / "a.yaml", cfg)))
    assert code == 0
    assert "warning" in err and "learning_rate=0.5 is outside" in err and "stays there until" in err


def test_check_config_says_a_log_float_zero_stays_zero(tmp_path, capsys):
    cfg = agent_cfg(mutation={"entropy_coef": "mutate_float"})  # the yaml's entropy_coef is 0.0
    code, _, err = run_main(capsys, "check-config", str(write_yaml(tmp_path / "a.yaml", cfg)))
    assert code == 0
    assert "entropy_coef=0.0 is outside" in err and "from_zero" in err


@pytest.mark.parametrize(
    "pbt_changes, agent_changes, overrides, key",
    [
        ({"num_policies": 0}, {}, [], "pbt.num_policies"),
        ({"policy_idx": 7}, {}, [], "pbt.policy_idx"),
        ({"window": 8, "min_episodes": 16}, {}, [], "pbt.min_episodes"),
        ({"rule": "tournament"}, {}, [], "pbt.rule"),
        ({"rule": "fixture_forced_exploit"}, {}, [], "pbt.rule"),
        ({"bogus_key": 1}, {}, [], "pbt.bogus_key"),
        ({"change_range": [0.5, 2.0]}, {}, [], "pbt.change_range"),
        ({"mutation_rate": 1.5}, {}, [], "pbt.mutation_rate"),
        ({"interval_steps": "often"}, {}, [], "pbt.interval_steps"),
        (
            {"mutation": {"agent.params.config.minibatch_size": "mutate_float"}},
            {},
            [],
            "pbt.mutation.agent.params.config.minibatch_size",
        ),
        ({"mutation": {"horizon_length": "mutate_float"}}, {}, [], "pbt.mutation.horizon_length"),
        ({"mutation": {"learning_rate": "mutate_sideways"}}, {}, [], "pbt.mutation.learning_rate"),
        (
            {"mutation": {"learning_rate": {"kind": "log_float", "low": 0.1, "high": 0.01}}},
            {},
            [],
            "pbt.mutation.learning_rate",
        ),
        ({}, {"lr_schedule": "linear"}, [], "params.config.lr_schedule"),
        ({"mutation": {"kl_threshold": "mutate_float"}}, {"lr_schedule": "constant"}, [], "pbt.mutation.kl_threshold"),
        ({"mutation": {"tau": "mutate_discount"}}, {}, [], "params.config.tau"),
        ({}, {}, ["agent.params.nothere.x=1"], "params.nothere"),
        ({}, {}, ["agent.nope=1"], "nope"),
        ({}, {}, ["pbt.window=0"], "pbt.window"),
    ],
)
def test_check_config_invalid_exits_2_naming_file_and_key(
    tmp_path, capsys, monkeypatch, pbt_changes, agent_changes, overrides, key
):
    monkeypatch.delenv("ASYNC_PBT_TEST_FIXTURE", raising=False)
    cfg = agent_cfg(**pbt_changes)
    cfg["params"]["config"].update(agent_changes)
    path = write_yaml(tmp_path / "agent.yaml", cfg)
    code, out, err = run_main(capsys, "check-config", str(path), *overrides)
    assert code == 2
    assert out == ""
    # One problem: one line; several: a header and one indented line each. Each names where its value came from.
    lines = [l for l in err.splitlines() if l.startswith("  ")] or err.strip().splitlines()
    assert len(lines) == 1 or err.splitlines()[0].endswith(":"), err
    where = overrides[0] if overrides else str(path)
    key_lines = [l for l in lines if key in l]
    assert key_lines and all(where in l for l in key_lines), err


def test_check_config_blames_the_override_not_the_file_and_suggests_the_key(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg())
    code, _, err = run_main(capsys, "check-config", str(path), "agent.pbt.rule=foo")
    assert code == 2 and str(path) not in err and len(err.strip().splitlines()) == 1
    assert "the command line: pbt.rule: 'foo'" in err and "(from override agent.pbt.rule=foo)" in err
    # A typo in the file names the file and the closest key.
    path = write_yaml(tmp_path / "typo.yaml", agent_cfg(num_polices=4))
    code, _, err = run_main(capsys, "check-config", str(path))
    assert code == 2 and f"{path}: pbt.num_polices: unknown key; did you mean 'num_policies'?" in err
    # Both at once: the header names the file (some problem is from it), each line its own origin.
    code, _, err = run_main(capsys, "check-config", str(path), "pbt.window=0")
    assert code == 2 and f"invalid population config in {path}:" in err
    assert "pbt.window" in err and "(from override pbt.window=0)" in err and "did you mean 'num_policies'" in err


def test_a_flag_is_blamed_by_its_own_name():
    from async_pbt_isaaclab.core.agent_config import load_population_config
    from async_pbt_isaaclab.core.config import ConfigError
    from async_pbt_isaaclab.pbt_flags import add_population_args, population_flag_origins, population_overrides

    parser = argparse.ArgumentParser()
    add_population_args(parser)
    args = parser.parse_args(["--pbt-rule", "foo", "--pbt-members", "2"])
    with pytest.raises(ConfigError) as excinfo:
        load_population_config(
            agent_cfg(), population_overrides(args), source="agent.yaml", origins=population_flag_origins(args)
        )
    assert excinfo.value.source == "the command line"
    assert excinfo.value.problems == [
        "pbt.rule: 'foo' is not accepted; accepted: dexpbt, isaaclab, welch (from flag --pbt-rule foo)"
    ]


def test_check_config_reports_every_problem_at_once(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg(num_policies=0, window=0, rule="x"))
    code, _, err = run_main(capsys, "check-config", str(path))
    assert code == 2
    for key in ("pbt.num_policies", "pbt.window", "pbt.rule"):
        assert key in err


def test_check_config_missing_or_broken_file(tmp_path, capsys):
    code, _, err = run_main(capsys, "check-config", str(tmp_path / "nope.yaml"))
    assert code == 2 and "file not found" in err and "nope.yaml" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("pbt: [unclosed\n")
    code, _, err = run_main(capsys, "check-config", str(bad))
    assert code == 2 and "not valid YAML" in err and "bad.yaml" in err


def test_check_config_disabled_is_checked_as_if_enabled(tmp_path, capsys):
    cfg = agent_cfg(enabled=False)
    path = write_yaml(tmp_path / "agent.yaml", cfg)
    code, out, err = run_main(capsys, "check-config", str(path))
    assert code == 0 and "note: pbt.enabled is false" in out and "warning" not in err
    cfg["params"]["config"]["lr_schedule"] = "linear"
    code, _, err = run_main(capsys, "check-config", str(write_yaml(tmp_path / "agent.yaml", cfg)))
    assert code == 2 and "params.config.lr_schedule" in err


def test_check_config_example_yaml_with_overrides(capsys):
    example = REPO / "async_pbt_isaaclab" / "examples" / "pendulum_ppo.yaml"
    code, out, err = run_main(
        capsys,
        "check-config",
        str(example),
        "pbt.enabled=true",
        "pbt.num_policies=4",
        "pbt.mutation={learning_rate: mutate_float, entropy_coef: mutate_float}",
    )
    assert code == 0, err
    assert "entropy_coef" in out and "learning_rate" in out


def test_check_config_via_subprocess(tmp_path):
    good = write_yaml(tmp_path / "agent.yaml", agent_cfg())
    proc = run_module("check-config", str(good))
    assert proc.returncode == 0, proc.stderr
    assert "population config is valid" in proc.stdout
    bad = write_yaml(tmp_path / "bad.yaml", agent_cfg(num_policies=0))
    proc = run_module("check-config", str(bad))
    assert proc.returncode == 2
    assert "pbt.num_policies" in proc.stderr and str(bad) in proc.stderr


# ----------------------------------------------------------------------------- status


def test_status_one_line_per_member_and_corrupt_record(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    ws.member_dir(4).mkdir(parents=True)
    (ws.member_dir(4) / "record.json").write_bytes(b'{"schema_version": 1, "member": 4, "fra')
    ws.member_dir(5).mkdir(parents=True)  # folder, no record yet
    code, out, err = run_main(capsys, "status", str(ws.root))
    assert code == 0, err
    lines = out.splitlines()
    assert "4 members, objective episode_return, task Pendulum-v1" in lines[0]
    assert lines[1].split()[:3] == ["member", "frames", "gen"]
    for i, mean in enumerate((-200, -900, -300, -250)):
        row = [l for l in lines if l.startswith(f"{i:03d} ")]
        assert len(row) == 1, out
        assert f"{mean} ± 1.07" in row[0] and "running" in row[0] and "keep: warm-up" in row[0]
        assert row[0].split()[1:3] == ["10000", "0"]
    bad = [l for l in lines if l.startswith("004")]
    assert len(bad) == 1 and "unreadable" in bad[0] and "not valid JSON" in bad[0] and "record.json" in bad[0]
    assert any(l.startswith("005") and "no record" in l for l in lines)


def test_status_json_and_stale_flag(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws", means=(-1.0, -2.0))
    old = record(1, -2.0, heartbeat=time.time() - 3600)
    fsio.atomic_write_json(ws.member_dir(1) / "record.json", old.to_dict())
    (ws.member_dir(0) / "record.json").write_text("[]")
    code, out, _ = run_main(capsys, "status", str(ws.root), "--json")
    assert code == 0
    data = json.loads(out)
    by = {m["member"]: m for m in data["members"]}
    assert by[0]["state"] == "unreadable" and "expected a JSON object" in by[0]["error"]
    assert by[1]["state"] == "ok" and by[1]["stale"] and by[1]["episodes"] == 8
    code, out, _ = run_main(capsys, "status", str(ws.root))
    assert "running (stale?)" in out and "1h00m" in out


def test_status_missing_workspace_exit_2(tmp_path, capsys):
    code, out, err = run_main(capsys, "status", str(tmp_path / "nowhere"))
    assert code == 2 and "does not exist" in err and out == ""
    (tmp_path / "empty").mkdir()
    code, _, err = run_main(capsys, "status", str(tmp_path / "empty"))
    assert code == 2 and "not a population workspace" in err


def test_status_via_subprocess(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    (ws.member_dir(2) / "record.json").write_bytes(b"\x00\xff garbage")
    proc = run_module("status", str(ws.root))
    assert proc.returncode == 0, proc.stderr
    assert "002  unreadable" in proc.stdout
    assert sum(1 for l in proc.stdout.splitlines() if re.match(r"^00[013] ", l)) == 3
    proc = run_module("status", str(tmp_path / "missing"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


# ----------------------------------------------------------------------------- audit


def test_audit_good_chain_exit_0(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    write_audit_chain(ws, member=1)
    code, out, err = run_main(capsys, "audit", str(ws.root))
    assert code == 0, out + err
    assert "member 001: 3 entries checked, ok" in out
    assert "member 000: no audit log" in out
    assert "all entries verified" in out


def test_audit_edited_entry_exit_1_naming_member_and_line(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    path = write_audit_chain(ws, member=1)
    lines = path.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["decision"]["donor"] = 3 if entry["decision"]["donor"] != 3 else 2
    lines[1] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    code, out, _ = run_main(capsys, "audit", str(ws.root))
    assert code == 1
    assert re.search(r"member 001 line 2 \(seq 1\): hash mismatch", out), out
    assert re.search(r"member 001 line 2 \(seq 1\): decision does not reproduce", out), out
    assert "FAILED for member(s) 001" in out
    code, out, _ = run_main(capsys, "audit", str(ws.root), "--json")
    data = json.loads(out)
    assert code == 1 and data["failed_members"] == [1]
    # The exploit applied at line 3 is checked against the plan replayed from the decision's inputs, which it
    # carried out: only the edited decision is reported. An applied entry edited the same way is caught there.
    assert {p["line"] for p in data["members"][1]["problems"]} == {2}
    entry = json.loads(lines[2])
    entry["donor"] = 3 if entry["donor"] != 3 else 2
    lines[2] = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    code, out, _ = run_main(capsys, "audit", str(ws.root))
    assert re.search(r"member 001 line 3 \(seq 2\): applied exploit does not match its decision: donor:", out), out


def test_audit_via_subprocess(tmp_path):
    ws = make_workspace(tmp_path / "ws")
    path = write_audit_chain(ws, member=1)
    assert run_module("audit", str(ws.root)).returncode == 0
    text = path.read_text().replace('"pid":1', '"pid":2', 1)
    path.write_text(text)
    proc = run_module("audit", str(ws.root))
    assert proc.returncode == 1
    assert "member 001 line 1 (seq 0): hash mismatch" in proc.stdout


def test_audit_unknown_member_exit_2(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    code, _, err = run_main(capsys, "audit", str(ws.root), "--member", "9")
    assert code == 2 and "member 9" in err


# ----------------------------------------------------------------------------- best, lineage


def test_best_lists_population_best(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    for i, objs in {0: [-150.0, -180.0], 2: [-120.0]}.items():
        entries = [
            {
                "objective": o,
                "frame": 1000 * (k + 1),
                "generation": 0,
                "checkpoint": f"members/{i:03d}/checkpoints/{checkpoint_name(0, 1000 * (k + 1))}",
                "sha256": SHA,
            }
            for k, o in enumerate(objs)
        ]
        fsio.atomic_write_json(ws.member_dir(i) / "best.json", entries)
    (ws.member_dir(3) / "best.json").write_text("{corrupt")
    code, out, err = run_main(capsys, "best", str(ws.root), "--top", "2")
    assert code == 0, err
    rows = out.splitlines()[1:]
    assert len(rows) == 2
    assert rows[0].split()[:3] == ["1", "002", "-120"] and "(missing)" in rows[0]
    assert rows[1].split()[:3] == ["2", "000", "-150"]
    code, out, _ = run_main(capsys, "best", str(ws.root), "--json")
    assert [e["member"] for e in json.loads(out)["best"]] == [2, 0, 0]


def test_lineage_from_audit_log(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    write_audit_chain(ws, member=1)
    log = AuditLog.open(ws.member_dir(1) / "audit.jsonl")
    # a later explore decided but aborted, then one still pending (synthetic, not replayable: lineage only)
    log.append(
        "decision",
        {
            "inputs": {"me": {"generation": 1, "frame": 30000}, "peers": []},
            "decision": {"outcome": "explore", "donor": None, "reasons": ["no leader"]},
            "changes": [{"key": "gamma", "old": 0.95, "new": 0.94, "factor": 1.2}],
        },
    )
    log.append("exploit_aborted", {"reason": "checksum mismatch"})
    log.append(
        "decision",
        {
            "inputs": {"me": {"generation": 1, "frame": 40000}, "peers": [{"member": 3, "generation": 2}]},
            "decision": {"outcome": "exploit", "donor": 3, "reasons": ["gap"]},
            "changes": [],
        },
    )
    code, out, err = run_main(capsys, "lineage", str(ws.root), "--member", "1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "member 001: 1 change(s) of generation"
    assert re.search(r"gen 0\s+frame -\s+start \(fresh\)", out), out
    # The recipient's own values before (its learning rate 0.002) -> the new ones, with the donor's value mutated.
    assert re.search(
        r"gen 1\s+applied at frame 10000\s+exploit <- member 0 gen 0\s+gamma 0.95 -> [\d.]+ \(donor's 0.95 x[\d.]+\), "
        r"learning_rate 0.002 -> [\d.e-]+ \(donor's live rate 0.001 x[\d.]+\)"
        r"\s+\[applied, seq 2, decided at frame \d+\]",
        out,
    ), out
    assert re.search(
        r"gen 2\s+decided at frame 30000\s+explore \(own weights\)\s+gamma 0.95 -> 0.94 \(x1.2\)\s+"
        r"\[aborted: checksum mismatch",
        out,
    )
    assert re.search(
        r"gen 2\s+decided at frame 40000\s+exploit <- member 3 gen 2\s+no hyperparameter changed\s+\[pending", out
    )
    code, out, _ = run_main(capsys, "lineage", str(ws.root), "--json")
    data = {m["member"]: m for m in json.loads(out)["members"]}
    ev = data[1]["events"][0]
    assert ev["state"] == "applied" and ev["donor_generation"] == 0 and ev["donor_checkpoint"].startswith("members/")
    assert data[0]["no_log"]


def test_lineage_lists_entries_in_log_order_with_the_recipients_own_values_and_the_inherited_rate(tmp_path, capsys):
    """The diverse start (seq 0) before the start (seq 1); an exploit shows the recipient's own value before, not
    the donor's, and the learning rate it inherited from the donor although no mutation drew it."""
    ws = make_workspace(tmp_path / "ws")
    log = AuditLog.open(ws.member_dir(1) / "audit.jsonl")
    log.append("initial_draw", {"changes": [{"key": "gamma", "old": 0.99, "new": 0.947562, "factor": None}]})
    log.append("start", {"mode": "fresh", "generation": 0})
    own = {"gamma": 0.947562, "learning_rate": 0.0012, "entropy_coef": 0.0}
    log.append(
        "decision",
        {
            "inputs": {"me": {"generation": 0, "frame": 8192, "hyperparameters": own}, "peers": []},
            "decision": {"outcome": "exploit", "donor": 0, "reasons": ["gap"]},
            "changes": [{"key": "gamma", "old": 0.95, "new": 0.95689, "factor": 1.138}],
        },
    )
    log.append(
        "exploit_applied",
        {
            "generation": 1,
            "donor": 0,
            "donor_generation": 0,
            "donor_checkpoint": "members/000/checkpoints/g0000_f000000008192.pth",
            "donor_sha256": SHA,
            "frame": 10240,
            "hyperparameters": {"gamma": 0.95689, "learning_rate": 0.01, "entropy_coef": 0.0},
            "changes": [{"key": "gamma", "old": 0.95, "new": 0.95689, "factor": 1.138}],
        },
    )
    code, out, _ = run_main(capsys, "lineage", str(ws.root), "--member", "1")
    assert code == 0
    rows = out.splitlines()[1:]
    assert "diverse start" in rows[0] and "start (fresh)" in rows[1] and "exploit <- member 0" in rows[2], out
    assert "gamma 0.947562 -> 0.95689 (donor's 0.95 x1.14), learning_rate 0.0012 -> 0.01 (donor's live rate)" in rows[2]
    assert "entropy_coef" not in rows[2]


def test_lineage_exploit_whose_mutation_lands_on_the_members_own_value_says_so(tmp_path, capsys):
    """A recipient at the rate's bound copies a donor whose rate is mutated onto that bound: its weights changed, its
    values did not. The line shows the mutation from the donor's value, not "no hyperparameter changed" (a clone)."""
    ws = make_workspace(tmp_path / "ws")
    log = AuditLog.open(ws.member_dir(2) / "audit.jsonl")
    own = {"learning_rate": 0.01}
    changes = [{"key": "learning_rate", "old": 0.00542788, "new": 0.01, "factor": None}]
    log.append(
        "decision",
        {
            "inputs": {"me": {"generation": 1, "frame": 491520, "hyperparameters": own}, "peers": []},
            "decision": {"outcome": "exploit", "donor": 3, "reasons": ["gap"]},
            "changes": changes,
        },
    )
    log.append(
        "exploit_applied",
        {
            "generation": 2,
            "donor": 3,
            "donor_generation": 1,
            "donor_checkpoint": "members/003/checkpoints/g0001_f000000491520.pth",
            "donor_sha256": SHA,
            "frame": 495616,
            "hyperparameters": dict(own),
            "changes": changes,
        },
    )
    code, out, _ = run_main(capsys, "lineage", str(ws.root), "--member", "2")
    assert code == 0
    (row,) = [line for line in out.splitlines() if "exploit <- member 3 gen 1" in line]
    assert "learning_rate 0.00542788 -> 0.01 from the donor's (the member's own values kept)" in row, out
    assert "no hyperparameter changed" not in out


def test_lineage_exploit_applied_without_decision_and_corrupt_line(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws")
    path = ws.member_dir(2) / "audit.jsonl"
    log = AuditLog.open(path)
    log.append(
        "exploit_applied",
        {
            "generation": 1,
            "donor": 0,
            "donor_generation": 3,
            "donor_checkpoint": "x",
            "donor_sha256": SHA,
            "frame": 500,
            "hyperparameters": {},
            "changes": [{"key": "learning_rate", "old": 0.001, "new": 0.002, "factor": 2.0}],
        },
    )
    with open(path, "ab") as fh:
        fh.write(b"not json\n")
    code, out, _ = run_main(capsys, "lineage", str(ws.root), "--member", "2")
    assert code == 0
    assert re.search(
        r"gen 1\s+applied at frame 500\s+exploit <- member 0 gen 3\s+learning_rate 0.001 -> 0.002 \(x2\)", out
    )
    assert "skipped unreadable audit entry at line 2" in out


# ----------------------------------------------------------------------------- CLI plumbing


def test_help_version_and_usage_errors(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("check-config", "status", "audit", "best", "lineage"):
        assert name in out
    assert cli.main(["--version"]) == 0
    assert cli.main([]) == 2
    assert cli.main(["frobnicate"]) == 2


def test_cli_import_is_light():
    code = (
        "import sys, async_pbt_isaaclab.cli as c; c.build_parser(); "
        "heavy = [m for m in ('torch', 'rl_games', 'isaaclab', 'isaacsim', 'omni', 'gymnasium') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_subcommand_registry_is_extensible(capsys):
    def add_hello(subparsers):
        p = subparsers.add_parser("hello")
        p.set_defaults(func=lambda args: 7)

    cli.SUBCOMMANDS.append(add_hello)
    try:
        assert cli.main(["hello"]) == 7
    finally:
        cli.SUBCOMMANDS.remove(add_hello)


# ----------------------------------------------------------------------------- docs cannot drift


def _doc_table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\|\s*`([a-z_.]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows.setdefault(m.group(1), [c.strip() for c in m.group(2).split("|")])
    return rows


def test_configuration_doc_lists_every_field_with_its_default():
    text = (REPO / "docs" / "configuration.md").read_text()
    rows = _doc_table_rows(text)
    for f in dataclasses.fields(PopulationConfig):
        assert f.name in rows, f"docs/configuration.md has no table row for PopulationConfig.{f.name}"
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        documented = rows[f.name][0].strip("`")
        assert yaml.safe_load(documented) == default, (
            f"docs/configuration.md: default of {f.name} is {documented!r}, the dataclass says {default!r}"
        )


def test_configuration_doc_lists_every_supported_hyperparameter():
    text = (REPO / "docs" / "configuration.md").read_text()
    rows = _doc_table_rows(text)
    for key, d in SUPPORTED_HYPERPARAMETERS.items():
        assert key in rows, f"docs/configuration.md: no row for hyperparameter {key}"
        kind, low, high = rows[key][0].strip("`"), rows[key][1], rows[key][2]
        assert kind == d.spec.kind, key
        assert float(low) == d.spec.low and float(high) == d.spec.high, key


def test_selection_doc_mentions_every_rule_and_parameter():
    text = (REPO / "docs" / "selection.md").read_text()
    from async_pbt_isaaclab.core.pbt_section import SELECTION_RULES

    for rule in SELECTION_RULES:
        assert f"`{rule}`" in text
    for key in PopulationConfig().selection_dict():
        assert key in text, f"docs/selection.md does not mention {key}"


def test_check_config_warns_rule_specific_key_ignored(tmp_path, capsys):
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg(threshold_std=0.2))
    code, _, err = run_main(capsys, "check-config", str(path), "pbt.rule=dexpbt")
    assert code == 0 and "pbt.threshold_std only acts under rule isaaclab" in err
    code, _, err = run_main(capsys, "check-config", str(path), "pbt.rule=isaaclab")
    assert code == 0 and "threshold_std" not in err


def test_isaaclab_thresholds_without_rule_select_the_isaaclab_rule(tmp_path, capsys):
    # An unchanged Isaac Lab pbt: section keeps its meaning: its band thresholds pick the band rule.
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg(threshold_std=0.2))
    code, out, err = run_main(capsys, "check-config", str(path))
    assert code == 0 and "threshold_std" not in err
    assert "isaaclab" in out


def test_lineage_explore_written_as_exploit_applied_from_self(tmp_path, capsys):
    # The observer logs an applied explore as exploit_applied with donor == the member itself.
    ws = make_workspace(tmp_path / "ws")
    log = AuditLog.open(ws.member_dir(3) / "audit.jsonl")
    log.append("start", {"mode": "fresh", "generation": 0})
    log.append(
        "decision",
        {
            "inputs": {"me": {"generation": 0, "frame": 8000}, "peers": []},
            "decision": {"outcome": "explore", "donor": None, "reasons": ["no leader"]},
            "changes": [{"key": "gamma", "old": 0.95, "new": 0.96, "factor": 0.8}],
        },
    )
    log.append(
        "exploit_applied",
        {
            "generation": 1,
            "donor": 3,
            "donor_generation": 0,
            "donor_checkpoint": "c",
            "donor_sha256": SHA,
            "frame": 8000,
            "hyperparameters": {"gamma": 0.96},
            "changes": [{"key": "gamma", "old": 0.95, "new": 0.96, "factor": 0.8}],
        },
    )
    log.append("start", {"mode": "exploit_applied", "generation": 1})
    code, out, _ = run_main(capsys, "lineage", str(ws.root), "--member", "3")
    assert code == 0
    assert re.search(
        r"gen 1\s+applied at frame 8000\s+explore \(own weights\)\s+gamma 0.95 -> 0.96 \(x0.8\)\s+"
        r"\[applied, seq 2, decided at frame 8000\]",
        out,
    ), out
    assert "start (fresh)" in out and out.count("gen ") == 2


def test_check_config_unreadable_path_exit_2(tmp_path, capsys):
    code, _, err = run_main(capsys, "check-config", str(tmp_path))
    assert code == 2 and str(tmp_path) in err and "cannot read" in err


def test_status_corrupt_population_json_still_lists_members(tmp_path, capsys):
    ws = make_workspace(tmp_path / "ws", means=(-1.0, -2.0))
    (ws.root / "population.json").write_text("{nope")
    code, out, err = run_main(capsys, "status", str(ws.root))
    assert code == 0 and "population.json" in err and "corrupt" in err
    assert [l[:3] for l in out.splitlines()[2:]] == ["000", "001"]


SHIPPED_YAMLS = sorted((Path(__file__).resolve().parents[1] / "tasks" / "agents").glob("*_pbt.yaml"))


def test_the_shipped_yamls_are_found():
    assert len(SHIPPED_YAMLS) >= 5, SHIPPED_YAMLS


@pytest.mark.parametrize("path", SHIPPED_YAMLS, ids=lambda p: p.name)
def test_every_shipped_task_yaml_passes_check_config_without_warnings(path, capsys, monkeypatch):
    monkeypatch.delenv("ASYNC_PBT_TEST_FIXTURE", raising=False)
    code, out, err = run_main(capsys, "check-config", str(path))
    assert code == 0 and err == "", err
    # ... and as a member uses it, with the population turned on by the flags' overrides.
    code, out, err = run_main(capsys, "check-config", "--json", str(path), "pbt.enabled=true", "pbt.policy_idx=1")
    assert code == 0 and err == "", err
    report = json.loads(out)
    assert report["warnings"] == [] and report["notes"] == []
    assert all(h["low"] <= h["current"] <= h["high"] for h in report["hyperparameters"] if h["kind"] != "choice")


def test_launch_usage_errors_are_one_line_and_write_nothing(tmp_path, capsys):
    (tmp_path / "taken").write_text("a file")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for args, named in [
        (["-n", "2", "-w", str(tmp_path / "taken"), "--", sys.executable, "-c", "pass"], "is a file"),
        (["-n", "2", "-w", str(tmp_path / "taken" / "ws"), "--", sys.executable, "-c", "pass"], "is a file"),
        (["-n", "0", "-w", str(tmp_path / "ws"), "--", sys.executable, "-c", "pass"], "got 0"),
        (["-n", "two", "-w", str(tmp_path / "ws")], "'two'"),
    ]:
        code, out, err = run_main(capsys, "launch", *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and named in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_launch_into_a_workspace_of_another_condition_is_refused_before_anything_is_written(tmp_path, capsys):
    """The condition a workspace was created with (size, task, objective) is checked before anything starts: one
    line, exit 2, nothing written, as every member's start would refuse it (not members crashing and given up)."""
    ws = Workspace(tmp_path / "ws")
    ws.ensure(num_policies=2, objective="episode_return", task="Pendulum-v1")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    member = [sys.executable, "-m", "async_pbt.examples.cpu_member"]
    for args, named in [
        (["-n", "2", "--", *member, "--task", "Hopper-v5"], ["task='Pendulum-v1', not --task Hopper-v5"]),
        (["-n", "2", "--", *member, "--task=Hopper-v5"], ["not --task Hopper-v5"]),
        (["-n", "2", "--", *member, "--pbt-objective", "success"], ["objective='episode_return'", "success"]),
        (["-n", "2", "--", *member, "agent.pbt.objective=episode.success"], ["objective='episode_return'"]),
        (["-n", "3", "--", *member], ["num_policies=2, not --members 3"]),
        (["-n", "2", "--backend", "slurm", "--dry-run", "--", *member, "--task", "Hopper-v5"], ["--task Hopper-v5"]),
    ]:
        code, out, err = run_main(capsys, "launch", "-w", str(ws.root), "--gpus", "none", *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (args, out, err)
        assert all(n in err for n in named) and str(ws.root) in err, (named, err)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_one_member_is_refused_alike_by_check_config_launch_and_the_cpu_population(tmp_path, capsys):
    """One rule, one place: a population of one is not valid for check-config, and the launchers refuse it with the
    same reason, before anything is written."""
    from async_pbt_isaaclab.core.pbt_section import population_size_problem

    reason = population_size_problem(1)
    assert reason and population_size_problem(2) == ""
    path = write_yaml(tmp_path / "agent.yaml", agent_cfg())
    code, out, err = run_main(capsys, "check-config", str(path), "pbt.num_policies=1", "pbt.enabled=true")
    assert code == 2 and "population config is valid" not in out and f"num_policies: 1: {reason}" in err
    code, _, err = run_main(capsys, "launch", "-n", "1", "-w", str(tmp_path / "ws"), "--", sys.executable, "-c", "0")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"async-pbt launch: error: --members 1: {reason};")
    from async_pbt_isaaclab.examples import cpu_population

    assert cpu_population.main(["--members", "1", "--workspace", str(tmp_path / "ws")]) == 2
    assert f"--members 1: {reason}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.yaml"]


def test_top_level_help_names_every_command_and_the_supported_trainers(capsys):
    from async_pbt_isaaclab.member.trainer import SUPPORTED_TRAINERS

    assert cli.main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    description = text.split("positional arguments")[0]
    names = list(cli.build_parser()._subparsers._group_actions[0].choices)
    assert {"launch", "evaluate", "stop", "report", "status"} <= set(names)
    for name in names:
        assert f" {name}," in description or f" {name} (" in description, name
    for trainer in SUPPORTED_TRAINERS:
        assert f"Supported trainers: {trainer}" in description or f"; {trainer} (" in description, trainer
