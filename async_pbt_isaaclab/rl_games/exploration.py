"""Bounded Gaussian exploration: an rl_games network whose policy log-std stays inside ``[low, high]``.

PPO with a learned Gaussian policy can collapse its exploration (log-std running to -10) or blow it up
(log-std climbing until actions are noise). In a population that is worse than in one run: a member
whose sigma collapsed cannot recover by mutation of the usual hyperparameters, and exploiting it copies
the collapse to others. This module keeps every member's log-std inside configured bounds, and makes the
bounds themselves hyperparameters that PBT can mutate.

Use it from an rl_games agent yaml (``params`` section)::

    model:
      name: continuous_a2c_logstd          # the only compatible model
    network:
      name: pbt_bounded_actor_critic       # NETWORK_NAME; everything else as for actor_critic
      log_std_bounds: {low: -5.0, high: 0.5}
      separate: False
      space:
        continuous:
          mu_activation: None
          sigma_activation: None
          mu_init: {name: default}
          sigma_init: {name: const_initializer, val: 0}
          fixed_sigma: True                # or False: state-dependent sigma head
      mlp: {units: [256, 128, 64], activation: elu, initializer: {name: default}}

and call :func:`register_bounded_exploration` before the rl_games ``Runner`` builds the agent (every
entry point of the package does: train_pbt.py, play_pbt.py, the CPU member and ``runner.train_member``). The
names and the checks of this yaml section are :mod:`async_pbt_isaaclab.rl_games.exploration_config`. PBT
mutates the bounds through its Isaac Lab dotted paths ``LOW_PATH`` and ``HIGH_PATH``; a restart rebuilds the
network from the mutated yaml. :func:`set_log_std_bounds` changes them on a live agent.

How the bound is applied (the design decision, and why)
-------------------------------------------------------
The network outputs ``log_std = clamp(raw, low, high)`` where ``raw`` is exactly what rl_games'
``A2CBuilder`` would output, so the stored parameter keeps its name (``a2c_network.sigma``) and its
meaning (a log-std). A smooth squash such as ``low + (high - low) * sigmoid(raw)`` was rejected:

* it changes what ``sigma`` means, so ``sigma_init: {val: 0}``, rl_games' ``_override_sigma`` (the
  ``sigma`` run argument), checkpoints of plain ``actor_critic`` networks and the lineage/inheritance of
  "sigma" between members would all silently mean something else;
* worse for PBT, mutating a bound would move *every* member's exploration, including members whose
  log-std was comfortably inside both the old and the new bounds. With a clamp, a mutation only
  touches values that the new bounds exclude.

A plain clamp has two known failure modes, and both are handled:

1. *Dead gradients.* Outside the bounds ``d clamp / d raw = 0``, so a value that went out can never be
   pulled back. Our clamp (:class:`_InwardStraightThroughClamp`) lets a gradient through outside the
   bounds **when the gradient-descent step points back inside**.
2. *Silent drift.* A straight-through clamp (identity gradient everywhere) lets ``raw`` wander
   arbitrarily far out while the output sits at the bound, and it then takes as long to come back.
   We block gradients that point further outward. For the learned fixed sigma we go further and
   *project* the parameter into the bounds (in place, like projected gradient descent) at build, at
   every forward pass, after ``load_state_dict`` and before ``state_dict``, so the stored value always
   equals the log-std the policy uses: checkpoints load into a plain ``actor_critic`` network or
   rl_games player unchanged.

For a state-dependent sigma (``fixed_sigma: False``) the head output cannot be projected; the
one-sided straight-through gradient keeps it from drifting and lets it recover. A checkpoint of such
a network should be played with the same network name (rl_games' player builds from the same yaml,
so this is automatic); a plain ``actor_critic`` would not clamp the head output.

The bounds are configuration, not state: they are never written to ``state_dict``, so restoring a
donor checkpoint keeps the recipient's (possibly mutated) bounds from its yaml.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from rl_games.algos_torch import model_builder, models
from rl_games.algos_torch.network_builder import A2CBuilder
from torch import nn

from async_pbt_isaaclab.rl_games.exploration_config import (
    COMPATIBLE_MODEL,
    NETWORK_NAME,
    REGISTRY_MARKER,
    parse_log_std_bounds,
    validate_network_params,
)

__all__ = [
    "BoundedA2CBuilder",
    "register_bounded_exploration",
    "is_bounded_exploration_registered",
    "bounded_log_std",
    "find_bounded_networks",
    "get_log_std_bounds",
    "set_log_std_bounds",
]

# rl_games model classes -> the yaml ``model.name`` that selects them, for error messages only. Looked up by name:
# rl-games 1.6.1 (what Isaac Lab 2.x pins) has no ModelA2CContinuousTanh.
_MODEL_NAMES = {
    getattr(models, cls): name
    for cls, name in (
        ("ModelA2C", "discrete_a2c"),
        ("ModelA2CMultiDiscrete", "multi_discrete_a2c"),
        ("ModelA2CContinuous", "continuous_a2c"),
        ("ModelA2CContinuousLogStd", "continuous_a2c_logstd"),
        ("ModelA2CContinuousTanh", "continuous_a2c_tanh"),
        ("ModelCentralValue", "central_value"),
    )
    if hasattr(models, cls)
}


# ---------------------------------------------------------------------------------------------------
# The bound itself
# ---------------------------------------------------------------------------------------------------


class _InwardStraightThroughClamp(torch.autograd.Function):
    """``clamp(x, low, high)`` whose gradient also flows outside the bounds, but only inward.

    Inside ``[low, high]`` (boundaries included) the gradient is the identity, as for ``clamp``.
    Outside, a plain clamp passes nothing (the value can never be pulled back: a dead unit) and a
    straight-through clamp passes everything (the value drifts ever further out while the output sits
    at the bound). Here the gradient passes exactly when the descent step ``-grad`` moves ``x`` back
    towards the interval: ``x > high`` and ``grad > 0``, or ``x < low`` and ``grad < 0``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.low = low
        ctx.high = high
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        inside = (x >= ctx.low) & (x <= ctx.high)
        inward = ((x > ctx.high) & (grad > 0)) | ((x < ctx.low) & (grad < 0))
        return torch.where(inside | inward, grad, torch.zeros_like(grad)), None, None


