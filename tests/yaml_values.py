"""Comparing our agent yamls with the upstream yamls they are adapted from (rl_games', Isaac Lab's), value by value."""

from __future__ import annotations

from typing import Any


def yaml11_number(value: Any) -> Any:
    """A number as its reader uses it: YAML 1.1 loads ``5e-4`` (no dot) as a string, which rl_games reads with
    float(); any other value is returned as it is."""
    if not isinstance(value, str):
        return value
    try:
        return float(value)
    except ValueError:
        return value


def flat_settings(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"config.gamma": 0.99, "network.mlp.units": [...], ...}``: every leaf of a nested dict by its dotted path,
    numbers as :func:`yaml11_number` reads them."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = yaml11_number(value)
    return out


def changed_settings(ours: dict[str, Any], upstream: dict[str, Any]) -> set[str]:
    """The dotted paths whose value differs between two nested dicts, or that only one of them has."""
    a, b = flat_settings(ours), flat_settings(upstream)
    missing = object()
    return {k for k in a.keys() | b.keys() if a.get(k, missing) != b.get(k, missing)}
