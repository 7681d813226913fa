"""Shared test fixtures. Append new fixtures below; keep each one small and documented."""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import pytest

from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord

# One torch/OpenMP thread per process, set before anything imports torch, and inherited by every member
# process a test starts. Tests run real members side by side with in-process training on small machines
# (CI has 2 cores): torch's default pool of one spinning thread per core then makes a tiny model's step
# tens of times slower (measured: 12 s -> 1 s for a 400-step bounded-sigma test at load 3.4). Members
# train with torch_threads=1 anyway. An OMP_NUM_THREADS the user set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

MAX_WORKERS = 4
"""Most ``-n auto`` workers: each file of real member processes uses a core or two of its own."""


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's default): one worker per core, at most :data:`MAX_WORKERS`.

    The slow files start populations whose members train until an event, so the cores are busy whenever such a
    file runs; a worker more than the cores only adds members competing for them. Measured with .ci/run on a clean
    clone (2 cores, two runs each): 3 workers 948 and 952 s; 2 workers 856 and 945 s. The gain is within this
    machine's run-to-run noise; it was not a loss in either pair.
    """
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


def pytest_configure(config: pytest.Config) -> None:
    """With xdist workers, one progress line per finished test file instead of a dot per test (file_progress.py);
    skips counted, and refused where ``ASYNC_PBT_STRICT_SKIPS=1`` says every test must run (skip_policy.py).

    Ctrl-C as a terminal has it: a run started in the background (``.ci/run &``) inherits SIGINT ignored, as bash
    gives every asynchronous command, and so would every member process a test starts, never stopping on the SIGINT
    the test sends (a three-member test then waited out its 120 s kill timeouts). The launcher resets it for the
    members it starts (``launch/member_process.py``); tests that start members themselves get it from here."""
    import signal
    import sys
    from pathlib import Path

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    sys.path.insert(0, str(Path(__file__).parent))
    import file_progress
    import skip_policy

    file_progress.register(config)
    skip_policy.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with ``slow`` tests (real member processes, tens of seconds each) run first, in collection order.

    Under ``--dist loadfile`` a worker takes whole files in this order, so the many short files fill the gaps at
    the end instead of one long file running alone after the rest. The order within a file is kept.

    Tests marked ``mjlab`` need mjlab, which the ``[test]`` venv cannot hold (it pins rsl-rl-lib 5.4.2 and mujoco
    3.11): they are deselected, not skipped (CI allows no skip), unless ``-m`` names them (``.ci/side-jobs``:
    ``-m mjlab``, in a venv with mjlab installed).
    """
    if "mjlab" not in (config.option.markexpr or ""):
        deselected = [item for item in items if item.get_closest_marker("mjlab")]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker("mjlab")]
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort: False (slow) first


def build_record(
    member: int,
    values: list[float] | tuple[float, ...] = (),
    *,
    now: float | None = None,
    generation: int = 0,
    evidence_generation: int | None = None,
    frame: int = 100_000,
    generation_start_frame: int = 0,
    heartbeat_age: float = 5.0,
    task: str = "t",
    objective: str = "episode_return",
    checkpoint: bool = True,
    hyperparameters: dict[str, Any] | None = None,
    history: tuple[HistoryEntry, ...] | None = None,
    **extra: Any,
) -> MemberRecord:
    """A realistic published member record with window ``values`` (per-episode objective values).

    Unless ``history`` is given, the record's history holds one entry at ``frame`` made of that window (when
    the window is of the member's generation and not empty): what a member publishes at an interval.
    """
    now = time.time() if now is None else now
    values = tuple(float(v) for v in values)
    ev_gen = generation if evidence_generation is None else evidence_generation
    evidence = EvidenceSummary(objective, ev_gen, values, len(values), 0)
    ckpt = f"members/{member:03d}/checkpoints/g{generation:04d}_f{frame:012d}.pth" if checkpoint else None
    sha = ("%064x" % (member + 1)) if checkpoint else None
    hparams = dict(hyperparameters or {"learning_rate": 3e-4, "gamma": 0.99})
    condition = ConditionLabel(task=task, objective=objective)
    if history is None:
        history = (
            (HistoryEntry(frame, ev_gen, evidence.mean, evidence.std, evidence.count, condition, ckpt, sha, hparams),)
            if values and ev_gen == generation
            else ()
        )
    return MemberRecord(
        member=member,
        generation=generation,
        frame=frame,
        generation_start_frame=generation_start_frame,
        restarts=generation,
        heartbeat=now - heartbeat_age,
        evidence=evidence,
        condition=condition,
        hyperparameters=hparams,
        checkpoint=ckpt,
        checkpoint_sha256=sha,
        history=history,
        **extra,
    )


@pytest.fixture
def make_record() -> Callable[..., MemberRecord]:
    """Factory for :class:`MemberRecord` (see :func:`build_record` for the keyword arguments)."""
    return build_record


def _start_pendulum_member(tmp_path, mutation, overrides=()):
    """Claim member 1 of a two-member Pendulum workspace under ``tmp_path`` (what a member process does before
    rl_games builds its agent), release it, and return its session."""
    from pathlib import Path

    from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
    from async_pbt_isaaclab.member.session import start_member

    raw = load_yaml(Path(__file__).resolve().parents[1] / "async_pbt_isaaclab" / "examples" / "pendulum_ppo.yaml")
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": 1,
        "num_policies": 2,
        "workspace": str(tmp_path / "ws"),
        "interval_steps": 10**9,
        "mutation": mutation,
    }
    agent_cfg, cfg = load_population_config(raw, list(overrides))
    session, _ = start_member(agent_cfg, cfg, train_dir=str(tmp_path / "runs"), task="Pendulum-v1")
    session.close()
    return session


@pytest.fixture
def start_pendulum_member() -> Callable[..., Any]:
    """``start_pendulum_member(tmp_path, mutation)``: a real member start of Pendulum member 1 (claim, state,
    audit entries), released; returns the session."""
    return _start_pendulum_member
