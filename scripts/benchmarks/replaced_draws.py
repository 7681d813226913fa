#!/usr/bin/env python
"""Which draws did selection change, and how would they have ended? Reads a finished study's population audit logs
beside its sweep's hand-over.

    python scripts/benchmarks/replaced_draws.py runs80/tuned-pb2-gapz7 runs79/no_learn-pb2
    python scripts/benchmarks/replaced_draws.py runs78/gamma-pb2 --episodes 64 --verbose

The sweep arm trains each member's generation-0 draw (the same values and seed) without selection, so where the
population changed a member still at its draw (a donor copied over it, or its values explored in place, as
``dexpbt`` does when the gap to the donor is too small for a copy), the sweep's twin of that member shows how the draw
would have ended had it been kept. For every such first change in a ``population_vs_independent.py`` folder, every
seed:

- the twin's rank among the sweep's runs on the final hand-over (1: the run the sweep hands over), and whether the
  population's own hand-over then ended below the sweep's (the seed missed);
- the gap to the donor in standard errors of the difference of the two windows (the decision's own ``gap`` and
  ``standard_error``: how sure the rule was that the member was behind; absent where no donor was weighed), or
  under ``rule: welch`` its test's p-value;
- for a copy, whether the member was improving faster than its donor: least-squares slopes of each one's last
  ``--slope-points`` window means of its current generation, from the entry's recorded inputs.

Prints one line per study folder and twin rank, and the same pooled over every folder given (with ``--verbose``, one
line per change too). Reads the logs and ``results.json`` only, and with ``--episodes N`` the hand-over on N episodes:
``study_handover.py``'s ``handover_<N>.json`` where the study has one, else the study's own if it played N; writes
nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_analysis as analysis  # next to this script

from async_pbt_isaaclab.core.decision.step import replay_records
from async_pbt_isaaclab.core.state.records import MemberRecord, RecordError


@dataclass(frozen=True)
class Change:
    """The first change of a member still at its generation-0 draw."""

    seed: str
    member: int
    frame: int
    copied: bool
    """A donor copied over it (else its values were explored in place)."""
    donor: int | None
    z: float | None
    """The gap to the donor weighed in standard errors of the difference (inf where both windows had no spread)."""
    p_value: float | None
    """``welch``: the p-value of the test against the donor weighed (that rule records no gap)."""
    faster: bool | None
    """For a copy, whether the member's window means rose faster than the donor's; None with fewer than two of
    either, and for an explore."""
    twin_rank: int
    """1-based rank of the member's sweep twin on the sweep's final hand-over."""
    missed: bool
    """The seed's population ended below its best sweep run."""


def slope(record: MemberRecord, frame: int, points: int) -> float | None:
    """Least-squares slope of the record's last ``points`` window means of its current generation, at or before
    ``frame`` (per frame); None with fewer than two."""
    own = [h for h in record.history if h.generation == record.generation and h.frame <= frame][-points:]
    if len(own) < 2:
        return None
    return statistics.linear_regression([h.frame for h in own], [h.mean for h in own]).slope


def twin_ranks(handover: dict[str, Any]) -> dict[int, int]:
    """Each member's 1-based rank among the sweep's runs on the seed's final hand-over."""
    sweep = handover["sweep"]["members"]
    finals = sorted((row["report"] for row in sweep.values()), reverse=True)
    return {int(m): finals.index(row["report"]) + 1 for m, row in sweep.items()}


def change_of_a_draw(
    entry: dict[str, Any], seed: str, ranks: dict[int, int], missed: bool, points: int
) -> Change | None:
    """The change an audit entry decided, where it changed a generation-0 draw; else None. ``ranks``: the seed's
    :func:`twin_ranks`; ``missed``: whether the seed's population ended below its best sweep run."""
    decision = entry.get("decision") or {}
    if entry.get("kind") != "decision" or decision.get("outcome") not in ("exploit", "explore"):
        return None
    me, peers, _ = replay_records(entry)
    if me.generation != 0:
        return None
    copied, faster = decision["outcome"] == "exploit", None
    if copied:
        donor = next(p for p in peers if p.member == decision["donor"])
        mine, theirs = slope(me, me.frame, points), slope(donor, me.frame, points)
        if mine is not None and theirs is not None:
            faster = mine > theirs
    thresholds, z = decision.get("thresholds") or {}, None
    p_value = thresholds.get("p_value")
    if "gap" in thresholds and "standard_error" in thresholds:
        se = float(thresholds["standard_error"])
        z = float(thresholds["gap"]) / se if se > 0 else float("inf")
    return Change(
        seed,
        me.member,
        me.frame,
        copied,
        decision["donor"],
        z,
        None if p_value is None else float(p_value),
        faster,
        ranks[me.member],
        missed,
    )


