"""The action step of ``M`` slice members as one batched pass over their stacked weights.

During a slices rollout (``rl_games/slice_rollout.py``) every member's policy acts on its slice of the envs at
every step. One forward pass per member costs ``M`` times rl_games' per-call Python work; on a CPU that is most of
what a rollout adds to the env step. For the network rl_games builds from a plain ``network: {name: actor_critic,
mlp: ...}`` section (``A2CBuilder.Network`` in ``ModelA2CContinuousLogStd``: an MLP trunk shared by the mean and the
value, a fixed or learned log-std, input and value normalisers) the pass is a short chain of batched matrix
products (``torch.baddbmm``) over the members' weights stacked along a first dimension, restacked at the start of
every rollout (the members' updates, exploits and fault repairs change their weights between rollouts, never
during one).

``torch.func.vmap`` over ``functional_call`` would batch any network, but on a CPU it saved little: 556 us a step
against 645 us for four ``get_action_values`` calls and 102 us for this pass (4 members x 16 envs of HalfCheetah's
MLP, ``scripts/benchmarks/stacked_forward.py``). So this covers the common network, and :func:`stack_problems`
sends anything else (a CNN, an RNN, a separate critic, normalisation layers, our bounded exploration network,
members of different shapes) to the per-member calls.
``tests/rl_games/test_slice_rollout.py`` checks it against each member's own rl_games model.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

ELEMENTWISE = (
    nn.Identity,
    nn.ELU,
    nn.ReLU,
    nn.LeakyReLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.SiLU,
    nn.SELU,
    nn.GELU,
    nn.Softplus,
    nn.Mish,
)
"""Parameter-free modules that act element by element: applied to the stacked activations as they are."""


def _describe(agent: Any) -> tuple[Any, ...] | str:
    """The structure the stacked pass depends on, or why the agent's model is not covered."""
    from rl_games.algos_torch.models import ModelA2CContinuousLogStd
    from rl_games.algos_torch.network_builder import A2CBuilder

    model = agent.model
    if type(model) is not ModelA2CContinuousLogStd.Network:
        return f"model {type(model).__qualname__}"
    net = model.a2c_network
    if type(net) is not A2CBuilder.Network:
        return f"network {type(net).__qualname__}"
    if net.separate or net.has_rnn or len(net.actor_cnn) or not net.is_continuous:
        return "a separate critic, an RNN, a CNN or a non-continuous action space"
    layers: list[Any] = []
    for module in net.actor_mlp:
        if isinstance(module, nn.Linear) and module.bias is not None:
            layers.append(("linear", tuple(module.weight.shape)))
        elif type(module) in ELEMENTWISE:
            layers.append((type(module).__name__, repr(module)))
        else:
            return f"MLP layer {type(module).__name__}"
    heads = [net.mu_act, net.value_act, net.sigma_act]
    if any(type(m) not in ELEMENTWISE for m in heads):
        return "an output activation that is not element-wise"
    norms: list[Any] = []
    for flag, rms in ((model.normalize_input, model.running_mean_std), (model.normalize_value, model.value_mean_std)):
        if flag:
            if rms.per_channel:
                return "a per-channel normaliser"
            norms.append((rms.norm_only, rms.epsilon, tuple(rms.running_mean.shape)))
        else:
            norms.append(None)
    return (
        tuple(layers),
        tuple(repr(m) for m in heads),
        bool(net.fixed_sigma),
        tuple(net.mu.weight.shape),
        tuple(net.value.weight.shape),
        tuple(norms),
    )


def stack_problems(agents: Sequence[Any]) -> list[str]:
    """Why :class:`StackedPolicy` cannot act for these agents (empty: it can)."""
    described = [_describe(a) for a in agents]
    problems = [f"slot {i}: {d}" for i, d in enumerate(described) if isinstance(d, str)]
    if not problems and len(set(described)) > 1:
        problems.append("the members' networks differ in shape")
    return problems


