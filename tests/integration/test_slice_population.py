"""Members that share one simulator: real PPO members on slices of one gymnasium vec-env, in this process.

An exploit between slices is a memory copy (the recipient's first env step acts with the donor's published
weights); a member whose weights go non-finite is repaired or stopped alone; the audit log verifies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
from async_pbt_isaaclab.core.slices import slice_layout
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.core.workspace.state_files import load_state
from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint
from async_pbt_isaaclab.rl_games.slices import STEP_BY_STEP_ENV, train_slices
from async_pbt_isaaclab.testing.forced_exploit import FIXTURE_RULE, forced_exploit_flags, slice_exploit

pytestmark = pytest.mark.slow


def _config(ws: Path, members: int, epochs: int, flags: list[str], interval: int) -> tuple[dict[str, Any], Any]:
    """The packaged Pendulum agent as ``members`` slices of 8 envs: 1024 frames an epoch, 2 PPO epochs."""
    overrides = [
        f"pbt.workspace={ws}",
        "pbt.enabled=true",
        f"pbt.num_policies={members}",
        f"pbt.interval_steps={interval}",
        "pbt.start_grace_frames=0",
        "pbt.restart_grace_frames=0",
        "pbt.min_episodes=8",
        "pbt.heartbeat_interval_s=3600",
        "pbt.max_heartbeat_age_s=100000000",
        *flags,
        "params.config.num_actors=8",
        "params.config.horizon_length=128",
        "params.config.minibatch_size=512",
        "params.config.mini_epochs=2",
        f"params.config.max_epochs={epochs}",
        "params.config.print_stats=False",
        "pbt.mutation.learning_rate=mutate_float",
        "pbt.mutation.entropy_coef=mutate_float",
    ]
    return load_population_config(load_yaml(DEFAULT_AGENT), overrides, source=str(DEFAULT_AGENT))


def _train(tmp_path: Path, agent_cfg, cfg, members: int, observers) -> Any:
    layout = slice_layout(0, members, cfg.num_policies, 8)
    return train_slices(
        agent_cfg,
        cfg,
        layout,
        lambda n: GymVecEnv("Pendulum-v1", n, seed=11),
        train_dir=str(tmp_path / "runs"),
        task="Pendulum-v1",
        extra_observers=observers,
    )


def _entries(ws: Path, member: int) -> list[dict[str, Any]]:
    return [e for _, e, _ in read_entries(ws / "members" / f"{member:03d}" / "audit.jsonl") if e is not None]


def _verified(ws: Path, members: int) -> None:
    for m in range(members):
        _, problems = verify_log(ws / "members" / f"{m:03d}" / "audit.jsonl")
        assert problems == [], problems


class FirstStepProbe(AlgoObserver):
    """Fingerprints the model at the first env step of every generation of its member (before any update)."""

    def __init__(self) -> None:
        super().__init__()
        self.algo: Any = None
        self.seen: dict[int, str] = {}

    def after_init(self, algo) -> None:
        self.algo = algo

    def process_infos(self, infos, done_indices) -> None:
        generation = self.algo.algo_observer.observers[0].session.state.generation
        if generation not in self.seen:
            self.seen[generation] = model_fingerprint(self.algo.model.state_dict())


@pytest.mark.parametrize("stepping", ["rollouts", "step_by_step"])
def test_exploit_between_slices_is_a_memory_copy(tmp_path, monkeypatch, capsys, stepping):
    """Both ways of stepping: rollouts played together (the default), and one env step at a time (the fallback). The
    members publish inline: the decision after the 5th rollout (frame 4096) is then certain to read member 0's
    settled evidence of 2048 and to find its state in memory (``testing/forced_exploit.py``)."""
    monkeypatch.setenv(TEST_FIXTURE_ENV, FIXTURE_RULE)
    monkeypatch.setenv(STEP_BY_STEP_ENV, "1" if stepping == "step_by_step" else "0")
    ws = tmp_path / "ws"
    flags = [f.replace("--pbt-", "pbt.").replace("-", "_") for f in forced_exploit_flags()[:2]]
    inline = "pbt.publish_in_background=false"
    agent_cfg, cfg = _config(ws, 3, 6, [f"{flags[0]}={flags[1]}", "pbt.mutation_rate=1.0", inline], 2048)
    probes = {m: FirstStepProbe() for m in range(3)}
    host = _train(tmp_path, agent_cfg, cfg, 3, lambda m: [probes[m]])
    assert {m.status for m in host.members.values()} == {"finished"}
    slice_exploit(ws, recipient=1, donor=0, interval_steps=2048, inline=True)
    for recipient in (1, 2):
        entries = _entries(ws, recipient)
        start = next(e for e in entries if e["kind"] == "start")
        assert start["slices"]["members"] == [0, 1, 2] and start["slot"] == recipient
        memory = [e for e in entries if e["kind"] == "donor_in_memory"]
        # The fixture rule copies the lowest-index member it compared: member 0, or for member 2 member 1 when its
        # decision came before member 0's publish of that interval (the threads publish in any order).
        assert len(memory) == 1 and memory[0]["donor"] in range(recipient), entries
        donor = memory[0]["donor"]
        # The published file and the memory copy are the same weights, and the recipient acted with them from its
        # first step of the new generation.
        published = load_checkpoint(
            ws / memory[0]["checkpoint"], map_location="cpu", expected_sha256=memory[0]["sha256"]
        )
        assert model_fingerprint(published["model"]) == memory[0]["model_sha256"]
        assert probes[recipient].seen[1] == memory[0]["model_sha256"]
        assert probes[recipient].seen[0] != probes[recipient].seen[1]
        applied = next(e for e in entries if e["kind"] == "exploit_applied")
        assert applied["path"] == "inprocess" and applied["donor"] == donor
        state = load_state(ws / "members" / f"{recipient:03d}" / "state.json")
        assert state.generation == 1 and state.lineage[-1].source.member == donor
        # The recipient kept its own counters: frames continue, no copy of the donor's.
        restored = next(e for e in entries if e["kind"] == "restored" and e["mode"] == "exploit_inprocess")
        assert restored["model_sha256"] == memory[0]["model_sha256"]
    _verified(ws, 3)
    records, errors = Workspace(ws).read_records()
    assert not errors and sorted(records) == [0, 1, 2]
    assert [records[m].status for m in range(3)] == ["finished"] * 3
    said = capsys.readouterr().out
    assert ("slices step the env one step at a time" in said) == (stepping == "step_by_step"), said[-2000:]


class NanAt(AlgoObserver):
    """Makes its member's weights non-finite just before the update of ``epoch`` (the update then spreads them)."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch
        self.algo: Any = None

    def after_init(self, algo) -> None:
        self.algo = algo

    def after_steps(self) -> None:
        if int(self.algo.epoch_num) == self.epoch:
            with torch.no_grad():
                for p in self.algo.model.parameters():
                    p.fill_(math.nan)


