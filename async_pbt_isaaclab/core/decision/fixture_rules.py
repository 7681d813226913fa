"""Selection rules for end-to-end tests only: deterministic outcomes that real member processes can run.

Importing this module registers them in :data:`async_pbt_isaaclab.core.decision.rules.RULES` with ``fixture=True``
(:mod:`async_pbt_isaaclab.core.pbt_section` imports it, so they are known wherever a config is read). A
config naming one is refused unless the environment variable :data:`TEST_FIXTURE_ENV` equals its name, and
the audit verifier replays recorded fixture decisions as they ran. Never meant for a real population.
"""

from __future__ import annotations

import os

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.rules import RuleSpec, register
from async_pbt_isaaclab.core.decision.selection import (
    Decision,
    Field,
    donor_candidates,
    exploit_decision,
    explore_decision,
    keep_decision,
)
from async_pbt_isaaclab.core.state.member_rng import MemberRng

TEST_FIXTURE_ENV = "ASYNC_PBT_TEST_FIXTURE"
"""Environment variable that must equal a fixture rule's name for that rule to be accepted."""


def fixture_enabled(rule: str) -> bool:
    """``rule`` is the fixture the environment variable :data:`TEST_FIXTURE_ENV` names for this process."""
    return os.environ.get(TEST_FIXTURE_ENV) == rule


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


register(RuleSpec("fixture_forced_exploit", forced_exploit, (), "test fixture: forced exploits", fixture=True))


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


register(
    RuleSpec(
        "fixture_exploit_every_decision",
        exploit_every_decision,
        (),
        "test fixture: every decision exploits the best peer (chaos harness)",
        fixture=True,
    )
)


def explore_every_decision(fld: Field, cfg: PopulationConfig, rng: MemberRng) -> Decision:
    """Every decision explores in place (my own weights, hyperparameters from ``pbt.explore``): an end-to-end test
    of an explore strategy gets one explore per decision; ``restart_grace_frames`` spaces them out."""
    return explore_decision("fixture_explore_every_decision", fld, ["fixture: explore at every decision"], {})


register(
    RuleSpec(
        "fixture_explore_every_decision",
        explore_every_decision,
        (),
        "test fixture: every decision explores in place (explore-strategy tests)",
        fixture=True,
    )
)
