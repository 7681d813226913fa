"""Fuzzing every parser of workspace files (CI size of ``scripts/reliability/fuzz_parsers.py``).

Each parser gets Hypothesis-generated inputs built from valid files written by the real code: structured
edits of the JSON (values replaced by other types, NaN, 1e400, 10**400, keys deleted or added), byte-level
edits (flips, truncation, splices of NaN / 5000 digits / deep nesting), arbitrary JSON and bytes, and for
torch checkpoints byte edits of a real small rl_games checkpoint plus edits of the pickle inside its zip.

What is shown here: every parser either returns a usable value or raises its documented error
(RecordError, ConfigError, WorkspaceError, CheckpointError; ChecksumMismatch with an expected sha256);
readers that never raise (``read_records``, ``active_pins``, ``population_best``, the lock owner text,
``verify_log`` and ``read_entries``) never do. An accepted record or state re-serialises as canonical JSON
and has the types the member relies on. A failure is shrunk by Hypothesis to a minimal input.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "fuzz_parsers.py"
EXAMPLES = 120
"""Inputs per target here; the script runs 10,000 per target."""


def _load():
    spec = importlib.util.spec_from_file_location("pbt_fuzz_parsers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pbt_fuzz_parsers"] = module
    spec.loader.exec_module(module)
    return module


fuzz = _load()
TARGET_NAMES = [
    "record_bytes",
    "record_dict",
    "read_records",
    "state_bytes",
    "state_dict",
    "population_config",
    "audit",
    "population_meta",
    "active_pins",
    "population_best",
    "lock_owner",
    "load_checkpoint",
]


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    seed = tmp_path_factory.mktemp("fuzz_seed")
    audit = fuzz.build_audit_log(seed / "audit.jsonl")
    checkpoint = fuzz.build_real_checkpoint(seed)  # torch and rl_games come with [test]: never a skip
    return {t.name: t for t in fuzz.build_targets(checkpoint, audit)}


def test_every_parser_is_covered(targets):
    assert set(TARGET_NAMES) == set(targets)


@pytest.mark.parametrize("name", TARGET_NAMES)
def test_parser_raises_only_documented_errors(targets, name, tmp_path):
    stats = fuzz.run_target(targets[name], EXAMPLES, tmp_path, raise_failures=True, seed=0)
    assert stats.inputs >= EXAMPLES
    assert not stats.unexpected and not stats.invariant
    # The generators reach both sides: some inputs are accepted, and (for strict parsers) some rejected.
    assert stats.accepted > 0
    if name == "audit":  # the verifier reports edits as problems instead of raising
        assert stats.notes["verify_log reported problems"] > 0
    elif targets[name].allowed:
        assert sum(stats.rejected.values()) > 0


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"heartbeat": ' + b"9" * 5000 + b"}", b"1e400"])
def test_pathological_record_files_are_record_errors(data):
    from async_pbt_isaaclab.core.state.records import RecordError, parse_record_bytes

    with pytest.raises(RecordError):
        parse_record_bytes(data, "record.json")
