"""The parsers ``fuzz_parsers.py`` feeds: one :class:`Target` each (inputs, allowed errors, what an accepted
result must satisfy) and the invariant checks of accepted records, states and configs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import mutate
from async_pbt_isaaclab.core.decision.step import decide, start_hyperparameters
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.state.records import MemberRecord, RecordError, parse_record_bytes
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import AuditLog, read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError
from async_pbt_isaaclab.core.workspace.member_lock import read_lock_owner
from async_pbt_isaaclab.core.workspace.retention import active_pins, population_best
from async_pbt_isaaclab.core.workspace.state_files import load_state

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other parts of the fuzzer, next to this file
from fuzz_inputs import (
    SPECIAL_FILES,
    dumps_loose,
    json_file_inputs,
    json_value_inputs,
    mutated_bytes,
    mutated_json,
    pickle_mutated_checkpoint,
)
from fuzz_seeds import (
    NOW,
    population_config_raw,
    seed_best,
    seed_lock_owner,
    seed_pin,
    seed_population_meta,
    seed_records,
    seed_state,
)


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
        raw = dict(
            population_config_raw(),
            rule=rule,
            max_frame_lag=10**9,
            max_heartbeat_age_s=1e12,
            max_clock_skew_s=1e12,
            policy_idx=0,
        )
        _DECIDE_CFGS[rule] = population_config_from_dict(raw)
    return _DECIDE_CFGS[rule]


def check_state(state: MemberState) -> None:
    """An accepted state must be fully typed (from_dict builds every part) and writable back."""
    for key, typ in _STATE_TYPES.items():
        value = getattr(state, key)
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise InvariantError(f"accepted state has {key}={value!r:.80} (expected {typ.__name__})")
    parts = [*state.lineage, *state.best, *state.history]
    parts += [p for p in (state.pending_exploit, state.evidence, state.finished, state.audit_head) if p is not None]
    if any(isinstance(p, dict) for p in parts):
        raise InvariantError("accepted state holds a plain dict where a typed part belongs")
    try:
        if state.rng_state:  # {}: not drawn from yet (a fresh member sets it at its first start)
            MemberRng.from_state(state.rng_state)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvariantError(f"accepted state has an unusable rng_state: {exc}") from None
    _canonical(state.to_dict(), "state")  # save_state refuses NaN
    if MemberState.from_dict(state.to_dict(), "round trip") != state:
        raise InvariantError("accepted state does not round-trip through its JSON form")


_STATE_TYPES = {
    "member": int,
    "generation": int,
    "generation_start_frame": int,
    "restarts": int,
    "process_starts": int,
    "rng_state": dict,
    "hyperparameters": dict,
    "lineage": list,
    "experiment_name": str,
    "last_checkpoint": str,
    "last_checkpoint_sha256": str,
    "best": list,
    "schema_version": int,
}


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
            if got != original[: len(got)]:
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
            text = read_lock_owner(fd)
        finally:
            os.close(fd)
        if not isinstance(text, str):
            raise InvariantError("read_lock_owner returned a non-string")

    targets = [
        Target("record_bytes", json_file_inputs(rec_dict), run_record_bytes, (RecordError,)),
        Target("record_dict", json_value_inputs(rec_dict), run_record_dict, (RecordError,)),
        Target("read_records", st.lists(json_file_inputs(rec_dict), min_size=1, max_size=3), run_read_records, ()),
        Target("state_bytes", json_file_inputs(state), run_state_bytes, (RecordError,)),
        Target("state_dict", json_value_inputs(state), run_state_dict, (RecordError,)),
        Target("population_config", json_value_inputs(population_config_raw()), run_config, (ConfigError,)),
        Target(
            "audit",
            st.one_of(
                mutated_bytes(audit_bytes),
                audit_line_edits(audit_bytes),
                st.binary(max_size=256),
                st.sampled_from([audit_bytes, *(f + b"\n" for f in SPECIAL_FILES)]),
            ),
            run_audit,
            (RecordError,),
        ),
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
    from async_pbt_isaaclab.core.workspace.audit import entry_hash

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

    from async_pbt_isaaclab.core.workspace.fsio import ChecksumMismatch

    strategy = st.tuples(
        st.one_of(
            mutated_bytes(checkpoint_bytes),
            mutated_bytes(checkpoint_bytes),
            pickle_mutated_checkpoint(checkpoint_bytes),
            st.binary(max_size=128),
            st.just(checkpoint_bytes),
        ),
        st.booleans(),
    )
    return Target("load_checkpoint", strategy, run, (CheckpointError, ChecksumMismatch))
