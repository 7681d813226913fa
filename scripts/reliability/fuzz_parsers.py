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
population_config      ``pbt_section.population_config_from_dict`` (``pbt:``)      ConfigError
audit                  ``AuditLog.open``; ``verify_log``; ``read_entries``          RecordError (open only)
population_meta        ``Workspace.population_meta`` (``population.json``)         WorkspaceError
active_pins            ``retention.active_pins`` (``pins/*.pin``)                  none
population_best        ``retention.population_best`` (``best.json``)               none
lock_owner             ``member_lock.read_lock_owner`` (the ``lock`` owner info)   none
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

The parts, next to this script: ``fuzz_seeds.py`` (the valid files), ``fuzz_inputs.py`` (the generators),
``fuzz_targets.py`` (the parsers and the invariants); this file runs them and reports.

Exit status 0 when no target raised an unexpected exception or broke an invariant, 1 otherwise.
``tests/core/test_fuzz_parsers.py`` runs the same targets with fewer examples.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the other parts of the fuzzer, next to this file
from fuzz_seeds import build_audit_log, build_real_checkpoint
from fuzz_targets import InvariantError, Stats, Target, build_targets


class Unexpected(Exception):
    """Raised (test mode) when a parser raised an exception outside its documented set."""


def run_target(
    target: Target, examples: int, tmp_root: Path, raise_failures: bool = False, seed: int | None = None
) -> Stats:
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
        except RecursionError as exc:
            _record_unexpected(stats, exc, value)
            if raise_failures:
                raise Unexpected(f"{target.name}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            _record_unexpected(stats, exc, value)
            if raise_failures:
                raise Unexpected(f"{target.name}: {type(exc).__name__}: {exc}") from exc
        finally:
            _rmtree(work)

    cfg = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate]
        if not raise_failures
        else [Phase.explicit, Phase.generate, Phase.shrink],
    )
    test = cfg(given(target.strategy)(one))
    t0 = time.perf_counter()
    test()
    stats.seconds = time.perf_counter() - t0
    return stats


def _record_unexpected(stats: Stats, exc: BaseException, value: Any) -> None:
    tb = traceback.extract_tb(exc.__traceback__)
    where = next(
        (f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb) if "async_pbt_isaaclab" in f.filename),
        f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?",
    )
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
        print(
            f"{'target':<18} {'inputs':>7} {'accepted':>8} {'rejected (documented errors)':<44} "
            f"{'unexpected':>10} {'invariant':>9} {'s':>6}"
        )
        all_examples: dict[str, str] = {}
        for t in targets:
            s = run_target(t, args.examples, tmp / "work")
            rej = ", ".join(f"{k} {v}" for k, v in s.rejected.most_common()) or "-"
            unexpected, invariant = sum(s.unexpected.values()), sum(s.invariant.values())
            print(
                f"{t.name:<18} {s.inputs:>7} {s.accepted:>8} {rej:<44} {unexpected:>10} {invariant:>9} "
                f"{s.seconds:>6.1f}",
                flush=True,
            )
            total_inputs += s.inputs
            total_unexpected += unexpected
            total_invariant += invariant
            for k, v in s.examples.items():
                all_examples[f"{t.name}: {k}"] = v
            for k, v in (*s.unexpected.items(), *s.invariant.items()):
                print(f"    {v:>6} x {k}")
            for k, v in s.notes.items():
                print(f"    ({v} accepted inputs: {k})")
        print(
            f"total: {total_inputs} inputs over {len(targets)} targets; unhandled exceptions: {total_unexpected}; "
            f"invariant violations: {total_invariant}"
        )
        for k, v in all_examples.items():
            print(f"\n--- {k}\n{v}")
    return 0 if total_unexpected == 0 and total_invariant == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
