"""One vectorized env shared by several members, each acting on a contiguous slice of its envs.

A process that hosts ``M`` members (``rl_games/slices.py``) builds one vec-env of ``M x n`` envs (the CPU gymnasium
:class:`~async_pbt_isaaclab.envs.gym_vec_env.GymVecEnv` or Isaac Lab's ``RlGamesVecEnvWrapper``) and gives each
member's rl_games agent a :class:`SliceVecEnv`: an rl_games ``IVecEnv`` that is a view of envs ``[i*n, (i+1)*n)``.

Stepping together (the barrier), in rollouts (the default, ``rl_games/slice_rollout.py``)::

    member thread i:  agent.play_steps -> SharedVecEnv.request_rollout(i) --> waits for its batch
    main thread:      SharedVecEnv.run(): once every active slice has asked, SliceRollout plays horizon_length
                      steps for all of them (one env.step a step) and hands each member its batch

or, for agents the rollout cannot play (``slice_rollout.rollout_problems``), one env step at a time::

    member thread i:  agent.play_steps -> SliceVecEnv.step(actions_i) --submit--> waits for its result
    main thread:      SharedVecEnv.run(): once every active slice has submitted, one env.step(concat(actions))
                      and every waiting slice takes its part of the outputs

The shared env steps in the thread that runs :meth:`SharedVecEnv.run` (the process's main thread): Isaac Sim
steps from the thread that started it, and Ctrl-C reaches the main thread, which then stops every slice at its next
step. Each step joins the actions with one ``cat`` and splits the outputs with views (no copy, no host
synchronisation on a GPU). Non-finite actions of a member whose weights went bad are replaced by 0 before they
reach the shared simulator (a device-side ``nan_to_num``), so one member's fault cannot corrupt another's envs.

Evidence: the env's :class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` (which would see all
envs as one member's) is replaced by a :class:`~async_pbt_isaaclab.envs.slice_summary.SlicedSummarySource`, one
emitter per slice fed with its slice of every step's rewards, flags and per-env terms; member ``i``'s
``SliceVecEnv.pbt_summary_source`` is its own emitter, so its evidence, generations and settling gate are its slice's
alone.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from async_pbt_isaaclab.envs.slice_summary import split_summary_source

DISPLAY_ONLY_INFOS = ("episode", "log")
"""``infos`` keys that hold means over all envs reset in a step (display values): they would mix members, so a
slice does not pass them on. A member's own curves come from rl_games' per-env rewards and the pbt/* scalars."""


class SlicesStopped(KeyboardInterrupt):
    """Raised in a member's thread at its next env step once the process is stopping (Ctrl-C, SIGTERM): the member
    stops like a process member on Ctrl-C (no checkpoint written, its resume line printed)."""


# ---------------------------------------------------------------------------------------------- splitting (no sync)


def split_value(value: Any, start: int, stop: int, num_envs: int) -> Any:
    """The part of one per-env output that belongs to envs ``[start, stop)``: a view of a tensor or array whose
    first dimension is ``num_envs``, a dict split key by key; anything else is shared and passed as is."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        if value.ndim >= 1 and value.shape[0] == num_envs:
            return value[start:stop]
        return value
    batch = getattr(value, "batch_size", None)  # a TensorDict (rsl_rl's observations): split as one, a view
    if batch is not None and len(batch) >= 1 and batch[0] == num_envs:
        return value[start:stop]
    if isinstance(value, Mapping):
        return {k: split_value(v, start, stop, num_envs) for k, v in value.items()}
    return value


def split_infos(infos: Any, start: int, stop: int, num_envs: int) -> dict[str, Any]:
    """A slice's ``infos``: per-env values split, the display means (:data:`DISPLAY_ONLY_INFOS`) left out."""
    if not isinstance(infos, Mapping):
        return {}
    return {k: split_value(v, start, stop, num_envs) for k, v in infos.items() if k not in DISPLAY_ONLY_INFOS}


def join_actions(parts: Sequence[Any]) -> Any:
    """One action batch from every slice's actions, in slice order, non-finite values replaced by 0 (device-side
    for tensors: no host synchronisation)."""
    if isinstance(parts[0], torch.Tensor):
        return finite_actions(torch.cat([p if isinstance(p, torch.Tensor) else torch.as_tensor(p) for p in parts]))
    return finite_actions(np.concatenate([np.asarray(p) for p in parts]))


def finite_actions(actions: Any) -> Any:
    """``actions`` with non-finite values replaced by 0 (a new tensor or array; device-side for tensors): a member
    whose weights went bad must not corrupt the envs the others act in."""
    if isinstance(actions, torch.Tensor):
        if actions.is_floating_point():
            return torch.nan_to_num(actions, nan=0.0, posinf=0.0, neginf=0.0)
        return actions.clone()
    array = np.asarray(actions)
    if np.issubdtype(array.dtype, np.floating):
        return np.nan_to_num(array, nan=0.0, posinf=0.0, neginf=0.0)
    return array.copy()


def zeros_like_actions(template: Any) -> Any:
    """Actions for a slice whose member has left (finished, stopped or failed): zeros, the shape of another's."""
    if isinstance(template, torch.Tensor):
        return torch.zeros_like(template)
    return np.zeros_like(np.asarray(template))


# ---------------------------------------------------------------------------------------------- the barrier


class SharedVecEnv:
    """The shared rl_games vec-env and its ``M`` slices: members hand in work, :meth:`run` does it for all of them
    once every active member has. See the module docstring.

    Two ways to step, one per process:

    * **rollouts** (:meth:`use_rollouts`, what ``rl_games/slices.py`` chooses when every agent allows it): each
      member asks for a whole rollout (:meth:`request_rollout`, in place of rl_games' ``play_steps``) and the main
      thread plays ``horizon_length`` steps for all members together, batching what can be batched: one thread
      handoff per member per epoch;
    * **steps**: each member's rl_games loop steps its :class:`SliceVecEnv` and the main thread steps the env once
      every member has handed in its actions: one handoff per member per env step."""

    def __init__(self, env: Any, num_envs: int, bounds: Sequence[tuple[int, int]]):
        self.env = env
        """The whole rl_games vec-env (``IVecEnv``)."""
        self.num_envs = int(num_envs)
        """Envs of :attr:`env`."""
        self.bounds = tuple(bounds)
        """``[start, stop)`` of every slice."""
        if self.bounds[-1][1] != self.num_envs:
            raise ValueError(f"slices cover {self.bounds[-1][1]} envs, the env has {self.num_envs}")
        self.summary = split_summary_source(env, self.bounds)
        """One emitter per slice."""
        self.slices = [SliceVecEnv(self, i) for i in range(len(self.bounds))]
        """Each member's view."""
        self.rounds = 0
        """Handoffs done: env steps in the step mode, rollouts in the rollout mode."""
        self.rollout: Callable[[list[int]], Mapping[int, Any]] | None = None
        """Plays one rollout of the given slots and returns each one's result (rollout mode), or ``None``."""
        # One lock; the main thread waits on its own condition (woken once, by the last submission of a round) and
        # each slice on its own (woken once, by the round): M + 1 wake-ups per round, not M x M.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        self._slot_conds = [threading.Condition(lock) for _ in self.bounds]
        self._actions: list[Any] = [None] * len(self.bounds)
        self._active = [True] * len(self.bounds)
        self._outputs: Any = None
        self._stopping: str | None = None
        self._error: BaseException | None = None
        self._obs: Any = None
        self.read_action_masks = False
        """Read the env's ``get_action_masks()`` after its reset and every step (set when a member uses action
        masks: rl_games' ``play_steps`` asks its vec-env for them before each step)."""
        self._masks: Any = None

    # ------------------------------------------------------------------ main thread
    def use_rollouts(self, rollout: Callable[[list[int]], Mapping[int, Any]]) -> None:
        """Step in rollouts: ``rollout(slots)`` plays one rollout for the members in ``slots`` (it steps
        :attr:`env` itself) and returns each slot's result, handed back by :meth:`request_rollout`."""
        self.rollout = rollout

    def reset(self, obs: Any = None) -> None:
        """Reset the whole env once, before the members start (each slice's first ``reset`` returns its part);
        ``obs``: the env's current observations instead (an rsl_rl env is reset when it is built)."""
        self._obs = self.env.reset() if obs is None else obs
        self._masks = self._read_masks()

    def _read_masks(self) -> Any:
        """The env's action masks of its current state (main thread), when a member uses them."""
        return self.env.get_action_masks() if self.read_action_masks else None

    def run(self) -> None:
        """Do each round (an env step, or a rollout) once every active slice has handed in its part, until no slice
        is active or the members are stopping (call in the main thread; a stopping member raises at its next hand-in
        and needs no round). A KeyboardInterrupt here (Ctrl-C, SIGTERM turned into one) is passed on: call
        :meth:`stop` then."""
        while True:
            with self._cond:
                while self._active_count() and not self._all_submitted() and self._stopping is None:
                    # A bounded wait: Ctrl-C is seen even where a lock wait is not interruptible.
                    self._cond.wait(timeout=1.0)
                if not self._active_count() or self._stopping is not None:
                    return
                parts = list(self._actions)
            try:
                outputs, masks = self._play(parts)
            except BaseException as exc:  # a simulator (or rollout) error stops every member, and says why
                what = "the members' rollout" if self.rollout is not None else "the shared env"
                with self._cond:
                    self._error = exc
                    self._stopping = f"{what} failed: {type(exc).__name__}: {exc}"
                    self._wake_slices()
                raise
            with self._cond:
                self.rounds += 1
                self._outputs, self._masks = outputs, masks
                self._actions = [None] * len(self.bounds)
                self._wake_slices()

    def _play(self, parts: list[Any]) -> tuple[Any, Any]:
        """One round: the rollout of the slots that asked, or one env step with every slice's actions (zeros for a
        slice that left) and the action masks of the state it reached."""
        if self.rollout is not None:
            return self.rollout([slot for slot, p in enumerate(parts) if p is not None]), None
        template = next(p for p in parts if p is not None)
        outputs = self.env.step(join_actions([zeros_like_actions(template) if p is None else p for p in parts]))
        return outputs, self._read_masks()

    def stop(self, reason: str) -> None:
        """Every member stops at its next env step or rollout (:class:`SlicesStopped` in its thread)."""
        with self._cond:
            if self._stopping is None:
                self._stopping = reason
            self._wake_slices()
            self._cond.notify_all()

    @property
    def steps(self) -> int:
        """Env steps taken in the step mode (each advances all envs; a rollout counts its own)."""
        return self.rounds if self.rollout is None else 0

    @property
    def stopping(self) -> str | None:
        """Why the members are stopping (``None``: they are not)."""
        return self._stopping

    # ------------------------------------------------------------------ member threads
    def leave(self, slot: int) -> None:
        """The member in ``slot`` stopped stepping (finished, stopped, failed): its envs get zero actions."""
        with self._cond:
            self._active[slot] = False
            self._actions[slot] = None
            self._cond.notify_all()  # the others may all have submitted already

    def submit(self, slot: int, actions: Any) -> tuple[Any, Any, Any, Any]:
        """Hand in ``slot``'s actions; returns its part of the next env step once the env has stepped."""
        if self.rollout is not None:
            raise RuntimeError(f"slice {slot} stepped its env alone while the members play rollouts together")
        obs, rewards, dones, infos = self._hand_in(slot, actions)
        start, stop = self.bounds[slot]
        n = self.num_envs
        return (
            split_value(obs, start, stop, n),
            split_value(rewards, start, stop, n),
            split_value(dones, start, stop, n),
            split_infos(infos, start, stop, n),
        )

    def request_rollout(self, slot: int) -> Any:
        """Ask for ``slot``'s next rollout (rollout mode); returns its result once the main thread has played it."""
        if self.rollout is None:
            raise RuntimeError("shared env: request_rollout without use_rollouts")
        return self._hand_in(slot, True)[slot]

    def _hand_in(self, slot: int, part: Any) -> Any:
        with self._cond:
            self._check_stop()
            if not self._active[slot]:
                raise RuntimeError(f"slice {slot} stepped after it left the shared env")
            self._actions[slot] = part
            done = self.rounds
            if self._all_submitted():
                self._cond.notify_all()  # only the main thread waits on it
            mine = self._slot_conds[slot]
            while self.rounds == done:
                self._check_stop()
                mine.wait()
            return self._outputs

    def first_obs(self, slot: int) -> Any:
        if self._obs is None:
            raise RuntimeError("shared env: reset() it before the members start")
        start, stop = self.bounds[slot]
        return split_value(self._obs, start, stop, self.num_envs)

    def action_masks(self, slot: int) -> Any:
        """``slot``'s part of the env's action masks of the current step (read by the main thread)."""
        if not self.read_action_masks:
            raise RuntimeError(f"slice {slot} asked for action masks, but no member of the process uses them")
        start, stop = self.bounds[slot]
        return split_value(self._masks, start, stop, self.num_envs)

    def _wake_slices(self) -> None:
        for cond in self._slot_conds:
            cond.notify_all()

    def _check_stop(self) -> None:
        if self._stopping is not None:
            raise SlicesStopped(self._stopping)

    def _active_count(self) -> int:
        return sum(self._active)

    def _all_submitted(self) -> bool:
        return all(a is not None for a, on in zip(self._actions, self._active, strict=True) if on)


class SliceVecEnv:
    """Member ``slot``'s rl_games vec-env: a view of its envs of the :class:`SharedVecEnv` (``IVecEnv`` methods)."""

    def __init__(self, shared: SharedVecEnv, slot: int):
        self.shared = shared
        """The env all slices share."""
        self.slot = slot
        """This slice's position in the process (0-based)."""
        start, stop = shared.bounds[slot]
        self.num_envs = stop - start
        """Envs of this slice."""
        self.pbt_summary_source = shared.summary.parts[slot]
        """This member's completed-episode evidence (its slice's envs alone)."""
        self._reset = False

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any]:
        return self.shared.submit(self.slot, actions)

    def reset(self) -> Any:
        """The slice's first observations: the shared env was reset once before the members started. rl_games
        resets once, at the start of ``train``; a later reset (``epochs_between_resets``, refused with slices by
        ``core/slices.py``) cannot be done: a slice cannot reset the envs the others act in."""
        if self._reset:
            raise RuntimeError(
                f"slice {self.slot}: reset() again: a slice cannot reset the envs the other members act in "
                f"(params.config.epochs_between_resets must be 0 with slices)"
            )
        self._reset = True
        return self.shared.first_obs(self.slot)

    def get_number_of_agents(self) -> int:
        return int(self.shared.env.get_number_of_agents())

    def get_env_info(self) -> dict[str, Any]:
        return self.shared.env.get_env_info()

    def has_action_masks(self) -> bool:
        has = getattr(self.shared.env, "has_action_masks", None)
        return bool(has()) if has is not None else False

    def get_action_masks(self) -> Any:
        """This slice's action masks for the coming step (rl_games' ``play_steps`` asks before each step)."""
        return self.shared.action_masks(self.slot)

    def seed(self, seed: int) -> None:
        pass  # the shared env is seeded once, by the process

    def set_train_info(self, env_frames: Any, *args: Any, **kwargs: Any) -> None:
        pass  # a curriculum of the shared env must not follow one member's frames

    def get_env_state(self) -> Any:
        getter = getattr(self.shared.env, "get_env_state", None)
        return getter() if getter is not None else None

    def set_env_state(self, env_state: Any) -> None:
        pass  # a donor's env state must not change the env the other members act in

    def close(self) -> None:
        pass  # the process closes the shared env once


def give_env_values(env: Any, shared: SharedVecEnv, keys: Iterable[str]) -> None:
    """Each slice's env values (searched ``env.*`` keys) set on its own envs: a slice member's trainer sets them
    live (``member/env_values.py``), so members on one env differ in them. Raises ``ValueError`` (one line per
    key) where the shared env cannot hold a value per slice."""
    from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
    from async_pbt_isaaclab.envs.env_parameters import SliceEnvValues
    from async_pbt_isaaclab.member.env_values import ENV_VALUES_ATTR, SLICE_ENV_VALUES_ATTR, find_on_chain

    keys = sorted(k for k in keys if is_env_key(k))
    if not keys:
        return
    # An Isaac Lab env gives its own per-slice values (envs/isaaclab/slice_rewards.py); gymnasium's are env objects.
    per_slice = find_on_chain(env, SLICE_ENV_VALUES_ATTR)
    sub_envs = getattr(getattr(env, "envs", None), "envs", None)
    if per_slice is None and not isinstance(sub_envs, (list, tuple)):
        raise ValueError(f"pbt.mutation.{keys[0]}: the shared env ({type(env).__name__}) holds no value per slice")
    for slot, slice_env in enumerate(shared.slices):
        start, stop = shared.bounds[slot]
        values = per_slice(start, stop, keys) if per_slice else SliceEnvValues(list(sub_envs or ())[start:stop], keys)
        if values.problems:
            raise ValueError("; ".join(values.problems))
        setattr(slice_env, ENV_VALUES_ATTR, values)
