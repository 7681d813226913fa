"""One rollout of every slice member at once: rl_games' ``play_steps`` for ``M`` agents on one shared env.

With slices (``rl_games/slices.py``) every member's rl_games loop runs in a thread of its own. Stepping the shared
env one step at a time costs each member a thread handoff per env step and its own per-step bookkeeping; on a CPU
that overhead, not the env, set the pace (docs/validation.md, "Slices vs processes"). Here each member's
``play_steps`` asks the main thread for its whole rollout instead (one handoff per epoch), and the main thread plays
``horizon_length`` steps for all members together:

* one experience buffer for the whole env, ``(horizon, M x n, ...)``; each agent's buffer entries are views of its
  columns, so a step writes each key once for every member, and each member's batch comes from its own
  ``experience_buffer.get_transformed_list`` as in rl_games;
* each member's action step on its slice of the observations (its own model: ``rl_games/action_step.py``), then
  one action batch, one ``env.step``, one reward shaping, one value bootstrap on time-outs with each member's
  ``gamma``;
* per member only what is its own: its episode statistics (``game_rewards`` ...) and its observers'
  ``process_infos`` with its slice's ``infos`` and done envs;
* GAE once for all members, with rl_games' own ``discount_values`` and a ``gamma`` / ``tau`` per env (each
  member's), so a mutated ``gamma`` or ``tau`` counts from the next rollout as it does for a process member.

What a step does is what rl_games' ``A2CBase.play_steps`` (rl-games 1.6.1 and 1.6.5 agree on it) does for one
agent; ``tests/rl_games/test_slice_rollout.py`` checks that one slice gives rl_games' own batch value for value.
Agents this cannot play (recurrent, central value, action masks, dict observations, agents of several env agents,
or members whose settings differ where the batch is shared) fall back to the step-by-step barrier:
:func:`rollout_problems` says why.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch

from async_pbt_isaaclab.envs.slice_env import SharedVecEnv, finite_actions, split_infos, split_value
from async_pbt_isaaclab.rl_games.action_step import OWN_CALL, action_step

SHARED_SETTINGS = ("horizon_length", "value_bootstrap", "clip_actions", "value_size", "ppo_device", "num_agents")
"""Agent attributes that shape the shared batch: every member must have the same value (the config checks refuse
the mutable ones; the others come from the one agent yaml)."""


def rollout_problems(agents: Mapping[int, Any]) -> list[str]:
    """Why :class:`SliceRollout` cannot play these agents' rollouts (empty: it can)."""
    problems = [problem for slot, agent in agents.items() for problem in _agent_problems(slot, agent)]
    for name in SHARED_SETTINGS:
        values = {str(getattr(a, name, None)) for a in agents.values()}
        if len(values) > 1:
            problems.append(f"members differ in {name} ({', '.join(sorted(values))})")
    first = next(iter(agents.values()), None)
    space = getattr(first, "observation_space", None)
    if isinstance(space, dict) or type(space).__name__ == "Dict":  # gym's or gymnasium's
        problems.append("dict observations")
    return problems


def _agent_problems(slot: int, agent: Any) -> list[str]:
    """What of one agent the shared rollout does not play: its kind of network, or a step of its own."""
    from rl_games.common.a2c_common import A2CBase

    problems = []
    if getattr(agent, "is_rnn", False):
        problems.append(f"slot {slot}: a recurrent agent")
    if getattr(agent, "has_central_value", False):
        problems.append(f"slot {slot}: a central value network")
    if getattr(agent, "use_action_masks", False):
        problems.append(f"slot {slot}: action masks")
    if getattr(agent, "num_agents", 1) != 1:
        problems.append(f"slot {slot}: {agent.num_agents} agents per env")
    kind = type(agent).__name__
    for method in ("play_steps", "env_step", "discount_values", "get_action_values", "get_values"):
        if getattr(type(agent), method, None) is not getattr(A2CBase, method):
            problems.append(f"slot {slot}: {kind} has its own {method}")
    return problems


