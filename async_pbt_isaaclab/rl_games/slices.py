"""Several population members in one process, each a full rl_games agent on a slice of one vectorized env.

Read top to bottom, one process of ``M`` slices is (docs/architecture.md, "Members that share a simulator")::

    layout = slice_layout(first, M, num_policies, num_actors)        members first .. first+M-1
    sessions: start_member(...) for each member                      claim, resume or start, like a process member
    shared = SharedVecEnv(make_env(M * num_actors), ...)              one env, one emitter per slice
    agents: rl_games A2CAgent per member, vec_env = its SliceVecEnv   built one after the other (global seeds)
    SliceRollout(shared, agents).install()                            play_steps asks the main thread (slice_rollout.py)
    threads: agent.train() per member                                 rl_games' loops, observers as usual
    main thread: shared.run()                                         every member's rollout at once, once all asked

Each member has its own :class:`~async_pbt_isaaclab.member.session.MemberSession`, :class:`SliceObserver` (a
:class:`~async_pbt_isaaclab.rl_games.observer.PbtObserver`), publisher, evidence window, RNG, hyperparameters and
rl_games log dir. What differs from a process member:

* **Exploits are memory copies** when the donor is a member of this process: every publish keeps a copy of the
  state it saved (the last two), with the checksum of the file and the fingerprint of its model. A recipient whose
  decision names that checkpoint (by checksum) takes the copy once its fingerprint still matches, and the audit
  log says so (``donor_in_memory``); otherwise it copies the donor's file as always. The mutation is applied live
  (an exploit never restarts the process: that would restart every slice), the recipient keeps its counters and
  RNG.
* **Faults stay local**: after every update the member's weights are checked (one device read per epoch); a member
  whose weights went non-finite is restored from its last published checkpoint, keeping its counters, and the
  audit log records a ``fault`` entry; with no checkpoint yet it stops (its envs then get zero actions) and the
  others go on. The shared env never sees a non-finite action (``envs/slice_env.py``).
* **Stops**: Ctrl-C or SIGTERM stops every member at its next env step; each prints its resume line, and the next
  start resumes each from its own checkpoint. A member whose thread has not ended :func:`stop_wait_s` seconds after
  the stop (stuck, e.g. in I/O) is left behind: :class:`~async_pbt_isaaclab.rl_games.slice_threads.MembersStuck`
  names it, and the process ends without it.
* **Threads**: each member trains in a thread of its own with :func:`~async_pbt_isaaclab.core.slices.member_threads`
  torch threads, so that the members' updates, which run at the same time, share the cores instead of each taking
  what a process member would.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.generation import DonorSource
from async_pbt_isaaclab.core.records import MemberRecord
from async_pbt_isaaclab.core.slices import SliceLayout, member_threads, slice_problems
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
from async_pbt_isaaclab.member.writer import Step
from async_pbt_isaaclab.rl_games.agent import LiveAgent
from async_pbt_isaaclab.rl_games.inheritance import DonorMisfit, model_fingerprint
from async_pbt_isaaclab.rl_games.live import LIVE_SETTERS, blockers
from async_pbt_isaaclab.rl_games.observer import PbtObserver
from async_pbt_isaaclab.rl_games.publisher import MemberPublisher
from async_pbt_isaaclab.rl_games.slice_rollout import SliceRollout, rollout_problems
from async_pbt_isaaclab.rl_games.slice_threads import (
    STOP_WAIT_S,
    available_cores,
    end_unstarted,
    join_members,
    raise_for_members,
    run_members,
    stop_wait_s,
)

STEP_BY_STEP_ENV = "ASYNC_PBT_SLICES_STEP_BY_STEP"
"""Set to 1 to step slices one env step at a time even where their rollouts can be played together (the path
agents that :func:`~async_pbt_isaaclab.rl_games.slice_rollout.rollout_problems` names take): for comparing the two
(``scripts/benchmarks/slices_vs_processes.py``) or ruling the batched rollout out when something looks wrong."""

KEEP_PUBLISHED = 2
"""Published states a member keeps in memory: the donor of a decision at matching progress is the newest one, or the
one before when the donor has not published at this interval yet (slices step in lockstep)."""


def check_slices(cfg: PopulationConfig, count: int, agent_cfg: dict[str, Any] | None = None) -> list[str]:
    """Why this population config (and ``agent_cfg``, the rl_games yaml, when given) cannot run as ``count`` slices
    of one process (empty: it can). Every entry point asks this before anything is claimed."""
    return slice_problems(cfg.mutation, cfg.exploit_mode, LIVE_SETTERS, count, agent_cfg)


def clone_state(value: Any) -> Any:
    """A copy of a checkpoint dict whose tensors share no storage with the live agent (later updates of the agent
    cannot change it); on a GPU the clones stay on the device (no host synchronisation)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: clone_state(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone_state(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clone_state(v) for v in value)
    return copy.deepcopy(value)


@dataclass(frozen=True)
class PublishedState:
    """A checkpoint this member published, kept in memory for recipients in the same process."""

    checkpoint: str
    """Workspace-relative path of the published file."""
    sha256: str
    """Its checksum (what a decision's donor source names)."""
    model_sha256: str
    """Fingerprint of the model saved in it, taken when it was saved."""
    state: dict[str, Any] = field(repr=False)
    """The saved state (tensors cloned from the agent)."""


class SliceAgent(LiveAgent):
    """A slice member's agent: every full state it hands out is a clone, and the published ones are kept."""

    def __init__(self, algo: Any):
        super().__init__(algo)
        self.taken: dict[str, Any] | None = None
        """The last state handed out by :meth:`full_state` (the one a publish saves)."""
        self.published: list[PublishedState] = []
        """The newest :data:`KEEP_PUBLISHED` published states, oldest first."""
        self.lock = threading.Lock()
        """Guards :attr:`published` (read by other members' threads)."""

    def full_state(self) -> dict[str, Any]:
        state = clone_state(super().full_state())
        self.taken = state
        return state

    def keep_published(self, checkpoint: str, sha256: str, state: dict[str, Any]) -> None:
        kept = PublishedState(checkpoint, sha256, model_fingerprint(state["model"]), state)
        with self.lock:
            self.published = [*[p for p in self.published if p.checkpoint != checkpoint], kept][-KEEP_PUBLISHED:]

    def find_published(self, checkpoint: str) -> PublishedState | None:
        with self.lock:
            return next((p for p in self.published if p.checkpoint == checkpoint), None)


class SlicePublisher(MemberPublisher):
    """A slice member's publisher: a published checkpoint is kept in memory before any record names it, so a
    recipient in this process that decides on that record finds it there."""

    def prepare_publish(self) -> tuple[MemberRecord, list[Step]]:
        """The process member's publish, plus a copy of the state it serialised kept in memory (with the
        checkpoint's name and sha256) before the writer writes anything that names that checkpoint."""
        agent = self.agent
        if isinstance(agent, SliceAgent):
            agent.taken = None
        record, steps = super().prepare_publish()
        if isinstance(agent, SliceAgent):
            taken, published = agent.taken, self.last_checkpoint
            if taken is not None and published is not None:
                agent.keep_published(published[0], published[1], taken)
            agent.taken = None
        return record, steps


class SliceObserver(PbtObserver):
    """A slice member's observer: the process member's, plus the published states and the fault check."""

    def __init__(self, session: Any, host: SliceHost, slot: int):
        super().__init__(session)
        self.publisher = SlicePublisher(session)
        self.host = host
        """The process's members (where in-memory donors are found)."""
        self.slot = slot
        """This member's slice (0-based within the process)."""
        self.faults = 0
        """Non-finite weights found and repaired."""
        self.donor_from_memory = self._donor_from_memory

    def make_agent(self, algo: Any) -> LiveAgent:
        return SliceAgent(algo)

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        super().after_print_stats(frame, epoch_num, total_time)
        if self.agent is not None and not weights_finite(self.agent.algo):
            self.repair_fault()

    # ------------------------------------------------------------------ in-memory donors
    def _donor_from_memory(self, source: DonorSource) -> dict[str, Any] | None:
        donor = self.host.observer_of(source.member)
        if donor is None or not isinstance(donor.agent, SliceAgent):
            return None  # another process (or not built): the donor's checkpoint is fetched
        kept = donor.agent.find_published(source.checkpoint)
        reason = ""
        if kept is None:
            reason = "not kept in memory (older than the last two it published)"
        elif kept.sha256 != source.sha256:
            reason = f"kept checksum {kept.sha256[:12]} is not the decision's {source.sha256[:12]}"
        else:
            fingerprint = model_fingerprint(kept.state["model"])
            if fingerprint != kept.model_sha256:
                reason = (
                    f"model fingerprint {fingerprint[:12]} changed since it was published ({kept.model_sha256[:12]})"
                )
        if reason or kept is None:
            self.session.audit.append(
                "warning",
                {"message": f"donor {source.member} {source.checkpoint}: {reason}; copying its checkpoint instead"},
            )
            return None
        assert self.agent is not None
        try:
            self.agent.check_fits(kept.state)
        except DonorMisfit:
            return None  # fetch_donor says why, in the usual words
        self.session.audit.append(
            "donor_in_memory",
            {
                "donor": source.member,
                "checkpoint": source.checkpoint,
                "sha256": source.sha256,
                "model_sha256": kept.model_sha256,
            },
        )
        return copy.deepcopy(kept.state)

    # ------------------------------------------------------------------ faults
    def repair_fault(self) -> None:
        """Weights went non-finite in the last update: restore the last published checkpoint (counters kept), or
        stop this member when there is none. Logged as a ``fault`` audit entry either way."""
        agent, session = self.agent, self.session
        assert agent is not None
        self.faults += 1
        checkpoint = session.state.last_checkpoint
        body: dict[str, Any] = {
            "reason": "non-finite weights after an update",
            "frame": agent.frame,
            "epoch": agent.completed_epochs(),
        }
        if not checkpoint:
            session.log("fault", dict(body, action="stopped", detail="no checkpoint to restore yet"))
            print(
                f"[async-pbt] member {session.member}: non-finite weights and no checkpoint yet: this member stops; "
                f"the others go on",
                file=sys.stderr,
                flush=True,
            )
            raise MemberFault(f"member {session.member}: non-finite weights, no checkpoint to restore")
        from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

        path = session.ws.checkpoint_path(checkpoint)
        kept = agent.find_published(checkpoint) if isinstance(agent, SliceAgent) else None
        state = (
            copy.deepcopy(kept.state)
            if kept is not None and kept.sha256 == session.state.last_checkpoint_sha256
            else load_checkpoint(
                path,
                trusted=self.cfg.trusted_workspace,
                map_location=agent.algo.ppo_device,
                expected_sha256=session.state.last_checkpoint_sha256,
            )
        )
        counters = agent.counters()
        state["epoch"], state["frame"] = int(agent.algo.epoch_num), counters.frame
        pbt = state.get("pbt")
        pbt = pbt if isinstance(pbt, dict) else {}
        hyperparameters = {k: v for k, v in session.state.hyperparameters.items() if k in self.cfg.mutation}
        hyperparameters["learning_rate"] = float(pbt.get("last_lr", agent.last_lr))
        agent.load(state, hyperparameters)
        # Episodes in flight were played by the weights that just failed: the restored ones start a new segment.
        self.publisher.summary_source.start_generation(session.state.generation)
        session.audit.append(
            "fault", dict(body, action="restored", checkpoint=checkpoint, model_sha256=agent.fingerprint())
        )
        session.save()
        print(
            f"[async-pbt] member {session.member}: non-finite weights at frame {agent.frame}: restored from "
            f"{checkpoint} (counters kept)",
            file=sys.stderr,
            flush=True,
        )


class MemberFault(RuntimeError):
    """A slice member that cannot go on (non-finite weights, nothing to restore): it stops, the others do not."""


def weights_finite(algo: Any) -> bool:
    """Every floating tensor of the model is finite (one device read)."""
    import torch

    flags = [torch.isfinite(t).all() for t in algo.model.state_dict().values() if t.is_floating_point()]
    return bool(torch.stack(flags).all().item()) if flags else True


# ---------------------------------------------------------------------------------------------- the host


@dataclass
class SliceMember:
    """One member of the process: its slot, session and observer, and how its training ended."""

    slot: int
    session: Any
    observer: SliceObserver | None = None
    agent: Any = None
    status: str = "running"
    """``running``, ``finished``, ``stopped``, ``failed`` or ``stuck`` (its thread did not end after a stop)."""
    error: BaseException | None = None
    thread: threading.Thread | None = None
    """Its training thread, once started."""


class SliceHost:
    """The members of one process (see the module docstring)."""

    def __init__(self, layout: SliceLayout, torch_threads: int = 1, stop_wait: float = STOP_WAIT_S):
        self.layout = layout
        self.members: dict[int, SliceMember] = {}
        """By member index."""
        self.torch_threads = torch_threads
        """Torch intra-op threads of each member's training thread (``core.slices.member_threads``)."""
        self.stop_wait = stop_wait
        """Seconds a stop waits for the member threads (:func:`stop_wait_s`)."""

    def observer_of(self, member: int) -> SliceObserver | None:
        m = self.members.get(member)
        return None if m is None else m.observer


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
    problems = check_slices(cfg, layout.count, agent_cfg)
    if problems:
        raise ValueError("; ".join(problems))
    from async_pbt_isaaclab.rl_games.runner import _StopOnSignal

    threads = member_threads(agent_cfg["params"].get("torch_threads", "auto"), layout.count, available_cores())
    host = SliceHost(layout, threads, stop_wait_s())
    rl_cfgs = _start_sessions(host, agent_cfg, cfg, train_dir, task, checkpoint, reward_config)
    stop_signal = _StopOnSignal()
    shared: SharedVecEnv | None = None
    try:
        shared = _build(host, rl_cfgs, make_env, sigma, extra_observers)
        run_members(host, shared)
    except KeyboardInterrupt:
        if shared is not None:
            shared.stop("stopped (Ctrl-C or SIGTERM)")
    finally:
        try:
            join_members(host, shared)  # a SIGTERM meanwhile is a KeyboardInterrupt too, not the default's kill
        finally:
            stop_signal.restore()
        end_unstarted(host)
        if shared is not None and close_env:
            close = getattr(shared.env, "close", None)
            if close is not None:
                close()
    raise_for_members(host)
    return host


def _start_sessions(
    host: SliceHost,
    agent_cfg: dict[str, Any],
    cfg: PopulationConfig,
    train_dir: str,
    task: str,
    checkpoint: str | None,
    reward_config: str,
) -> dict[int, dict[str, Any]]:
    """Claim, resume or start every member of the process (as a process member starts); their agent configs."""
    from async_pbt_isaaclab.member.session import start_member

    layout = host.layout
    # An exploit is carried out in memory: a restart would restart every slice (check_slices makes it possible).
    member_cfg = dataclasses.replace(cfg, exploit_mode="inprocess")
    rl_cfgs: dict[int, dict[str, Any]] = {}
    try:
        for slot, member in enumerate(layout.members):
            session, member_agent_cfg = start_member(
                _member_agent_cfg(agent_cfg, layout.first, member),
                dataclasses.replace(member_cfg, policy_idx=member),
                train_dir=train_dir,
                task=task,
                checkpoint=checkpoint,
                reward_config=reward_config,
                start_info={"slices": layout.to_dict(), "slot": slot, "torch_threads": host.torch_threads},
            )
            host.members[member] = SliceMember(slot, session)
            rl_cfgs[member] = member_agent_cfg
    except BaseException:
        for m in host.members.values():
            m.session.close()
        raise
    return rl_cfgs


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

    register_bounded_exploration()
    layout = host.layout
    env = make_env(layout.num_envs)
    shared = SharedVecEnv(env, layout.num_envs, [layout.bounds(s) for s in range(layout.count)])
    for member, m in host.members.items():
        if m.session.already_finished:
            m.status = "finished"
            print(f"[async-pbt] member {member}: nothing to train: {m.session.already_finished}", flush=True)
            m.session.log("stop", {"status": "finished", "reason": m.session.already_finished})
            m.session.close()
            shared.leave(m.slot)
            continue
        observer = SliceObserver(m.session, host, m.slot)
        extra = list(extra_observers(member)) if extra_observers is not None else [IsaacAlgoObserver()]
        cfg = copy.deepcopy(rl_cfgs[member])
        # Members must not share a seed, or the slices start as copies of one run (the process's seed is its first
        # member's, as a process member's is its index's: each slice adds its slot).
        cfg["params"]["seed"] = int(cfg["params"].get("seed", 0) or 0) + m.slot
        m.observer = observer
        m.agent = build_slice_agent(
            cfg,
            shared.slices[m.slot],
            MultiObserver([observer, PbtScalarsObserver(m.session, observer.publisher), *extra]),
        )
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
