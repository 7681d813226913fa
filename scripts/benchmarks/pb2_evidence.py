#!/usr/bin/env python
"""Did PB2's model learn anything? Replays every PB2 proposal in a run's audit logs and asks whether the values
explain the improvements better than time alone.

    python scripts/benchmarks/pb2_evidence.py runs78/gamma-pb2
    python scripts/benchmarks/pb2_evidence.py /shared/pbt/my_workspace --verbose

For every decision entry PB2 proposed by its model (``explore_note`` ``pb2: GP-UCB ...``), anywhere under the folder
given (a workspace, or a study's ``--out`` folder), the observations the decision read are rebuilt from its recorded
inputs (``pb2.observations``) and the GP is fitted twice: as PB2 fitted it, and with every value set equal, so that
only time and noise explain the improvements (``pb2.fit(..., time_only=True)``). The evidence is the difference of
their log marginal likelihoods, in nats. Below ``--threshold`` (1.92: half the 95 % quantile of chi-square with one
degree of freedom, the length scale the values add; a likelihood-ratio test at 5 %) the model resolved no effect of
the values, and its upper confidence bound ranked the candidates by the model's uncertainty alone.
Prints one line per folder (with ``--verbose``, one per decision too). Reads the logs only; writes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_analysis as analysis  # next to this script

from async_pbt_isaaclab.core.config import ConfigError
from async_pbt_isaaclab.core.decision import explore, pb2
from async_pbt_isaaclab.core.decision.step import replay_records
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.records import RecordError
from async_pbt_isaaclab.core.workspace.audit_replay import recorded_config

THRESHOLD = 1.92
"""Half the 95 % quantile of chi-square with one degree of freedom (3.84 / 2)."""


@dataclass(frozen=True)
class Evidence:
    """One PB2 proposal by the model, replayed."""

    log: str
    """The audit log's path, relative to the folder given."""
    member: int
    frame: int
    observations: int
    length_scale: float
    """The fitted length scale of the model PB2 proposed by."""
    nats: float
    """Log marginal likelihood of that model minus that of the same GP on time alone."""
    changes: str


def replay(entry: dict[str, Any], log: str) -> Evidence:
    """The evidence of one decision entry PB2 proposed by its model."""
    cfg = population_config_from_dict(recorded_config(entry), allow_test_fixture=True)
    me, peers, now = replay_records(entry)
    context = explore.ExploreContext(me, tuple(peers), now, int(entry.get("mutation_semantics", 1)))
    keys, _, _ = pb2.modelled_keys(entry["start_hyperparameters"], cfg.mutation)
    obs = pb2.observations(context, keys, cfg)
    model, baseline = pb2.fit(obs), pb2.fit(obs, time_only=True)
    changes = ", ".join(f"{c['key']} {c['old']:.4g} -> {c['new']:.4g}" for c in entry.get("changes", []))
    return Evidence(
        log,
        me.member,
        me.frame,
        len(obs),
        model.hyperparameters()["length_scale"],
        model.log_likelihood - baseline.log_likelihood,
        changes,
    )


def folder_evidence(folder: Path) -> list[Evidence]:
    """Every PB2 proposal by the model in the audit logs under ``folder``, in path and sequence order."""
    out = []
    for path, number, entry in analysis.audit_entries(folder):
        if not (entry.get("kind") == "decision" and str(entry.get("explore_note", "")).startswith("pb2: GP-UCB")):
            continue
        try:
            out.append(replay(entry, str(path.relative_to(folder))))
        except (KeyError, TypeError, ValueError, ConfigError, RecordError) as exc:
            raise SystemExit(f"error: {path}:{number}: the entry cannot be replayed ({exc})") from None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="workspaces or study --out folders")
    p.add_argument("--threshold", type=float, default=THRESHOLD, help="nats (default 1.92)")
    p.add_argument("--verbose", action="store_true", help="one line per decision")
    args = p.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            p.error(f"{folder}: not a folder")
        rows = folder_evidence(folder)
        if args.verbose:
            for r in rows:
                print(
                    f"  {r.log} member {r.member} frame {r.frame}: {r.observations} observations, length scale "
                    f"{r.length_scale:.2f}, evidence {r.nats:.2f} nats; {r.changes}"
                )
        below = sum(r.nats < args.threshold for r in rows)
        median = f"{statistics.median(r.nats for r in rows):.2f}" if rows else "-"
        print(
            f"{folder}: {len(rows)} PB2 proposals by the model, {below} with evidence < {args.threshold} nats "
            f"(median {median})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
