"""Searched env values (``env.*`` keys) that the running env sets itself, beside the trainer's hyperparameters.

Without this, an env key is a value the env is built with: the member's restart path rebuilds the env with a new
one (the CPU fallback's gymnasium constructor arguments). An env layer that can set some of them on the running env
(Isaac Lab: a manager-based task's reward term weights through its reward manager, a direct task's config values
read at every step) carries an :class:`EnvValues` on its wrapper chain as ``pbt_env_values``; the member then
trains a :class:`WithEnvValues`, the trainer with those keys added to what it sets live. The trainer adapters stay
as they are: this is a wrapper around any of them, and the member loop sees one :class:`~.trainer.Trainer`.

:func:`with_env_values` is called where a member's trainer is made (the rl_games observer, the rsl_rl member
events). It sets the member's live env values on the env at once (a first start's draw, a resume), and a value
that cannot be set live and differs from the one the env was built with (a first start's draw of a restart-path
key, a resume whose command line lacks the override) restarts the process with the override before training.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, runtime_checkable

from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.decision.plan_inputs import TrainerAbilities
from async_pbt_isaaclab.member import restart as process

ENV_VALUES_ATTR = "pbt_env_values"
"""Attribute of an env wrapper that holds its :class:`EnvValues`."""
SLICE_ENV_VALUES_ATTR = "pbt_slice_env_values"
"""Attribute of a shared env (``--pbt-slices``) that holds ``(start, stop, keys) -> EnvValues`` of envs
``[start, stop)``, whose ``problems`` name the keys it cannot hold per slice."""


@runtime_checkable
class EnvValues(Protocol):
    """The searched env keys of a running env: which it sets live, and how a restart carries the others."""

    def live_keys(self) -> frozenset[str]:
        """The searched env keys set on the running env (from the next step on)."""
        ...

    def key_reasons(self) -> Mapping[str, str]:
        """Why each other searched env key is not set live (the restart path rebuilds the env with it)."""
        ...

    def read(self, key: str) -> Any:
        """The value ``key`` has in the running env."""
        ...

    def set_live(self, values: Mapping[str, Any]) -> None:
        """Set each of ``values`` (live keys only) on the running env."""
        ...

    def overrides(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The command-line overrides that build the env with ``values`` at a restart."""
        ...


def find_on_chain(obj: Any, attribute: str) -> Any:
    """The first value of ``attribute`` on ``obj`` or what it wraps (followed through ``vec_env``, ``env`` and
    ``unwrapped``, breadth first, a few levels, cycles ignored); ``None`` when nothing along the chain has it."""
    seen: set[int] = set()
    todo = [obj]
    while todo:
        cur = todo.pop(0)
        if cur is None or id(cur) in seen or len(seen) > 16:
            continue
        seen.add(id(cur))
        found = getattr(cur, attribute, None)
        if found is not None:
            return found
        for attr in ("vec_env", "env", "unwrapped"):
            try:
                nxt = getattr(cur, attr, None)
            except Exception:  # noqa: BLE001 - some wrappers raise on attribute access before reset
                nxt = None
            if nxt is not None and nxt is not cur:
                todo.append(nxt)
    return None


class WithEnvValues:
    """A trainer whose env sets some searched env keys live (see the module docstring); every other call goes to
    the trainer."""

    def __init__(self, trainer: Any, env_values: EnvValues):
        self.trainer = trainer
        self.env_values = env_values

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trainer, name)

    def abilities(self) -> TrainerAbilities:
        base = self.trainer.abilities()
        return dataclasses.replace(
            base,
            live_keys=base.live_keys | self.env_values.live_keys(),
            key_reasons={**base.key_reasons, **self.env_values.key_reasons()},
        )

    def load(self, state: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> None:
        """The env's live values set on the env, the rest given to the trainer with ``state``."""
        env, rest = split_env_values(hyperparameters)
        self.env_values.set_live({k: v for k, v in env.items() if k in self.env_values.live_keys()})
        self.trainer.load(state, rest)

    def restart_overrides(self, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        env, rest = split_env_values(hyperparameters)
        return {**self.trainer.restart_overrides(rest), **self.env_values.overrides(env)}


def split_env_values(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(env keys' values, the others)``."""
    env = {k: v for k, v in values.items() if is_env_key(k)}
    return env, {k: v for k, v in values.items() if k not in env}


def with_env_values(trainer: Any, chain: Any, session: Any, exit_on_restart: bool = False) -> Any:
    """``trainer`` wrapped in :class:`WithEnvValues` when the env reachable from ``chain`` (the agent, runner or
    vec-env) carries :class:`EnvValues`, with the member's searched env values in place (see the module docstring);
    ``trainer`` itself otherwise."""
    env_values = find_on_chain(chain, ENV_VALUES_ATTR)
    if env_values is None:
        return trainer
    mine = {k: v for k, v in session.state.hyperparameters.items() if is_env_key(k) and k in session.cfg.mutation}
    live = env_values.live_keys()
    stale = {k: v for k, v in mine.items() if k not in live and env_values.read(k) != v}
    if stale:
        rebuild(session, env_values.overrides(stale), exit_on_restart)
    env_values.set_live({k: v for k, v in mine.items() if k in live})
    held = ", ".join(f"{k}={env_values.read(k)!r} ({'live' if k in live else 'built'})" for k in sorted(mine))
    print(f"[async-pbt] member {session.member}: env values {held}", flush=True)
    return WithEnvValues(trainer, env_values)


def rebuild(session: Any, overrides: Mapping[str, Any], exit_on_restart: bool) -> None:
    """The env was built with other values than the member's (``overrides`` builds it with them): the process
    starts again with them, from the same checkpoint argument (the member's state is saved; the next start
    resumes it). Never returns."""
    argv = process.restart_argv(session.argv, None, overrides)
    names = ", ".join(f"{k}={v!r}" for k, v in sorted(overrides.items()))
    print(f"[async-pbt] member {session.member}: the env is rebuilt with its own values ({names})", flush=True)
    process.restart_member(session, argv, exit_on_restart)


__all__ = [
    "SLICE_ENV_VALUES_ATTR",
    "ENV_VALUES_ATTR",
    "EnvValues",
    "WithEnvValues",
    "rebuild",
    "find_on_chain",
    "split_env_values",
    "with_env_values",
]
