#!/usr/bin/env python
"""The slices rollout's action step: M members' rl_games calls, their lean steps, ``torch.func.vmap``; and a check.

::

    nice python scripts/benchmarks/action_step.py                          # HalfCheetah's network, M=4, n=16, CPU
    nice python scripts/benchmarks/action_step.py --task Pendulum-v1 --members 8 --num-envs 64
    python scripts/benchmarks/action_step.py --check --device cuda:0 --task Pendulum-v1 --members 4 \\
        --num-envs 4096 --override "params.network.mlp.units=[256, 128, 64]"   # the GPU check (docs/validation.md)

Builds ``M`` real rl_games agents of the task's packaged yaml (on a gymnasium vec-env of ``M x n`` envs shared as
slices), gives each its own weights and normaliser statistics, and times, interleaved over ``--repeats`` rounds of
``--calls`` calls each, what one env step of a slices rollout spends choosing actions:

* **per member**: each agent's own ``get_action_values`` on its slice;
* **lean**: each member's ``LeanActionStep`` on its slice (``rl_games/action_step.py``, what slices use): the same
  computation without rl_games' per-call work;
* **vmap**: ``torch.func.vmap`` of ``functional_call`` over the agents' stacked parameters and buffers, a batched
  alternative (it cannot give each member's own bits: other kernels);
* **one agent on all envs**: the ceiling's single call on ``M x n`` observations, for scale.

Prints the median and spread (min-max) of microseconds per call of each, and the ratios to per member. One torch
thread on a CPU (as the CPU benchmarks run). A measurement on a shared machine, not a test.

``--check``: instead of timing, compares the lean step with each member's own ``get_action_values`` on the same
observations from the same RNG state, ``--repeats`` times after warm-up calls (TorchScript optimises rl_games'
normalisers after its first calls), and prints the largest absolute difference of each output. They must be 0: the
lean step runs each member's own modules on the same tensors, so the same kernels give the same bits, on a CPU and on
CUDA with the TF32 settings rl_games' ``Runner`` makes (printed). Exit status 1 when any difference is not 0.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from typing import Any, Callable

KEYS = ("actions", "neglogpacs", "values", "mus", "sigmas")
"""What a rollout stores of each action step."""


def build_agents(
    task: str, members: int, num_envs: int, device: str = "cpu", overrides: tuple[str, ...] = ()
) -> tuple[list[Any], Any]:
    """``members`` rl_games agents of ``task``'s packaged yaml (with ``overrides``) on ``device``, each on its slice
    of one shared env, each with its own weights and normaliser statistics."""
    import torch

    from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml
    from async_pbt_isaaclab.envs.gym_vec_env import GymVecEnv
    from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
    from async_pbt_isaaclab.examples.agents import packaged_agent_yaml
    from async_pbt_isaaclab.rl_games.slices import build_slice_agent

    total = members * num_envs
    shared = SharedVecEnv(
        GymVecEnv(task, total, seed=0), total, [(i * num_envs, (i + 1) * num_envs) for i in range(members)]
    )
    shared.reset()
    generator = torch.Generator().manual_seed(0)
    agents = []
    for slot in range(members):
        cfg = apply_overrides(load_yaml(packaged_agent_yaml(task)), overrides)
        cfg.pop("pbt", None)
        cfg["params"]["seed"] = slot + 1
        rl = cfg["params"]["config"]
        # One minibatch of the whole rollout: rl_games refuses a batch the minibatch does not divide (no update here).
        rl.update(num_actors=num_envs, print_stats=False, device=device, device_name=device)
        rl["minibatch_size"] = int(rl["horizon_length"]) * num_envs
        agent = build_slice_agent(cfg, shared.slices[slot])
        with torch.no_grad():  # fresh members are alike (zero means, unit variances): make each its own
            for name, buffer in agent.model.named_buffers():
                if name.endswith(("running_mean", "running_var")):
                    noise = torch.rand(buffer.shape, generator=generator, dtype=buffer.dtype)
                    buffer.copy_((noise + 0.1 if name.endswith("var") else noise - 0.5).to(buffer.device))
            for param in agent.model.parameters():
                param.add_(0.1 * torch.randn(param.shape, generator=generator).to(param.device))
        agent.model.eval()
        agents.append(agent)
    return agents, shared


def variants(agents: list[Any], obs: Any) -> dict[str, Callable[[], Any]]:
    import torch
    from torch.func import functional_call, stack_module_state, vmap

    from async_pbt_isaaclab.rl_games.action_step import LeanActionStep

    members = len(agents)
    n = obs.shape[0] // members
    parts = [{"obs": obs[i * n : (i + 1) * n]} for i in range(members)]
    lean = [LeanActionStep(agent) for agent in agents]
    base = copy.deepcopy(agents[0].model).to("meta").eval()
    params, buffers = stack_module_state([a.model for a in agents])

    def one(p: Any, b: Any, x: Any) -> dict[str, Any]:
        out = functional_call(base, (p, b), ({"is_train": False, "prev_actions": None, "obs": x, "rnn_states": None},))
        return {k: out[k] for k in KEYS}

    batched = vmap(one, randomness="different")
    whole = {"obs": obs}

    def with_vmap() -> Any:
        with torch.no_grad():
            return batched(params, buffers, obs.reshape(members, n, *obs.shape[1:]))

    return {
        "per member": lambda: [agent.get_action_values(part) for agent, part in zip(agents, parts, strict=True)],
        "lean": lambda: [step(part) for step, part in zip(lean, parts, strict=True)],
        "vmap": with_vmap,
        "one agent on all envs": lambda: agents[0].get_action_values(whole),
    }


def check(agents: list[Any], obs: Any, repeats: int) -> int:
    """Lean step against each member's own ``get_action_values``: the largest difference of each output."""
    import torch

    runs = variants(agents, obs)
    for _ in range(5):  # TorchScript's profiling executor settles on its optimised graph after a few calls
        runs["per member"](), runs["lean"]()
    worst = dict.fromkeys(KEYS, 0.0)
    for r in range(repeats):
        torch.manual_seed(r)
        own = runs["per member"]()
        torch.manual_seed(r)
        lean = runs["lean"]()
        for mine, theirs in zip(lean, own, strict=True):
            for key in KEYS:
                worst[key] = max(worst[key], float((mine[key].double() - theirs[key].double()).abs().max()))
    print(
        f"device {obs.device}; TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, cuDNN "
        f"{torch.backends.cudnn.allow_tf32}; float32 matmul precision {torch.get_float32_matmul_precision()}"
    )
    print(f"lean step vs each member's own get_action_values, {repeats} rounds, largest absolute difference:")
    for key, value in worst.items():
        print(f"  {key:12s} {value:.3g}")
    ok = all(value == 0.0 for value in worst.values())
    print("bit for bit: yes (tolerance 0 met)" if ok else "bit for bit: NO (tolerance 0 not met)")
    return 0 if ok else 1