CURRENT = ("current_rewards", "current_shaped_rewards", "current_lengths")
"""rl_games' running sums of the episodes in flight, per env."""


@dataclass
class _Run:
    """One rollout in progress: whole-env tensors in slot order."""

    slots: list[int]
    first: Any
    horizon: int
    buffers: dict[str, torch.Tensor]
    obs: dict[str, Any]
    dones: torch.Tensor
    current: dict[str, torch.Tensor]
    gamma: torch.Tensor
    tau: torch.Tensor
    shapers: list[Any] | None
    """Each slot's reward shaper, or ``None`` when they are all alike (one call for the whole env)."""
    inactive: list[tuple[int, int]]
    step_time: float = 0.0


class SliceRollout:
    """Plays rollouts of the members of one :class:`~async_pbt_isaaclab.envs.slice_env.SharedVecEnv` together (see
    the module docstring); called by ``SharedVecEnv.run`` in the main thread with the slots that asked.
    ``lean=False``: every member acts through its own ``get_action_values`` (to compare the two)."""

    def __init__(self, shared: SharedVecEnv, agents: Mapping[int, Any], *, lean: bool = True):
        self.shared = shared
        """The env all slices share."""
        self.agents = dict(agents)
        """Each slot's rl_games agent (a slot whose member never trained has none)."""
        self.steps = 0
        """Env steps played."""
        steps = {
            slot: action_step(agent) if lean else (agent.get_action_values, "not asked")
            for slot, agent in self.agents.items()
        }
        self._act = {slot: step for slot, (step, _) in steps.items()}
        """Each slot's action step: its lean step (``rl_games/action_step.py``) or its own ``get_action_values``."""
        self.own_calls = {slot: why for slot, (_, why) in steps.items() if why}
        """The slots that act through rl_games' own ``get_action_values``, and why (worked out once, here)."""
        self._buffers: dict[str, torch.Tensor] | None = None

    def install(self) -> None:
        """Every agent's ``play_steps`` asks the shared env for its rollout; the env plays them through ``self``."""
        for slot, agent in self.agents.items():
            agent.play_steps = _Request(self.shared, slot)
        self.shared.use_rollouts(self)
        if self.own_calls:
            why = "; ".join(f"slot {slot}: {reason}" for slot, reason in sorted(self.own_calls.items()))
            print(f"[async-pbt] slices: some members act through {OWN_CALL} ({why})", flush=True)

    # ------------------------------------------------------------------ the rollout
    def __call__(self, slots: list[int]) -> dict[int, dict[str, Any]]:
        """Play ``horizon_length`` steps for the members in ``slots`` (the others' envs get zero actions) and return
        each one's batch, as its own ``play_steps`` would."""
        first = self.agents[slots[0]]
        run = self._start(slots, first)
        for slot in slots:
            self.agents[slot].model.eval()  # what get_action_values sets at every call (its set_eval did too)
        for n in range(run.horizon):
            self._step(n, run)
            self.steps += 1
        buffers = run.buffers
        # rl_games' own GAE, with each env's member's gamma and tau (tensors broadcast where it uses floats).
        gae = SimpleNamespace(horizon_length=run.horizon, gamma=run.gamma, tau=run.tau)
        advantages = type(first).discount_values(
            gae, run.dones.float(), self._values(run), buffers["dones"].float(), buffers["values"], buffers["rewards"]
        )
        return self._hand_out(run, advantages + buffers["values"])

    def _start(self, slots: list[int], first: Any) -> _Run:
        """The state a rollout starts from: each member's from its last rollout (views of ours, unless something
        replaced them since), joined in slot order."""
        agents, count = self.agents, len(self.shared.bounds)

        def joined(value: Callable[[Any], torch.Tensor]) -> torch.Tensor:
            return torch.cat(
                [value(agents[s]) if _started(agents.get(s)) else torch.zeros_like(value(first)) for s in range(count)]
            )

        shapers = [agents.get(s, first).rewards_shaper for s in range(count)]
        return _Run(
            slots=slots,
            first=first,
            horizon=int(first.horizon_length),
            buffers=self._shared_buffers(first),
            obs={"obs": joined(lambda a: a.obs["obs"])},
            dones=joined(lambda a: a.dones),
            current={name: joined(operator.attrgetter(name)) for name in CURRENT},
            gamma=self._per_env(lambda a: a.gamma, first),
            tau=self._per_env(lambda a: a.tau, first),
            shapers=None if len({repr(vars(shaper)) for shaper in shapers}) == 1 else shapers,
            inactive=[self.shared.bounds[s] for s in range(count) if s not in slots],
        )

    def _step(self, n: int, run: _Run) -> None:
        """One env step for every member: rl_games' ``play_steps`` loop body, for the whole env at once."""
        first, buffers, bounds, n_envs = run.first, run.buffers, self.shared.bounds, self.shared.num_envs
        buffers["obses"][n] = run.obs["obs"]
        buffers["dones"][n] = run.dones
        results = [self._act[s](split_value(run.obs, *bounds[s], n_envs)) for s in run.slots]
        for key in first.update_list:
            _write_row(buffers[key][n], [r[key] for r in results], run.slots, bounds)
        actions = finite_actions(first.preprocess_actions(buffers["actions"][n]))
        for start, stop in run.inactive:
            actions[start:stop] = 0
        t0 = time.perf_counter()
        stepped = self.shared.env.step(actions)
        run.step_time += time.perf_counter() - t0
        run.obs, rewards, run.dones, infos = _to_tensors(first, stepped)
        if run.shapers is None:
            shaped = first.rewards_shaper(rewards)
        else:
            shaped = torch.cat([shaper(rewards[a:b]) for shaper, (a, b) in zip(run.shapers, bounds, strict=True)])
        if first.value_bootstrap and "time_outs" in infos:
            time_outs = first.cast_obs(infos["time_outs"]).unsqueeze(1).float()
            shaped.add_(run.gamma * buffers["values"][n] * time_outs)
        buffers["rewards"][n] = shaped
        current = run.current
        current["current_rewards"].add_(rewards)
        current["current_shaped_rewards"].add_(shaped)
        current["current_lengths"].add_(1)
        for s in run.slots:  # each member's statistics and observers: its slice alone
            start, stop = bounds[s]
            agent = self.agents[s]
            done_envs = run.dones[start:stop].nonzero(as_tuple=False)
            agent.game_rewards.update(current["current_rewards"][start:stop][done_envs])
            agent.game_shaped_rewards.update(current["current_shaped_rewards"][start:stop][done_envs])
            agent.game_lengths.update(current["current_lengths"][start:stop][done_envs])
            agent.algo_observer.process_infos(split_infos(infos, start, stop, n_envs), done_envs)
        not_dones = (1.0 - run.dones.float()).unsqueeze(1)
        current["current_rewards"].mul_(not_dones)
        current["current_shaped_rewards"].mul_(not_dones)
        current["current_lengths"].mul_(not_dones.squeeze(1))

    def _values(self, run: _Run) -> torch.Tensor:
        """The value of the observations after the last step (rl_games' ``get_values``), for every env."""
        values = torch.zeros_like(run.buffers["values"][0])
        for s in run.slots:
            start, stop = self.shared.bounds[s]
            values[start:stop] = self.agents[s].get_values(split_value(run.obs, start, stop, self.shared.num_envs))
        return values

    def _hand_out(self, run: _Run, returns: torch.Tensor) -> dict[int, dict[str, Any]]:
        """Each member's batch (from its own experience buffer, views of ours) and its state, for the next rollout."""
        from rl_games.common.a2c_common import swap_and_flatten01

        out = {}
        for s in run.slots:
            agent, (start, stop) = self.agents[s], self.shared.bounds[s]
            agent.obs = split_value(run.obs, start, stop, self.shared.num_envs)
            agent.dones = run.dones[start:stop]
            for name, whole in run.current.items():
                setattr(agent, name, whole[start:stop])
            batch = agent.experience_buffer.get_transformed_list(swap_and_flatten01, agent.tensor_list)
            batch["returns"] = swap_and_flatten01(returns[:, start:stop])
            batch["played_frames"] = agent.batch_size
            batch["step_time"] = run.step_time
            out[s] = batch
        return out

    # ------------------------------------------------------------------ helpers
    def _shared_buffers(self, first: Any) -> dict[str, torch.Tensor]:
        """One buffer per key for the whole env, made at the first rollout (rl_games builds each agent's in
        ``train()``); each agent's entries become views of its columns, so its own buffer memory is released."""
        if self._buffers is None:
            template = first.experience_buffer.tensor_dict
            n_envs = self.shared.num_envs
            self._buffers = {
                key: torch.zeros((t.shape[0], n_envs, *t.shape[2:]), dtype=t.dtype, device=t.device)
                for key, t in template.items()
            }
            for slot, agent in self.agents.items():
                if not _started(agent):
                    continue  # never reached train(): it has no buffer, and plays no rollout
                start, stop = self.shared.bounds[slot]
                for key, whole in self._buffers.items():
                    agent.experience_buffer.tensor_dict[key] = whole[:, start:stop]
        return self._buffers

    def _per_env(self, value: Any, first: Any) -> torch.Tensor:
        """A ``(num_envs, 1)`` column of each env's member's value (a slot without an agent takes the first's)."""
        parts = []
        for slot, (start, stop) in enumerate(self.shared.bounds):
            agent = self.agents.get(slot, first)
            parts.append(torch.full((stop - start, 1), float(value(agent)), device=first.ppo_device))
        return torch.cat(parts)


