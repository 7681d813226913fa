"""One PBT step as a pure function: a member's view of the population in, the whole step out.

    view = PopulationView(me=my_record, peers=records, now=time.time())
    step = pbt_step(view, cfg, rng_state)           # decide -> start hyperparameters -> mutate
    audit.append("decision", step.audit_body(view, cfg))   # write-ahead, before anything acts on it

The observer (:mod:`async_pbt_isaaclab.rl_games.observer`) calls :func:`pbt_step` at every interval; the
audit verifier (:func:`async_pbt_isaaclab.core.workspace.audit.recompute_decision`) calls it again on the inputs an
entry recorded and compares. Both go through this one function, so what is verified is what ran.

:func:`initial_step` is the same for the optional mutation of a member's yaml hyperparameters at its first
start (``initial_mutation``), logged as an ``initial_mutation`` entry and replayed the same way; the diverse
start (:func:`async_pbt_isaaclab.core.decision.start.initial_draw`) returns the same :class:`InitialMutation`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision import catalog
from async_pbt_isaaclab.core.decision.explore import ExploreContext
from async_pbt_isaaclab.core.decision.mutation import MUTATION_SEMANTICS, Change, MutationSpec, mutate
from async_pbt_isaaclab.core.decision.selection import Decision, Outcome, build_field, keep_decision, my_ineligibility
from async_pbt_isaaclab.core.state.hyperparameters import Hyperparameters, HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng, RngState
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord


@dataclass(frozen=True)
class PopulationView:
    """What a member sees when it decides: its own record and the peers' records, read at ``now``."""

    me: MemberRecord
    """My record as just published."""
    peers: tuple[MemberRecord, ...]
    """Every other member's record that could be read."""
    now: float
    """Wall-clock time of the decision (unix seconds), the clock heartbeats are judged against."""
    unreadable: Mapping[int, str] = field(default_factory=dict)
    """Members whose record could not be read, with why (recorded, not compared)."""


@dataclass(frozen=True)
class StepResult:
    """Everything one PBT step decided, ready to be logged and acted on."""

    decision: Decision
    """Keep / exploit / explore, with reasons, compared and excluded peers, and the donor entry."""
    start_hyperparameters: Hyperparameters | None
    """What the mutation started from (exploit/explore only): mine, with the donor entry's mutated keys."""
    new_hyperparameters: Hyperparameters | None
    """Hyperparameters of the next generation (exploit/explore only)."""
    changes: tuple[Change, ...]
    """The mutation's changes (empty for keep)."""
    rng_before: RngState
    """Member RNG state before the step."""
    rng_after: RngState
    """Member RNG state after the step (the member persists it)."""
    explore_note: str = ""
    """What the explore strategy said about its proposal (a fallback, say); empty for keep."""

    @property
    def acts(self) -> bool:
        """True when the member starts a new generation (exploit or explore)."""
        return self.decision.outcome is not Outcome.KEEP

    def audit_body(self, view: PopulationView, cfg: PopulationConfig) -> dict[str, Any]:
        """The body of a ``decision`` audit entry: every input the step read, and everything it produced."""
        return {
            "inputs": {
                "me": view.me.to_dict(),
                "peers": [p.to_dict() for p in view.peers],
                "now": view.now,
                "unreadable_peers": {str(k): v for k, v in sorted(view.unreadable.items())},
            },
            "config": cfg.selection_dict(),
            "rng_before": self.rng_before,
            "decision": self.decision.to_dict(),
            "start_hyperparameters": self.start_hyperparameters,
            "new_hyperparameters": self.new_hyperparameters,
            "changes": [c.to_dict() for c in self.changes],
            "rng_after": self.rng_after,
            **({"explore_note": self.explore_note} if self.explore_note else {}),
            "mutation_semantics": MUTATION_SEMANTICS,
        }


def decide(
    me: MemberRecord,
    peers: Sequence[MemberRecord],
    cfg: PopulationConfig,
    rng: MemberRng,
    now: float,
    semantics: int = MUTATION_SEMANTICS,
) -> Decision:
    """Decide keep / exploit / explore for ``me``. Pure: same inputs and RNG state, same decision. ``semantics``: the
    rules an older audit entry was written under, when the verifier replays it."""
    rule = cfg.rule
    why = my_ineligibility(me, cfg)
    if why is not None:
        return keep_decision(rule, why)
    fld = build_field(me, peers, cfg, now, semantics)
    if len(fld.standings) < cfg.min_members:
        n_ex = len(fld.common["excluded"])
        return keep_decision(
            rule,
            f"{len(fld.standings)} compatible live members with evidence < min_members="
            f"{cfg.min_members}" + (f" ({n_ex} excluded: see excluded)" if n_ex else ""),
            **fld.common,
        )
    return catalog.rule_spec(rule).decide(fld, cfg, rng)