def timed(runs: dict[str, Callable[[], Any]], repeats: int, calls: int, sync: Callable[[], None]) -> dict[str, list]:
    for fn in runs.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(repeats):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                runs[name]()
            sync()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="HalfCheetah-v5", help="task with a packaged agent yaml")
    p.add_argument("--members", type=int, default=4, help="M: slice members")
    p.add_argument("--num-envs", type=int, default=16, help="n: envs per member")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds (--check: compared calls)")
    p.add_argument("--calls", type=int, default=300, help="calls per variant per round")
    p.add_argument("--device", default="cpu", help="the agents' device (cpu, cuda:0)")
    p.add_argument("--override", action="append", default=[], help="agent yaml override, e.g. params.network...")
    p.add_argument("--check", action="store_true", help="compare the lean step with get_action_values instead")
    args = p.parse_args(argv)
    import torch

    if args.device == "cpu":
        torch.set_num_threads(1)
    agents, shared = build_agents(args.task, args.members, args.num_envs, args.device, tuple(args.override))
    obs = agents[0].obs_to_tensors(shared._obs)["obs"]
    obs = obs + 3 * torch.randn(obs.shape, generator=torch.Generator().manual_seed(1)).to(obs.device)
    if args.check:
        return check(agents, obs, args.repeats)
    sync = torch.cuda.synchronize if obs.is_cuda else (lambda: None)
    times = timed(variants(agents, obs), args.repeats, args.calls, sync)
    print(
        f"{args.task} on {args.device}: M={args.members} members x n={args.num_envs} envs, {args.repeats} interleaved "
        f"rounds of {args.calls} calls; microseconds per call, median [min-max]"
    )
    base = statistics.median(times["per member"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"  {name:22s} {med:7.0f} [{min(values):.0f}-{max(values):.0f}]   {med / base:.2f}x per member")
    return 0


if __name__ == "__main__":
    sys.exit(main())