def test_a_fault_stays_with_its_member(tmp_path):
    ws = tmp_path / "ws"
    agent_cfg, cfg = _config(ws, 2, 4, ["pbt.rule=dexpbt"], 1024)
    # Member 0 goes bad after publishing its frame-2048 checkpoint; member 1 before it has any checkpoint.
    host = _train(tmp_path, agent_cfg, cfg, 2, lambda m: [NanAt(3 if m == 0 else 1)])
    assert host.members[0].status == "finished"
    assert host.members[1].status == "failed"
    fault0 = [e for e in _entries(ws, 0) if e["kind"] == "fault"]
    assert len(fault0) == 1 and fault0[0]["action"] == "restored", fault0
    assert fault0[0]["checkpoint"].endswith("g0000_f000000002048.pth")
    fault1 = [e for e in _entries(ws, 1) if e["kind"] == "fault"]
    assert [f["action"] for f in fault1] == ["stopped"]
    records, _ = Workspace(ws).read_records()
    assert records[0].status == "finished" and records[0].frame == 4096
    assert records[1].status == "stopped"
    final = load_checkpoint(ws / records[0].checkpoint, map_location="cpu")
    assert all(torch.isfinite(t).all() for t in final["model"].values() if t.is_floating_point())
    _verified(ws, 2)


class HeldEnvValues(AlgoObserver):
    """What its member's slice envs hold of ``env.g`` after the first update of every generation, read from them."""

    def __init__(self) -> None:
        super().__init__()
        self.algo: Any = None
        self.held: dict[int, list[float]] = {}

    def after_init(self, algo) -> None:
        self.algo = algo

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        generation = self.algo.algo_observer.observers[0].session.state.generation
        self.held.setdefault(generation, self.algo.vec_env.pbt_env_values.held("env.g"))


def test_slices_differ_in_env_values_and_an_exploit_carries_the_donors_over(tmp_path, monkeypatch):
    """Pendulum's gravity ``g`` (a constructor argument the env reads at every step) searched by slices of one env:
    each slice's envs hold its member's value, and an in-memory exploit sets the donor's (explored from). With the
    background writer (the default), member 1's decision certain to read member 0's evidence of 2048 follows the 7th
    rollout (``testing/forced_exploit.py``): 8 epochs."""
    monkeypatch.setenv(TEST_FIXTURE_ENV, FIXTURE_RULE)
    ws = tmp_path / "ws"
    flags = [f.replace("--pbt-", "pbt.").replace("-", "_") for f in forced_exploit_flags()[:2]]
    search = ["params.config.env_config.g=10.0", "pbt.mutation.env.g={kind: log_float, low: 5.0, high: 15.0}"]
    search += ["pbt.allow_shaped_return_objective=true"]
    agent_cfg, cfg = _config(ws, 2, 8, [f"{flags[0]}={flags[1]}", *search], 2048)
    probes = {m: HeldEnvValues() for m in range(2)}
    host = _train(tmp_path, agent_cfg, cfg, 2, lambda m: [probes[m]])
    assert {m.status for m in host.members.values()} == {"finished"}
    starts = {m: next(e for e in _entries(ws, m) if e["kind"] == "start")["hyperparameters"]["env.g"] for m in (0, 1)}
    assert starts[0] == 10.0 and starts[1] != 10.0  # member 1's diverse start drew another gravity
    slice_exploit(ws, recipient=1, donor=0, interval_steps=2048, inline=False)
    for m in (0, 1):
        assert probes[m].held[0] == [starts[m]] * 8, probes[m].held
    applied = [(m, e) for m in (0, 1) for e in _entries(ws, m) if e["kind"] == "exploit_applied"]
    assert applied, "the fixture rule exploits the better peer at a decision"
    for recipient, entry in applied:
        assert entry["path"] == "inprocess"
        # The donor's value carried over (member 0 keeps its start value: no exploit changes it before this one),
        # then explored from; the recipient's slice envs hold the new generation's value.
        (change,) = [c for c in entry["changes"] if c["key"] == "env.g"] or [{"old": entry["hyperparameters"]["env.g"]}]
        assert change["old"] == starts[entry["donor"]]
        assert probes[recipient].held[entry["generation"]] == [entry["hyperparameters"]["env.g"]] * 8
    _verified(ws, 2)
