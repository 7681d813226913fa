"""What a trainer's live setter is: the one function that sets one hyperparameter on a running trainer.

Each trainer subpackage keeps its table of them (``rl_games/live.py``, ``rsl_rl/live.py``); most are an attribute
of the running agent or algorithm that the trainer reads at every update, made by :func:`attribute_setter`.
"""

from __future__ import annotations

from typing import Any, Callable

Setter = Callable[[Any, Any], None]
"""``(running, value) -> None``: sets one hyperparameter on a running agent or algorithm."""


def attribute_setter(name: str, cast: Callable[[Any], Any] = float) -> Setter:
    """A setter that writes ``cast(value)`` to the attribute ``name``."""

    def set_(running: Any, value: Any) -> None:
        setattr(running, name, cast(value))

    return set_
