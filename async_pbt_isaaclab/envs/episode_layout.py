"""What a completed episode is recorded as: the term modes, and the row layout of the emitter's buffers.

A per-episode term is reduced from per-step values by its mode (:data:`TermMode`). The
:class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` keeps one row per recorded value in its
``(rows, num_envs)`` accumulator and its ring buffer; :class:`EpisodeLayout` says which row holds what. Rows, not
columns, so that each mode's block is a contiguous slab one ``torch.stack(out=...)`` writes in one kernel. Nothing
here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

TermMode = Literal["sum", "last", "max", "log"]
"""How a per-episode term is computed from per-step values.

* ``"sum"``: sum over the episode's steps (reward terms).
* ``"last"``: value at the episode's final step (a success flag, a final distance).
* ``"max"``: maximum over the episode's steps (for example "ever reached the goal").
* ``"log"``: the value of the same-named key of Isaac Lab's ``extras["log"]`` at the step the episode
  finished. That value is a batch mean over all envs reset in that step, so it is exact only when one env
  finishes per step; with several simultaneous finishes every one of them receives the same mean.
"""

TERM_MODES: tuple[str, ...] = ("sum", "last", "max", "log")
"""All accepted term modes."""


def default_term_mode(name: str) -> str:
    """Mode used for a term not listed in ``term_modes``.

    Isaac Lab log keys look like ``"Episode_Reward/success"`` or ``"Curriculum/terrain_levels"``, so a name
    containing ``/`` is read from ``extras["log"]``; any other name is a per-step value to be summed.
    """
    return "log" if "/" in name else "sum"


@dataclass(frozen=True)
class EpisodeLayout:
    """Rows of the emitter's buffers: return and length, the summed terms, the maxima, the truncated flag, the
    last-step and log terms, then the segment an episode began in and whether its segment had settled."""

    term_names: tuple[str, ...]
    """Recorded terms, in batch order."""
    term_modes: dict[str, str]
    """Mode of each term."""
    sum_terms: tuple[str, ...]
    """Terms summed over the episode (their rows follow return and length, which are sums too)."""
    max_terms: tuple[str, ...]
    """Terms maximised over the episode."""
    last_terms: tuple[str, ...]
    """Terms taken at the episode's final step (their rows follow the truncated flag, itself a last-step value)."""
    log_terms: tuple[str, ...]
    """Terms read from ``extras["log"]`` at the final step (last-step rows too)."""
    row: dict[str, int]
    """Row of every value: the term names, and ``__return``, ``__length``, ``__truncated``, ``__segment``,
    ``__settled``."""

    @classmethod
    def build(cls, term_names: Sequence[str], term_modes: Mapping[str, str] | None = None) -> EpisodeLayout:
        """The layout of ``term_names``; a name missing from ``term_modes`` gets :func:`default_term_mode`.
        Raises ``ValueError`` for duplicate names, modes of unknown terms and unknown modes."""
        names = list(term_names)
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate term names in {names}")
        given = dict(term_modes or {})
        unknown = set(given) - set(names)
        if unknown:
            raise ValueError(f"term_modes names terms that are not in term_names: {sorted(unknown)}")
        modes = {name: given.get(name, default_term_mode(name)) for name in names}
        for name, mode in modes.items():
            if mode not in TERM_MODES:
                raise ValueError(f"term {name!r}: unknown mode {mode!r}, expected one of {TERM_MODES}")
        by_mode = {mode: tuple(n for n in names if modes[n] == mode) for mode in TERM_MODES}
        order = [
            "__return",
            "__length",
            *by_mode["sum"],
            *by_mode["max"],
            "__truncated",
            *by_mode["last"],
            *by_mode["log"],
            "__segment",
            "__settled",
        ]
        return cls(
            term_names=tuple(names),
            term_modes=modes,
            sum_terms=by_mode["sum"],
            max_terms=by_mode["max"],
            last_terms=by_mode["last"],
            log_terms=by_mode["log"],
            row={name: i for i, name in enumerate(order)},
        )

    @property
    def num_rows(self) -> int:
        """Rows of the buffers."""
        return len(self.row)

    @property
    def sum_rows(self) -> int:
        """The summed rows are ``[0, sum_rows)``: return, length and the summed terms."""
        return 2 + len(self.sum_terms)

    @property
    def max_rows(self) -> tuple[int, int]:
        """``(start, stop)`` of the maximised rows."""
        return self.sum_rows, self.sum_rows + len(self.max_terms)

    @property
    def last_rows(self) -> tuple[int, int]:
        """``(start, stop)`` of the last-step rows: the truncated flag, the last and the log terms."""
        return self.max_rows[1], self.row["__segment"]
