"""The audit verifier's replay: a logged entry's recorded inputs run again through the same pure decision code
(:func:`~async_pbt_isaaclab.core.decision.step.pbt_step`, :func:`~async_pbt_isaaclab.core.decision.start.initial_draw`,
:func:`~async_pbt_isaaclab.core.decision.exploit_plan.plan_exploit`), under the rules the entry was written with, and
what differs from what it recorded. Reads no file: :mod:`.audit_verify` walks the log and calls these."""

from __future__ import annotations

import sys
from typing import Any

from async_pbt_isaaclab.core.config import ConfigError
from async_pbt_isaaclab.core.decision.exploit_plan import aborted_mismatches, applied_mismatches
from async_pbt_isaaclab.core.decision.start import initial_draw
from async_pbt_isaaclab.core.decision.step import (
    InitialMutation,
    PopulationView,
    StepResult,
    initial_step,
    pbt_step,
    replay_records,
)
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import RecordError


def replay_decision(entry: dict[str, Any]) -> tuple[StepResult | None, list[str]]:
    """Replay a decision entry through :func:`~async_pbt_isaaclab.core.decision.step.pbt_step`: the recomputed step
    (``None``
    when the entry cannot be replayed) and the differences from what was recorded (empty when it reproduces)."""
    try:
        # A recorded fixture decision replays as it ran; this does not enable the fixture anywhere else.
        cfg = population_config_from_dict(recorded_config(entry), allow_test_fixture=True)
        me, peers, now = replay_records(entry)
        rng_before = entry["rng_before"]
        MemberRng.from_state(rng_before)
    except (KeyError, TypeError, ValueError, OverflowError, ConfigError, RecordError) as exc:
        return None, [f"entry cannot be replayed: {exc}"]
    try:
        step = pbt_step(PopulationView(me, tuple(peers), now), cfg, rng_before, _recorded_semantics(entry))
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        # Recorded inputs a member could not have produced (e.g. a start value missing for a mutated key).
        return None, [f"entry cannot be replayed: {type(exc).__name__}: {exc}"]
    return step, _replay_differences(step, entry)


def _replay_differences(step: StepResult, entry: dict[str, Any]) -> list[str]:
    """What a replayed step produced that the entry did not record (empty when it reproduces)."""
    recorded = entry.get("decision")
    if not isinstance(recorded, dict):
        return [f"decision: recorded {recorded!r:.80} is not an object"]
    problems: list[str] = []
    mine = step.decision.to_dict()
    for key in ("outcome", "donor", "compared", "excluded", "donor_entry"):
        if mine[key] != recorded.get(key):
            problems.append(f"decision.{key}: recorded {recorded.get(key)!r:.300}, recomputed {mine[key]!r:.300}")
    for key in ("start_hyperparameters", "new_hyperparameters"):
        if getattr(step, key) != entry.get(key):
            problems.append(f"{key}: recorded {entry.get(key)!r}, recomputed {getattr(step, key)!r}")
    if [c.to_dict() for c in step.changes] != entry.get("changes"):
        problems.append("changes: recorded mutation changes do not match the recomputed ones")
    if step.explore_note != entry.get("explore_note", ""):
        problems.append(
            f"explore_note: recorded {entry.get('explore_note')!r:.200}, recomputed {step.explore_note!r:.200}"
        )
    if step.rng_after != entry.get("rng_after"):
        problems.append("rng_after: recorded RNG state does not match the state after replay")
    return problems


def _recorded_semantics(entry: dict[str, Any]) -> int:
    """The rules an entry was written under (``mutation_semantics``; none: 0.1.x, replayed as version 1)."""
    version = entry.get("mutation_semantics", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"mutation_semantics: expected an integer, got {version!r}")
    return version


ADDED_CONFIG_KEYS = {
    "explore": "random",
    "min_mutated_keys": 0,
    "gap_z": 0.0,
    "resample_probability": 0.0,
    "unsettled_fill_worst": False,
    "protect_reference": False,
    "freeze_at_frame": -1,
}
"""Config keys added after entries were first written, with the value that reproduces what an entry recorded
without them did, whatever today's default (before ``explore``, every explore was the random mutation; before
``min_mutated_keys``, the per-key coin alone decided; before ``gap_z``, the dexpbt gap had no sampling-noise floor;
before ``resample_probability``, no key was resampled; before ``unsettled_fill_worst``, the worst group was a
fraction of the compared members alone; before ``protect_reference``, member 0 acted as any member; before
``freeze_at_frame``, members changed generation to the end)."""


