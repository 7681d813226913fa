"""Valid workspace files written by the real code: the seeds every input of ``fuzz_parsers.py`` is built from.

Records, a member state, a ``pbt:`` config, best list, population file, pin and lock owner, a real audit log (real
decisions) and a real small rl_games checkpoint.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.decision.generation import plan_generation
from async_pbt_isaaclab.core.decision.plan_inputs import TrainerCounters
from async_pbt_isaaclab.core.decision.step import PopulationView, pbt_step
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.best import BestEntry
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.member_state import STATE_SCHEMA_VERSION, MemberState
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.retention import update_best

NOW = 1_700_000_000.0
TASK = "Pendulum-v1"

# ============================================================================ valid seed files


def _record(
    member: int, values: list[float], generation: int = 0, frame: int = 20_000, hparams: dict[str, Any] | None = None
) -> MemberRecord:
    sha = hashlib.sha256(f"ckpt{member}".encode()).hexdigest()
    evidence = EvidenceSummary("episode_return", generation, tuple(values), len(values) + 3, 1)
    condition = ConditionLabel(task=TASK, objective="episode_return", curriculum_stage="", reward_config="r1")
    hparams = dict(hparams or {"learning_rate": 3e-4, "gamma": 0.99, "mini_epochs": 4, "entropy_coef": 1e-3})
    ckpt = f"members/{member:03d}/checkpoints/g{generation:04d}_f{frame:012d}.pth"
    history = (
        HistoryEntry(
            frame // 2,
            generation,
            evidence.mean - 5.0,
            evidence.std,
            evidence.count,
            condition,
            ckpt.replace(f"f{frame:012d}", f"f{frame // 2:012d}"),
            sha,
            hparams,
        ),
        HistoryEntry(frame, generation, evidence.mean, evidence.std, evidence.count, condition, ckpt, sha, hparams),
    )
    return MemberRecord(
        member=member,
        generation=generation,
        frame=frame,
        generation_start_frame=frame // 2,
        restarts=generation,
        heartbeat=NOW - 3.0,
        evidence=evidence,
        condition=condition,
        hyperparameters=hparams,
        checkpoint=ckpt,
        checkpoint_sha256=sha,
        interval_best=max(values) if values else None,
        status="running",
        epoch=9,
        last_decision="keep: rank 1/3",
        host="node1",
        pid=4242 + member,
        history=history,
    )


def population_config_raw() -> dict[str, Any]:
    """A realistic ``pbt:`` section (Isaac Lab kind names, our bounded form, flags as the CLI gives them)."""
    return {
        "enabled": True,
        "num_policies": 3,
        "policy_idx": 2,
        "directory": "",
        "workspace": "pbt_ws",
        "objective": "episode_return",
        "interval_steps": 4096,
        "threshold_std": 0.1,
        "threshold_abs": 0.05,
        "mutation_rate": 0.8,
        "change_range": [1.1, 2.0],
        "rule": "dexpbt",
        "window": 16,
        "min_episodes": 4,
        "max_heartbeat_age_s": 600.0,
        "max_frame_lag": -1,
        "start_grace_frames": 0,
        "restart_grace_frames": 4096,
        "gap_std_fraction": 0.0,
        "gap_donor_fraction": 0.0,
        "protect_interval_best": False,
        "keep_last_checkpoints": 3,
        "temp_grace_s": 600.0,
        "launcher_prefix": ["torchrun", "--nproc_per_node=1"],
        "mutation": {
            "agent.params.config.learning_rate": "mutate_float",
            "gamma": "mutate_discount",
            "entropy_coef": {"kind": "log_float", "low": 1e-6, "high": 0.05},
            "mini_epochs": {"kind": "int", "low": 1, "high": 8, "step": 2},
        },
    }


def seed_records() -> list[MemberRecord]:
    return [
        _record(
            0,
            [-200.0 + k for k in range(8)],
            hparams={"learning_rate": 1e-3, "gamma": 0.99, "mini_epochs": 4, "entropy_coef": 1e-3},
        ),
        _record(
            1,
            [-900.0 - k for k in range(8)],
            hparams={"learning_rate": 5e-4, "gamma": 0.98, "mini_epochs": 6, "entropy_coef": 1e-4},
        ),
        _record(
            2,
            [-1200.0 + 3 * k for k in range(8)],
            hparams={"learning_rate": 2e-4, "gamma": 0.97, "mini_epochs": 2, "entropy_coef": 1e-5},
        ),
    ]


def seed_state() -> dict[str, Any]:
    rng = MemberRng(1_000_003)
    rec = seed_records()[2]
    data = dict(
        schema_version=STATE_SCHEMA_VERSION,
        member=2,
        generation=2,
        generation_start_frame=16_384,
        restarts=2,
        process_starts=5,
        rng_state=rng.get_state(),
        hyperparameters=dict(rec.hyperparameters),
        lineage=[
            {
                "generation": 1,
                "outcome": "exploit",
                "donor": 0,
                "donor_generation": 0,
                "frame": 8192,
                "donor_checkpoint": "members/000/checkpoints/g0000_f000000008192.pth",
                "donor_sha256": "a" * 64,
                "donor_frame": 8192,
                "time": NOW,
                "changes": [{"key": "learning_rate", "old": 1e-3, "new": 5e-4, "factor": 0.5}],
            }
        ],
        experiment_name="pendulum_ppo_pbt_002",
        last_checkpoint="members/002/checkpoints/g0002_f000000016384.pth",
        last_checkpoint_sha256="b" * 64,
        pending_exploit={
            "checkpoint": "members/002/checkpoints/g0002_f000000016384.pth",
            "sha256": "b" * 64,
            "generation": 2,
            "frame": 16_384,
            "hyperparameters": dict(rec.hyperparameters),
            "changes": [],
            "last_lr": 5e-4,
            "path": "restart",
            "path_reason": "exploit_mode: restart",
            "donor": 0,
            "donor_generation": 1,
            "donor_checkpoint": "members/000/checkpoints/g0001_f000000016384.pth",
            "donor_sha256": "d" * 64,
            "donor_frame": 16_384,
        },
        best=[
            {
                "objective": -180.5,
                "checkpoint": "members/002/checkpoints/g0001_f000000012288.pth",
                "sha256": "c" * 64,
                "frame": 12_288,
                "generation": 1,
                "episodes": 16,
                "time": NOW,
                "direction": "max",
            }
        ],
    )
    state = MemberState.from_dict(data, "seed_state")
    return state.to_dict()


def seed_best() -> list[dict[str, Any]]:
    best: list[BestEntry] = []
    for i, obj in enumerate((-300.0, -180.5, -250.0, -3.0)):
        best = update_best(
            best,
            BestEntry(
                objective=obj,
                checkpoint=f"members/001/checkpoints/g0000_f{i:012d}.pth",
                sha256=f"{i:064x}",
                frame=4096 * i,
                generation=0,
                episodes=16,
                time=NOW + i,
            ),
            keep=3,
        )
    return [b.to_dict() for b in best]


def seed_population_meta() -> dict[str, Any]:
    return {"schema_version": 1, "num_policies": 3, "objective": "episode_return", "task": TASK, "created": NOW}


def seed_pin() -> dict[str, Any]:
    return {"checkpoint": "members/000/checkpoints/g0000_f000000008192.pth", "by": 2, "time": NOW}


def seed_lock_owner() -> dict[str, Any]:
    return {"pid": 4242, "host": "node1", "since": NOW}


def build_audit_log(path: Path) -> bytes:
    """A real audit log: start, restored, keep/exploit decisions (real decide + explore), facts."""
    cfg = population_config_from_dict(population_config_raw())
    recs = seed_records()
    me = recs[2]
    rng = MemberRng(cfg.resolved_mutation_seed())
    log = AuditLog.open(path)
    log.append(
        "start",
        {
            "mode": "fresh",
            "pid": 1,
            "host": "node1",
            "process_starts": 1,
            "generation": 0,
            "checkpoint": None,
            "argv": ["python", "-m", "x"],
            "hyperparameters": me.hyperparameters,
            "environ_size": 1234,
        },
        now=NOW - 100,
    )
    for step, now in enumerate((NOW - 50, NOW)):
        view = PopulationView(me, tuple(r for r in recs if r.member != me.member), now, {7: "bad json"} if step else {})
        result = pbt_step(view, cfg, rng.get_state())
        rng.set_state(result.rng_after)
        log.append("decision", result.audit_body(view, cfg), now=now)
    # The applied exploit carries out the last decision's plan, as a member's does.
    plan = plan_generation(result, me, "", TrainerCounters(frame=me.frame, epoch=4), NOW)
    pending = plan.pending(me.checkpoint, me.checkpoint_sha256, 5e-4, "restart", "exploit_mode: restart")
    log.append("exploit_applied", dict(pending.to_dict(), pid=1, process_starts=2), now=NOW + 1)
    log.append("exploit_aborted", {"donor": 0, "reason": "vanished"}, now=NOW + 2)
    log.append("stop", {"status": "stopped", "frame": me.frame}, now=NOW + 3)
    return path.read_bytes()


def build_real_checkpoint(folder: Path) -> bytes:
    """A real rl_games ``a2c_continuous`` checkpoint after one epoch (input/value normalisation, adaptive
    LR, Adam moments, numpy ``last_mean_rewards``) with PBT metadata, written by ``save_checkpoint``."""
    from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint
    from async_pbt_isaaclab.testing.tiny_agent import small_pendulum_agent_cfg, train_agent

    cfg = small_pendulum_agent_cfg(
        folder / "runs",
        "fuzz",
        max_epochs=1,
        num_actors=4,
        horizon_length=16,
        minibatch_size=64,
        mini_epochs=1,
        print_stats=False,
    )
    cfg["params"]["network"]["mlp"]["units"] = [8]
    state = train_agent(cfg).get_full_state_weights()
    state["pbt"] = {
        "member": 0,
        "generation": 1,
        "frame": int(state["frame"]),
        "epoch": 1,
        "hyperparameters": {"learning_rate": 1e-3},
        "rng_state": MemberRng(3).get_state(),
        "lineage": [],
        "experiment_name": "fuzz",
        "objective": "episode_return",
    }
    path = folder / "real.pth"
    save_checkpoint(path, state)
    return path.read_bytes()