def _started(agent: Any) -> bool:
    """The agent ran the start of rl_games' ``train()`` (its buffers and first observations exist)."""
    return agent is not None and getattr(agent, "experience_buffer", None) is not None and agent.obs is not None


class _Request:
    """An agent's ``play_steps``: ask the shared env for this slot's rollout and wait for it."""

    def __init__(self, shared: SharedVecEnv, slot: int):
        self.shared, self.slot = shared, slot

    def __call__(self) -> dict[str, Any]:
        return self.shared.request_rollout(self.slot)


def _write_row(row: torch.Tensor, parts: list[torch.Tensor], slots: list[int], bounds: Any) -> None:
    """Write the members' values of one step into a buffer row: one ``cat`` when every slot played."""
    if len(slots) == len(bounds):
        torch.cat([p.reshape(-1, *row.shape[1:]) for p in parts], out=row)
        return
    for part, slot in zip(parts, slots, strict=True):
        start, stop = bounds[slot]
        row[start:stop] = part.reshape(-1, *row.shape[1:])


def _to_tensors(agent: Any, stepped: tuple[Any, Any, Any, Any]) -> tuple[dict[str, Any], Any, Any, Any]:
    """What rl_games' ``A2CBase.env_step`` makes of a vec-env's step (the same conversion, for the whole env)."""
    import numpy as np

    obs, rewards, dones, infos = stepped
    if agent.is_tensor_obses:
        if agent.value_size == 1:
            rewards = rewards.unsqueeze(1)
        return agent.obs_to_tensors(obs), rewards.to(agent.ppo_device), dones.to(agent.ppo_device), infos
    if agent.value_size == 1:
        rewards = np.expand_dims(rewards, axis=1)
    rewards = torch.from_numpy(rewards).to(agent.ppo_device, dtype=torch.float32)
    return agent.obs_to_tensors(obs), rewards, torch.from_numpy(dones).to(agent.ppo_device), infos