def study_changes(study: Path, episodes: int | None, points: int) -> list[Change]:
    """Every first change of a generation-0 draw in the study's population arms, seed by seed."""
    results = _read_json(study / "results.json")
    later = study / f"handover_{episodes}.json"
    rejudged = _read_json(later)["seeds"] if episodes and later.is_file() else {}
    out = []
    for seed, run in results["seeds"].items():
        handover = rejudged.get(seed) or run.get("final_handover")
        if not handover or "sweep" not in handover:
            raise SystemExit(f"error: {study}: seed {seed} has no final hand-over of the sweep to compare with")
        if episodes and handover["sweep"].get("episodes") != episodes:
            raise SystemExit(
                f"error: {study}: seed {seed}'s hand-over played {handover['sweep'].get('episodes')} episodes, not "
                f"{episodes}, and there is no {later.name} (study_handover.py --episodes {episodes} writes one)"
            )
        try:
            ranks = twin_ranks(handover)
            missed = not analysis.no_worse_than_sweep(handover["population"]["report"], handover["sweep"]["report"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SystemExit(f"error: {study}: seed {seed}'s final hand-over cannot be read ({exc!r})") from None
        workspace = analysis.arm_folder(study, run, seed, "population")
        for path, number, entry in analysis.audit_entries(workspace):
            try:
                found = change_of_a_draw(entry, seed, ranks, missed, points)
            except (KeyError, TypeError, ValueError, StopIteration, RecordError) as exc:
                raise SystemExit(f"error: {path}:{number}: the entry cannot be read as a decision ({exc!r})") from None
            if found:
                out.append(found)
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: {path}: a finished study's file is needed ({exc})") from None


def rank_line(rank: int, changes: list[Change]) -> str:
    """One twin rank's changes in words."""
    copies = [c for c in changes if c.copied]
    zs = sorted(c.z for c in copies if c.z is not None)
    gaps = f"{zs[0]:.1f}-{zs[-1]:.1f} standard errors (median {statistics.median(zs):.1f})" if zs else "-"
    judged = [c for c in copies if c.faster is not None]
    return (
        f"  sweep rank {rank}: {len(copies)} copies, {len(changes) - len(copies)} explores in place "
        f"({sum(c.missed for c in changes)} in seeds the population missed); gap of the copies {gaps}; improving "
        f"faster than the donor {sum(bool(c.faster) for c in judged)} of {len(judged)}"
    )


def print_ranks(changes: list[Change]) -> None:
    for rank in sorted({c.twin_rank for c in changes}):
        print(rank_line(rank, [c for c in changes if c.twin_rank == rank]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("studies", nargs="+", type=Path, help="population_vs_independent.py --out folders")
    p.add_argument(
        "--episodes", type=int, default=None, help="the hand-over on N episodes: handover_<N>.json where present"
    )
    p.add_argument("--slope-points", type=int, default=4, help="window means per slope (default 4)")
    p.add_argument("--verbose", action="store_true", help="one line per change")
    args = p.parse_args(argv)
    if args.slope_points < 2:
        p.error(f"--slope-points {args.slope_points}: a slope needs at least 2")
    pooled: list[Change] = []
    for study in args.studies:
        if not study.is_dir():
            p.error(f"{study}: not a folder")
        changes = study_changes(study, args.episodes, args.slope_points)
        pooled += changes
        print(f"{study}: {len(changes)} changes of a generation-0 draw")
        for c in changes if args.verbose else ():
            how = f"copied from {c.donor}" if c.copied else "explored in place"
            if c.p_value is not None:
                gap = f"Welch p {c.p_value:.2g}"
            elif c.z is not None:
                gap = f"gap {c.z:.1f} standard errors"
            else:
                gap = "no donor weighed"
            print(
                f"    seed {c.seed} member {c.member} frame {c.frame}: {how}, {gap}, faster {c.faster}; "
                f"twin rank {c.twin_rank}{', seed missed' if c.missed else ''}"
            )
        print_ranks(changes)
    if len(args.studies) > 1:
        print(f"all {len(args.studies)} folders: {len(pooled)} changes of a generation-0 draw")
        print_ranks(pooled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
