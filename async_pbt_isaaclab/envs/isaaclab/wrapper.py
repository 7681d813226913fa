"""The env wrapper that feeds the PBT evidence: per-episode summaries of an Isaac Lab env.

:class:`PbtIsaacLabEnv` is a gymnasium wrapper; :func:`attach_summary_source` builds it from the agent yaml's
``pbt_summary:`` section (:class:`~async_pbt_isaaclab.envs.isaaclab.terms.SummaryCfg`, where the term sources are
described). It is separate from :mod:`async_pbt_isaaclab.envs.isaaclab` (the script-facing hooks that start the
simulator and load tasks) because it only *reads* an env it is handed: it never imports ``isaaclab``, ``isaaclab_rl``
or ``isaaclab_tasks``, and torch only inside the wrapper's methods.

Where the wrapper sits (the standard Isaac Lab RL-Games chain, one layer added)::

    rl_games agent
      algo.vec_env = RlGamesGpuEnv                 (isaaclab_rl; .env is what the env_creator returned)
        .env = RlGamesVecEnvWrapper                (isaaclab_rl; .env is the gymnasium env it was given)
          .env = PbtIsaacLabEnv                    (this module; has .pbt_summary_source)
            .env = [gymnasium.wrappers.RecordVideo]
              ... ManagerBasedRLEnv | DirectRLEnv  (what gym.make returned; .unwrapped)

``RlGamesVecEnvWrapper`` only requires ``isinstance(env.unwrapped, ManagerBasedRLEnv | DirectRLEnv)`` and calls
``env.step/reset/close/render_mode`` on the env it is given, so a :class:`gymnasium.Wrapper` is accepted there.
The PBT observer finds the summary source with
:func:`async_pbt_isaaclab.member.summary_source.find_summary_source`, which walks ``vec_env -> env -> env ...``.

Contract of :class:`PbtIsaacLabEnv` (what it needs from the wrapped env, as ``ManagerBasedRLEnv.step`` and
``DirectRLEnv.step`` provide it):

* ``env.unwrapped`` has ``num_envs`` (int) and ``device`` (str); ``step(actions)`` returns
  ``(obs, rew, terminated, truncated, extras)`` with ``rew`` float ``(num_envs,)``, ``terminated`` and
  ``truncated`` bool ``(num_envs,)`` on ``device``;
* an env with ``terminated | truncated`` set finished its episode *in this step* and has already been reset
  (its next step starts a new episode); the reset goes through ``env.unwrapped._reset_idx(env_ids)``;
* ``extras["log"]`` (optional) maps names to scalars (0-d tensors or Python numbers) describing the envs reset in
  this step; Isaac Lab rebuilds or updates it on steps with resets, so its values are stale between resets.

What it adds: every step feeds an :class:`~async_pbt_isaaclab.envs.summary_emitter.EpisodeSummaryEmitter` (on the env
device, no host synchronisation) with the step's rewards, flags, per-env term values and ``extras["log"]``. The
emitter is exposed as :attr:`PbtIsaacLabEnv.pbt_summary_source` (``drain() -> EpisodeBatch``,
``start_generation(g)``). Observations, rewards, flags and extras pass through unchanged.


A multi-agent task (``DirectMARLEnv``) reaches the wrapper converted to one agent by Isaac Lab's
``multi_agent_to_single_agent`` (as its scripts do): ``env.unwrapped`` is then the conversion, a ``DirectRLEnv`` whose
``.env`` is the task's multi-agent env. Term sources, the curriculum source and the ``_reset_idx`` hook go to that
inner env (:func:`~async_pbt_isaaclab.envs.isaaclab.terms.task_env`), where the task keeps its state and resets its
finished envs.

Values are taken at the end of each step and, for envs that finish, *just before the env resets them*: the
wrapper hooks ``env.unwrapped._reset_idx`` to snapshot the sources there (Isaac Lab zeroes ``successes`` and the
reward manager's episodic sums in that call). The snapshot costs one device copy per term on steps with resets and
no host synchronisation.

Curriculum stage (part of the condition label; episodes collected under another stage are not compared): a source
``log:Curriculum/<term>``, ``attr:<path>`` or ``<module>:<function>`` read every ``curriculum_poll_steps`` steps,
optionally binned (``curriculum_bin``) so a continuous value such as the mean terrain level does not start a new
condition at every reset. Reading a tensor-valued source synchronises with the host once per poll.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import gymnasium

from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE, ConditionLabel
from async_pbt_isaaclab.envs.isaaclab.condition import curriculum_reader, format_stage
from async_pbt_isaaclab.envs.isaaclab.terms import (
    CALLABLE_PREFIX,
    SummaryCfg,
    TermSpec,
    make_term_reader,
    task_env,
    term_specs,
    with_objective,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter


class PbtIsaacLabEnv(gymnasium.Wrapper):
    """Gymnasium wrapper for an Isaac Lab ``ManagerBasedRLEnv`` / ``DirectRLEnv`` that emits per-episode evidence.

    Place it directly inside ``RlGamesVecEnvWrapper``: ``RlGamesVecEnvWrapper(PbtIsaacLabEnv(env), ...)``. See the
    module docstring for the env contract, the term sources and where values are sampled.

    Attributes are documented where :meth:`__init__` and its setup steps define them; the one the PBT observer uses
    is :attr:`pbt_summary_source`.

    Args:
        env: The Isaac Lab env (or a wrapper of it, such as ``RecordVideo``).
        terms: Per-episode terms: :class:`TermSpec` objects, a mapping ``name -> source`` (yaml form, see
            :func:`parse_term_spec`), or a callable ``f(env_unwrapped) -> {name: Tensor (num_envs,)}`` whose
            names and modes are given by ``term_modes`` (default mode ``last``).
        term_modes: Modes for the names a callable ``terms`` returns.
        objective: The population objective (a term name, ``episode_return`` or ``episode_length``). When it is
            not among the terms it is added: as ``log:<objective>`` if it looks like an Isaac Lab log key
            (contains ``/``), as ``accessor:<objective>`` if the env's ``get_per_env_terms()`` has it;
            otherwise construction fails with the ways to provide it.
        curriculum: Curriculum-stage source string, or a callable ``f(env_unwrapped)``; None for no curriculum.
        curriculum_bin: Bin width for numeric stages.
        curriculum_poll_steps: Read the curriculum every this many steps.
        task: Task id for the condition label.
        reward_config: Reward-configuration fingerprint for the condition label (see :func:`reward_fingerprint`).
        generation: Policy generation at construction (the observer sets it again in ``after_init``).
        capacity: Emitter ring-buffer size (episodes between drains).
        compile: Fuse the emitter update with ``torch.compile``.
        dtype: Emitter accumulator dtype (default float64).
    """

    def __init__(
        self,
        env: gymnasium.Env,
        *,
        terms: Iterable[TermSpec] | Mapping[str, Any] | Callable[[Any], Mapping[str, "torch.Tensor"]] = (),
        term_modes: Mapping[str, str] | None = None,
        objective: str | None = None,
        curriculum: str | Callable[[Any], Any] | None = None,
        curriculum_bin: float | None = None,
        curriculum_poll_steps: int = 1,
        task: str = "",
        reward_config: str = "",
        generation: int = 0,
        capacity: int | None = None,
        compile: bool = False,
        dtype: "torch.dtype | None" = None,
    ):
        """Wrap ``env`` and allocate the emitter on ``env.unwrapped.device`` (arguments: the class docstring)."""
        super().__init__(env)
        base: Any = env.unwrapped  # an Isaac Lab env: num_envs, device (gymnasium.Env declares neither)
        task_state = task_env(base)
        # Where terms, curriculum and resets are read (the multi-agent env of a converted multi-agent task).
        self._task_env = task_state
        self.num_envs = int(base.num_envs)
        """Number of parallel environments."""
        self.device = str(base.device)
        """Device of the env's tensors and of the emitter's buffers."""
        self.task = str(task)
        """Task id stamped into the condition label."""
        self.reward_config = str(reward_config)
        """Reward-configuration fingerprint stamped into the condition label."""
        self.objective = objective or RETURN_OBJECTIVE
        """Objective the condition label names."""
        specs = self._set_up_terms(terms, term_modes, objective)
        self._set_up_curriculum(curriculum, curriculum_bin, curriculum_poll_steps)
        self.pbt_summary_source: EpisodeSummaryEmitter = self._make_emitter(specs, generation, capacity, compile, dtype)
        """Completed-episode summaries: ``drain() -> EpisodeBatch``, ``start_generation(g)`` (the observer's
        contract)."""
        # Snapshot of the per-env sources taken inside _reset_idx during a step (None: no reset this step).
        self._snapshot: dict[str, torch.Tensor] | None = None
        self._in_step = False
        self._hooked: tuple[Any, Any] | None = None
        if self._per_env:
            self._install_reset_hook(task_state)

    def _set_up_terms(self, terms: Any, term_modes: Mapping[str, str] | None, objective: str | None) -> list[TermSpec]:
        """The recorded terms, objective included (setup step of :meth:`__init__`), and how each is read."""
        specs, self._callable_terms = term_specs(terms, term_modes)
        specs = with_objective(specs, objective, self._task_env)
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate term names in {names}")
        self.term_specs: tuple[TermSpec, ...] = tuple(specs)
        """The recorded terms (objective included), in batch order."""
        # (name, reader) of every per-env term; reader None: the value comes from the ``terms`` callable.
        self._per_env = [
            (s.name, None if s.source.startswith(CALLABLE_PREFIX) else make_term_reader(s))
            for s in specs
            if s.kind != "log"
        ]
        self._log_terms = [(s.name, s.target) for s in specs if s.kind == "log"]
        return specs

    def _set_up_curriculum(self, curriculum: Any, curriculum_bin: float | None, curriculum_poll_steps: int) -> None:
        """Where and how often the curriculum stage is read (setup step of :meth:`__init__`), and its first read."""
        self._curriculum_read = curriculum_reader(curriculum)
        self.curriculum_source = curriculum
        """Where the curriculum stage is read from (None: no curriculum)."""
        self.curriculum_bin = curriculum_bin
        """Bin width of numeric curriculum stages."""
        self.curriculum_poll_steps = max(1, int(curriculum_poll_steps))
        """Steps between two curriculum reads."""
        self.steps = 0
        """Env steps taken through this wrapper (each advances all ``num_envs`` envs)."""
        self._stage = ""
        self._condition = self._make_label()
        self._poll_curriculum(getattr(self._task_env, "extras", None), force=True)

    def _make_emitter(
        self,
        specs: list[TermSpec],
        generation: int,
        capacity: int | None,
        compile: bool,
        dtype: "torch.dtype | None",
    ) -> EpisodeSummaryEmitter:
        """The emitter on the env's device (setup step of :meth:`__init__`)."""
        import torch

        from async_pbt_isaaclab.envs.summary_emitter import EpisodeSummaryEmitter

        fresh = int(getattr(self._task_env, "common_step_counter", 0) or 0) == 0
        return EpisodeSummaryEmitter(
            num_envs=self.num_envs,
            device=self.device,
            term_names=[s.name for s in specs],
            condition=lambda: self._condition,
            generation=generation,
            term_modes={s.name: s.mode for s in specs},
            capacity=capacity,
            dtype=dtype or torch.float64,
            fresh_start=fresh,
            compile=compile,
        )

    # ------------------------------------------------------------------ condition label

    def _make_label(self) -> ConditionLabel:
        return ConditionLabel(
            task=self.task, objective=self.objective, curriculum_stage=self._stage, reward_config=self.reward_config
        )

    def _poll_curriculum(self, extras: Any, force: bool = False) -> None:
        if self._curriculum_read is None:
            return
        if not force and self.steps % self.curriculum_poll_steps:
            return
        value = self._curriculum_read(self._task_env, extras)
        if value is None:
            return  # key not logged yet (or this step): keep the stage we have
        stage = format_stage(value, self.curriculum_bin)
        if stage != self._stage:
            self._stage = stage
            self._condition = self._make_label()

    # ------------------------------------------------------------------ the reset hook

    def _install_reset_hook(self, base: Any) -> None:
        original = getattr(base, "_reset_idx", None)
        if original is None:
            warnings.warn(
                f"{type(base).__name__} has no _reset_idx: per-env terms are read after each step, so "
                f"values the env clears when it resets a finished env are lost",
                stacklevel=3,
            )
            return
        wrapper = self

        def _reset_idx(env_ids=None, *args, **kwargs):
            if wrapper._in_step:
                wrapper._take_snapshot(env_ids)
            return original(env_ids, *args, **kwargs)

        base._reset_idx = _reset_idx  # instance attribute: shadows the class method for this env only
        self._hooked = (base, original)

    def _read_per_env(self) -> dict[str, "torch.Tensor"]:
        import torch

        env = self._task_env
        out = {}
        called: Mapping[str, Any] = self._callable_terms(env) if self._callable_terms is not None else {}
        for name, read in self._per_env:
            if read is None:
                if name not in called:
                    raise KeyError(f"the terms callable returned {sorted(called)}, without {name!r}")
                value = called[name]
            else:
                value = read(env)
            if not isinstance(value, torch.Tensor):
                value = torch.as_tensor(value, device=self.device)
            if not value.is_floating_point():
                value = value.float()
            out[name] = value.reshape(self.num_envs)
        return out

    def _take_snapshot(self, env_ids: Any) -> None:
        current = self._read_per_env()
        if self._snapshot is None or env_ids is None:
            self._snapshot = {k: v.clone() for k, v in current.items()}
        else:
            # A second reset inside the same step: take the newly reset envs' values, keep the others'.
            for k, v in current.items():
                self._snapshot[k][env_ids] = v[env_ids]

    # ------------------------------------------------------------------ gymnasium API

    def step(self, action):
        """Step the env, account the step in the emitter, return the env's outputs unchanged."""
        import torch

        self._snapshot = None
        self._in_step = True
        try:
            # Isaac Lab returns tensors where gymnasium.Env.step declares Python scalars.
            outputs: tuple[Any, Any, Any, Any, Any] = self.env.step(action)
        finally:
            self._in_step = False
        obs, rew, terminated, truncated, extras = outputs
        self.steps += 1
        terms = None
        if self._per_env:
            terms = self._read_per_env()
            if self._snapshot is not None:
                done = terminated | truncated
                terms = {k: torch.where(done, self._snapshot[k], v) for k, v in terms.items()}
        log_view = None
        if self._log_terms:
            log = extras.get("log") if isinstance(extras, Mapping) else None
            log_view = {} if log is None else {name: log.get(key) for name, key in self._log_terms}
        self._poll_curriculum(extras)
        self.pbt_summary_source.step(rew, terminated, truncated, terms=terms, log=log_view)
        return obs, rew, terminated, truncated, extras

    def reset(self, **kwargs):
        """Reset all envs; episodes in progress are abandoned (never reported as completed)."""
        obs, extras = self.env.reset(**kwargs)
        emitter = self.pbt_summary_source
        emitter.reset()
        self._poll_curriculum(extras, force=True)
        if emitter.condition != self._condition:
            # The reset logged the stage (Isaac Lab fills extras["log"] in _reset_idx). Every env starts a fresh
            # episode now, so all of them belong to the new label; left to the emitter's per-step poll, the label
            # would change after the first step and these first episodes would be dropped as straddlers.
            emitter.condition = self._condition
            emitter.start_generation(emitter.generation)
        return obs, extras

    def close(self):
        if self._hooked is not None:
            base, _ = self._hooked
            base.__dict__.pop("_reset_idx", None)
            self._hooked = None
        return self.env.close()

    @property
    def condition(self) -> ConditionLabel:
        """The condition label episodes finishing now are stamped with."""
        return self._condition


def attach_summary_source(env: gymnasium.Env, summary: SummaryCfg | None = None, **kwargs: Any) -> PbtIsaacLabEnv:
    """``PbtIsaacLabEnv(env, ...)`` configured from a :class:`SummaryCfg` (keyword arguments win)."""
    summary = summary or SummaryCfg()
    options: dict[str, Any] = dict(
        terms=summary.terms,
        curriculum=summary.curriculum,
        curriculum_bin=summary.curriculum_bin,
        curriculum_poll_steps=summary.curriculum_poll_steps,
        capacity=summary.capacity,
    )
    options.update(kwargs)
    return PbtIsaacLabEnv(env, **options)


__all__ = ["PbtIsaacLabEnv", "attach_summary_source"]
