"""The CPU demo's own settings (``cpu_population``): its two presets, and the ``pbt:`` keys and searched values it
adds to the members' agent yaml. A key the yaml's ``pbt:`` section sets is the user's and stays: the demo fills in
only what the yaml leaves unset (``--rule``, typed by the user, wins over both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from async_pbt_isaaclab.examples import rsl_rl_member
from async_pbt_isaaclab.pbt_flags import flag_name

RL_GAMES_OVERRIDES = (
    "agent.params.torch_threads=1",  # one torch thread per member: N members share the machine's cores
    "agent.pbt.mutation.learning_rate=mutate_float",
    "agent.pbt.mutation.entropy_coef=mutate_float",
    "agent.pbt.mutation.gamma=mutate_discount",
    "agent.pbt.mutation.e_clip=mutate_float",
)
"""An rl_games member's extra overrides: one torch thread, and what it searches (an rsl_rl member's:
``rsl_rl_member.POPULATION_OVERRIDES``; its packaged configs set one torch thread themselves)."""

SMOKE = {"iterations": 24, "interval": 8192, "start_grace": 8192, "min_episodes": 16}
"""Short run: 24 epochs x 2048 frames per member, a decision every 4 epochs after the first 4."""
FULL = {"iterations": 200, "interval": 32768, "min_episodes": 32}
"""Learning run: 200 epochs (about 410k frames) per member. No start grace of its own: the member's task decides it
(``core.config.task_start_grace``: two intervals on Pendulum, 128,000 frames on HalfCheetah and Hopper), so the first
decision does not rest on episodes that all began at frame 0."""

MUTATION_OVERRIDE = "agent.pbt.mutation."


def preset(smoke: bool) -> dict[str, int]:
    """``--smoke``'s preset, or the learning run's."""
    return SMOKE if smoke else FULL


def pbt_flags(pbt: Mapping[str, Any], smoke: bool, rule: str | None) -> list[str]:
    """The ``--pbt-*`` flags the demo adds, sized for its preset, for the keys ``pbt`` (the yaml's section) leaves
    unset; ``--pbt-rule`` only when ``rule`` was typed."""
    chosen = preset(smoke)
    min_episodes = pbt.get("min_episodes", chosen["min_episodes"])
    settings = {
        "interval_steps": chosen["interval"],
        "start_grace_frames": chosen.get("start_grace"),
        "restart_grace_frames": chosen["interval"],
        "min_episodes": chosen["min_episodes"],
        "window": max(64, min_episodes) if type(min_episodes) is int else 64,  # a bad value is the config check's
        "heartbeat_interval_s": 5,
    }
    unset = {key: value for key, value in settings.items() if key not in pbt and value is not None}
    flags = [f for key, value in unset.items() for f in (flag_name(key), str(value))]
    return [*flags, *([flag_name("rule"), rule] if rule else [])]


def searched_overrides(pbt: Mapping[str, Any], rsl_rl: bool) -> list[str]:
    """The demo's overrides (:data:`RL_GAMES_OVERRIDES`, or rsl_rl's), less the searched values the yaml's
    ``pbt.mutation`` specifies itself."""
    mutation = pbt.get("mutation")
    own = mutation if isinstance(mutation, Mapping) else {}
    overrides = rsl_rl_member.POPULATION_OVERRIDES if rsl_rl else RL_GAMES_OVERRIDES
    return [o for o in overrides if _searched_key(o) not in own]


def _searched_key(override: str) -> str | None:
    """The mutation key an ``agent.pbt.mutation.KEY=...`` override sets (``None`` for any other override)."""
    key = override.split("=", 1)[0]
    return key[len(MUTATION_OVERRIDE) :] if key.startswith(MUTATION_OVERRIDE) else None