def pbt_step(
    view: PopulationView, cfg: PopulationConfig, rng_state: Mapping[str, Any], semantics: int = MUTATION_SEMANTICS
) -> StepResult:
    """Decide, and for an exploit or explore propose the new generation's hyperparameters with the configured
    explore strategy (:mod:`async_pbt_isaaclab.core.decision.explore`). An explore whose proposal changes nothing
    becomes a keep (an exploit that changes nothing still copies the donor's weights). Pure. ``semantics``: the rules
    of :data:`~async_pbt_isaaclab.core.decision.mutation.MUTATION_SEMANTICS` to run under (an older entry's, when
    the verifier replays it)."""
    rng = MemberRng.from_state(rng_state)
    rng_before = rng.get_state()
    decision = decide(view.me, view.peers, cfg, rng, view.now, semantics)
    if decision.outcome is Outcome.KEEP:
        return StepResult(decision, None, None, (), rng_before, rng.get_state())
    donor = decision.donor_entry if decision.outcome is Outcome.EXPLOIT else None
    start = start_hyperparameters(view.me, donor, cfg)
    context = ExploreContext(view.me, view.peers, view.now, semantics)
    proposal = catalog.strategy(cfg.explore).propose(start, context, cfg, rng)
    if decision.outcome is Outcome.EXPLORE and not proposal.changes and semantics >= 2:
        # Same weights, same values: no new generation and no grace. The draws stay consumed (and recorded).
        keep = dataclasses.replace(
            decision,
            outcome=Outcome.KEEP,
            reasons=(*decision.reasons, "the explore changed nothing (no drawn key moved): keep"),
        )
        return StepResult(keep, None, None, (), rng_before, rng.get_state(), proposal.note)
    return StepResult(
        decision,
        start,
        proposal.hyperparameters,
        proposal.changes,
        rng_before,
        rng.get_state(),
        proposal.note,
    )


def start_hyperparameters(me: MemberRecord, donor: HistoryEntry | None, cfg: PopulationConfig) -> Hyperparameters:
    """What a new generation mutates from: my hyperparameters, with the donor entry's mutated keys when
    ``hparams_from: donor``. The donor's ``learning_rate`` is its live rate at that entry, so under the
    adaptive schedule the recipient continues from the rate the donor had reached."""
    start = dict(me.hyperparameters)
    if donor is not None and cfg.hparams_from == "donor":
        start.update(
            {k: v for k, v in donor.hyperparameters.items() if k in cfg.mutation and _mutable_value(v, cfg.mutation[k])}
        )
    return start


def _mutable_value(value: Any, spec: MutationSpec) -> bool:
    """A donor's value the mutation can start from. A peer's record is not trusted: a value of the wrong type
    (a string or list where a number belongs) would make the recipient's mutation raise mid-exploit, so it
    keeps its own value for that key instead."""
    if spec.kind == "choice":
        return any(value == c and type(value) is type(c) for c in spec.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


@dataclass(frozen=True)
class InitialMutation:
    """What a member's first start did to its yaml hyperparameters: the optional one-off mutation
    (``initial_mutation``) or the diverse start's draw (``initial_draw``)."""

    start_hyperparameters: Hyperparameters
    """The yaml's values."""
    new_hyperparameters: Hyperparameters
    """What the member trains with from its first epoch."""
    changes: tuple[Change, ...]
    """What changed."""
    rng_before: RngState
    """Member RNG state before."""
    rng_after: RngState
    """Member RNG state after."""
    strata_seed: int | None = None
    """The population seed that dealt the diverse start's strata (``None``: independent draws)."""
    pinned: tuple[str, ...] = ()
    """Keys the command line set, which the diverse start keeps unless their spec asks for the draw."""

    def audit_body(self, member: int, cfg: PopulationConfig) -> dict[str, Any]:
        """The body of an ``initial_mutation`` audit entry: its inputs and what it produced."""
        return {
            "member": member,
            "config": cfg.selection_dict(),
            "rng_before": self.rng_before,
            "start_hyperparameters": self.start_hyperparameters,
            "new_hyperparameters": self.new_hyperparameters,
            "changes": [c.to_dict() for c in self.changes],
            "rng_after": self.rng_after,
            "mutation_semantics": MUTATION_SEMANTICS,
            **({"strata_seed": self.strata_seed} if self.strata_seed is not None else {}),
            **({"pinned": list(self.pinned)} if self.pinned else {}),
        }


def initial_step(
    member: int,
    hyperparameters: HyperparameterView,
    cfg: PopulationConfig,
    rng_state: Mapping[str, Any],
    semantics: int = MUTATION_SEMANTICS,
) -> InitialMutation:
    """Member 0 keeps the yaml's values (the population always holds the configuration you wrote); every
    other member mutates each key with probability 1, inside the bounds. Pure."""
    rng = MemberRng.from_state(rng_state)
    before = rng.get_state()
    start = dict(hyperparameters)
    if member == 0:
        return InitialMutation(start, dict(start), (), before, before)
    new, changes = mutate(start, cfg.mutation, 1.0, cfg.change_range, rng, semantics=semantics)
    return InitialMutation(start, new, tuple(changes), before, rng.get_state())


def replay_records(entry: Mapping[str, Any]) -> tuple[MemberRecord, Sequence[MemberRecord], float]:
    """The (me, peers, now) an audit entry recorded; raises ``RecordError``/``KeyError``/``TypeError``."""
    inputs = entry["inputs"]
    me = MemberRecord.from_dict(inputs["me"], "inputs.me")
    peers = [MemberRecord.from_dict(p, f"inputs.peers[{i}]") for i, p in enumerate(inputs["peers"])]
    return me, peers, float(inputs["now"])