def recorded_config(entry: dict[str, Any]) -> dict[str, Any]:
    """The ``config`` an entry recorded, with :data:`ADDED_CONFIG_KEYS` filled in where it predates them (and, for an
    entry written before ``max_frame_lag: -1`` bounded the lag, that placeholder as the "no limit" it meant)."""
    config = {**ADDED_CONFIG_KEYS, **entry["config"]}
    if entry.get("mutation_semantics", 1) in (1, 2) and config.get("max_frame_lag") == -1:
        config["max_frame_lag"] = sys.maxsize
    return config


def recompute_decision(entry: dict[str, Any]) -> list[str]:
    """The differences between a decision entry and its replay (empty when it reproduces)."""
    return replay_decision(entry)[1]


def recompute_initial_mutation(entry: dict[str, Any]) -> list[str]:
    """Replay an ``initial_mutation`` entry through :func:`~async_pbt_isaaclab.core.decision.step.initial_step`, or an
    ``initial_draw`` entry (the diverse start) through :func:`~async_pbt_isaaclab.core.decision.start.initial_draw`."""
    try:
        cfg = population_config_from_dict(recorded_config(entry), allow_test_fixture=True)
        member, start, rng_before = int(entry["member"]), entry["start_hyperparameters"], entry["rng_before"]
        semantics = _recorded_semantics(entry)
        if entry.get("kind") == "initial_draw":
            strata_seed = entry.get("strata_seed")
            pinned = _string_list(entry.get("pinned", []))
            step: InitialMutation = initial_draw(member, start, cfg, rng_before, _optional_int(strata_seed), pinned)
        else:
            step = initial_step(member, start, cfg, rng_before, semantics)
    except (KeyError, TypeError, ValueError, OverflowError, ArithmeticError, ConfigError) as exc:
        return [f"entry cannot be replayed: {exc}"]
    problems = []
    if step.new_hyperparameters != entry.get("new_hyperparameters"):
        problems.append(
            f"new_hyperparameters: recorded {entry.get('new_hyperparameters')!r}, "
            f"recomputed {step.new_hyperparameters!r}"
        )
    if [c.to_dict() for c in step.changes] != entry.get("changes"):
        problems.append("changes: recorded changes do not match the recomputed ones")
    if step.rng_after != entry.get("rng_after"):
        problems.append("rng_after: recorded RNG state does not match the state after replay")
    return problems


def _optional_int(value: Any) -> int | None:
    """A recorded optional integer (``strata_seed``): ``None`` or an int; anything else cannot be replayed."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"strata_seed: expected an integer, got {value!r}")


def _string_list(value: Any) -> list[str]:
    """A recorded list of key names (``pinned``); anything else cannot be replayed."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(f"pinned: expected a list of key names, got {value!r:.80}")


def applied_exploit_mismatches(applied: dict[str, Any], decision: dict[str, Any] | None) -> list[str]:
    """How an ``exploit_applied`` entry differs from the plan its ``decision`` entry makes (empty when it carries out
    exactly that decision): the plan is replayed through
    :func:`~async_pbt_isaaclab.core.decision.exploit_plan.plan_exploit`
    as the member made it, and its donor source, generation, hyperparameters and changes compared, and, where the
    entry records the plan's inputs, its path, keys set live and starting learning rate."""
    if decision is None:
        return ["no exploit or explore decision precedes it (an exploit applied that no logged decision made)"]
    replayed = _replayed_decision(decision)
    if isinstance(replayed, str):
        return [replayed]
    step, me = replayed
    try:
        mismatches = applied_mismatches(applied, step, me)
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return [f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"]
    return [
        f"{key}: applied {value!r:.200}, but the decision at seq {decision.get('seq')!r} decided {planned!r:.200}"
        for key, value, planned in mismatches
    ]


def aborted_exploit_mismatches(aborted: dict[str, Any], decision: dict[str, Any] | None) -> list[str]:
    """How an ``exploit_aborted`` entry that records the plan's inputs (the plan refused to carry the decision out)
    differs from the plan its ``decision`` makes; entries without them (a donor that could not be copied, entries
    written before plans were recorded) are facts."""
    if aborted.get("plan_inputs") is None or decision is None:
        return []
    replayed = _replayed_decision(decision)
    if isinstance(replayed, str):
        return [replayed]
    try:
        return aborted_mismatches(aborted, *replayed)
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return [f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"]


def _replayed_decision(decision: dict[str, Any]) -> tuple[StepResult, Any] | str:
    """The replayed step of an exploit or explore ``decision`` entry and the record it was taken on, or why not."""
    step, _ = replay_decision(decision)
    if step is None or step.decision.outcome.value not in ("exploit", "explore"):
        return f"its decision (seq {decision.get('seq')!r}) cannot be replayed into a plan"
    try:
        return step, replay_records(decision)[0]
    except (KeyError, TypeError, ValueError, RecordError) as exc:
        return f"its decision (seq {decision.get('seq')!r}) cannot be read: {type(exc).__name__}: {exc}"
