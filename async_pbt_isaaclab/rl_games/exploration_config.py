"""The yaml side of bounded Gaussian exploration: names, the ``log_std_bounds`` section and its checks.

The network itself (the bound, the rl_games builder, its registration and live access) is
:mod:`async_pbt_isaaclab.rl_games.exploration`, where the design is explained. The checks here read only the yaml
dicts (and rl_games' network registry, to know the names the network is registered under); the builder runs them
when rl_games loads the config, and the entry points before anything is built, so a bad section fails with a
message naming the key.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from rl_games.algos_torch import model_builder

#: Name under which the network is registered with rl_games (``params.network.name``).
NETWORK_NAME = "pbt_bounded_actor_critic"
#: The only rl_games model this network is valid for: it reads the second output as a log-std.
COMPATIBLE_MODEL = "continuous_a2c_logstd"
#: Key of the bounds inside ``params.network``.
BOUNDS_KEY = "log_std_bounds"
#: Isaac Lab dotted paths of the two bounds, as used in ``pbt.mutation`` / hyperparameter records.
LOW_PATH = f"agent.params.network.{BOUNDS_KEY}.low"
HIGH_PATH = f"agent.params.network.{BOUNDS_KEY}.high"

REGISTRY_MARKER = "_async_pbt_bounded_exploration"
"""Attribute set on the rl_games registry entries registered by this package, so a second registration is recognised
as ours (idempotent), a clash with somebody else's network of the same name is reported, and a config naming the
network under another registered name is still checked."""

_BOUNDS_FORMAT = f"{{low: <float>, high: <float>}} with low < high, e.g. {BOUNDS_KEY}: {{low: -5.0, high: 0.5}}"


def _real(value: Any, key: str) -> float:
    # bool is an int subclass; "True" as a bound is always a yaml mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{key} must be a finite number (float), got {value!r} of type {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{key} must be a finite number (float), got {value!r}")
    return out


def parse_log_std_bounds(value: Any, key: str = f"params.network.{BOUNDS_KEY}") -> tuple[float, float]:
    """Validate a ``log_std_bounds`` mapping and return ``(low, high)`` as floats.

    Raises ``ValueError`` naming ``key`` when the value is missing, not a mapping, has keys other than
    ``low``/``high``, holds a non-finite or non-numeric bound, or has ``low >= high``.
    """
    if value is None:
        raise ValueError(f"{key} is required for network.name: {NETWORK_NAME}; expected {_BOUNDS_FORMAT}")
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a mapping {_BOUNDS_FORMAT}; got {value!r}")
    extra = sorted(str(k) for k in value.keys() if k not in ("low", "high"))
    missing = [k for k in ("low", "high") if k not in value]
    if extra or missing:
        raise ValueError(
            f"{key} accepts exactly the keys 'low' and 'high'"
            + (f"; missing {missing}" if missing else "")
            + (f"; unknown {extra}" if extra else "")
            + f". Expected {_BOUNDS_FORMAT}"
        )
    low = _real(value["low"], f"{key}.low")
    high = _real(value["high"], f"{key}.high")
    if not low < high:
        raise ValueError(f"{key}.low must be < {key}.high, got low={low}, high={high}. Expected {_BOUNDS_FORMAT}")
    return low, high


def validate_network_params(network: Mapping[str, Any], key: str = "params.network") -> tuple[float, float]:
    """Validate the ``network`` section for :data:`NETWORK_NAME` and return the bounds ``(low, high)``.

    This is all rl_games shows a network builder (``NetworkBuilder.load`` receives only this section),
    so it checks what can be checked here: a ``continuous`` action space with ``fixed_sigma`` set, not a
    central-value (critic-only) network, valid bounds. The model name is checked by
    :func:`validate_exploration_config` and, at build time, by :meth:`BoundedA2CBuilder.build`.
    """
    if not isinstance(network, Mapping):
        raise ValueError(f"{key} must be a mapping, got {type(network).__name__}")
    if network.get("central_value", False):
        raise ValueError(
            f"{key}.central_value: True is not supported by {NETWORK_NAME}: a critic-only network has no "
            "policy log-std to bound. Use network.name: actor_critic for the central value network."
        )
    space = network.get("space")
    space_keys = sorted(space.keys()) if isinstance(space, Mapping) else space
    if not isinstance(space, Mapping) or "continuous" not in space or len(space) != 1:
        raise ValueError(
            f"{key}.space must be {{continuous: {{...}}}} for network.name: {NETWORK_NAME} (Gaussian policy, "
            f"model.name: {COMPATIBLE_MODEL}); got space {space_keys!r}. Discrete and multi_discrete action "
            "spaces have no log-std to bound: use network.name: actor_critic for them."
        )
    continuous = space["continuous"]
    if not isinstance(continuous, Mapping) or not isinstance(continuous.get("fixed_sigma"), bool):
        got = continuous.get("fixed_sigma") if isinstance(continuous, Mapping) else continuous
        raise ValueError(
            f"{key}.space.continuous.fixed_sigma must be True (one learned log-std per action, parameter "
            f"a2c_network.sigma) or False (state-dependent log-std head); got {got!r}"
        )
    return parse_log_std_bounds(network.get(BOUNDS_KEY), key=f"{key}.{BOUNDS_KEY}")


def registered_network_names() -> set[str]:
    """:data:`NETWORK_NAME` and every other name the bounded network is registered under with rl_games."""
    names = {NETWORK_NAME}
    for name, entry in model_builder.NETWORK_REGISTRY.items():
        if getattr(entry, REGISTRY_MARKER, False):
            names.add(name)
    return names


def validate_exploration_config(params: Mapping[str, Any]) -> tuple[float, float] | None:
    """Check a whole rl_games config that may use the bounded network; return its bounds or ``None``.

    ``params`` is the rl_games ``params`` dict (with ``model``, ``network``, ``config``) or the whole
    agent yaml (with a top-level ``params``). Returns ``None`` when the policy network is not ours (no
    checks apply). Otherwise raises ``ValueError`` naming the offending key and the accepted values when
    ``model.name`` is not :data:`COMPATIBLE_MODEL`, the network section is invalid
    (:func:`validate_network_params`), or the central value network also names our network.
    """
    if "network" not in params and isinstance(params.get("params"), Mapping):
        params = params["params"]
    network = params.get("network")
    if not isinstance(network, Mapping) or network.get("name") not in registered_network_names():
        _check_central_value(params)
        return None
    model = params.get("model")
    model_name = model.get("name") if isinstance(model, Mapping) else None
    if model_name != COMPATIBLE_MODEL:
        raise ValueError(
            f"params.model.name must be '{COMPATIBLE_MODEL}' when params.network.name is "
            f"'{network.get('name')}', got {model_name!r}. The bounded network outputs a log-std, which only "
            f"rl_games' ModelA2CContinuousLogStd interprets as such (continuous_a2c would read it as a "
            "standard deviation; discrete models have no standard deviation at all)."
        )
    bounds = validate_network_params(network)
    _check_central_value(params)
    return bounds


def _check_central_value(params: Mapping[str, Any]) -> None:
    config = params.get("config")
    cv = config.get("central_value_config") if isinstance(config, Mapping) else None
    cv_net = cv.get("network") if isinstance(cv, Mapping) else None
    if isinstance(cv_net, Mapping) and cv_net.get("name") in registered_network_names():
        raise ValueError(
            f"params.config.central_value_config.network.name is '{cv_net.get('name')}', but the central value "
            "network is a critic with no policy log-std to bound. Use actor_critic there."
        )
