#!/usr/bin/env python
"""Fuzz every parser of workspace files with Hypothesis; count the inputs and any unhandled exception.

A workspace lives on a shared filesystem that other processes (other users, other versions, a full
disk, a killed writer, NFS) can leave in any state. Every function that reads a workspace file must
therefore either return a sound value or raise its documented error, never anything else:

=====================  ==========================================================  =====================
target                 parser                                                      allowed exceptions
=====================  ==========================================================  =====================
record_bytes           ``records.parse_record_bytes`` (a ``record.json``'s bytes)  RecordError
record_dict            ``MemberRecord.from_dict`` (JSON values)                     RecordError
read_records           ``Workspace.read_records`` (a folder of records)            none (errors returned)
state_bytes            ``member_state.load_state`` (``state.json``)                RecordError
state_dict             ``MemberState.from_dict``                                   RecordError
population_config      ``config.population_config_from_dict`` (``pbt:`` mapping)   ConfigError
audit                  ``AuditLog.open``; ``verify_log``; ``read_entries``          RecordError (open only)
population_meta        ``Workspace.population_meta`` (``population.json``)         WorkspaceError
active_pins            ``workspace.active_pins`` (``pins/*.pin``)                  none
population_best        ``workspace.population_best`` (``best.json``)               none
lock_owner             ``workspace._read_owner`` (the ``lock`` file's owner info)  none
load_checkpoint        ``rl_games.checkpoint.load_checkpoint`` (torch checkpoints)  CheckpointError
                                                                                    (+ ChecksumMismatch
                                                                                    with expected_sha256)
=====================  ==========================================================  =====================

Beyond "no other exception", an input a parser *accepts* must be usable: an accepted record or state
re-serialises as canonical JSON (the audit log copies records; ``save_state`` writes no NaN), an
accepted state has the field types the member relies on, an accepted config is valid, pins are
strings, best entries have finite numeric objectives. Violations are counted as ``invariant`` failures.

Inputs come from three generators, all built from *valid* files written by the real code:

* **structured**: a valid JSON document with 1-4 edits (a value replaced by another JSON value, an
  "interesting" one such as ``NaN``, ``1e400``, ``10**400``, ``-1``, ``True``, ``[]``; a key deleted;
  an unknown key added), re-serialised (NaN and Infinity allowed, since ``json.loads`` accepts them);
* **bytes**: the valid file's bytes with 1-4 byte-level edits (flip, overwrite, insert, delete,
  truncate, duplicate, splice a token such as ``NaN``, ``\\xff``, 5000 digits, 10,000 ``[``);
* **random**: arbitrary JSON values and arbitrary bytes.

For torch checkpoints, the byte edits hit a real small rl_games checkpoint (a real ``a2c_continuous``
agent after one epoch, saved by ``save_checkpoint``), and a fourth generator edits the pickle inside
the zip (``data.pkl``) and re-zips it with correct CRCs, so the weights-only unpickler itself is fuzzed.

    python scripts/reliability/fuzz_parsers.py --examples 10000           # >= 10,000 inputs per target
    python scripts/reliability/fuzz_parsers.py --examples 500 --targets audit load_checkpoint

Exit status 0 when no target raised an unexpected exception or broke an invariant, 1 otherwise.
``tests/core/test_fuzz_parsers.py`` runs the same targets with fewer examples.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import io
import json
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from async_pbt_isaaclab.core import fsio
from async_pbt_isaaclab.core.audit import AuditLog, read_entries, verify_log
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig, population_config_from_dict
from async_pbt_isaaclab.core.evidence import ConditionLabel, EvidenceSummary
from async_pbt_isaaclab.core.member_state import MemberState, load_state
from async_pbt_isaaclab.core.mutation import MemberRng, mutate
from async_pbt_isaaclab.core.records import HistoryEntry, MemberRecord, RecordError, parse_record_bytes
from async_pbt_isaaclab.core.selection import decide
from async_pbt_isaaclab.core.step import PopulationView, pbt_step, start_hyperparameters
from async_pbt_isaaclab.core.workspace import (
    Workspace,
    WorkspaceError,
    _read_owner,
    active_pins,
    population_best,
    update_best,
)

NOW = 1_700_000_000.0
TASK = "Pendulum-v1"

# ============================================================================ valid seed files


def _record(member: int, values: list[float], generation: int = 0, frame: int = 20_000,
            hparams: dict[str, Any] | None = None) -> MemberRecord:
    sha = hashlib.sha256(f"ckpt{member}".encode()).hexdigest()
    evidence = EvidenceSummary("episode_return", generation, tuple(values), len(values) + 3, 1)
    condition = ConditionLabel(task=TASK, objective="episode_return", curriculum_stage="", reward_config="r1")
    hparams = dict(hparams or {"learning_rate": 3e-4, "gamma": 0.99, "mini_epochs": 4, "entropy_coef": 1e-3})
    ckpt = f"members/{member:03d}/checkpoints/g{generation:04d}_f{frame:012d}.pth"
    history = (HistoryEntry(frame // 2, generation, evidence.mean - 5.0, evidence.std, evidence.count, condition,
                            ckpt.replace(f"f{frame:012d}", f"f{frame // 2:012d}"), sha, hparams),
               HistoryEntry(frame, generation, evidence.mean, evidence.std, evidence.count, condition, ckpt, sha,
                            hparams))
    return MemberRecord(
        member=member, generation=generation, frame=frame, generation_start_frame=frame // 2,
        restarts=generation, heartbeat=NOW - 3.0,
        evidence=evidence, condition=condition, hyperparameters=hparams, checkpoint=ckpt,
        checkpoint_sha256=sha, interval_best=max(values) if values else None, status="running", epoch=9,
        last_decision="keep: rank 1/3", host="node1", pid=4242 + member, history=history,
    )


def population_config_raw() -> dict[str, Any]:
    """A realistic ``pbt:`` section (Isaac Lab kind names, our bounded form, flags as the CLI gives them)."""
    return {
        "enabled": True, "num_policies": 3, "policy_idx": 2, "directory": "", "workspace": "pbt_ws",
        "objective": "episode_return", "interval_steps": 4096, "threshold_std": 0.1, "threshold_abs": 0.05,
        "mutation_rate": 0.8, "change_range": [1.1, 2.0], "rule": "dexpbt", "window": 16, "min_episodes": 4,
        "max_heartbeat_age_s": 600.0, "max_frame_lag": -1, "start_grace_frames": 0,
        "restart_grace_frames": 4096, "gap_std_fraction": 0.0, "gap_donor_fraction": 0.0,
        "protect_interval_best": False, "keep_last_checkpoints": 3, "temp_grace_s": 600.0,
        "launcher_prefix": ["torchrun", "--nproc_per_node=1"],
        "mutation": {
            "agent.params.config.learning_rate": "mutate_float",
            "gamma": "mutate_discount",
            "entropy_coef": {"kind": "log_float", "low": 1e-6, "high": 0.05},
            "mini_epochs": {"kind": "int", "low": 1, "high": 8, "step": 2},
        },
    }


def seed_records() -> list[MemberRecord]:
    return [_record(0, [-200.0 + k for k in range(8)], hparams={"learning_rate": 1e-3, "gamma": 0.99, "mini_epochs": 4, "entropy_coef": 1e-3}),
            _record(1, [-900.0 - k for k in range(8)], hparams={"learning_rate": 5e-4, "gamma": 0.98, "mini_epochs": 6, "entropy_coef": 1e-4}),
            _record(2, [-1200.0 + 3 * k for k in range(8)], hparams={"learning_rate": 2e-4, "gamma": 0.97, "mini_epochs": 2, "entropy_coef": 1e-5})]


def seed_state() -> dict[str, Any]:
    rng = MemberRng(1_000_003)
    rec = seed_records()[2]
    state = MemberState(
        member=2, generation=2, generation_start_frame=16_384, restarts=2, process_starts=5,
        rng_state=rng.get_state(), hyperparameters=dict(rec.hyperparameters),
        lineage=[{"generation": 1, "outcome": "exploit", "donor": 0, "donor_generation": 0, "frame": 8192,
                  "donor_checkpoint": "members/000/checkpoints/g0000_f000000008192.pth",
                  "donor_sha256": "a" * 64, "changes": [{"key": "learning_rate", "old": 1e-3, "new": 5e-4,
                                                          "factor": 0.5}]}],
        experiment_name="pendulum_ppo_pbt_002",
        last_checkpoint="members/002/checkpoints/g0002_f000000016384.pth", last_checkpoint_sha256="b" * 64,
        pending_exploit={"checkpoint": "members/002/checkpoints/g0002_f000000016384.pth", "sha256": "b" * 64,
                         "generation": 2, "frame": 16_384, "hyperparameters": dict(rec.hyperparameters),
                         "changes": [], "donor": 0},
        best=[{"objective": -180.5, "checkpoint": "members/002/checkpoints/g0001_f000000012288.pth",
               "sha256": "c" * 64, "frame": 12_288, "generation": 1, "episodes": 16, "time": NOW}],
    )
    return state.to_dict()


def seed_best() -> list[dict[str, Any]]:
    best: list[dict[str, Any]] = []
    for i, obj in enumerate((-300.0, -180.5, -250.0, -3.0)):
        best = update_best(best, {"objective": obj, "checkpoint": f"members/001/checkpoints/g0000_f{i:012d}.pth",
                                  "sha256": f"{i:064x}", "frame": 4096 * i, "generation": 0, "episodes": 16,
                                  "time": NOW + i}, keep=3)
    return best


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
    log.append("start", {"mode": "fresh", "pid": 1, "host": "node1", "process_starts": 1, "generation": 0,
                         "checkpoint": None, "argv": ["python", "-m", "x"], "hyperparameters": me.hyperparameters,
                         "environ_size": 1234}, now=NOW - 100)
    for step, now in enumerate((NOW - 50, NOW)):
        view = PopulationView(me, tuple(r for r in recs if r.member != me.member), now,
                              {7: "bad json"} if step else {})
        result = pbt_step(view, cfg, rng.get_state())
        rng.set_state(result.rng_after)
        log.append("decision", result.audit_body(view, cfg), now=now)
    source = result.decision.donor_entry  # the applied exploit carries out the last decision, as a member's does
    log.append("exploit_applied", {"checkpoint": me.checkpoint, "sha256": me.checkpoint_sha256,
                                   "donor": result.decision.donor, "donor_checkpoint": source.checkpoint,
                                   "donor_sha256": source.checkpoint_sha256, "donor_generation": source.generation,
                                   "hyperparameters": result.new_hyperparameters,
                                   "changes": [c.to_dict() for c in result.changes],
                                   "generation": 1, "frame": me.frame, "pid": 1, "process_starts": 2}, now=NOW + 1)
    log.append("exploit_aborted", {"donor": 0, "reason": "vanished"}, now=NOW + 2)
    log.append("stop", {"status": "stopped", "frame": me.frame}, now=NOW + 3)
    return path.read_bytes()


def build_real_checkpoint(folder: Path) -> bytes:
    """A real rl_games ``a2c_continuous`` checkpoint after one epoch (input/value normalisation, adaptive
    LR, Adam moments, numpy ``last_mean_rewards``) with PBT metadata, written by ``save_checkpoint``."""
    import torch
    import yaml
    from rl_games.common.algo_observer import AlgoObserver
    from rl_games.torch_runner import Runner

    from async_pbt_isaaclab.envs.gym_vec_env import register_gym_vecenv_for
    from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
    from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint

    cfg = yaml.safe_load(Path(DEFAULT_AGENT).read_text())
    c = cfg["params"]["config"]
    c.update(max_epochs=1, num_actors=4, horizon_length=16, minibatch_size=64, mini_epochs=1,
             train_dir=str(folder / "runs"), full_experiment_name="fuzz", save_best_after=1000, print_stats=False)
    cfg["params"]["network"]["mlp"]["units"] = [8]
    register_gym_vecenv_for(cfg)

    class Capture(AlgoObserver):
        algo: Any = None

        def after_init(self, algo):
            self.algo = algo

        def after_clear_stats(self):
            pass

    capture = Capture()
    threads = torch.get_num_threads()
    try:
        runner = Runner(capture)
        runner.load(cfg)
        runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
    finally:
        torch.set_num_threads(threads)
    state = capture.algo.get_full_state_weights()
    state["pbt"] = {"member": 0, "generation": 1, "frame": int(state["frame"]), "epoch": 1,
                    "hyperparameters": {"learning_rate": 1e-3}, "rng_state": MemberRng(3).get_state(),
                    "lineage": [], "experiment_name": "fuzz", "objective": "episode_return"}
    path = folder / "real.pth"
    save_checkpoint(path, state)
    return path.read_bytes()


# ============================================================================ strategies

HUGE_INT = 10 ** 400
INTERESTING: list[Any] = [
    None, True, False, 0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64, -(2 ** 63), 2 ** 128 + 1, HUGE_INT, -HUGE_INT,
    0.0, -0.0, 1e-320, 1e308, -1e308, math.nan, math.inf, -math.inf, "", "x", "0", "1e400", "NaN", "PCG64",
    "../../etc/passwd", "/abs/path", "a\x00b", "members/000/checkpoints/g0000_f000000000000.pth", "f" * 64,
    [], {}, [None], [math.nan], {"": None}, {"checkpoint": 1}, [[[]]], {"time": "x", "checkpoint": []},
]
"""Values that tend to break parsers: type confusions, bool-as-int, non-finite and huge numbers."""

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2 ** 130), max_value=2 ** 130),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12), st.sampled_from(INTERESTING),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=16,
)
"""Arbitrary JSON-like values (NaN and Infinity included, since ``json.loads`` accepts them)."""


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, prefix + (i,))
    return out


def _get(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


@st.composite
def mutated_json(draw: Any, base: Any) -> Any:
    """``base`` with 1-4 edits: replace a value, delete a key / item, add an unknown key, wrap a value."""
    obj = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(obj)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "interesting", "delete", "add", "wrap", "scale"]))
        if op == "scale":  # a number far out of the usual range, but finite: statistics over it may overflow
            target = _get(obj, path)
            if path and isinstance(target, (int, float)) and not isinstance(target, bool):
                _get(obj, path[:-1])[path[-1]] = draw(st.sampled_from([1e155, -1e155, 1e200, -1e300, 1.7e308]))
            continue
        if op in ("replace", "interesting"):
            value = draw(json_values) if op == "replace" else draw(st.sampled_from(INTERESTING))
            if not path:
                obj = copy.deepcopy(value)
            else:
                _get(obj, path[:-1])[path[-1]] = copy.deepcopy(value)
        elif op == "delete" and path:
            parent = _get(obj, path[:-1])
            del parent[path[-1]]
        elif op == "add":
            target = _get(obj, path)
            # Deep copies throughout: drawn values may be shared objects (INTERESTING's [] and {}), and
            # editing them in place would change what later draws return.
            if isinstance(target, dict):
                target[draw(st.text(max_size=10))] = copy.deepcopy(draw(json_values))
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), copy.deepcopy(draw(json_values)))
        elif op == "wrap" and path:
            parent = _get(obj, path[:-1])
            parent[path[-1]] = draw(st.sampled_from([lambda v: [v], lambda v: {"v": v}, str]))(parent[path[-1]])
    return obj


def dumps_loose(obj: Any) -> bytes:
    """JSON as a careless or foreign writer might produce it: NaN/Infinity allowed, any indentation."""
    return json.dumps(obj, allow_nan=True).encode()


TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"9" * 5000, b"[" * 10_000, b"{" * 3000, b"\xff\xfe",
          b"\x00", b'"', b"\\", b",", b"}", b"]", b"null", b"true", b"-", b"\n", b"\xc3(", b"\"\\ud800\""]


@st.composite
def mutated_bytes(draw: Any, base: bytes) -> bytes:
    """``base`` with 1-4 byte-level edits."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "duplicate", "token"]))
        pos = draw(st.integers(0, max(0, n - 1)))
        if op == "flip" and n:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and n:
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and n:
            del data[pos:pos + draw(st.integers(1, 64))]
        elif op == "truncate":
            del data[pos:]
        elif op == "duplicate" and n:
            end = min(n, pos + draw(st.integers(1, 64)))
            data[pos:pos] = data[pos:end]
        elif op == "token":
            token = draw(st.sampled_from(TOKENS))
            if draw(st.booleans()):
                data[pos:pos + len(token)] = token
            else:
                data[pos:pos] = token
    return bytes(data)


