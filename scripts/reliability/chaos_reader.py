#!/usr/bin/env python
"""The reader of a chaos run: reads the population all along, as a peer or `async-pbt status` would, and counts
what it saw (a partial or mismatched record, state, best list or checkpoint is an error).

    python scripts/reliability/chaos_reader.py WORKSPACE STOP_FILE OUT_JSON    (started by chaos.py)
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.core.workspace.state_files import load_state

PAUSE_S = 0.05
"""Pause between two passes over the workspace. About 20 passes a second: a record, state or best list is rewritten
at most a few times a second (heartbeat 1 s, an epoch every ~0.1-0.3 s here), so the reader still sees nearly every
version, while using a small share of a core that the members need (a 10 ms pause cost ~20 CPU-s a CI run)."""


def reader_main(root: str, stop_file: str, out_path: str, checkpoint_every: int = 2) -> None:
    """Read the population continuously as a peer / `async-pbt status` would; count what was seen.
    Runs in its own process until ``stop_file`` exists; checkpoints are hashed every ``checkpoint_every`` passes."""
    ws = Workspace(root)
    stop = Path(stop_file)
    c: Counter = Counter()
    samples: list[str] = []
    i = 0
    while not stop.exists():
        i += 1
        try:
            records, errors = ws.read_records()
        except Exception as exc:  # noqa: BLE001 - counted: read_records must never raise
            c["read_records_raised"] += 1
            samples.append(f"read_records raised {exc!r}")
            records, errors = {}, {}
        c["record_reads"] += len(records)
        c["record_errors"] += len(errors)
        samples += [f"record: {e}" for e in errors.values()][:3]
        for index in ws.member_indices():
            mdir = ws.member_dir(index)
            try:
                if load_state(mdir / "state.json") is not None:
                    c["state_reads"] += 1
            except RecordError as exc:
                c["state_errors"] += 1
                samples.append(f"state: {exc}")
            try:
                raw = (mdir / "best.json").read_bytes()
                json.loads(raw)
                c["best_reads"] += 1
            except FileNotFoundError:
                pass
            except ValueError as exc:
                c["best_errors"] += 1
                samples.append(f"best.json: {exc}")
        if i % checkpoint_every == 0:
            for rec in records.values():
                if not rec.checkpoint:
                    continue
                try:
                    data = ws.checkpoint_path(rec.checkpoint).read_bytes()
                except FileNotFoundError:
                    c["checkpoint_gone"] += 1  # replaced by a newer one since the record was read: reported, fine
                    continue
                if hashlib.sha256(data).hexdigest() == rec.checkpoint_sha256:
                    c["checkpoint_verified"] += 1
                else:
                    c["checkpoint_mismatch"] += 1  # refused (never used); reported
                    samples.append(f"checkpoint {rec.checkpoint}: content does not match the record's sha256")
        time.sleep(PAUSE_S)
    Path(out_path).write_text(json.dumps({"counts": dict(c), "samples": samples[:20]}))


if __name__ == "__main__":
    reader_main(*sys.argv[1:4])
