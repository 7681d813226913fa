"""Selection rules for end-to-end tests only: deterministic outcomes that real member processes can run.

They are registered with ``fixture=True``: a config naming one is refused unless the environment variable
``ASYNC_PBT_TEST_FIXTURE`` equals its name, and the audit verifier replays recorded fixture decisions as
they ran. Never meant for a real population.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from async_pbt_isaaclab.core.rules import RuleSpec, register
from async_pbt_isaaclab.core.selection import Decision, Field, donor_candidates, exploit_decision, keep_decision

if TYPE_CHECKING:
    from async_pbt_isaaclab.core.config import PopulationConfig
    from async_pbt_isaaclab.core.member_rng import MemberRng


def forced_exploit(fld: Field, cfg: "PopulationConfig", rng: "MemberRng") -> Decision:
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


def exploit_every_decision(fld: Field, cfg: "PopulationConfig", rng: "MemberRng") -> Decision:
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
