"""A slice member's action step in a slices rollout: its own model's computation, without rl_games' per-call work.

During a slices rollout (``rl_games/slice_rollout.py``) every member acts on its slice of the envs at every step.
rl_games' ``get_action_values`` costs, beside the model, a walk of the module tree (``model.eval()``), a
``Normal`` distribution object and two dicts per call. For rl_games' ``continuous_a2c_logstd`` model (what Isaac
Lab's rl_games tasks use) :class:`LeanActionStep` skips that work and computes the rest with the member's own
code, in the order rl_games' ``ModelA2CContinuousLogStd.forward`` does: its ``_preproc_obs`` (uint8 observations
divided by 255), its input normaliser, its network's own ``forward`` (any A2C network: MLP, D2RL, CNN, separate
critic, our bounded exploration network), the sample ``Normal(mu, sigma).sample()`` draws, its ``neglogp`` and
its value normaliser. Every other model (discrete, central value, recurrent) keeps rl_games' own
``get_action_values`` (:func:`action_step` says which, and why).

Exact by construction: the same kernels on the same tensors at the same shapes give the same bits, so the
outputs equal the member's own ``get_action_values`` bit for bit (same observations and RNG state in, same
actions, means, sigmas, values and log-probabilities out: ``tests/rl_games/test_slice_configs.py``; on CUDA with
TF32, ``scripts/benchmarks/action_step.py --check``). A batched pass over the members' stacked weights, which shipped
first, was faster on a CPU but could only match to float rounding: a batched matrix product runs other BLAS kernels
than a member's ``nn.Linear`` (docs/architecture.md, "Members that share a simulator").
"""

from __future__ import annotations

from typing import Any, Callable

import torch

OWN_CALL = "rl_games' get_action_values"
"""How :func:`action_step` names the step of a member it does not make lean."""


def lean_step_problem(agent: Any) -> str:
    """Why :class:`LeanActionStep` cannot act for ``agent`` (empty: it can)."""
    from rl_games.algos_torch.models import ModelA2CContinuousLogStd

    model = getattr(agent, "model", None)
    if type(model) is not ModelA2CContinuousLogStd.Network:
        return f"model {type(model).__qualname__}"  # a subclass may compute its outputs differently
    if getattr(agent, "is_rnn", False):
        return "a recurrent network"
    if getattr(agent, "has_central_value", False):
        return "a central value network"
    return ""


class LeanActionStep:
    """``agent.get_action_values(obs)`` for a ``continuous_a2c_logstd`` agent whose model is in eval mode, without
    the per-call work (see the module docstring); the outputs rl_games' rollout stores."""

    def __init__(self, agent: Any):
        problem = lean_step_problem(agent)
        if problem:
            raise ValueError(problem)
        self.agent = agent
        """The member's rl_games agent (its live model: no copy, so nothing can go stale)."""

    @torch.no_grad()
    def __call__(self, obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        agent = self.agent
        model = agent.model
        x = model.norm_obs(agent._preproc_obs(obs["obs"]))
        inputs = {"is_train": False, "prev_actions": None, "obs": x, "rnn_states": agent.rnn_states}
        mu, logstd, value, _ = model.a2c_network(inputs)
        sigma = torch.exp(logstd)
        # Normal(mu, sigma).sample() is torch.normal(mu, sigma): standard normals, times sigma, plus mu (the same
        # draws and operations), without torch.normal's check that sigma >= 0, which reads sigma back to the host.
        actions = torch.randn_like(mu).mul_(sigma).add_(mu)
        return {
            "neglogpacs": torch.squeeze(model.neglogp(actions, mu, sigma, logstd)),
            "values": model.denorm_value(value),
            "actions": actions,
            "mus": mu,
            "sigmas": sigma,
        }


def action_step(agent: Any) -> tuple[Callable[[dict[str, Any]], dict[str, Any]], str]:
    """The action step a slices rollout uses for ``agent`` and, when it is rl_games' own ``get_action_values``,
    why (``""`` for the lean step). The one place this is decided."""
    problem = lean_step_problem(agent)
    if problem:
        return agent.get_action_values, problem
    return LeanActionStep(agent), ""
