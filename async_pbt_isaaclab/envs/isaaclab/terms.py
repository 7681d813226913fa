"""The ``pbt_summary:`` section of an agent yaml and the per-episode term sources it names.

:class:`SummaryCfg` is the section (terms, curriculum source, binning, poll period, buffer size), :class:`TermSpec`
one term, :func:`make_term_reader` the reader of a term's per-env values, :func:`term_specs` and
:func:`with_objective` the recorded terms of a wrapper (the objective included), :func:`task_env` the env they are
read from. Nothing here imports ``isaaclab`` or torch.
The wrapper that reads these sources every step is :class:`async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv`.

Per-episode terms (the candidates for the population objective) come from *sources*, written as strings so an
agent yaml can name them (section ``pbt_summary:``, see :class:`SummaryCfg`):

* ``accessor:<name>``: ``env.unwrapped.get_per_env_terms()[name]`` (the env's own per-env term accessor);
* ``attr:<dotted.path>``: an attribute of ``env.unwrapped``, e.g. ``attr:successes`` (Allegro / Shadow hand
  in-hand tasks count goals reached per env there);
* ``reward:<term>``: the episodic sum of one reward term of a ``ManagerBasedRLEnv``
  (``reward_manager._episode_sums[term]``, the number behind ``extras["log"]["Episode_Reward/<term>"]`` before
  Isaac Lab averages it over envs and divides it by ``max_episode_length_s``);
* ``log:<key>``: ``extras["log"][key]`` at the step the episode ended. Isaac Lab logs *batch means* over the envs
  reset in that step, so every episode finishing in the same step gets the same value: exact only when one env
  finishes per step, an approximation otherwise (use it when nothing per-env exists);
* ``<module>:<function>``: any callable ``f(env_unwrapped) -> Tensor (num_envs,)``.

The env a source is read from is the task's own env: ``env.unwrapped``, or, for a multi-agent task that Isaac Lab's
``multi_agent_to_single_agent`` turned into one agent, the multi-agent env inside that conversion.
"""

from __future__ import annotations

import importlib
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from async_pbt_isaaclab.core.state.evidence import LENGTH_OBJECTIVE, RETURN_OBJECTIVE

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

SUMMARY_SECTION = "pbt_summary"
"""Top-level key of an agent yaml that configures the evidence wrapper (see :class:`SummaryCfg`)."""

CALLABLE_PREFIX = "<terms callable>:"
"""Source of the terms a ``terms`` callable returns (see :func:`term_specs`): read from that callable, not by a
reader."""

SOURCE_KINDS = ("accessor", "attr", "reward", "log")
"""Source prefixes with a fixed meaning; any other ``a.b:c`` is a ``module:function`` callable."""


@dataclass(frozen=True)
class TermSpec:
    """One per-episode term: its name in the evidence, where its per-env values come from and how they reduce."""

    name: str
    """Name in the episode batch (what ``pbt.objective`` refers to)."""
    source: str
    """``accessor:<name>``, ``attr:<path>``, ``reward:<term>``, ``log:<key>`` or ``<module>:<function>``."""
    mode: str = "last"
    """``sum``, ``last``, ``max`` (over the episode's steps) or ``log`` (``extras["log"]`` at the final step)."""

    @property
    def kind(self) -> str:
        prefix = self.source.split(":", 1)[0]
        return prefix if prefix in SOURCE_KINDS else "callable"

    @property
    def target(self) -> str:
        return self.source.split(":", 1)[1] if self.kind != "callable" else self.source


