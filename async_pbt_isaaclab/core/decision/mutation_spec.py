"""How one hyperparameter may change (:class:`MutationSpec`): its kind, bounds and factor range. Read by the config
parser, drawn from by ``value_draws`` and mutated by ``mutation``; apart from both so that neither imports the
other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MUTATION_KINDS = ("log_float", "discount", "log_shift", "int", "choice")
"""Accepted values of ``MutationSpec.kind``."""

ENV_KEY_PREFIX = "env."
"""Searched env values are named ``env.<parameter>`` (``env.healthy_reward``): a value the env is built with (a
gymnasium constructor argument, under ``params.config.env_config`` of an rl_games agent), searched beside the
trainer's hyperparameters with the same kinds, bounds, audit and lineage. Nothing sets one on a running trainer:
an exploit or explore that changes one rebuilds the env (the restart path)."""


def is_env_key(key: str) -> bool:
    """``key`` names a searched env value (``env.<parameter>``), not a trainer hyperparameter."""
    return key.startswith(ENV_KEY_PREFIX)


def env_parameter(key: str) -> str:
    """The env's own name of a searched env key: ``env.healthy_reward`` -> ``healthy_reward``."""
    return key[len(ENV_KEY_PREFIX) :]


@dataclass(frozen=True)
class MutationSpec:
    """How one hyperparameter may change. Every result lies in ``[low, high]``."""

    kind: str = "log_float"
    """One of ``MUTATION_KINDS``."""
    low: float = 0.0
    """Smallest allowed value (inclusive)."""
    high: float = 1.0
    """Largest allowed value (inclusive)."""
    change_range: tuple[float, float] | None = None
    """Factor range for ``log_float``/``discount``/``log_shift``; ``None`` uses the population's ``change_range``."""
    step: int = 1
    """Largest step for ``int`` (a step in ``1..step`` is drawn)."""
    choices: tuple[Any, ...] = ()
    """Allowed values for ``choice``."""
    from_zero: float | None = None
    """``log_float``: where a drawn value of exactly 0 jumps to (inside the bounds); ``None``: a 0 stays 0."""
    diverse_start: bool | None = None
    """Whether the diverse start draws this key: ``False`` keeps the configured value for every member, ``True``
    draws it even when the command line set it; ``None`` (not given): drawn, unless the command line set it."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the ``mutation`` mapping of a recorded config)."""
        out: dict[str, Any] = {"kind": self.kind, "low": self.low, "high": self.high}
        if self.change_range is not None:
            out["change_range"] = list(self.change_range)
        if self.kind == "int":
            out["step"] = self.step
        if self.kind == "choice":
            out["choices"] = list(self.choices)
        if self.from_zero is not None:
            out["from_zero"] = self.from_zero
        if self.diverse_start is not None:
            out["diverse_start"] = self.diverse_start
        return out
