"""The ``pbt_summary:`` section of an agent yaml and the per-episode term sources it names.

:class:`SummaryCfg` is the section (terms, curriculum source, binning, poll period, buffer size), :class:`TermSpec`
one term, :func:`make_term_reader` the reader of a term's per-env values. Nothing here imports ``isaaclab`` or torch.
The wrapper that reads these sources every step is :class:`async_pbt_isaaclab.envs.isaaclab_wrapper.PbtIsaacLabEnv`.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

SUMMARY_SECTION = "pbt_summary"
"""Top-level key of an agent yaml that configures the evidence wrapper (see :class:`SummaryCfg`)."""

SOURCE_KINDS = ("accessor", "attr", "reward", "log")
"""Source prefixes with a fixed meaning; any other ``a.b:c`` is a ``module:function`` callable."""

TERM_MODES = ("sum", "last", "max", "log")
"""Per-episode reductions (see :data:`async_pbt_isaaclab.envs.summary_emitter.TermMode`)."""


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
    :class:`~async_pbt_isaaclab.envs.isaaclab_wrapper.PbtIsaacLabEnv` builds episode evidence.

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
    kind, target = spec.kind, spec.target
    if kind == "accessor":

        def read(env):
            terms = env.get_per_env_terms()
            if target not in terms:
                raise KeyError(
                    f"term {spec.name!r}: {type(env).__name__}.get_per_env_terms() has no {target!r}; "
                    f"it has {sorted(terms)}"
                )
            return terms[target]
    elif kind == "attr":

        def read(env):
            return resolve_attr(env, target)
    elif kind == "reward":

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
    elif kind == "callable":
        fn = load_callable(target)

        def read(env):
            return fn(env)
    else:
        raise ValueError(f"term {spec.name!r}: {kind}: sources are not read per env")
    return read


__all__ = [
    "SOURCE_KINDS",
    "SUMMARY_SECTION",
    "SummaryCfg",
    "TERM_MODES",
    "TermSpec",
    "load_callable",
    "make_term_reader",
    "parse_term_spec",
    "resolve_attr",
]
