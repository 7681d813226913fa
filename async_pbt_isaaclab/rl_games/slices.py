"""Several population members in one process, each a full rl_games agent on a slice of one vectorized env.

Read top to bottom, one process of ``M`` slices is (docs/architecture.md, "Members that share a simulator")::

    layout = slice_layout(first, M, num_policies, num_actors)        members first .. first+M-1
    sessions: start_member(...) for each member                      claim, resume or start, like a process member
    shared = SharedVecEnv(make_env(M * num_actors), ...)              one env, one emitter per slice
    agents: rl_games A2CAgent per member, vec_env = its SliceVecEnv   built one after the other (global seeds)
    SliceRollout(shared, agents).install()                            play_steps asks the main thread (slice_rollout.py)
    threads: agent.train() per member                                 rl_games' loops, observers as usual
    main thread: shared.run()                                         every member's rollout at once, once all asked

Each member has its own :class:`~async_pbt_isaaclab.member.session.MemberSession` and member loop, driven by the
same :class:`~async_pbt_isaaclab.rl_games.observer.PbtObserver` as a process member's, with its own evidence window,
RNG, hyperparameters and rl_games log dir. What the observer is given (``shared``) makes the difference:

* **Exploits are memory copies** when the donor is a member of this process: every publish keeps a copy of the
  state it saved (the last two, :class:`~async_pbt_isaaclab.member.donors.KeptStates`), with the checksum of the
  file and the fingerprint of its model. A recipient whose decision names that checkpoint (by checksum) takes the
  copy once its fingerprint still matches, and the audit log says so (``donor_in_memory``); otherwise it copies
  the donor's file as always. The mutation is applied live (an exploit never restarts the process: that would
  restart every slice, and the trainer says it cannot), the recipient keeps its counters and RNG.
* **Faults stay local**: after every update the member's weights are checked (one device read per epoch); a member
  whose weights went non-finite is restored from its last published checkpoint, keeping its counters, and the
  audit log records a ``fault`` entry; with no checkpoint yet it stops (its envs then get zero actions) and the
  others go on. The shared env never sees a non-finite action (``envs/slice_env.py``).
* **Stops**: Ctrl-C or SIGTERM stops every member at its next env step; each prints its resume line, and the next
  start resumes each from its own checkpoint. A member whose thread has not ended :func:`stop_wait_s` seconds after
  the stop (stuck, e.g. in I/O) is left behind: :class:`~async_pbt_isaaclab.envs.slice_threads.MembersStuck`
  names it, and the process ends without it.
* **Threads**: each member trains in a thread of its own with :func:`~async_pbt_isaaclab.core.slices.member_threads`
  torch threads, so that the members' updates, which run at the same time, share the cores instead of each taking
  what a process member would.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.slices import SliceLayout, slice_problems
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv, give_env_values
from async_pbt_isaaclab.envs.slice_host import SliceHost
from async_pbt_isaaclab.envs.slice_threads import available_cores, leave_if_finished, open_slices, run_slices
from async_pbt_isaaclab.rl_games.live import LIVE_SETTERS, blockers
from async_pbt_isaaclab.rl_games.observer import PbtObserver
from async_pbt_isaaclab.rl_games.slice_rollout import SliceRollout, rollout_problems

STEP_BY_STEP_ENV = "ASYNC_PBT_SLICES_STEP_BY_STEP"
"""Set to 1 to step slices one env step at a time even where their rollouts can be played together (the path
agents that :func:`~async_pbt_isaaclab.rl_games.slice_rollout.rollout_problems` names take): for comparing the two
(``scripts/benchmarks/slices_vs_processes.py``) or ruling the batched rollout out when something looks wrong."""


def check_slices(cfg: PopulationConfig, count: int, agent_cfg: dict[str, Any] | None = None) -> list[str]:
    """Why this population config (and ``agent_cfg``, the rl_games yaml, when given) cannot run as ``count`` slices
    of one process (empty: it can). Every entry point asks this before anything is claimed."""
    return slice_problems(cfg.mutation, cfg.exploit_mode, LIVE_SETTERS, count, agent_cfg)


def train_slices(
    agent_cfg: dict[str, Any],
    cfg: PopulationConfig,
    layout: SliceLayout,
    make_env: Callable[[int], Any],
    *,
    train_dir: str,
    task: str,
    checkpoint: str | None = None,
    sigma: float | None = None,
    reward_config: str = "",
    extra_observers: Callable[[int], Sequence[Any]] | None = None,
    close_env: bool = True,
) -> SliceHost:
    """Train the members of ``layout`` in this process on one env ``make_env(layout.num_envs)`` (an rl_games
    vec-env carrying a summary source). Raises ``ValueError`` naming the setting when the config cannot run as
    slices, ``slice_threads.MemberThreadError`` when a member's thread cannot start, ``slice_threads.MembersStuck``
    when member threads are still running :func:`stop_wait_s` seconds after a stop; a stop (Ctrl-C, SIGTERM)
    returns after every member has stopped and said where it resumes.

    ``extra_observers(member)``: more rl_games observers for that member (default: rl_games' ``IsaacAlgoObserver``,
    as a process member has)."""
    host, rl_cfgs = open_slices(
        layout,
        check_slices(cfg, layout.count, agent_cfg),
        agent_cfg["params"].get("torch_threads", "auto"),
        cfg,
        lambda member: _member_agent_cfg(agent_cfg, layout.first, member),
        train_dir=train_dir,
        task=task,
        checkpoint=checkpoint,
        reward_config=reward_config,
    )
    run_slices(host, lambda: _build(host, rl_cfgs, make_env, sigma, extra_observers), close_env)
    return host


def _member_agent_cfg(agent_cfg: dict[str, Any], first: int, member: int) -> dict[str, Any]:
    """The agent config of ``member``: a run name given for the process (Isaac Lab's script names it after the
    first member, ``<name>_pbt_<first>``) gets this member's suffix, so members never share a log folder."""
    name = agent_cfg["params"]["config"].get("full_experiment_name")
    if not name:
        return agent_cfg
    out = copy.deepcopy(agent_cfg)
    base = name[: -len(f"_pbt_{first:03d}")] if name.endswith(f"_pbt_{first:03d}") else name
    out["params"]["config"]["full_experiment_name"] = f"{base}_pbt_{member:03d}"
    return out


