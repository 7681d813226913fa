"""The summary-source contract between env layers and the PBT observer.

An rl_games vec-env (the CPU gymnasium one, or Isaac Lab's ``RlGamesVecEnvWrapper`` around our
``PbtIsaacLabEnv``) carries, somewhere along its wrapper chain, an attribute ``pbt_summary_source``
that is a :class:`SummarySource`:

* ``drain() -> EpisodeBatch``: the episodes completed since the last drain, then forgets them;
* ``start_generation(g)``: episodes completing from now on are labelled generation ``g``.

A source that also has ``set_settle_max_steps`` (a :class:`SettlingSummarySource`, as
:class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` is) gets the population's
``settle_max_steps`` from the observer.

The observer finds it with :func:`find_summary_source` and never needs to know which env layer it
runs on. It lives in the member layer, which consumes it; the env layers above implement it. It imports nothing
heavy, so every env layer and trainer adapter can share it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from async_pbt_isaaclab.member.env_values import find_on_chain

if TYPE_CHECKING:
    from async_pbt_isaaclab.core.state.evidence import EpisodeBatch

SUMMARY_SOURCE_ATTR = "pbt_summary_source"
"""Attribute of a vec-env or wrapper that holds its episode-summary source."""


@runtime_checkable
class SummarySource(Protocol):
    """What the PBT observer needs from an env's completed-episode evidence."""

    def drain(self) -> EpisodeBatch:
        """The episodes completed since the last drain (then forgotten), with their condition label."""
        ...

    def start_generation(self, generation: int) -> None:
        """Label episodes completing from now on with ``generation``; episodes in flight were begun by the
        previous policy and are not counted for it."""
        ...


@runtime_checkable
class SettlingSummarySource(SummarySource, Protocol):
    """A summary source whose settling gate (episodes begun before a change do not count) has a step cap."""

    def set_settle_max_steps(self, steps: int | None) -> None:
        """Cap the settling gate: a new generation's episodes count after ``steps`` env steps even if some env
        has not finished an episode begun in it (``None`` or negative: no cap)."""
        ...


def find_summary_source(obj: Any) -> SummarySource | None:
    """The episode-summary source reachable from ``obj``, or None.

    ``obj`` may be an rl_games agent (looks at ``obj.vec_env``), a vec-env, or a wrapper; wrappers are
    followed through ``.env`` and ``.unwrapped`` (a few levels, cycles ignored) so an Isaac Lab
    ``RlGamesVecEnvWrapper`` around an env that carries the source is found too.
    """
    source: SummarySource | None = find_on_chain(obj, SUMMARY_SOURCE_ATTR)
    return source