def parse_term_spec(name: str, raw: Any, where: str = "terms") -> TermSpec:
    """A :class:`TermSpec` from yaml: a source string, or ``{source: ..., mode: ...}``. Raises ValueError."""
    if isinstance(raw, str):
        raw = {"source": raw}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}.{name}: expected a source string or {{source: ..., mode: ...}}, got {raw!r}")
    unknown = set(raw) - {"source", "mode"}
    if unknown:
        raise ValueError(f"{where}.{name}: unknown keys {sorted(unknown)}; accepted: source, mode")
    source = raw.get("source")
    if not isinstance(source, str) or ":" not in source or not source.split(":", 1)[1]:
        raise ValueError(
            f"{where}.{name}.source: expected 'accessor:<name>', 'attr:<path>', 'reward:<term>', "
            f"'log:<key>' or '<module>:<function>', got {source!r}"
        )
    kind = source.split(":", 1)[0]
    if kind == "log":
        mode = raw.get("mode", "log")
        if mode != "log":
            raise ValueError(
                f"{where}.{name}: a log: source is read from extras['log'] at the final step; "
                f"its mode must be 'log', got {mode!r}"
            )
    elif kind == "reward":
        mode = raw.get("mode", "last")
        if mode != "last":
            raise ValueError(
                f"{where}.{name}: a reward: source already is the episodic sum; its mode must be 'last', got {mode!r}"
            )
    else:
        mode = raw.get("mode", "last")
        if mode not in ("sum", "last", "max"):
            raise ValueError(f"{where}.{name}.mode: {mode!r} is not accepted; accepted: sum, last, max")
    return TermSpec(name=str(name), source=source, mode=mode)


@dataclass(frozen=True)
class SummaryCfg:
    """The ``pbt_summary:`` section of an agent yaml: how
    :class:`~async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv` builds episode evidence.

    Example (Allegro hand reorientation)::

        pbt_summary:
          terms:
            successes: {source: "attr:successes", mode: last}
          curriculum: null
    """

    terms: tuple[TermSpec, ...] = ()
    """Per-episode terms to record (the objective must be one of them, or episode_return / episode_length)."""
    curriculum: str | None = None
    """Curriculum-stage source (``log:<key>``, ``attr:<path>`` or ``<module>:<function>``); None: no curriculum."""
    curriculum_bin: float | None = None
    """Bin width for a numeric stage (``floor(v / bin) * bin``); None: the value as read."""
    curriculum_poll_steps: int = 1
    """Read the curriculum source every this many env steps."""
    capacity: int | None = None
    """Emitter ring-buffer size in episodes (None: ``max(4 * num_envs, 1024)``)."""

    KEYS = ("terms", "curriculum", "curriculum_bin", "curriculum_poll_steps", "capacity")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None, where: str = SUMMARY_SECTION) -> "SummaryCfg":
        """Parse and validate; every problem is reported at once in one ValueError."""
        raw = dict(raw or {})
        problems: list[str] = []
        unknown = set(raw) - set(cls.KEYS)
        if unknown:
            problems.append(f"{where}: unknown keys {sorted(unknown)}; accepted: {', '.join(cls.KEYS)}")
        terms: list[TermSpec] = []
        raw_terms = raw.get("terms") or {}
        if not isinstance(raw_terms, Mapping):
            problems.append(f"{where}.terms: expected a mapping name -> source, got {raw_terms!r}")
            raw_terms = {}
        for name, spec in raw_terms.items():
            try:
                terms.append(parse_term_spec(str(name), spec, f"{where}.terms"))
            except ValueError as exc:
                problems.append(str(exc))
        curriculum = raw.get("curriculum")
        if curriculum is not None and (
            not isinstance(curriculum, str)
            or ":" not in curriculum
            or curriculum.split(":", 1)[0] in ("accessor", "reward")
        ):
            problems.append(
                f"{where}.curriculum: expected 'log:<key>', 'attr:<path>' or '<module>:<function>', got {curriculum!r}"
            )
        cbin = raw.get("curriculum_bin")
        if cbin is not None and (
            isinstance(cbin, bool) or not isinstance(cbin, (int, float)) or not math.isfinite(cbin) or cbin <= 0
        ):
            problems.append(f"{where}.curriculum_bin: expected a positive number or null, got {cbin!r}")
        poll = raw.get("curriculum_poll_steps", 1)
        if isinstance(poll, bool) or not isinstance(poll, int) or poll < 1:
            problems.append(f"{where}.curriculum_poll_steps: expected an integer >= 1, got {poll!r}")
        capacity = raw.get("capacity")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
            problems.append(f"{where}.capacity: expected an integer >= 1 or null, got {capacity!r}")
        if problems:
            raise ValueError("invalid episode-summary config:\n  - " + "\n  - ".join(problems))
        return cls(
            terms=tuple(terms),
            curriculum=curriculum,
            curriculum_bin=None if cbin is None else float(cbin),
            curriculum_poll_steps=int(poll),
            capacity=capacity,
        )

    @classmethod
    def from_agent_cfg(cls, agent_cfg: Mapping[str, Any]) -> "SummaryCfg":
        """The ``pbt_summary:`` section of an rl_games agent config (an empty config when absent)."""
        return cls.from_dict(agent_cfg.get(SUMMARY_SECTION))


