"""Members that are rank groups: two members of two ranks each, real ``torchrun`` processes over gloo on the CPU
(``async_pbt_isaaclab.testing.gloo_ranks``: rl_games' multi-GPU agent, its nccl and CUDA device swapped for gloo and
the CPU). Member 0 runs under ``async-pbt launch --gpus-per-member 2``; held at its first publish, its rank 1 is killed
with SIGKILL, which takes the group down, and the launcher restarts it from its last checkpoint. Member 1 exploits
member 0 in-process at its first decision. Everything asserted is read back from what the groups wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint

pytestmark = pytest.mark.slow


def _entries(ws: Path, member: int) -> list[dict]:
    return [json.loads(line) for line in (ws / f"members/{member:03d}/audit.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    from async_pbt_isaaclab.testing.gloo_ranks import run_group_population

    root = tmp_path_factory.mktemp("rank_groups")
    log, launched = run_group_population(root)
    return root / "ws", log, launched


def test_every_exploit_reaches_every_rank_before_the_next_rollout(groups):
    ws, log, _ = groups
    entries = _entries(ws, 1)
    applied = [i for i, e in enumerate(entries) if e["kind"] == "exploit_applied"]
    decisions = [e["decision"] for e in entries if e["kind"] == "decision"]
    assert len(applied) == 1, (decisions, log[-3000:])
    for i in applied:
        exploit = entries[i]
        assert exploit["path"] == "inprocess"
        (restored,) = [e for e in entries[i:] if e["kind"] == "restored"][:1]
        # The next group_synced entry is written at the next epoch start, before any rank plays a step: each rank's
        # own fingerprint of the weights it will play and train with.
        synced = next(e for e in entries[i:] if e["kind"] == "group_synced")
        assert synced["reason"] == "exploit" and synced["world_size"] == 2
        assert synced["generation"] == exploit["generation"]
        ranks = synced["model_sha256"]
        assert len(ranks) == 2 and ranks[0] == ranks[1] == restored["model_sha256"] == exploit["model_sha256"]
        # Every rank's optimizer trains at the plan's rate.
        assert synced["optimizer_lr"] == [[exploit["last_lr"]]] * 2 == [restored["optimizer_lr"]] * 2
        # ... and they are the recipient checkpoint's weights, which are the donor's.
        recipient = load_checkpoint(ws / exploit["checkpoint"], trusted=False)
        assert model_fingerprint(recipient["model"]) == ranks[0]
        donor = load_checkpoint(ws / exploit["donor_checkpoint"], trusted=False)
        assert model_fingerprint(donor["model"]) == ranks[0]
    synced_all = [e for e in entries if e["kind"] == "group_synced" and e["reason"] == "exploit"]
    assert len(synced_all) == len(applied)
    # A fresh start: before the first rollout both ranks train rank 0's state at the member's drawn rate (rank 1 was
    # built with the config's).
    (draw,) = [e for e in entries if e["kind"] == "initial_draw"]
    start = next(e for e in entries if e["kind"] == "group_synced")
    assert start["reason"] == "start" and len(set(start["model_sha256"])) == 1
    assert start["optimizer_lr"] == [[draw["new_hyperparameters"]["learning_rate"]]] * 2


def test_a_dead_rank_stops_the_group_and_the_launcher_restarts_it_from_its_checkpoint(groups):
    from async_pbt_isaaclab.testing.gloo_ranks import resume_after_the_dead_rank

    ws, _, launched = groups
    # The restarted group resumed from the last checkpoint rank 0 wrote (its publish at frame 1024), on every rank.
    assert resume_after_the_dead_rank(ws, launched)["frame"] == 1024


def test_decisions_record_the_group_and_count_every_rank(groups):
    ws, _, _ = groups
    for member in (0, 1):
        decisions = [e for e in _entries(ws, member) if e["kind"] == "decision"]
        assert decisions and all(d["world_size"] == 2 for d in decisions)
        for d in decisions:
            me = d["inputs"]["me"]
            # 2 ranks x 8 envs x 32 steps an epoch: the frame is the group's, a multiple of 512.
            assert me["frame"] % 512 == 0 and me["frame"] > 0
    record = json.loads((ws / "members/000/record.json").read_text())
    assert record["status"] == "finished" and record["frame"] == 4 * 512
    # Every env of both ranks ends a 32-step episode each epoch: 16 a generation's epoch, not rank 0's 8.
    entry = record["history"][-1]
    assert entry["count"] % 16 == 0 and entry["count"] >= 16, entry


def test_the_audit_verifies(groups):
    ws, _, _ = groups
    out = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
