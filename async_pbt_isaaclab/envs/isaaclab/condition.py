"""What an Isaac Lab env contributes to the condition label of its evidence, besides the task and objective.

* :func:`curriculum_reader`: where the curriculum stage is read (an ``extras["log"]`` key, an env attribute, a
  function);
* :func:`format_stage`: the curriculum stage as a label string (numbers optionally binned), so a continuous value
  such as the mean terrain level does not start a new condition at every reset;
* :func:`reward_fingerprint`: a short hash of the env config's reward definition, so members optimising different
  rewards (a weight overridden for one of them) do not compare their evidence.

Episodes collected under another label are not compared. Nothing here imports ``isaaclab`` or torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import re
from typing import Any, Callable, Iterable, Mapping

from async_pbt_isaaclab.envs.isaaclab.terms import load_callable, resolve_attr


def _host_value(value: Any) -> Any:
    """A curriculum value as a Python scalar or string (tensors are read back: a host synchronisation)."""
    if hasattr(value, "detach") and hasattr(value, "numel"):
        value = value.detach()
        value = value.float().mean().item() if value.numel() != 1 else value.item()
    return value


def format_stage(value: Any, bin_width: float | None = None) -> str:
    """The condition-label string of a curriculum value (numbers binned to ``floor(v / bin) * bin``)."""
    value = _host_value(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        v = float(value)
        if not math.isfinite(v):
            return str(v)
        if bin_width:
            v = math.floor(v / bin_width + 1e-9) * bin_width
        return f"{v:g}"
    return str(value)


_REWARD_FIELD = re.compile(r"reward|penalty|bonus|success", re.IGNORECASE)


def _public_fields(obj: Any) -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    try:
        return [(k, v) for k, v in vars(obj).items() if not k.startswith("_")]
    except TypeError:
        return []


def _plain(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return None if any(i is None for i in items) else items
    if isinstance(value, Mapping):
        fields = {str(k): _plain(v) for k, v in value.items()}
        return None if any(i is None for i in fields.values()) else fields
    return None


def _without(plain: Any, paths: list[list[str]]) -> Any:
    """``plain`` (a field's plain form) without the nested values at ``paths`` (searched ones)."""
    for path in paths:
        parent = plain
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return plain


def _callable_name(fn: Any) -> str:
    if fn is None:
        return ""
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def reward_fingerprint(env_cfg: Any, searched: Iterable[str] = ()) -> str:
    """A short, stable fingerprint of an env config's reward definition ("" when none is recognisable).

    Two members whose fingerprints differ optimise different rewards (a reward weight overridden for one of them),
    so their evidence is not compared. What goes in: each ``env_cfg.rewards.<term>`` of a ``ManagerBasedRLEnvCfg``
    (weight and function), and every top-level number, string or container of numbers whose field name mentions
    reward, penalty, bonus or success (``DirectRLEnvCfg`` tasks define their rewards this way, e.g. Allegro's
    ``rot_reward_scale``, ``reach_goal_bonus`` and ``success_tolerance``, which also defines the success objective).

    ``searched``: the population's ``pbt.mutation`` keys. A value it searches (``env.rewards.<term>.weight``,
    ``env.<field>``) is left out: members differ in it on purpose and are judged by an objective it cannot inflate.
    """
    skip = {k[len("env.") :] for k in searched if k.startswith("env.")}
    items: dict[str, Any] = {}
    rewards = getattr(env_cfg, "rewards", None)
    if rewards is not None and not isinstance(rewards, (int, float, str, Mapping)):
        for name, term in _public_fields(rewards):
            weight = getattr(term, "weight", None)
            if isinstance(weight, (int, float)) and not isinstance(weight, bool):
                kept = None if f"rewards.{name}.weight" in skip else float(weight)
                items[f"rewards.{name}"] = [kept, _callable_name(getattr(term, "func", None))]
    for name, value in _public_fields(env_cfg):
        if name == "rewards" or name in skip or not _REWARD_FIELD.search(name):
            continue
        plain = _without(_plain(value), [p.split(".")[1:] for p in skip if p.split(".")[0] == name])
        if plain is not None:
            items[name] = plain
    if not items:
        return ""
    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
    return f"sha256:{digest[:16]}"


def curriculum_reader(curriculum: str | Callable[[Any], Any] | None) -> Callable[[Any, Any], Any] | None:
    """``f(env, extras)`` reading the curriculum stage from the source ``curriculum`` (``log:<key>`` in
    ``extras["log"]``, ``attr:<path>`` of the env, ``<module>:<function>``, or a callable ``f(env)``); ``None`` for
    no curriculum. The value read is ``None`` while the source has nothing yet."""
    if curriculum is None:
        return None
    if callable(curriculum):
        return lambda env, extras: curriculum(env)
    kind, _, target = str(curriculum).partition(":")
    if kind == "log":
        return lambda env, extras: (extras or {}).get("log", {}).get(target) if isinstance(extras, Mapping) else None
    if kind == "attr":
        return lambda env, extras: resolve_attr(env, target)
    fn = load_callable(str(curriculum))
    return lambda env, extras: fn(env)


__all__ = ["curriculum_reader", "format_stage", "reward_fingerprint"]
