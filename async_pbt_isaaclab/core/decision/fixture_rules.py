"""Selection rules for end-to-end tests only: deterministic outcomes that real member processes can run.

Listed with ``fixture=True`` in :mod:`async_pbt_isaaclab.core.decision.catalog` (:data:`FIXTURE_RULES`), so they are
known wherever a config is read and the audit verifier replays recorded fixture decisions as they ran. A config
naming one is refused unless the environment variable the config reader checks names it
(:data:`async_pbt_isaaclab.core.pbt_section.TEST_FIXTURE_ENV`). Never meant for a real population.
"""

from __future__ import annotations

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.rules import RuleSpec
from async_pbt_isaaclab.core.decision.selection import (
    Decision,
    Field,
    donor_candidates,
    exploit_decision,
    explore_decision,
    keep_decision,
)
from async_pbt_isaaclab.core.state.member_rng import MemberRng


def forced_exploit(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """In generation 0, every member except the lowest-index compared one exploits that one."""
    me = fld.me
    donors = sorted(donor_candidates(fld, fld.ranked))
    if me.generation > 0 or not donors or me.member < donors[0]:
        return keep_decision(
            "fixture_forced_exploit", "fixture: only generation-0 members above the lowest index exploit", **fld.common
        )
    return exploit_decision(
        "fixture_forced_exploit", fld, donors[0], [f"fixture: forced exploit of member {donors[0]}"], {}
    )


def exploit_every_decision(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """Every decision exploits the best-ranked peer that may be a donor, whatever the gap: a reliability
    harness gets exploit windows at a steady rate that no objective value can change."""
    donors = donor_candidates(fld, fld.ranked)
    if not donors:
        return keep_decision(
            "fixture_exploit_every_decision", "fixture: no peer with a checkpoint to exploit", **fld.common
        )
    return exploit_decision(
        "fixture_exploit_every_decision",
        fld,
        donors[0],
        [f"fixture: exploit at every decision, best peer {donors[0]}"],
        {},
    )


def explore_every_decision(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """Every decision explores in place (my own weights, hyperparameters from ``pbt.explore``): an end-to-end test
    of an explore strategy gets one explore per decision; ``restart_grace_frames`` spaces them out."""
    return explore_decision("fixture_explore_every_decision", fld, ["fixture: explore at every decision"], {})


FIXTURE_RULES = (
    RuleSpec("fixture_forced_exploit", forced_exploit, (), "test fixture: forced exploits", fixture=True),
    RuleSpec(
        "fixture_exploit_every_decision",
        exploit_every_decision,
        (),
        "test fixture: every decision exploits the best peer (chaos harness)",
        fixture=True,
    ),
    RuleSpec(
        "fixture_explore_every_decision",
        explore_every_decision,
        (),
        "test fixture: every decision explores in place (explore-strategy tests)",
        fixture=True,
    ),
)
"""The fixture rules, in the order the catalog lists them."""
