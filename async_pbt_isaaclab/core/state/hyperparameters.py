"""The type of a member's hyperparameters: key (``learning_rate``, ``network.log_std_bounds.low``) to a JSON scalar.

Plain dicts at run time, so records, ``state.json`` and audit entries keep their JSON form exactly; the aliases say
what a decision reads and returns where ``dict[str, Any]`` said nothing.
"""

from __future__ import annotations

from typing import Mapping, TypeAlias

HyperparameterValue: TypeAlias = "float | int | bool | str"
"""One value: a number (``int`` and ``bool`` included, as JSON has them) or a ``choice`` kind's string."""

Hyperparameters: TypeAlias = "dict[str, HyperparameterValue]"
"""A member's hyperparameters (a new generation's, a record's), owned by whoever holds it."""

HyperparameterView: TypeAlias = "Mapping[str, HyperparameterValue]"
"""Hyperparameters a function reads and does not change."""