SPECIAL_FILES = [b"", b"\n", b"null", b"[]", b"{}", b"0", b"NaN", b"\xff\xfe", b"[" * 100_000, b"{\"a\":" * 50_000,
                 b"9" * 5000, b"[" + b"1" * 5000 + b"]", b"1e400", b"-Infinity", b"\"\\ud800\"", b"\x00" * 64]
"""Whole files that broke parsers elsewhere: empty, deep nesting, 5000-digit integers, lone surrogates."""


def json_file_inputs(base: Any) -> st.SearchStrategy[bytes]:
    """Bytes of a JSON workspace file: structured edits, byte edits, arbitrary JSON, arbitrary bytes."""
    valid = json.dumps(base, sort_keys=True, indent=1).encode() + b"\n"
    return st.one_of(
        mutated_json(base).map(dumps_loose),
        mutated_bytes(valid),
        json_values.map(dumps_loose),
        st.binary(max_size=256),
        st.sampled_from(SPECIAL_FILES),
    )


def json_value_inputs(base: Any) -> st.SearchStrategy[Any]:
    return st.one_of(mutated_json(base), mutated_json(base), json_values)


@st.composite
def pickle_mutated_checkpoint(draw: Any, base: bytes) -> bytes:
    """The checkpoint zip with its ``data.pkl`` edited and re-zipped with correct CRCs."""
    with zipfile.ZipFile(io.BytesIO(base)) as zin:
        entries = [(info, zin.read(info.filename)) for info in zin.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for info, payload in entries:
            if info.filename.endswith("data.pkl"):
                payload = draw(mutated_bytes(payload))
            zout.writestr(info.filename, payload)
    return out.getvalue()


# ============================================================================ targets


class InvariantError(AssertionError):
    """A parser accepted an input but returned something unusable."""


def _canonical(obj: Any, what: str) -> None:
    try:
        fsio.canonical_json(obj)
    except (ValueError, TypeError) as exc:
        raise InvariantError(f"accepted {what} does not re-serialise as canonical JSON: {exc}") from None


def check_record(rec: MemberRecord) -> None:
    d = rec.to_dict()
    _canonical(d, "record")  # the audit log copies every record a decision used
    if MemberRecord.from_dict(json.loads(fsio.canonical_json(d)), "roundtrip") != rec:
        raise InvariantError("accepted record does not round-trip")
    if not all(math.isfinite(v) for v in rec.evidence.values):
        raise InvariantError("accepted record has non-finite evidence")
    # Selection must cope with whatever a peer may publish: as a peer and as "me", under every rule.
    peers = [r for r in seed_records() if r.member != rec.member]
    for rule in ("dexpbt", "isaaclab", "welch"):
        cfg = _decide_cfg(rule)
        for me, others in ((seed_records()[2], [p for p in peers if p.member != 2] + [rec]), (rec, peers)):
            try:
                decide(me, others, cfg, MemberRng(7), NOW)
            except Exception as exc:  # noqa: BLE001
                raise InvariantError(f"decide() raised {type(exc).__name__} on an accepted record: {exc}") from None
        # ... and an exploit of it as the donor: its hyperparameters are the recipient's starting point.
        me = seed_records()[2]
        try:
            entry = rec.history[-1] if rec.history else None
            start = start_hyperparameters(me, entry, cfg)
            mutate(start, cfg.mutation, 1.0, cfg.change_range, MemberRng(7))
        except Exception as exc:  # noqa: BLE001
            raise InvariantError(f"exploit of an accepted donor record raised {type(exc).__name__}: {exc}") from None


_DECIDE_CFGS: dict[str, PopulationConfig] = {}


def _decide_cfg(rule: str) -> PopulationConfig:
    if rule not in _DECIDE_CFGS:
        raw = dict(population_config_raw(), rule=rule, max_frame_lag=10 ** 9,
                   max_heartbeat_age_s=1e12, max_clock_skew_s=1e12, policy_idx=0)
        _DECIDE_CFGS[rule] = population_config_from_dict(raw)
    return _DECIDE_CFGS[rule]


_STATE_TYPES = {"member": int, "generation": int, "generation_start_frame": int, "restarts": int,
                "process_starts": int, "rng_state": dict, "hyperparameters": dict, "lineage": list,
                "experiment_name": str, "last_checkpoint": str, "last_checkpoint_sha256": str,
                "best": list, "schema_version": int}


def check_state(state: MemberState) -> None:
    for key, typ in _STATE_TYPES.items():
        value = getattr(state, key)
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise InvariantError(f"accepted state has {key}={value!r:.80} (expected {typ.__name__})")
    if not all(isinstance(e, dict) for e in state.lineage):
        raise InvariantError("accepted state has a lineage entry that is not an object")
    for e in state.best:
        if not isinstance(e, dict) or not isinstance(e.get("checkpoint"), str):
            raise InvariantError(f"accepted state has a best entry without a checkpoint path: {e!r:.80}")
    pending = state.pending_exploit
    if pending is not None and not (isinstance(pending, dict) and isinstance(pending.get("checkpoint"), str)
                                    and isinstance(pending.get("sha256"), str)):
        raise InvariantError(f"accepted state has an unusable pending_exploit {pending!r:.80}")
    try:
        if state.rng_state:  # {}: not drawn from yet (a fresh member sets it at its first start)
            MemberRng.from_state(state.rng_state)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvariantError(f"accepted state has an unusable rng_state: {exc}") from None
    _canonical(state.to_dict(), "state")  # save_state refuses NaN


def check_config(cfg: PopulationConfig) -> None:
    _canonical(cfg.selection_dict(), "config")  # every decision entry records it


@dataclass
class Target:
    """One parser under fuzz: how to feed it, what it may raise, what an accepted result must satisfy."""

    name: str
    strategy: st.SearchStrategy
    run: Callable[[Any, Path], Any]
    allowed: tuple[type[BaseException], ...]
    doc: str = ""


@dataclass
class Stats:
    inputs: int = 0
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    unexpected: Counter = field(default_factory=Counter)
    invariant: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def build_targets(checkpoint_bytes: bytes | None, audit_bytes: bytes) -> list[Target]:
    recs = seed_records()
    rec_dict = recs[0].to_dict()
    state = seed_state()

    def run_record_bytes(data: bytes, tmp: Path) -> str | None:
        check_record(parse_record_bytes(data, "record.json"))

    def run_record_dict(obj: Any, tmp: Path) -> None:
        check_record(MemberRecord.from_dict(obj, "record"))

    def run_read_records(datas: list[bytes], tmp: Path) -> None:
        ws = Workspace(tmp / "ws")
        for i, data in enumerate(datas):
            _write(ws.members_dir / f"{i:03d}", "record.json", data)
        records, errors = ws.read_records()
        if set(records) & set(errors) or (set(records) | set(errors)) - set(range(len(datas))):
            raise InvariantError("read_records returned a member both read and unreadable, or an unknown one")
        for rec in records.values():
            check_record(rec)

    def run_state_bytes(data: bytes, tmp: Path) -> None:
        loaded = load_state(_write(tmp, "state.json", data))
        if loaded is None:
            raise InvariantError("load_state returned None for an existing file")
        check_state(loaded)

    def run_state_dict(obj: Any, tmp: Path) -> None:
        check_state(MemberState.from_dict(obj, "state.json"))

    def run_config(obj: Any, tmp: Path) -> None:
        if not isinstance(obj, dict):
            obj = {"mutation": obj}  # the documented input is a mapping; fuzz the nested parser instead
        check_config(population_config_from_dict(obj, "fuzz.yaml"))
        check_config(population_config_from_dict(obj, "fuzz.yaml", allow_test_fixture=True))

    def run_audit(data: bytes, tmp: Path) -> None:
        path = _write(tmp, "audit.jsonl", data)
        entries = list(read_entries(path))
        count, problems = verify_log(path)
        if count != sum(1 for _, e, _ in entries if e is not None):
            raise InvariantError("verify_log counted a different number of entries than read_entries")
        if data == audit_bytes and problems:
            raise InvariantError(f"the valid log does not verify: {problems[:2]}")
        original = [json.loads(x) for x in audit_bytes.splitlines()]
        got = [e for _, e, _ in entries]
        if not problems and all(e.get("hash") in {o["hash"] for o in original} for e in got):
            # An edit that kept the original hashes must be reported, unless it left the entries as they
            # were or cut whole entries off the end (a chain without an outside anchor cannot tell a
            # shorter log). Edits re-hashed by a forger are caught only where a decision stops replaying.
            if got != original[:len(got)]:
                raise InvariantError("an edited log verified clean")
        log = AuditLog.open(path)  # RecordError (allowed) when the last complete line is unreadable
        log.append("warning", {"message": "fuzz"})  # appending after open must work and chain on
        after = path.read_bytes()
        if not after.endswith(b"\n"):
            raise InvariantError("log does not end with a newline after open + append")
        return "verify_log reported problems" if problems else "verify_log clean"

    def run_meta(data: bytes, tmp: Path) -> None:
        ws = Workspace(tmp / "ws")
        _write(ws.root, "population.json", data)
        meta = ws.population_meta()
        if not isinstance(meta, dict):
            raise InvariantError("population_meta returned a non-dict")

    def run_pins(datas: list[bytes], tmp: Path) -> None:
        ws = Workspace(tmp / "ws")
        for i, data in enumerate(datas):
            _write(ws.member_dir(0) / "pins", f"{i + 1:03d}.pin", data)
        pins = active_pins(ws, 0, now=NOW + 10)
        if not all(isinstance(p, str) for p in pins):
            raise InvariantError(f"active_pins returned non-strings: {pins!r:.80}")

    def run_best(datas: list[bytes], tmp: Path) -> None:
        ws = Workspace(tmp / "ws")
        for i, data in enumerate(datas):
            _write(ws.member_dir(i), "best.json", data)
        best = population_best(ws, top=5)
        for e in best:
            obj = e.get("objective")
            if isinstance(obj, bool) or not isinstance(obj, (int, float)) or not math.isfinite(obj):
                raise InvariantError(f"population_best returned an entry with objective {obj!r}")
        objs = [float(e["objective"]) for e in best]
        if objs != sorted(objs, reverse=True):
            raise InvariantError("population_best is not best first")

    def run_owner(data: bytes, tmp: Path) -> None:
        path = _write(tmp, "lock", data)
        fd = os.open(path, os.O_RDONLY)
        try:
            text = _read_owner(fd)
        finally:
            os.close(fd)
        if not isinstance(text, str):
            raise InvariantError("_read_owner returned a non-string")

    targets = [
        Target("record_bytes", json_file_inputs(rec_dict), run_record_bytes, (RecordError,)),
        Target("record_dict", json_value_inputs(rec_dict), run_record_dict, (RecordError,)),
        Target("read_records", st.lists(json_file_inputs(rec_dict), min_size=1, max_size=3), run_read_records, ()),
        Target("state_bytes", json_file_inputs(state), run_state_bytes, (RecordError,)),
        Target("state_dict", json_value_inputs(state), run_state_dict, (RecordError,)),
        Target("population_config", json_value_inputs(population_config_raw()), run_config, (ConfigError,)),
        Target("audit", st.one_of(mutated_bytes(audit_bytes), audit_line_edits(audit_bytes), st.binary(max_size=256),
                                  st.sampled_from([audit_bytes, *(f + b"\n" for f in SPECIAL_FILES)])),
               run_audit, (RecordError,)),
        Target("population_meta", json_file_inputs(seed_population_meta()), run_meta, (WorkspaceError,)),
        Target("active_pins", st.lists(json_file_inputs(seed_pin()), min_size=1, max_size=3), run_pins, ()),
        Target("population_best", st.lists(json_file_inputs(seed_best()), min_size=1, max_size=3), run_best, ()),
        Target("lock_owner", json_file_inputs(seed_lock_owner()), run_owner, ()),
    ]
    if checkpoint_bytes is not None:
        targets.append(checkpoint_target(checkpoint_bytes))
    return targets


@st.composite
def audit_line_edits(draw: Any, base: bytes) -> bytes:
    """Structured edits of one or two entries of a real log (hashes left as they were, or recomputed so
    that the chain holds and the replay of an edited decision is what has to catch it)."""
    from async_pbt_isaaclab.core.audit import entry_hash

    lines = base.splitlines(keepends=True)
    entries = [json.loads(line) for line in lines]
    for _ in range(draw(st.integers(1, 2))):
        i = draw(st.integers(0, len(entries) - 1))
        entries[i] = draw(mutated_json(entries[i]))
    out = []
    rehash = draw(st.booleans())
    prev = "0" * 64
    for e in entries:
        if rehash and isinstance(e, dict):
            e = dict(e, prev_hash=prev)
            try:
                e["hash"] = entry_hash(prev, e)
            except (ValueError, TypeError):
                pass
            prev = str(e.get("hash"))
        out.append(dumps_loose(e) + b"\n")
    if draw(st.booleans()):
        out[-1] = out[-1][: draw(st.integers(0, len(out[-1])))]  # torn tail
    return b"".join(out)


def checkpoint_target(checkpoint_bytes: bytes) -> Target:
    from async_pbt_isaaclab.rl_games.checkpoint import CheckpointError, load_checkpoint

    sha = hashlib.sha256(checkpoint_bytes).hexdigest()

    def run(args: tuple[bytes, bool], tmp: Path) -> None:
        # Only the safe (weights-only) loader is fuzzed: full pickle of a mutated file may call anything.
        data, with_sha = args
        path = _write(tmp, "ckpt.pth", data)
        with warnings.catch_warnings():  # torch warns about the odd pickle protocols byte edits produce
            warnings.simplefilter("ignore")
            state = load_checkpoint(path, trusted=False, expected_sha256=sha if with_sha else None)
        if not isinstance(state, dict) or "model" not in state:
            raise InvariantError("load_checkpoint returned something that is not an rl_games checkpoint dict")
        if with_sha and data != checkpoint_bytes:
            raise InvariantError("a file whose bytes differ from the expected sha256 was accepted")

    from async_pbt_isaaclab.core.fsio import ChecksumMismatch

    strategy = st.tuples(
        st.one_of(mutated_bytes(checkpoint_bytes), mutated_bytes(checkpoint_bytes),
                  pickle_mutated_checkpoint(checkpoint_bytes), st.binary(max_size=128),
                  st.just(checkpoint_bytes)),
        st.booleans(),
    )
    return Target("load_checkpoint", strategy, run, (CheckpointError, ChecksumMismatch))


# ============================================================================ driver


class Unexpected(Exception):
    """Raised (test mode) when a parser raised an exception outside its documented set."""


def run_target(target: Target, examples: int, tmp_root: Path, raise_failures: bool = False,
               seed: int | None = None) -> Stats:
    """Feed ``examples`` generated inputs to ``target``; count outcomes. With ``raise_failures`` the first
    unexpected exception or invariant violation fails (Hypothesis then shrinks it to a minimal input)."""
    stats = Stats()
    tmp = tmp_root / target.name
    tmp.mkdir(parents=True, exist_ok=True)

    def one(value: Any) -> None:
        stats.inputs += 1
        work = Path(tempfile.mkdtemp(dir=tmp))
        try:
            note = target.run(copy.deepcopy(value), work)  # a parser must not edit shared generated objects
            stats.accepted += 1
            if note:
                stats.notes[note] += 1
        except target.allowed as exc:
            stats.rejected[type(exc).__name__] += 1
        except InvariantError as exc:
            key = str(exc).split(":")[0][:120]
            stats.invariant[key] += 1
            stats.examples.setdefault("invariant: " + key, f"{exc}\ninput: {value!r:.600}")
            if raise_failures:
                raise
        except RecursionError as exc:  # noqa: B014 - listed apart: a deep input must not crash the reader
            _record_unexpected(stats, exc, value)
            if raise_failures:
                raise Unexpected(f"{target.name}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - anything else is a bug in the parser
            _record_unexpected(stats, exc, value)
            if raise_failures:
                raise Unexpected(f"{target.name}: {type(exc).__name__}: {exc}") from exc
        finally:
            _rmtree(work)

    cfg = settings(max_examples=examples, deadline=None, database=None, derandomize=seed is not None,
                   suppress_health_check=list(HealthCheck),
                   phases=[Phase.explicit, Phase.generate] if not raise_failures
                   else [Phase.explicit, Phase.generate, Phase.shrink])
    test = cfg(given(target.strategy)(one))
    t0 = time.perf_counter()
    test()
    stats.seconds = time.perf_counter() - t0
    return stats


def _record_unexpected(stats: Stats, exc: BaseException, value: Any) -> None:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                  if "async_pbt_isaaclab" in f.filename), f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?")
    key = f"{type(exc).__name__} at {where}"
    stats.unexpected[key] += 1
    stats.examples.setdefault(key, f"{type(exc).__name__}: {str(exc)[:300]}\ninput: {value!r:.600}")


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=10_000, help="generated inputs per target (default 10000)")
    p.add_argument("--targets", nargs="*", default=None, help="only these targets (default all)")
    p.add_argument("--seed", type=int, default=None, help="derandomize (same inputs every run)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="fuzz-parsers-") as tmp_s:
        tmp = Path(tmp_s)
        audit_bytes = build_audit_log(tmp / "seed" / "audit.jsonl")
        ckpt = None
        if args.targets is None or "load_checkpoint" in args.targets:
            t0 = time.perf_counter()
            ckpt = build_real_checkpoint(tmp / "seed")
            print(f"real rl_games checkpoint: {len(ckpt)} bytes (built in {time.perf_counter() - t0:.1f} s)")
        targets = [t for t in build_targets(ckpt, audit_bytes) if args.targets is None or t.name in args.targets]
        total_inputs = total_unexpected = total_invariant = 0
        print(f"{'target':<18} {'inputs':>7} {'accepted':>8} {'rejected (documented errors)':<44} "
              f"{'unexpected':>10} {'invariant':>9} {'s':>6}")
        all_examples: dict[str, str] = {}
        for t in targets:
            s = run_target(t, args.examples, tmp / "work")
            rej = ", ".join(f"{k} {v}" for k, v in s.rejected.most_common()) or "-"
            unexpected, invariant = sum(s.unexpected.values()), sum(s.invariant.values())
            print(f"{t.name:<18} {s.inputs:>7} {s.accepted:>8} {rej:<44} {unexpected:>10} {invariant:>9} "
                  f"{s.seconds:>6.1f}", flush=True)
            total_inputs += s.inputs
            total_unexpected += unexpected
            total_invariant += invariant
            for k, v in s.examples.items():
                all_examples[f"{t.name}: {k}"] = v
            for k, v in (*s.unexpected.items(), *s.invariant.items()):
                print(f"    {v:>6} x {k}")
            for k, v in s.notes.items():
                print(f"    ({v} accepted inputs: {k})")
        print(f"total: {total_inputs} inputs over {len(targets)} targets; unhandled exceptions: {total_unexpected}; "
              f"invariant violations: {total_invariant}")
        for k, v in all_examples.items():
            print(f"\n--- {k}\n{v}")
    return 0 if total_unexpected == 0 and total_invariant == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