class StackedPolicy:
    """The rollout-time forward pass (``is_train=False``) of several rl_games ``ModelA2CContinuousLogStd`` members,
    member ``i`` acting on rows ``[i*n, (i+1)*n)`` of the observations (see the module docstring)."""

    def __init__(self, agents: Sequence[Any]):
        problems = stack_problems(agents)
        if problems:
            raise ValueError("; ".join(problems))
        self.agents = list(agents)
        """The members' agents, in slot order."""
        net = self.agents[0].model.a2c_network
        self._activations = [m for m in net.actor_mlp if not isinstance(m, nn.Linear)]
        self._kinds = ["linear" if isinstance(m, nn.Linear) else "act" for m in net.actor_mlp]
        self._stacked: dict[str, Any] = {}

    @torch.no_grad()
    def refresh(self) -> None:
        """Stack the members' current weights and normaliser statistics (once per rollout)."""
        models = [a.model for a in self.agents]
        nets = [m.a2c_network for m in models]

        def weights(modules: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor]:
            return (
                torch.stack([m.bias for m in modules]).unsqueeze(1),
                torch.stack([m.weight.t() for m in modules]),
            )

        linears = [[m for m in net.actor_mlp if isinstance(m, nn.Linear)] for net in nets]
        s: dict[str, Any] = {
            "trunk": [weights([layers[k] for layers in linears]) for k in range(len(linears[0]))],
            "mu": weights([net.mu for net in nets]),
            "value": weights([net.value for net in nets]),
        }
        if nets[0].fixed_sigma:
            s["log_std"] = torch.stack([net.sigma for net in nets]).unsqueeze(1)
        else:
            s["sigma"] = weights([net.sigma for net in nets])
        for key, attr, flag in (
            ("obs_norm", "running_mean_std", models[0].normalize_input),
            ("value_norm", "value_mean_std", models[0].normalize_value),
        ):
            if flag:
                rms = [getattr(m, attr) for m in models]
                mean = torch.stack([r.running_mean.float() for r in rms]).unsqueeze(1)
                std = torch.sqrt(torch.stack([r.running_var.float() for r in rms]).unsqueeze(1) + rms[0].epsilon)
                s[key] = (mean, std, rms[0].norm_only)
        self._stacked = s

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """rl_games' ``get_action_values`` for every member at once: ``actions`` (sampled), ``neglogpacs``,
        ``values`` (denormalised), ``mus`` and ``sigmas``, each for all rows of ``obs`` in slot order."""
        s = self._stacked
        x = self._trunk(obs)
        net = self.agents[0].model.a2c_network
        mu = net.mu_act(torch.baddbmm(s["mu"][0], x, s["mu"][1]))
        if "log_std" in s:
            log_std = mu * 0.0 + net.sigma_act(s["log_std"])
        else:
            log_std = net.sigma_act(torch.baddbmm(s["sigma"][0], x, s["sigma"][1]))
        sigma = torch.exp(log_std)
        # Not torch.normal(mu, sigma), which raises on a NaN sigma: a member that left with non-finite weights is
        # still in the stack, and its actions are replaced by 0 before the env sees them (envs/slice_env.py).
        actions = mu + sigma * torch.randn_like(mu)
        neglogp = (
            0.5 * (((actions - mu) / sigma) ** 2).sum(dim=-1)
            + 0.5 * math.log(2.0 * math.pi) * actions.size(-1)
            + log_std.sum(dim=-1)
        )
        rows = obs.shape[0]
        return {
            "actions": actions.reshape(rows, -1),
            "neglogpacs": neglogp.reshape(rows),
            "values": self._value(x).reshape(rows, -1),
            "mus": mu.reshape(rows, -1),
            "sigmas": sigma.reshape(rows, -1),
        }

    @torch.no_grad()
    def values(self, obs: torch.Tensor) -> torch.Tensor:
        """rl_games' ``get_values`` for every member at once (denormalised), ``(rows, value_size)``."""
        return self._value(self._trunk(obs)).reshape(obs.shape[0], -1)

    def _trunk(self, obs: torch.Tensor) -> torch.Tensor:
        s = self._stacked
        x = obs.reshape(len(self.agents), obs.shape[0] // len(self.agents), *obs.shape[1:]).flatten(2)
        if "obs_norm" in s:
            mean, std, norm_only = s["obs_norm"]
            x = x / std if norm_only else torch.clamp((x - mean) / std, min=-5.0, max=5.0)
        linear, activation = iter(s["trunk"]), iter(self._activations)
        for kind in self._kinds:
            if kind == "linear":
                bias, weight = next(linear)
                x = torch.baddbmm(bias, x, weight)
            else:
                x = next(activation)(x)
        return x

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        s = self._stacked
        net = self.agents[0].model.a2c_network
        value = net.value_act(torch.baddbmm(s["value"][0], x, s["value"][1]))
        if "value_norm" in s:
            mean, std, _ = s["value_norm"]
            value = std * torch.clamp(value, min=-5.0, max=5.0) + mean
        return value
