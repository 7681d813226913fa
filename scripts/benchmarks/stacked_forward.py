#!/usr/bin/env python
"""The slices rollout's action step: M members' forward passes one by one, stacked, and with ``torch.func.vmap``.

::

    nice python scripts/benchmarks/stacked_forward.py                         # HalfCheetah's network, M=4, n=16
    nice python scripts/benchmarks/stacked_forward.py --task Pendulum-v1 --members 8 --num-envs 64

Builds ``M`` real rl_games agents of the task's packaged yaml (on a gymnasium vec-env of ``M x n`` envs shared as
slices) and times, interleaved over ``--repeats`` rounds of ``--calls`` calls each, what one env step of a slices
rollout spends choosing actions:

* **per member**: each agent's own ``get_action_values`` on its slice (what the rollout does for networks the
  stacked pass does not cover);
* **stacked**: ``StackedPolicy.act`` on all ``M x n`` observations (``rl_games/stacked_policy.py``, the default);
* **vmap**: ``torch.func.vmap`` of ``functional_call`` over the agents' stacked parameters and buffers, the generic
  alternative (the same outputs, any network);
* **one agent on all envs**: the ceiling's single call on ``M x n`` observations, for scale.

Prints the median and spread (min-max) of microseconds per call of each, and the ratios to per member. One torch
thread (as the CPU benchmarks run). A measurement on a shared machine, not a test.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from typing import Any, Callable


def build_agents(task: str, members: int, num_envs: int) -> tuple[list[Any], Any]:
    """``members`` rl_games agents of ``task``'s packaged yaml, each on its slice of one shared env."""
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
    from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
    from async_pbt_isaaclab.examples.agents import packaged_agent_yaml
    from async_pbt_isaaclab.rl_games.slices import build_slice_agent

    total = members * num_envs
    shared = SharedVecEnv(
        GymVecEnv(task, total, seed=0), total, [(i * num_envs, (i + 1) * num_envs) for i in range(members)]
    )
    shared.reset()
    agents = []
    for slot in range(members):
        cfg = copy.deepcopy(load_yaml(packaged_agent_yaml(task)))
        cfg.pop("pbt", None)
        cfg["params"]["seed"] = slot
        cfg["params"]["config"].update(num_actors=num_envs, print_stats=False)
        agents.append(build_slice_agent(cfg, shared.slices[slot]))
    return agents, shared


def variants(agents: list[Any], obs: Any) -> dict[str, Callable[[], Any]]:
    import torch
    from torch.func import functional_call, stack_module_state, vmap

    from async_pbt_isaaclab.rl_games.stacked_policy import StackedPolicy

    members = len(agents)
    n = obs.shape[0] // members
    parts = [{"obs": obs[i * n : (i + 1) * n]} for i in range(members)]
    for agent in agents:
        agent.model.eval()
    policy = StackedPolicy(agents)
    policy.refresh()
    base = copy.deepcopy(agents[0].model).to("meta").eval()
    params, buffers = stack_module_state([a.model for a in agents])
    keys = ("actions", "neglogpacs", "values", "mus", "sigmas")

    def one(p: Any, b: Any, x: Any) -> dict[str, Any]:
        out = functional_call(base, (p, b), ({"is_train": False, "prev_actions": None, "obs": x, "rnn_states": None},))
        return {k: out[k] for k in keys}

    batched = vmap(one, randomness="different")
    whole = {"obs": obs}

    def per_member() -> Any:
        return [agent.get_action_values(part) for agent, part in zip(agents, parts, strict=True)]

    def with_vmap() -> Any:
        with torch.no_grad():
            return batched(params, buffers, obs.reshape(members, n, *obs.shape[1:]))

    return {
        "per member": per_member,
        "stacked": lambda: policy.act(obs),
        "vmap": with_vmap,
        "one agent on all envs": lambda: agents[0].get_action_values(whole),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="HalfCheetah-v5", help="task with a packaged agent yaml")
    p.add_argument("--members", type=int, default=4, help="M: slice members")
    p.add_argument("--num-envs", type=int, default=16, help="n: envs per member")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds")
    p.add_argument("--calls", type=int, default=300, help="calls per variant per round")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    agents, shared = build_agents(args.task, args.members, args.num_envs)
    obs = agents[0].obs_to_tensors(shared._obs)["obs"]
    runs = variants(agents, obs)
    for fn in runs.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.repeats):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            t0 = time.perf_counter()
            for _ in range(args.calls):
                runs[name]()
            times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    print(
        f"{args.task}: M={args.members} members x n={args.num_envs} envs, {args.repeats} interleaved rounds of "
        f"{args.calls} calls; microseconds per call, median [min-max]"
    )
    base = statistics.median(times["per member"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"  {name:22s} {med:7.0f} [{min(values):.0f}-{max(values):.0f}]   {med / base:.2f}x per member")
    return 0


if __name__ == "__main__":
    sys.exit(main())
