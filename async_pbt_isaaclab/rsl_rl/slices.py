"""Several rsl_rl members in one process, each its own ``OnPolicyRunner`` on a slice of one vectorized env.

The process is rl_games slices' (``envs/slice_threads.py``; docs/slices.md). Each member's thread runs its runner's
own ``learn`` (rsl_rl's ``alg.act``, ``process_env_step``, ``compute_returns``, ``update`` on its own storage,
unforked) on an ``RslRlSliceEnv`` (``envs/rsl_rl_vec_env.py``), whose ``step`` returns the member's rows once every
member has handed in its actions (``envs/slice_env.py``, one env step at a time)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.slices import SliceLayout, slice_problems
from async_pbt_isaaclab.envs.rsl_rl_vec_env import RslRlSliceEnv
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv, give_env_values
from async_pbt_isaaclab.envs.slice_host import SliceHost
from async_pbt_isaaclab.envs.slice_threads import leave_if_finished, open_slices, run_slices
from async_pbt_isaaclab.member.donors import ClonesItsStates
from async_pbt_isaaclab.rsl_rl.config import with_hyperparameters
from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS
from async_pbt_isaaclab.rsl_rl.member import MemberEvents, member_values
from async_pbt_isaaclab.rsl_rl.member_config import OVERRIDE_PREFIX, agent_view, rsl_rl_key
from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer


class SliceTrainer(ClonesItsStates, RslRlTrainer):
    """A slice member's runner: its states are clones, it does not restart (that would restart every slice)."""


def check_slices(cfg: PopulationConfig, count: int) -> list[str]:
    """Why this population config cannot run as ``count`` rsl_rl slices of one process (empty: it can)."""
    return slice_problems(cfg.mutation, cfg.exploit_mode, LIVE_SETTERS, count)


def train_slices(
    rsl_cfg: Mapping[str, Any],
    cfg: PopulationConfig,
    layout: SliceLayout,
    make_env: Callable[[int], Any],
    build: Callable[[dict[str, Any], str, RslRlSliceEnv], Any],
    *,
    train_dir: str,
    override_prefix: str = OVERRIDE_PREFIX,
    **start: Any,
) -> SliceHost:
    """Train ``layout``'s members here on one rsl_rl env ``make_env(layout.num_envs)``, member ``first + i`` seeded
    ``runner.seed + i``, its runner ``build(config, log folder, its slice env)``; raises as rl_games'
    ``train_slices``."""
    problems, start = check_slices(cfg, layout.count), dict(start, train_dir=train_dir, task=rsl_cfg["env"]["id"])
    start["override_name"] = lambda key: rsl_rl_key(key, override_prefix)  # as train_member's, for typed values
    host, views = open_slices(
        layout, problems, rsl_cfg.get("torch_threads", 1), cfg, lambda _: agent_view(rsl_cfg), **start
    )
    run_slices(host, lambda: _build(host, rsl_cfg, views, make_env, build, Path(train_dir)))
    return host


def _build(
    host: SliceHost, rsl_cfg: Mapping[str, Any], views: Mapping[int, Any], make_env: Any, build: Any, train_dir: Path
) -> SharedVecEnv:
    """The shared env, then each member's runner and driver (one after the other: building a runner seeds)."""
    whole = make_env((layout := host.layout).num_envs)
    shared = SharedVecEnv(whole, layout.num_envs, [layout.bounds(s) for s in range(layout.count)])
    shared.reset(whole.get_observations())
    give_env_values(whole, shared, host.members[layout.first].session.cfg.mutation)  # searched env values per slice
    for member, m in host.members.items():
        if leave_if_finished(m, shared):
            continue
        view, seed = views[member], int(rsl_cfg["runner"].get("seed", 0) or 0) + m.slot
        runner_cfg = with_hyperparameters(dict(rsl_cfg["runner"], seed=seed), member_values(view, m.session.cfg))
        log_dir = train_dir / view["params"]["config"]["full_experiment_name"] / "summaries"
        m.agent = build(dict(rsl_cfg, runner=runner_cfg), str(log_dir), RslRlSliceEnv(shared, m.slot, whole))
        trainer = SliceTrainer(m.agent)
        if trainer.abilities().why_not_live:
            why = "; ".join(trainer.abilities().why_not_live)
            raise ValueError(f"member {member}: {why}: slices exploit in memory only; run members as processes")
        m.observer = MemberEvents(m.session, trainer, donors=host.kept)
        m.train = functools.partial(trainer.train, int(runner_cfg["max_iterations"]))
    return shared