def _build(
    host: SliceHost,
    rl_cfgs: dict[int, dict[str, Any]],
    make_env: Callable[[int], Any],
    sigma: float | None,
    extra_observers: Callable[[int], Sequence[Any]] | None,
) -> SharedVecEnv:
    """The shared env, then each member's agent (one after the other: rl_games seeds the global RNGs)."""
    from rl_games.common.algo_observer import IsaacAlgoObserver
    from rl_games.torch_runner import _override_sigma

    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
    from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver
    from async_pbt_isaaclab.rl_games.pbt_logging import PbtScalarsObserver
    from async_pbt_isaaclab.rl_games.training_run import say_if_unseeded

    register_bounded_exploration()
    layout = host.layout
    env = make_env(layout.num_envs)
    shared = SharedVecEnv(env, layout.num_envs, [layout.bounds(s) for s in range(layout.count)])
    give_env_values(env, shared, next(iter(host.members.values())).session.cfg.mutation)
    for member, m in host.members.items():
        if leave_if_finished(m, shared):
            continue
        observer = PbtObserver(m.session, shared=host.kept)
        extra = list(extra_observers(member)) if extra_observers is not None else [IsaacAlgoObserver()]
        cfg = copy.deepcopy(rl_cfgs[member])
        # Members must not share a seed, or the slices start as copies of one run (the process's seed is its first
        # member's, as a process member's is its index's: each slice adds its slot).
        cfg["params"]["seed"] = int(cfg["params"].get("seed", 0) or 0) + m.slot
        say_if_unseeded(member, cfg)  # slot 0 of a process seeded 0 trains unseeded, as a process member would
        m.observer = observer
        m.agent = build_slice_agent(
            cfg,
            shared.slices[m.slot],
            MultiObserver([observer, PbtScalarsObserver(m.session, observer.publisher), *extra]),
        )
        m.train = m.agent.train
        blocked = blockers(m.agent, ())
        if blocked:
            raise ValueError(
                f"member {member}: {'; '.join(blocked)}: slices exploit in memory only; run members as processes"
            )
        if m.session.start_mode in ("fresh", "warm_start"):
            _override_sigma(m.agent, {"sigma": sigma})
    _choose_stepping(host, shared)
    shared.reset()
    return shared


def _choose_stepping(host: SliceHost, shared: SharedVecEnv) -> None:
    """How the members collect experience: rollouts played together, or one env step at a time (said, with why)."""
    agents = {m.slot: m.agent for m in host.members.values() if m.agent is not None}
    # rl_games' play_steps asks its vec-env for the masks before every step: the main thread reads them after each.
    shared.read_action_masks = any(getattr(a, "use_action_masks", False) for a in agents.values())
    print(
        f"[async-pbt] {len(agents)} members train in this process, {host.torch_threads} torch thread(s) each "
        f"({available_cores()} cores)",
        flush=True,
    )
    problems = rollout_problems(agents)
    if os.environ.get(STEP_BY_STEP_ENV, "") not in ("", "0"):
        problems = [f"{STEP_BY_STEP_ENV} is set", *problems]
    if problems:
        print(f"[async-pbt] slices step the env one step at a time ({'; '.join(problems)})", flush=True)
    elif agents:
        SliceRollout(shared, agents).install()


def build_slice_agent(agent_cfg: dict[str, Any], vec_env: Any, observer: Any = None) -> Any:
    """An rl_games agent of ``agent_cfg`` (loaded by rl_games' ``Runner``, which may change it) that acts on the
    vec-env it is given (a member's :class:`~async_pbt_isaaclab.envs.slice_env.SliceVecEnv`) instead of building one
    of its own: rl_games' ``A2CBase`` skips ``create_vec_env`` when the config gives ``env_info`` and ``vec_env``.
    ``observer``: its rl_games observer (``None``: rl_games' default)."""
    from rl_games.torch_runner import Runner

    runner = Runner(observer)
    runner.load(agent_cfg)
    runner.params["config"]["env_info"] = vec_env.get_env_info()
    runner.params["config"]["vec_env"] = vec_env
    return runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
