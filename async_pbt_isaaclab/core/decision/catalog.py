"""The one place names are bound: every selection rule and explore strategy, listed explicitly.

``pbt.rule`` and ``pbt.explore`` name an entry here; ``check-config``, the config reader, the docs tables and the
audit verifier read these tables. To add a rule or a strategy, write it in its module and list it below: no module
registers anything when it is imported.
"""

from __future__ import annotations

from async_pbt_isaaclab.core.decision import pb2
from async_pbt_isaaclab.core.decision.explore import RANDOM, ExploreStrategy
from async_pbt_isaaclab.core.decision.fixture_rules import FIXTURE_RULES
from async_pbt_isaaclab.core.decision.registry import Registry
from async_pbt_isaaclab.core.decision.rules import DEXPBT, ISAACLAB, WELCH, RuleSpec

RULES: Registry[RuleSpec] = Registry(
    "selection rule", (DEXPBT, ISAACLAB, WELCH, *FIXTURE_RULES), listed=lambda spec: not spec.fixture
)
"""Every selection rule by name, production rules first, then the test fixtures (known, never offered)."""

STRATEGIES: Registry[ExploreStrategy] = Registry("explore strategy", (RANDOM, pb2.STRATEGY))
"""Every explore strategy by name."""


def rule_spec(name: str) -> RuleSpec:
    """The rule registered as ``name``; a ``ValueError`` lists the production rules."""
    return RULES.get(name)


def strategy(name: str) -> ExploreStrategy:
    """The strategy registered as ``name``; a ``ValueError`` lists the accepted names."""
    return STRATEGIES.get(name)


def production_rules() -> tuple[str, ...]:
    """Rules a user may choose."""
    return RULES.choices()


def fixture_rules() -> tuple[str, ...]:
    """Rules for end-to-end tests only."""
    return tuple(spec.name for spec in RULES.entries() if spec.fixture)


def rule_specific_keys() -> dict[str, tuple[str, ...]]:
    """``{config key: rules that read it}`` over the production rules."""
    out: dict[str, tuple[str, ...]] = {}
    for name in production_rules():
        for key in RULES[name].keys:
            out[key] = out.get(key, ()) + (name,)
    return out
