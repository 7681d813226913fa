"""rsl_rl members that are rank groups, beside a member of one process: rsl-rl-lib's own multi-GPU ``OnPolicyRunner``
as real ``torchrun`` process groups over gloo on the CPU (``async_pbt_isaaclab.testing.gloo_ranks``: its nccl and
``cuda:LOCAL_RANK`` swapped for gloo and the CPU), real rsl_rl PPO on Pendulum-v1. Members 0 and 1 are groups of 2
ranks (256 frames an iteration), member 2 one process (128 frames an iteration); members 1 and 2 exploit a peer
in-process at their first decision. Apart, member 0 alone under the launcher loses its rank 1 at its first publish
and the launcher restarts the group. Everything asserted is read back from what the members wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.testing.gloo_ranks import rsl_rl_checkpoint_fingerprint as _fingerprint

pytestmark = [pytest.mark.slow, pytest.mark.rslrl_compat]

GROUPS = (0, 1)
"""The members of 2 ranks; member 2 is one process."""


def _entries(ws: Path, member: int) -> list[dict]:
    return [json.loads(line) for line in (ws / f"members/{member:03d}/audit.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    from async_pbt_isaaclab.testing.gloo_ranks import run_rsl_rl_group_population

    root = tmp_path_factory.mktemp("rsl_rl_rank_groups")
    logs = run_rsl_rl_group_population(root)
    return root / "ws", logs


def test_the_exploit_reaches_every_rank_before_the_next_rollout(population):
    ws, logs = population
    entries = _entries(ws, 1)
    (i,) = [i for i, e in enumerate(entries) if e["kind"] == "exploit_applied"]
    exploit = entries[i]
    assert exploit["path"] == "inprocess", logs[1][-3000:]
    restored = next(e for e in entries[i:] if e["kind"] == "restored")
    # Written at the next epoch start (update_done, before the next rollout's first step): each rank's own
    # fingerprint and optimizer rates after it loaded rank 0's sync.
    synced = next(e for e in entries[i:] if e["kind"] == "group_synced")
    assert synced["reason"] == "exploit" and synced["world_size"] == 2 and synced["generation"] == exploit["generation"]
    ranks = synced["model_sha256"]
    assert ranks == [restored["model_sha256"]] * 2 == [exploit["model_sha256"]] * 2
    assert ranks[0] == _fingerprint(ws / exploit["checkpoint"]) == _fingerprint(ws / exploit["donor_checkpoint"])
    # A fixed schedule: only the sync gives rank 1 the plan's searched rate, in every optimizer group.
    (rate,) = [c["new"] for c in exploit["changes"] if c["key"] == "learning_rate"]
    assert exploit["last_lr"] == rate and restored["optimizer_lr"] and set(restored["optimizer_lr"]) == {rate}
    assert synced["optimizer_lr"] == [restored["optimizer_lr"]] * 2
    # A group exploits in its running processes only: its plan was told it cannot restart (a restart path aborts).
    assert exploit["plan_inputs"]["abilities"]["restarts"] is False
    single = next(e for e in _entries(ws, 2) if e["kind"] == "exploit_applied")
    assert single["plan_inputs"]["abilities"]["restarts"] is True


def test_a_fresh_group_trains_every_rank_with_the_members_drawn_values(population):
    ws, _ = population
    entries = _entries(ws, 1)
    (draw,) = [e for e in entries if e["kind"] == "initial_draw"]
    rate = draw["new_hyperparameters"]["learning_rate"]
    assert rate != 1e-3  # drawn, not the config's: rank 1 was built with the config's
    # Before the first rollout: rank 0's own fresh state and the member's values, on both ranks.
    synced = next(e for e in entries if e["kind"] == "group_synced")
    assert synced["reason"] == "start" and synced["generation"] == 0 and len(set(synced["model_sha256"])) == 1
    assert len(synced["optimizer_lr"]) == 2 and all(set(r) == {rate} for r in synced["optimizer_lr"])


def test_members_of_different_world_sizes_decide_at_equal_total_frames(population):
    ws, _ = population
    for member in (0, 1, 2):
        decisions = [e for e in _entries(ws, member) if e["kind"] == "decision"]
        # The audit says each decision's world size: a group's carries it, a process of its own does not.
        assert decisions and all(d.get("world_size") == (2 if member in GROUPS else None) for d in decisions)
        # The group's 2nd iteration and the single process's 4th: the same 512 total frames, as every peer
        # entry compared there (member 2's decision read member 0's entry at 512, not its newer one).
        assert [d["inputs"]["me"]["frame"] for d in decisions] == [512]
        assert set(decisions[0]["decision"]["compared_frames"].values()) == {512}
        record = json.loads((ws / f"members/{member:03d}/record.json").read_text())
        assert record["status"] == "finished" and record["frame"] == 1024
        assert record["epoch"] == (4 if member in GROUPS else 8)
        # Every env of every rank ends a 16-step episode each iteration: a group's evidence holds both ranks'.
        episodes = 2 * 8 if member in GROUPS else 8
        assert all(h["count"] % episodes == 0 and h["count"] > 0 for h in record["history"]), record["history"]
    (exploit,) = [e for e in _entries(ws, 2) if e["kind"] == "exploit_applied"]
    assert exploit["donor"] == 0 and exploit["donor_frame"] == 512


def test_the_audit_verifies(population):
    ws, _ = population
    out = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "all entries verified" in out.stdout, out.stdout + out.stderr


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    from async_pbt_isaaclab.testing.gloo_ranks import run_rsl_rl_group_restart

    root = tmp_path_factory.mktemp("rsl_rl_group_restart")
    return root / "ws", run_rsl_rl_group_restart(root)


def test_a_dead_rank_stops_the_group_and_the_launcher_restarts_it_from_its_checkpoint(restarted):
    from async_pbt_isaaclab.testing.gloo_ranks import resume_after_the_dead_rank

    ws, launched = restarted
    # The restarted group resumed from the checkpoint of the publish its rank 1 died in (frame 512), on every rank.
    restored = resume_after_the_dead_rank(ws, launched)
    assert restored["frame"] == 512 and restored["model_sha256"] == _fingerprint(ws / restored["checkpoint"])
    # Its counters went on from there: one decision at 512, the next publish at 1024, no iteration done twice.
    record = json.loads((ws / "members/000/record.json").read_text())
    assert record["status"] == "finished" and record["frame"] == 1024 and record["epoch"] == 4
    assert [h["frame"] for h in record["history"]] == [512, 1024]
    out = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "all entries verified" in out.stdout, out.stdout + out.stderr
