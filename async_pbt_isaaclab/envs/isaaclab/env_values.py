"""Searched Isaac Lab env values: ``pbt.mutation`` keys ``env.<path>``, the path of a value in the task's env config.

The key is the entry scripts' own Hydra override of that value (``env.rewards.track_lin_vel_xy_exp.weight=2.0``), so
the restart path writes it back as typed. How each key reaches the running env (:class:`IsaacLabEnvValues`):

* ``env.rewards.<term>.weight`` and ``env.rewards.<term>.params.<name>`` of a manager-based task: **live**, through
  the reward manager's term config (``reward_manager.get_term_cfg`` / ``set_term_cfg``; the manager reads the term
  config at every ``compute``; 3.0's experimental warp manager syncs its weight buffer in ``set_term_cfg``);
* ``env.<field>`` of a direct-workflow task whose per-step methods read ``self.cfg.<field>`` (``step``,
  ``_pre_physics_step``, ``_apply_action``, ``_get_observations``, ``_get_rewards``, ``_get_dones``, ``_reset_idx``
  and the task's own methods they call, read from the task class's source): **live**, set on ``env.unwrapped.cfg``;
* any other value of the env config (a field copied into a buffer when the env is built, a nested setting, a
  manager-based task's non-reward value): the **restart path**, the env rebuilt with the override.

At start, :func:`searched_start_values` reads each key's value from the env config before the env is built (a key
naming no field of it is refused there, one line naming the key), and :func:`attach_env_values` refuses a key that
cannot be set live when the member cannot restart (slices of one process, ``exploit_mode: inprocess``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key
from async_pbt_isaaclab.core.decision.plan_inputs import ENV_KEY_REASON
from async_pbt_isaaclab.member.env_values import ENV_VALUES_ATTR

PER_STEP_METHODS = (
    "step",
    "_pre_physics_step",
    "_apply_action",
    "_get_observations",
    "_get_states",
    "_get_rewards",
    "_get_dones",
    "_reset_idx",
)
"""A direct task's methods that run at every env step (or reset): a config field they read is read live."""

_MISSING = object()


def cfg_value(cfg: Any, path: str) -> Any:
    """The value at dotted ``path`` of an env config (attributes, or keys of a dict field); ``_MISSING`` when absent."""
    value = cfg
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        else:
            value = getattr(value, part, _MISSING)
        if value is _MISSING or value is None:
            return _MISSING
    return value


def set_cfg_value(cfg: Any, path: str, value: Any) -> None:
    """Set the value at dotted ``path`` of an env config (the last part an attribute or a dict key)."""
    *head, last = path.split(".")
    parent = cfg_value(cfg, ".".join(head)) if head else cfg
    if isinstance(parent, dict):
        parent[last] = value
    else:
        setattr(parent, last, value)


def _reward_terms(cfg: Any) -> list[str]:
    rewards = getattr(cfg, "rewards", None)
    if rewards is None or isinstance(rewards, (Mapping, int, float, str)):
        return []
    names = vars(rewards) if hasattr(rewards, "__dict__") else {}
    return sorted(n for n, t in names.items() if not n.startswith("_") and hasattr(t, "weight"))


