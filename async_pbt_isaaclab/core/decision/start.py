"""The diverse start: a new member's searched hyperparameters drawn within their mutation bounds.

At a member's first start (never on a resume or restart) every key of ``pbt.mutation`` is drawn from the
member's own RNG, which comes from (population seed, member index)
(:meth:`~async_pbt_isaaclab.core.state.member_rng.MemberRng.for_member`), so the draw is reproducible and differs
between populations. Member 0, the reference, keeps the yaml's values. Per kind:

* ``log_float``: log-uniform; ``discount``: uniform on ``log(1 - x)``; ``log_shift`` and ``int``: uniform;
  ``choice``: uniform among the choices.
* ``start_spread`` (``s``): the draw covers a window of ``s`` times the (log-, 1-x-) range of the bounds,
  centred on the yaml value and moved inside the bounds where it would cross them; ``s = 1`` is the whole
  bounds, ``s = 0`` is off (the session then draws nothing). A ``choice`` draws among all choices for any
  ``s > 0``.
* A ``log_float`` value of exactly 0 stays 0 unless its spec sets ``from_zero`` (the window is then centred
  there), as in :func:`~async_pbt_isaaclab.core.decision.mutation.mutate`.
* Stratified (Latin hypercube) when the population seed is known: each key's window is cut into
  ``num_policies - 1`` equal strata (on the scale above) and the population seed deals them out, one per
  non-reference member, by a permutation of its own per key (:func:`stratum`); the member's RNG places it within
  its stratum. Independent draws can leave the whole population on one side: with 4 members, all three draws of a
  learning rate fall in the lower half of its log range one time in eight (the study's ``no_learn`` case, seed 1,
  drew 1e-6..6e-5 from [1e-6, 1e-2] and never learnt). Every member computes the same deal from the seed alone,
  with no coordination; the ``initial_draw`` entry records the seed (``strata_seed``) for the verifier.

One draw per key, in sorted key order, whatever the values: the verifier replays an ``initial_draw`` audit
entry through :func:`initial_draw` and compares.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np

from async_pbt_isaaclab.core.config import REFERENCE_MEMBER, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import Change, MutationSpec, isaaclab_key
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.decision.step import InitialMutation
from async_pbt_isaaclab.core.decision.value_draws import Stratum, draw_value
from async_pbt_isaaclab.core.state.hyperparameters import HyperparameterView
from async_pbt_isaaclab.core.state.member_rng import MemberRng

__all__ = [
    "REFERENCE_MEMBER",
    "Stratum",
    "command_line_keys",
    "draw_value",
    "initial_draw",
    "kept_from_start",
    "stratum",
]


_STRATA_STREAM = 0x57A7A
"""Mixed into the population seed for the strata permutations, apart from every member's stream
(``SeedSequence([seed, member])``)."""


def stratum(strata_seed: int, num_policies: int, member: int, key_index: int) -> Stratum:
    """Member ``member``'s stratum of the ``key_index``-th searched key (sorted order): a permutation of the
    ``num_policies - 1`` strata drawn from the population seed alone, so each member computes the whole deal."""
    count = max(num_policies - 1, 1)
    order = np.random.Generator(np.random.PCG64(np.random.SeedSequence([strata_seed, _STRATA_STREAM, key_index])))
    return Stratum(int(order.permutation(count)[(member - 1) % count]), count)


def command_line_keys(
    args: Iterable[str],
    keys: Iterable[str],
    override_name: Callable[[str], str] = isaaclab_key,
    flag_name: Callable[[str], str | None] | None = None,
) -> tuple[str, ...]:
    """The ``keys`` (searched ones: a population's ``mutation``, a checkpoint's values) whose value an override among
    ``args`` sets, sorted; anything else is ignored.
    ``override_name(key)``: the trainer's own override of ``key`` (rl_games: ``agent.params.config.<key>``; an rsl_rl
    member's names its runner config's keys), matched with or without its ``agent.`` and a leading ``+``. An env key
    is matched by its own name too (``env.<path>=``: Isaac Lab's override of an env config value).
    ``flag_name(key)``: where the trainer's own parser takes ``key`` as a flag too (mjlab's tyro:
    ``--agent.algorithm.learning-rate 1e-3``), its name (``None``: no flag); matched as ``--name VALUE`` or
    ``--name=VALUE``, hyphens and underscores alike."""
    names: dict[str, str] = {}
    flags: dict[str, str] = {}
    for key in keys:
        name = override_name(key)
        names.update({name: key, name.removeprefix("agent."): key})
        if is_env_key(key):
            names[key] = key
        flag = None if flag_name is None else flag_name(key)
        if flag:
            flags[_flag_spelling(flag)] = key
    typed = (arg.split("=", 1)[0].strip().lstrip("+") for arg in args if "=" in arg and not arg.startswith("-"))
    flagged = (_flag_spelling(arg[2:].split("=", 1)[0]) for arg in args if arg.startswith("--"))
    return tuple(sorted({names[name] for name in typed if name in names} | {flags[f] for f in flagged if f in flags}))


def _flag_spelling(name: str) -> str:
    """A flag's name as compared: tyro writes ``learning_rate`` as ``learning-rate`` and accepts either."""
    return name.strip().replace("-", "_")


def kept_from_start(key: str, spec: MutationSpec, pinned: Iterable[str] = ()) -> str | None:
    """Why the diverse start keeps ``key`` at its configured value for every member, or ``None`` when it draws it:
    the spec says so (``diverse_start: false``), or the value was set on the command line (``pinned``) and the spec
    does not ask for the draw anyway (``diverse_start: true``). A value typed on purpose is not replaced silently."""
    if spec.diverse_start is False:
        return f"pbt.mutation.{key}.diverse_start is false"
    if spec.diverse_start is None and key in set(pinned):
        return f"set on the command line (pbt.mutation.{key}.diverse_start: true draws it anyway)"
    return None


def initial_draw(
    member: int,
    hyperparameters: HyperparameterView,
    cfg: PopulationConfig,
    rng_state: Mapping[str, Any],
    strata_seed: int | None = None,
    pinned: Iterable[str] = (),
) -> InitialMutation:
    """Draw every key of ``cfg.mutation`` within its bounds (``cfg.start_spread`` of them around the yaml
    value), stratified across the population when ``strata_seed`` (the population seed) is given; member 0
    keeps the yaml's values and draws nothing, and so does every member for a key :func:`kept_from_start` names
    (``pinned``: the keys set on the command line, recorded in the entry). Pure."""
    rng = MemberRng.from_state(rng_state)
    before = rng.get_state()
    start = dict(hyperparameters)
    pinned = tuple(sorted(set(pinned)))
    if member == REFERENCE_MEMBER or cfg.start_spread <= 0:
        return InitialMutation(start, dict(start), (), before, before, strata_seed, pinned)
    new = dict(start)
    changes: list[Change] = []
    for key_index, key in enumerate(sorted(cfg.mutation)):
        if key not in start:
            raise KeyError(f"hyperparameter {key!r} has a mutation spec but no current value")
        spec, old = cfg.mutation[key], start[key]
        if kept_from_start(key, spec, pinned) is not None:
            continue  # no draw: the strata of the other keys stay where they were
        part = None if strata_seed is None else stratum(strata_seed, cfg.num_policies, member, key_index)
        value, from_zero = draw_value(old, spec, cfg.start_spread, rng, part)
        if value != old:
            new[key] = value
            changes.append(Change(key, old, value, None, from_zero))
    return InitialMutation(start, new, tuple(changes), before, rng.get_state(), strata_seed, pinned)
