"""Bounded, reproducible mutation (async_pbt_isaaclab.core.decision.mutation).

What is shown here:
1. (property) every result of every kind lies inside [low, high], for any starting value (inside,
   outside, zero, negative, infinite), any mutation rate and any change range;
2. the kinds do what they say: log_float multiplies/divides by a factor in the change range,
   discount does so on 1-x, int steps by 1..step, choice picks another allowed value;
3. (property) the member RNG state survives json.dumps/loads and the draw sequence continues exactly
   where it stopped (a restart neither replays nor skips draws);
4. explore visits keys in sorted order: dict insertion order does not change the result.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from async_pbt_isaaclab.core.decision.mutation import (
    SUPPORTED_HYPERPARAMETERS,
    MutationSpec,
    mutate,
    mutate_value,
    within_bounds,
)
from async_pbt_isaaclab.core.state.member_rng import MemberRng

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
starting_float = st.one_of(
    finite,
    st.just(0.0),
    st.just(-0.0),
    st.just(float("inf")),
    st.just(-float("inf")),
    st.floats(min_value=1e-300, max_value=1e-200),
)
change_ranges = st.tuples(st.floats(1.0, 4.0), st.floats(0.0, 3.0)).map(lambda t: (t[0], t[0] + t[1]))


@st.composite
def float_specs(draw):
    kind = draw(st.sampled_from(["log_float", "discount", "log_shift"]))
    if kind == "log_float":
        low = draw(st.floats(1e-8, 10.0))
        high = low * draw(st.floats(1.0, 1e4))
    elif kind == "discount":
        low = draw(st.floats(0.0, 0.999))
        high = draw(st.floats(low, 0.9999))
    else:
        low = draw(st.floats(-10.0, 5.0))
        high = low + draw(st.floats(0.0, 10.0))
    cr = draw(st.one_of(st.none(), change_ranges))
    return MutationSpec(kind=kind, low=low, high=high, change_range=cr)


@st.composite
def int_specs(draw):
    low = draw(st.integers(-20, 20))
    high = low + draw(st.integers(0, 30))
    # Bounds may be written as floats (1.5 .. 7.5): results must still be integers inside them.
    # (Config refuses int bounds with no integer between them, e.g. [0.5, 0.5].)
    shift = draw(st.sampled_from([None, "outward", "up"]))
    if shift == "outward":
        low, high = low - 0.5, high + 0.5
    elif shift == "up" and high > low:
        low, high = low + 0.5, high + 0.5
    return MutationSpec(kind="int", low=low, high=high, step=draw(st.integers(1, 10)))


@SETTINGS
@given(spec=float_specs(), value=starting_float, rate=st.floats(0.0, 1.0), cr=change_ranges, seed=st.integers(0, 2**63))
def test_float_kinds_always_inside_bounds(spec, value, rate, cr, seed):
    rng = MemberRng(seed)
    new, changes = mutate({"x": value}, {"x": spec}, rate, cr, rng)
    if changes:  # a drawn key lands inside the bounds; an undrawn one (or a 0 that stays 0) is untouched
        assert spec.low <= new["x"] <= spec.high, (spec, value, new)
    else:
        assert new["x"] == value
    # Direct mutation as well (rate 1 path), for any value.
    mutated, factor = mutate_value(value, spec, cr, MemberRng(seed))
    assert spec.low <= mutated <= spec.high
    lo, hi = spec.change_range or cr
    assert lo - 1e-12 <= max(factor, 1 / factor) <= hi + 1e-12


@SETTINGS
@given(spec=int_specs(), value=st.integers(-1000, 1000), rate=st.floats(0.0, 1.0), seed=st.integers(0, 2**63))
def test_int_kind_always_integer_inside_bounds(spec, value, rate, seed):
    new, changes = mutate({"n": value}, {"n": spec}, rate, (1.1, 2.0), MemberRng(seed))
    assert isinstance(new["n"], int)
    if changes:
        assert spec.low <= new["n"] <= spec.high, (spec, value, new)
    else:
        assert new["n"] == value


@SETTINGS
@given(
    choices=st.lists(st.sampled_from(["adam", "sgd", "rmsprop", "lamb"]), min_size=2, max_size=4, unique=True),
    seed=st.integers(0, 2**63),
)
def test_choice_kind_picks_another_allowed_value(choices, seed):
    spec = MutationSpec(kind="choice", choices=tuple(choices))
    new, changes = mutate({"opt": choices[0]}, {"opt": spec}, 1.0, (1.1, 2.0), MemberRng(seed))
    assert new["opt"] in choices and new["opt"] != choices[0]
    assert within_bounds(new["opt"], spec)
    assert changes[0].old == choices[0] and changes[0].new == new["opt"]


@SETTINGS
@given(value=st.floats(1e-5, 1e-3), seed=st.integers(0, 2**63))
def test_log_float_multiplies_or_divides_by_factor_in_range(value, seed):
    spec = MutationSpec(kind="log_float", low=1e-9, high=1.0)
    new, factor = mutate_value(value, spec, (1.1, 2.0), MemberRng(seed))
    assert new == pytest.approx(value * factor)
    assert 1.1 <= factor <= 2.0 or 1 / 2.0 <= factor <= 1 / 1.1


@SETTINGS
@given(gamma=st.floats(0.95, 0.999), seed=st.integers(0, 2**63))
def test_discount_mutates_one_minus_x(gamma, seed):
    spec = SUPPORTED_HYPERPARAMETERS["gamma"].spec
    spec = MutationSpec(kind="discount", low=0.0, high=0.99999, change_range=spec.change_range)
    new, factor = mutate_value(gamma, spec, (1.1, 2.0), MemberRng(seed))
    assert 1.0 - new == pytest.approx((1.0 - gamma) * factor, rel=1e-9)
    assert new < 1.0
    assert 1.1 <= max(factor, 1 / factor) <= 1.2  # Isaac Lab's mutate_discount range, not change_range


def test_undrawn_key_is_untouched_even_out_of_bounds():
    lr = MutationSpec(kind="log_float", low=1e-6, high=1e-2)
    # Not drawn (rate 0) and outside the bounds (a donor trained with other bounds): it stays as it came.
    new, changes = mutate({"learning_rate": 0.5}, {"learning_rate": lr}, 0.0, (1.1, 2.0), MemberRng(1))
    assert new["learning_rate"] == 0.5 and changes == []
    # Drawn: the mutated value is brought inside.
    new, changes = mutate({"learning_rate": 0.5}, {"learning_rate": lr}, 1.0, (1.1, 2.0), MemberRng(1))
    assert new["learning_rate"] == 1e-2 and [c.key for c in changes] == ["learning_rate"]


def test_zero_stays_zero_unless_the_spec_says_where_it_goes():
    ent = MutationSpec(kind="log_float", low=1e-6, high=0.1)
    new, changes = mutate({"entropy_coef": 0.0}, {"entropy_coef": ent}, 1.0, (1.1, 2.0), MemberRng(1))
    assert new["entropy_coef"] == 0.0 and changes == []
    jump = MutationSpec(kind="log_float", low=1e-6, high=0.1, from_zero=1e-3)
    rng_a, rng_b = MemberRng(1), MemberRng(1)
    new, changes = mutate({"entropy_coef": 0.0}, {"entropy_coef": jump}, 1.0, (1.1, 2.0), rng_a)
    assert new["entropy_coef"] == 1e-3
    assert [c.to_dict() for c in changes] == [
        {"key": "entropy_coef", "old": 0.0, "new": 1e-3, "factor": None, "from_zero": True}
    ]
    # The same draws are consumed either way: the stream does not depend on the values.
    mutate({"entropy_coef": 0.0}, {"entropy_coef": ent}, 1.0, (1.1, 2.0), rng_b)
    assert rng_a.get_state() == rng_b.get_state()
    # An ordinary change's JSON has no from_zero key (entries written before it replay unchanged).
    _, changes = mutate({"entropy_coef": 0.01}, {"entropy_coef": ent}, 1.0, (1.1, 2.0), MemberRng(1))
    assert "from_zero" not in changes[0].to_dict()


def test_legacy_semantics_replay_the_0_1_mutation():
    lr = MutationSpec(kind="log_float", low=1e-6, high=1e-2)
    new, changes = mutate({"learning_rate": 0.5}, {"learning_rate": lr}, 0.0, (1.1, 2.0), MemberRng(1), semantics=1)
    assert new["learning_rate"] == 1e-2 and [(c.old, c.new, c.factor) for c in changes] == [(0.5, 1e-2, None)]
    new, _ = mutate({"x": 0.0}, {"x": lr}, 1.0, (1.1, 2.0), MemberRng(1), semantics=1)
    assert 1e-6 <= new["x"] <= 1e-2


def test_int_step_is_between_one_and_step():
    spec = MutationSpec(kind="int", low=0, high=1000, step=3)
    rng = MemberRng(7)
    seen = set()
    for _ in range(300):
        new, _ = mutate_value(500, spec, (1.1, 2.0), rng)
        seen.add(new - 500)
    assert seen == {-3, -2, -1, 1, 2, 3}


def test_rate_zero_changes_nothing_inside_bounds_and_rate_one_changes_everything():
    specs = {k: SUPPORTED_HYPERPARAMETERS[k].spec for k in ("learning_rate", "gamma", "e_clip", "mini_epochs")}
    hp = {"learning_rate": 3e-4, "gamma": 0.99, "e_clip": 0.2, "mini_epochs": 5}
    new, changes = mutate(hp, specs, 0.0, (1.1, 2.0), MemberRng(3))
    assert new == hp and changes == []
    new, changes = mutate(hp, specs, 1.0, (1.1, 2.0), MemberRng(3))
    assert sorted(c.key for c in changes) == sorted(hp)
    assert all(new[k] != hp[k] for k in hp)


def test_missing_value_for_a_spec_is_an_error():
    with pytest.raises(KeyError, match="gamma"):
        mutate({}, {"gamma": SUPPORTED_HYPERPARAMETERS["gamma"].spec}, 1.0, (1.1, 2.0), MemberRng(0))


# ------------------------------------------------------------------ RNG persistence


@SETTINGS
@given(seed=st.integers(0, 2**64 - 1), before=st.integers(0, 20), after=st.integers(1, 20))
def test_rng_state_round_trips_json_and_continues_the_sequence(seed, before, after):
    specs = {k: SUPPORTED_HYPERPARAMETERS[k].spec for k in ("learning_rate", "gamma", "mini_epochs")}
    hp = {"learning_rate": 3e-4, "gamma": 0.99, "mini_epochs": 5}

    def draws(rng, n):
        out = []
        for _ in range(n):
            out.append(mutate(hp, specs, 0.5, (1.1, 2.0), rng)[0])
            out.append(rng.uniform(0, 1))
            out.append(rng.integers(0, 5))
        return out

    uninterrupted = MemberRng(seed)
    draws(uninterrupted, before)
    expected = draws(uninterrupted, after)

    first_life = MemberRng(seed)
    draws(first_life, before)
    saved = json.dumps({"rng": first_life.get_state()})  # persisted with the member's state
    restarted = MemberRng.from_state(json.loads(saved)["rng"])  # the process after os.execv
    assert restarted.get_state() == first_life.get_state()
    assert draws(restarted, after) == expected


def test_restart_does_not_replay_the_same_draws():
    rng = MemberRng(123)
    first = [rng.random() for _ in range(5)]
    resumed = MemberRng.from_state(json.loads(json.dumps(rng.get_state())))
    assert [resumed.random() for _ in range(5)] != first


def test_invalid_rng_state_is_refused():
    with pytest.raises(ValueError, match="PCG64"):
        MemberRng.from_state({"bit_generator": "MT19937", "state": 1, "inc": 1, "has_uint32": 0, "uinteger": 0})
    with pytest.raises(ValueError, match="invalid RNG state"):
        MemberRng.from_state({"bit_generator": "PCG64"})


# ------------------------------------------------------------------ key order


@SETTINGS
@given(
    seed=st.integers(0, 2**63),
    order=st.permutations(["learning_rate", "gamma", "e_clip", "tau", "mini_epochs"]),
    rate=st.floats(0.0, 1.0),
)
def test_explore_ignores_insertion_order(seed, order, rate):
    hp = {"learning_rate": 3e-4, "gamma": 0.99, "e_clip": 0.2, "tau": 0.95, "mini_epochs": 5}
    specs_sorted = {k: SUPPORTED_HYPERPARAMETERS[k].spec for k in sorted(hp)}
    specs_shuffled = {k: specs_sorted[k] for k in order}
    hp_shuffled = {k: hp[k] for k in order}
    rng_a, rng_b = MemberRng(seed), MemberRng(seed)
    new_a, changes_a = mutate(hp, specs_sorted, rate, (1.1, 2.0), rng_a)
    new_b, changes_b = mutate(hp_shuffled, specs_shuffled, rate, (1.1, 2.0), rng_b)
    assert new_a == new_b
    assert changes_a == changes_b
    assert [c.key for c in changes_a] == sorted(c.key for c in changes_a)  # reported in sorted order
    assert rng_a.get_state() == rng_b.get_state()


def test_defaults_are_valid_specs():
    for key, default in SUPPORTED_HYPERPARAMETERS.items():
        spec = default.spec
        assert spec.low <= spec.high, key
        if spec.kind == "log_float":
            assert spec.low > 0, key
        if spec.kind == "discount":
            assert 0 <= spec.low and spec.high < 1, key
        assert not math.isnan(spec.low)


@given(seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.0, 0.1, 0.25]), keys=st.integers(1, 4))
@settings(max_examples=80, deadline=None)
def test_at_least_min_keys_change_and_the_rest_stay(seed, rate, keys):
    """``min_keys`` (``pbt.min_mutated_keys``): however the coin falls, at least that many keys change, the others
    keep their values exactly; with min_keys 0 the draws are those of the coin alone."""
    specs = {f"k{i}": MutationSpec(kind="log_float", low=1e-6, high=1.0) for i in range(keys)}
    start = {k: 1e-3 for k in specs}
    for wanted in range(0, keys + 1):
        new, changes = mutate(start, specs, rate, (1.1, 2.0), MemberRng(seed), min_keys=wanted)
        assert len(changes) >= wanted
        assert {k for k in specs if new[k] != start[k]} == {c.key for c in changes}
    coin_only = mutate(start, specs, rate, (1.1, 2.0), MemberRng(seed))
    assert coin_only == mutate(start, specs, rate, (1.1, 2.0), MemberRng(seed), min_keys=0)


def test_min_keys_skips_a_zero_that_cannot_move():
    """A log_float 0 without ``from_zero`` cannot change, so the forced key is the other one."""
    specs = {
        "entropy_coef": MutationSpec(kind="log_float", low=1e-6, high=0.1),
        "learning_rate": MutationSpec(kind="log_float", low=1e-6, high=1e-2),
    }
    for seed in range(30):
        new, changes = mutate({"entropy_coef": 0.0, "learning_rate": 1e-3}, specs, 0.0, (1.1, 2.0), MemberRng(seed), 1)
        assert [c.key for c in changes] == ["learning_rate"] and new["entropy_coef"] == 0.0


# ------------------------------------------------------------------ no clones


def _any_spec_and_value():
    """A spec of every kind with a starting value inside its bounds, at a bound half of the time."""
    float_kind = st.tuples(st.sampled_from(["log_float", "discount", "log_shift"]), st.booleans(), st.booleans())

    def build(kind_at):
        kind, at_bound, at_high = kind_at
        low, high = {"log_float": (1e-6, 1e-2), "discount": (0.9, 0.9999), "log_shift": (-5.0, 0.5)}[kind]
        spec = MutationSpec(kind=kind, low=low, high=high)
        value = (high if at_high else low) if at_bound else (low + high) / 2
        return spec, value

    ints = st.tuples(st.integers(1, 16), st.booleans()).map(
        lambda t: (MutationSpec(kind="int", low=1, high=16, step=2), 16 if t[1] else t[0])
    )
    choices = st.just((MutationSpec(kind="choice", choices=("a", "b", "c")), "a"))
    return st.one_of(float_kind.map(build), ints, choices)


@SETTINGS
@given(
    seed=st.integers(0, 2**63),
    keys=st.lists(_any_spec_and_value(), min_size=1, max_size=4),
    rate=st.sampled_from([0.0, 0.25, 1.0]),
    wanted=st.integers(0, 4),
    resample=st.sampled_from([0.0, 0.25, 1.0]),
)
def test_at_least_min_keys_values_change_after_clipping(seed, keys, rate, wanted, resample):
    """Every key here can move; whatever the coin, the bounds and the seed, at least ``min_keys`` of them end with
    another value (counted after clipping: a key pinned at its bound moves inward), and only they are reported."""
    specs = {f"k{i}": spec for i, (spec, _) in enumerate(keys)}
    start = {f"k{i}": value for i, (_, value) in enumerate(keys)}
    new, changes = mutate(start, specs, rate, (1.1, 2.0), MemberRng(seed), wanted, resample)
    moved = {k for k in specs if new[k] != start[k]}
    assert moved == {c.key for c in changes}
    assert len(moved) >= min(wanted, len(specs))
    assert all(within_bounds(new[k], specs[k]) for k in specs)


def test_a_learning_rate_at_its_bound_moves_inward_and_is_never_a_clone():
    """The case of the issue: a donor at the 1e-2 bound. Before, half of all draws pushed outward and were clipped
    back (109 of 200 exploits were clones); now every draw moves it inside."""
    specs = {"learning_rate": MutationSpec(kind="log_float", low=1e-6, high=1e-2)}
    for seed in range(200):
        new, changes = mutate({"learning_rate": 1e-2}, specs, 0.25, (1.1, 2.0), MemberRng(seed), min_keys=1)
        assert 1e-2 / 2.0 <= new["learning_rate"] < 1e-2 and len(changes) == 1
        assert changes[0].factor is not None and changes[0].factor < 1
    ints = {"mini_epochs": MutationSpec(kind="int", low=1, high=16, step=2)}
    for seed in range(50):
        new, _ = mutate({"mini_epochs": 1}, ints, 1.0, (1.1, 2.0), MemberRng(seed))
        assert new["mini_epochs"] in (2, 3)


def test_a_key_that_cannot_move_is_not_counted():
    """A zero-width range cannot change: min_keys moves the other key (and never loops on the stuck one)."""
    specs = {
        "a": MutationSpec(kind="log_float", low=1e-3, high=1e-3),
        "b": MutationSpec(kind="log_float", low=1e-6, high=1.0),
    }
    for seed in range(30):
        new, changes = mutate({"a": 1e-3, "b": 1e-3}, specs, 0.0, (1.1, 2.0), MemberRng(seed), min_keys=2)
        assert [c.key for c in changes] == ["b"] and new["a"] == 1e-3


def test_resampling_jumps_across_the_bounds_and_is_recorded():
    """``resample_probability``: a drawn key is drawn afresh over its whole (log) bounds, so a population stuck
    around 1e-6 can land an order of magnitude or more away in one change."""
    specs = {"learning_rate": MutationSpec(kind="log_float", low=1e-6, high=1e-2)}
    jumps, resampled = [], 0
    for seed in range(400):
        new, (change,) = mutate({"learning_rate": 1e-6}, specs, 1.0, (1.1, 2.0), MemberRng(seed), 1, 0.25)
        resampled += change.resampled
        if change.resampled:
            assert change.factor is None and change.to_dict()["resampled"] is True
            jumps.append(math.log10(new["learning_rate"] / 1e-6))
        else:
            assert 1e-6 < new["learning_rate"] <= 2e-6 and "resampled" not in change.to_dict()
    assert 70 <= resampled <= 130  # about a quarter
    assert max(jumps) > 3 and sum(j > 1 for j in jumps) > len(jumps) / 2
    # 0: the draws are exactly those of the plain mutation (no coin is drawn).
    plain = mutate({"learning_rate": 1e-4}, specs, 1.0, (1.1, 2.0), MemberRng(7), 1)
    assert plain == mutate({"learning_rate": 1e-4}, specs, 1.0, (1.1, 2.0), MemberRng(7), 1, 0.0)


def test_entries_written_under_version_2_replay_their_counting():
    """An entry written before the change (``mutation_semantics`` 2) counted keys drawn, not changed, and let a key
    at its bound stay: replayed under its version, the same draws give the same (clone) result."""
    specs = {"learning_rate": MutationSpec(kind="log_float", low=1e-6, high=1e-2)}
    clones = 0
    for seed in range(40):
        new, changes = mutate({"learning_rate": 1e-2}, specs, 0.25, (1.1, 2.0), MemberRng(seed), 1, 0.25, semantics=2)
        clones += not changes
        assert new["learning_rate"] == 1e-2 or new["learning_rate"] < 1e-2
    assert 10 <= clones <= 30  # about half, as the issue measured


def test_recorded_changes_round_trip_with_their_flags():
    """A pending exploit read back from state.json (after a restart) keeps ``resampled`` and ``from_zero``: the
    verifier compares its changes with the decision's."""
    from async_pbt_isaaclab.core.decision.generation import changes_from_list
    from async_pbt_isaaclab.core.decision.mutation import Change

    changes = (
        Change("entropy_coef", 0.005, 1e-5, None, resampled=True),
        Change("gamma", 0.99, 0.991, 0.9),
        Change("bounds_loss_coef", 0.0, 0.0, None, from_zero=True),
    )
    assert changes_from_list([c.to_dict() for c in changes], "changes") == changes