def searched_start_values(env_cfg: Any, keys: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """``(value of each searched env key in env_cfg, one line per key naming no value of it)``."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key in sorted(k for k in keys if is_env_key(k)):
        path = env_parameter(key)
        value = cfg_value(env_cfg, path)
        if value is not _MISSING:
            values[key] = value
            continue
        terms = _reward_terms(env_cfg)
        hint = f"; its reward terms: {', '.join(terms)}" if path.startswith("rewards.") and terms else ""
        problems.append(f"pbt.mutation.{key}: the task's env config ({type(env_cfg).__name__}) has no {path!r}{hint}")
    return values, problems


def step_read_fields(env_class: type) -> frozenset[str]:
    """The config fields (``self.cfg.<field>``) a task class reads in its per-step methods (:data:`PER_STEP_METHODS`)
    and the methods of its own they call, from the source of its classes outside Isaac Lab's."""
    reads: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for cls in reversed(env_class.__mro__):
        if cls is object or cls.__module__.split(".")[0] in ("isaaclab", "gymnasium", "builtins"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                reads[node.name], calls[node.name] = _method_uses(node)
    todo, seen, out = list(PER_STEP_METHODS), set(), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in reads:
            continue
        seen.add(name)
        out |= reads[name]
        todo.extend(calls[name])
    return frozenset(out)


def _method_uses(node: ast.AST) -> tuple[set[str], set[str]]:
    """``(fields of self.cfg read, methods of self called)`` inside a method."""
    fields, methods = set(), set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute):
            inner = sub.value
            if isinstance(inner.value, ast.Name) and inner.value.id == "self" and inner.attr == "cfg":
                fields.add(sub.attr)
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if isinstance(sub.func.value, ast.Name) and sub.func.value.id == "self":
                methods.add(sub.func.attr)
    return fields, methods


class IsaacLabEnvValues:
    """The searched env keys of one running Isaac Lab env (see the module docstring): an ``EnvValues``."""

    def __init__(self, env: Any, keys: Iterable[str]):
        self.env = env.unwrapped
        self.manager: Any = getattr(self.env, "reward_manager", None)
        self.keys = tuple(sorted(k for k in keys if is_env_key(k)))
        self.problems: list[str] = []
        self._how: dict[str, str] = {}
        step_fields = step_read_fields(type(self.env)) if self.manager is None else frozenset()
        for key in self.keys:
            how, problem = self._resolve(env_parameter(key), step_fields)
            self._how[key] = how
            if problem:
                self.problems.append(f"pbt.mutation.{key}: {problem}")

    def _resolve(self, path: str, step_fields: frozenset[str]) -> tuple[str, str]:
        """``(how it is set: term, cfg or restart; the problem with it, if any)``."""
        parts = path.split(".")
        if self.manager is not None and parts[0] == "rewards":
            terms = list(self.manager.active_terms)
            if len(parts) < 2 or parts[1] not in terms:
                named = ".".join(parts[1:2])
                return "", f"the task's reward manager has no term {named!r}; its terms: {', '.join(terms)}"
            term = self.manager.get_term_cfg(parts[1])
            if parts[2:] == ["weight"] or (len(parts) == 4 and parts[2] == "params" and parts[3] in term.params):
                return "term", ""
            return "", f"a reward term's weight or params.<name> is searched, not {'.'.join(parts[2:])!r}"
        if cfg_value(self.env.cfg, path) is _MISSING:
            return "", f"the task's env config ({type(self.env.cfg).__name__}) has no {path!r}"
        return ("cfg" if len(parts) == 1 and parts[0] in step_fields else "restart"), ""

    def refuse_restart(self, why: str) -> None:
        """This member cannot restart (``why``): every key not set live is a problem."""
        for key in self.keys:
            if self._how.get(key) == "restart":
                self.problems.append(
                    f"pbt.mutation.{key}: the running env does not read it again (the env is built with it), and {why}"
                )

    # ------------------------------------------------------------------ EnvValues
    def live_keys(self) -> frozenset[str]:
        return frozenset(k for k, how in self._how.items() if how in ("term", "cfg"))

    def key_reasons(self) -> Mapping[str, str]:
        return {k: ENV_KEY_REASON for k, how in self._how.items() if how == "restart"}

    def read(self, key: str) -> Any:
        parts = env_parameter(key).split(".")
        if self._how.get(key) == "term":
            term = self.manager.get_term_cfg(parts[1])
            return term.weight if parts[2] == "weight" else term.params[parts[3]]
        return cfg_value(self.env.cfg, ".".join(parts))

    def set_live(self, values: Mapping[str, Any]) -> None:
        for key, value in sorted(values.items()):
            path = env_parameter(key)
            if self._how.get(key) == "term":
                self._set_term(path.split("."), value)
            elif self._how.get(key) != "cfg":
                raise KeyError(f"{key}: not set on the running env ({ENV_KEY_REASON})")
            # The env config says what the env runs with (its dump, the next start's fingerprint), terms too.
            if cfg_value(self.env.cfg, path) is not _MISSING:
                set_cfg_value(self.env.cfg, path, value)

    def _set_term(self, parts: list[str], value: Any) -> None:
        term = self.manager.get_term_cfg(parts[1])
        if parts[2] == "weight":
            term.weight = float(value)
        else:
            term.params[parts[3]] = value
        self.manager.set_term_cfg(parts[1], term)

    def overrides(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Each value as the entry scripts' Hydra override: the key itself (``env.<path>``)."""
        return dict(values)


def restart_refused(cfg: Any) -> str:
    """Why a member cannot take a new env value through a restart (empty: it can): ``pbt.exploit_mode: inprocess``."""
    if getattr(cfg, "exploit_mode", "auto") == "inprocess":
        return "pbt.exploit_mode is inprocess (no restart)"
    return ""


def attach_env_values(env: Any, keys: Iterable[str], restart_refused: str = "") -> list[str]:
    """Give ``env`` (the outermost Isaac Lab wrapper the member's vec-env wraps) the :class:`IsaacLabEnvValues` of the
    searched env keys among ``keys``; the problems, one line each (empty: the member can train). ``restart_refused``:
    why this member cannot restart (empty: it can). Members on slices of one env hold theirs per slice instead
    (:mod:`.slice_rewards`)."""
    values = IsaacLabEnvValues(env, keys)
    if not values.keys:
        return []
    if restart_refused:
        values.refuse_restart(restart_refused)
    setattr(env, ENV_VALUES_ATTR, values)
    return values.problems


__all__ = [
    "PER_STEP_METHODS",
    "IsaacLabEnvValues",
    "attach_env_values",
    "restart_refused",
    "cfg_value",
    "searched_start_values",
    "set_cfg_value",
    "step_read_fields",
]