# ============================================================================ sources


def resolve_attr(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def load_callable(spec: str) -> Callable[[Any], Any]:
    module_name, _, attr = spec.partition(":")
    try:
        fn = resolve_attr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {spec!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable")
    return fn


def make_term_reader(spec: TermSpec) -> Callable[[Any], "torch.Tensor"]:
    """``reader(env_unwrapped) -> Tensor (num_envs,)`` for a non-``log`` term (no host synchronisation)."""
    build = _READERS.get(spec.kind)
    if build is None:
        raise ValueError(f"term {spec.name!r}: {spec.kind}: sources are not read per env")
    return build(spec)


def _accessor_reader(spec: TermSpec) -> Callable[[Any], "torch.Tensor"]:
    """``accessor:KEY``: the env's ``get_per_env_terms()[KEY]``."""
    target = spec.target

    def read(env):
        terms = env.get_per_env_terms()
        if target not in terms:
            raise KeyError(
                f"term {spec.name!r}: {type(env).__name__}.get_per_env_terms() has no {target!r}; "
                f"it has {sorted(terms)}"
            )
        return terms[target]

    return read


def _attr_reader(spec: TermSpec) -> Callable[[Any], "torch.Tensor"]:
    """``attr:PATH``: an attribute path of the env."""
    target = spec.target

    def read(env):
        return resolve_attr(env, target)

    return read


def _reward_reader(spec: TermSpec) -> Callable[[Any], "torch.Tensor"]:
    """``reward:TERM``: the reward manager's running episode sum of one reward term."""
    target = spec.target

    def read(env):
        manager = getattr(env, "reward_manager", None)
        sums = getattr(manager, "_episode_sums", None)
        if sums is None:
            raise TypeError(
                f"term {spec.name!r}: source reward:{target} needs a ManagerBasedRLEnv "
                f"(reward_manager._episode_sums); {type(env).__name__} has none"
            )
        if target not in sums:
            raise KeyError(f"term {spec.name!r}: no reward term {target!r}; terms: {sorted(sums)}")
        return sums[target]

    return read


def _callable_reader(spec: TermSpec) -> Callable[[Any], "torch.Tensor"]:
    """``module:function``: the function, called with the env (loaded once, here)."""
    fn = load_callable(spec.target)

    def read(env):
        return fn(env)

    return read


_READERS: dict[str, Callable[[TermSpec], Callable[[Any], "torch.Tensor"]]] = {
    "accessor": _accessor_reader,
    "attr": _attr_reader,
    "reward": _reward_reader,
    "callable": _callable_reader,
}
"""The per-env reader of each term source kind (``log`` terms are read from the env's log, not per env)."""


def task_env(unwrapped: Any) -> Any:
    """The env that holds the task's state: ``unwrapped`` itself, or the multi-agent env inside Isaac Lab's
    ``multi_agent_to_single_agent`` conversion (a ``DirectRLEnv`` whose ``.env`` has ``possible_agents``).

    The conversion steps the multi-agent env, which resets its own finished envs and keeps the task's buffers; the
    conversion object has none of them.
    """
    inner = getattr(unwrapped, "env", None)
    if inner is not None and inner is not unwrapped and hasattr(inner, "possible_agents"):
        return inner
    return unwrapped


def term_specs(terms: Any, term_modes: Mapping[str, str] | None = None) -> tuple[list[TermSpec], Callable | None]:
    """The wrapper's ``terms`` argument as term specs, and the terms callable when ``terms`` is one.

    ``terms``: :class:`TermSpec` objects, a yaml mapping ``name -> source`` (:func:`parse_term_spec`), or a callable
    ``f(env) -> {name: Tensor (num_envs,)}`` whose names and modes ``term_modes`` gives (``sum``, ``last`` or
    ``max``; its specs' sources are ``CALLABLE_PREFIX + name``).
    """
    if callable(terms) and not isinstance(terms, Mapping):
        modes = dict(term_modes or {})
        if not modes:
            raise ValueError("terms given as a callable need term_modes={name: mode} naming every term it returns")
        specs = []
        for name, mode in modes.items():
            if mode not in ("sum", "last", "max"):
                raise ValueError(f"term {name!r}: mode {mode!r} is not accepted for a callable; use sum, last, max")
            specs.append(TermSpec(name=name, source=f"{CALLABLE_PREFIX}{name}", mode=mode))
        return specs, terms
    if isinstance(terms, Mapping):
        return [parse_term_spec(str(k), v) for k, v in terms.items()], None
    specs = list(terms)
    bad = [s for s in specs if not isinstance(s, TermSpec)]
    if bad:
        raise TypeError(f"terms must be TermSpec objects, a mapping or a callable; got {bad[0]!r}")
    return specs, None


def with_objective(specs: list[TermSpec], objective: str | None, base: Any) -> list[TermSpec]:
    """``specs`` with a term for ``objective`` when none of them is it: ``log:<objective>`` for an Isaac Lab log key
    (it contains ``/``; with a warning, it is a batch mean), ``accessor:<objective>`` when ``base``'s
    ``get_per_env_terms()`` has it. Raises ``ValueError`` naming the ways to provide it otherwise."""
    if not objective or objective in (RETURN_OBJECTIVE, LENGTH_OBJECTIVE) or any(s.name == objective for s in specs):
        return specs
    if "/" in objective:
        # An Isaac Lab PbtCfg objective ("episode.Episode_Reward/success" -> "Episode_Reward/success").
        warnings.warn(
            f"objective {objective!r} is read from extras['log'] (a batch mean over the envs reset in "
            f"a step): episodes finishing in the same step share its value. Give a per-env source in "
            f"{SUMMARY_SECTION}.terms for exact per-episode evidence.",
            stacklevel=3,
        )
        return [*specs, TermSpec(objective, f"log:{objective}", "log")]
    accessor = getattr(base, "get_per_env_terms", None)
    if accessor is not None and objective in accessor():
        return [*specs, TermSpec(objective, f"accessor:{objective}", "last")]
    raise ValueError(
        f"objective {objective!r} has no per-episode source: it is neither episode_return, episode_length nor a "
        f"term of {SUMMARY_SECTION}.terms ({[s.name for s in specs]}). Add it, e.g. "
        f"`{SUMMARY_SECTION}: {{terms: {{{objective}: {{source: 'attr:{objective}', mode: last}}}}}}` "
        f"(sources: accessor:, attr:, reward:, log:, module:function)"
    )


__all__ = [
    "CALLABLE_PREFIX",
    "SOURCE_KINDS",
    "SUMMARY_SECTION",
    "SummaryCfg",
    "TermSpec",
    "load_callable",
    "make_term_reader",
    "parse_term_spec",
    "resolve_attr",
    "task_env",
    "term_specs",
    "with_objective",
]