def bounded_log_std(log_std: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Bound ``log_std`` to ``[low, high]`` with the inward straight-through gradient described above."""
    return _InwardStraightThroughClamp.apply(log_std, float(low), float(high))


def _calling_model() -> Any:
    # rl_games never tells a network builder which model wraps it: ModelBuilder.load hands the builder
    # only params['network'], and BaseModel.build calls ``network_builder.build(self.model_class, ...)``
    # with model_class == 'a2c' for discrete, continuous and central-value models alike. The one place
    # the model is known is the caller's frame (BaseModel.build, where ``self`` is the model). Reading it
    # is the only way to reject ``model.name: discrete_a2c`` / ``continuous_a2c`` at build time without
    # patching rl_games. If the caller is anything else (a direct build call, a future rl_games), we
    # return None and rely on exploration_config.validate_exploration_config.
    frame = sys._getframe(2)  # 0: here, 1: BoundedA2CBuilder.build, 2: its caller
    try:
        candidate = frame.f_locals.get("self")
    finally:
        del frame
    return candidate if isinstance(candidate, models.BaseModel) else None


class BoundedA2CBuilder(A2CBuilder):
    """rl_games ``A2CBuilder`` whose continuous policy keeps its log-std inside ``network.log_std_bounds``.

    Everything except the log-std output is inherited unchanged (MLP/CNN/RNN, separate critic, value
    head, initialisers), so any ``actor_critic`` yaml becomes bounded by changing ``network.name`` and
    adding ``log_std_bounds``. Registered under :data:`NETWORK_NAME` by :func:`register_bounded_exploration`.
    """

    def load(self, params):
        # Fail at config load (ModelBuilder.load), before any env or optimizer is created.
        validate_network_params(params)
        super().load(params)

    def build(self, name, **kwargs):
        model = _calling_model()
        if model is not None and not isinstance(model, models.ModelA2CContinuousLogStd):
            got = _MODEL_NAMES.get(type(model), type(model).__name__)
            raise ValueError(
                f"params.model.name must be '{COMPATIBLE_MODEL}' for params.network.name: {NETWORK_NAME}, got "
                f"'{got}'. The bounded network outputs a log-std, which only continuous_a2c_logstd reads as one."
            )
        return BoundedA2CBuilder.Network(self.params, **kwargs)

    class Network(A2CBuilder.Network):
        """The A2C network with ``log_std = clamp(raw, low, high)`` (inward straight-through gradient).

        Attributes ``log_std_low`` / ``log_std_high`` hold the bounds (plain floats, deliberately not
        buffers: see the module docstring). Change them with :func:`set_log_std_bounds`.
        """

        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)  # calls self.load(params) -> bounds are set
            # The stored fixed sigma can be projected only when it *is* the log-std (identity
            # activation, the rl_games default). With another sigma_activation the output clamp alone
            # bounds the policy, and the one-sided gradient keeps the parameter from drifting.
            self._projects_sigma = bool(self.fixed_sigma and isinstance(self.sigma_act, nn.Identity))
            # Keep the invariant "stored fixed sigma is inside the bounds" at every observable point.
            # (module-level functions rather than lambdas, so the module stays picklable)
            self.register_state_dict_pre_hook(_project_before_state_dict)
            self.register_load_state_dict_post_hook(_project_after_load)
            self.project_sigma_()  # e.g. sigma_init val: 0 with high: -1 starts at -1

        def load(self, params):
            low, high = validate_network_params(params)
            super().load(params)
            self.log_std_low = low
            self.log_std_high = high

        @torch.no_grad()
        def project_sigma_(self) -> None:
            """Clamp the learned fixed log-std parameter into the bounds, in place (no-op otherwise).

            Writes through ``.data`` so it neither records autograd history nor bumps the parameter's
            version counter; values already inside are rewritten unchanged, so no device sync (``any()``)
            is needed to skip the write. It only changes values after something else moved the parameter
            in place (optimizer step, ``_override_sigma``, a checkpoint load, narrower bounds).
            """
            if getattr(self, "_projects_sigma", False):
                self.sigma.data.clamp_(self.log_std_low, self.log_std_high)

        def forward(self, obs_dict):
            self.project_sigma_()
            out = super().forward(obs_dict)
            # Validation guarantees a continuous, non-central-value network: (mu, log_std, value, states).
            mu, log_std, value, states = out
            return mu, bounded_log_std(log_std, self.log_std_low, self.log_std_high), value, states


def _project_before_state_dict(module: BoundedA2CBuilder.Network, prefix: str, keep_vars: bool) -> None:
    module.project_sigma_()


def _project_after_load(module: BoundedA2CBuilder.Network, incompatible_keys: Any) -> None:
    module.project_sigma_()


# ---------------------------------------------------------------------------------------------------
# Registration and live access
# ---------------------------------------------------------------------------------------------------


def register_bounded_exploration(name: str = NETWORK_NAME) -> str:
    """Register :class:`BoundedA2CBuilder` with rl_games under ``name``; idempotent. Returns ``name``.

    Must run before rl_games builds the agent (``Runner.run``/``create_player``); registering again is
    harmless. Raises ``ValueError`` if ``name`` is already registered to a different network.
    """
    existing = model_builder.NETWORK_REGISTRY.get(name)
    if existing is not None:
        if getattr(existing, REGISTRY_MARKER, False):
            return name
        raise ValueError(
            f"rl_games network name {name!r} is already registered to another network; "
            f"register the bounded network under a different name (default {NETWORK_NAME!r})."
        )
    model_builder.register_network(name, BoundedA2CBuilder)
    setattr(model_builder.NETWORK_REGISTRY[name], REGISTRY_MARKER, True)
    return name


def is_bounded_exploration_registered(name: str = NETWORK_NAME) -> bool:
    """Whether ``name`` is registered with rl_games as the bounded network."""
    return bool(getattr(model_builder.NETWORK_REGISTRY.get(name), REGISTRY_MARKER, False))


def find_bounded_networks(target: Any) -> list[BoundedA2CBuilder.Network]:
    """All bounded networks inside ``target``: an rl_games agent or player (``.model``), a model
    (``ModelA2CContinuousLogStd.Network``, possibly ``torch.compile``-wrapped), or the network itself."""
    module = target if isinstance(target, nn.Module) else getattr(target, "model", None)
    if not isinstance(module, nn.Module):
        return []
    return [m for m in module.modules() if isinstance(m, BoundedA2CBuilder.Network)]


def _require_networks(target: Any) -> list[BoundedA2CBuilder.Network]:
    nets = find_bounded_networks(target)
    if not nets:
        raise ValueError(
            f"no {NETWORK_NAME} network found in {type(target).__name__}: the agent was built with another "
            f"network (params.network.name must be '{NETWORK_NAME}' to have log-std bounds)"
        )
    return nets


def get_log_std_bounds(target: Any) -> tuple[float, float]:
    """Current ``(low, high)`` of the (first) bounded network in ``target``."""
    net = _require_networks(target)[0]
    return net.log_std_low, net.log_std_high


def set_log_std_bounds(target: Any, low: float, high: float) -> tuple[float, float]:
    """Change the log-std bounds of a live agent/model/network; returns the previous ``(low, high)``.

    Validated like the yaml (finite, ``low < high``); on error nothing changes. The learned fixed sigma
    is projected into the new bounds immediately, so the next rollout and the next checkpoint already
    use them; a state-dependent head is clamped from the next forward pass. This does not edit the
    yaml: a later restart rebuilds from the config, so whoever calls this must also write the new
    values to ``exploration_config.LOW_PATH`` / ``HIGH_PATH`` of the member's hyperparameters.
    """
    new_low, new_high = parse_log_std_bounds({"low": low, "high": high}, key="log_std_bounds")
    nets = _require_networks(target)
    previous = (nets[0].log_std_low, nets[0].log_std_high)
    for net in nets:
        net.log_std_low = new_low
        net.log_std_high = new_high
        net.project_sigma_()
    return previous
