"""The rsl_rl trainer adapter: an unforked ``OnPolicyRunner`` as the member loop sees it (``member/trainer.py``).

**Events.** rsl_rl has no observer hooks. The trainer wraps the running algorithm's ``update`` and ``act`` (instance
attributes; rsl_rl's code is not changed) and tells the listener given to :meth:`RslRlTrainer.attach`: before the
real update, ``rollout_done`` (the evidence is in: publish and decide, as rl_games members do); at the next rollout's
first ``act`` (or when ``learn`` returns), ``update_done`` (an exploit is carried out there, so the next rollout runs
with the new weights). ``runner.learn`` is called once per process, so rsl_rl's own logging, checkpoints and
TensorBoard run stay what they are in a plain run (docs/rsl_rl.md says why not ``learn`` in chunks).

**Counters** are the member's own (:class:`TrainerCounters`: completed iterations and env frames), kept in the
checkpoint's ``infos`` (rsl_rl's slot for extra data, which ``runner.load`` returns and nothing reads) and restored
by :meth:`RslRlTrainer.load`; :meth:`RslRlTrainer.train` starts ``learn`` at index ``epoch`` so that no iteration
index is repeated or skipped across a restart (rsl_rl's own resume repeats the saved one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol

from async_pbt_isaaclab import checkpoint_io
from async_pbt_isaaclab.member.summary_source import SummarySource, find_summary_source
from async_pbt_isaaclab.member.trainer import TrainerAbilities, TrainerCounters
from async_pbt_isaaclab.rsl_rl.layout import COUNTERS_KEY, LAYOUTS, optimizer_learning_rate
from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS, apply_live_hyperparameters
from async_pbt_isaaclab.rsl_rl.member_config import rsl_rl_key
from async_pbt_isaaclab.rsl_rl.release import installed_line


class IterationListener(Protocol):
    """What the member loop is told of each rsl_rl iteration (either may raise :class:`StopTraining`)."""

    def rollout_done(self) -> None:
        """The iteration's rollout is collected; its update has not run."""

    def update_done(self) -> None:
        """The iteration's update has run and rsl_rl has logged it; the next rollout has not started."""


class RunnerInfos(Protocol):
    """What a runner subclass's own ``save`` adds to ``infos`` and its ``load`` takes back (mjlab's runner: the env's
    ``env_state``); a member checkpoint carries it beside the member's counters."""

    def saved(self, runner: Any) -> Mapping[str, Any]:
        """The runner's own ``infos`` entries now."""

    def restore(self, runner: Any, infos: Mapping[str, Any]) -> None:
        """Take them back from a loaded checkpoint's ``infos``."""


class StopTraining(Exception):
    """Raised by a listener to end ``runner.learn`` after the current event (:meth:`RslRlTrainer.train` returns)."""


class RslRlTrainer:
    """One member's ``OnPolicyRunner``, wrapped for the member loop's reads and writes."""

    name = "rsl_rl"
    in_group = False
    """A rank of a member's group, whose ranks load together (``rsl_rl/group.py``)."""

    def __init__(
        self,
        runner: Any,
        summary_source: SummarySource | None = None,
        line: int | None = None,
        runner_infos: RunnerInfos | None = None,
        override_prefix: str = "agent.",
    ):
        self.runner = runner
        self.override_prefix = override_prefix
        """Where the runner config sits among the command line's overrides (:meth:`restart_overrides`): ``agent.``
        on Isaac Lab (the agent config is the runner config), ``agent.runner.`` for the CPU member's config."""
        self._runner_infos = runner_infos
        """What the runner's own ``save`` puts in ``infos`` (mjlab: the env's ``env_state``); the member's are kept
        beside it."""
        self.layout = LAYOUTS[installed_line() if line is None else line]
        source = summary_source or find_summary_source(runner.env)
        if source is None:
            raise ValueError(f"{type(runner.env).__name__}: the env carries no pbt_summary_source (episode evidence)")
        self._source = source
        self.epoch = 0
        """Completed iterations (updates) of this member, across exploits and restarts."""
        self.frame = 0
        """Env frames of those iterations (the whole rank group's)."""
        self.total_iterations = 0
        """Where :meth:`train` stops (completed iterations)."""
        self._listener: IterationListener | None = None
        self._update_untold = False
        """An update has run whose ``update_done`` the listener has not been told yet."""
        self._count_updates()

    @property
    def alg(self) -> Any:
        """rsl_rl's running PPO."""
        return self.runner.alg

    @property
    def frames_per_iteration(self) -> int:
        """Env frames one iteration collects (all ranks of a group)."""
        runner = self.runner
        steps = runner.cfg["num_steps_per_env"]
        return int(steps) * int(runner.env.num_envs) * int(getattr(runner, "gpu_world_size", 1))

    # ------------------------------------------------------------------------- the loop's events
    def attach(self, listener: IterationListener) -> None:
        """Tell ``listener`` of every iteration from now on."""
        self._listener = listener

    def _count_updates(self) -> None:
        """Wrap ``runner.alg.update`` and ``runner.alg.act`` (once, at construction). Every update is counted, the
        listener told ``rollout_done`` before it, and ``update_done`` once rsl_rl has logged and saved that iteration:
        at the next rollout's first ``act``, or when ``learn`` returns. So an exec restart there loses none of rsl_rl's
        own output of the iteration it completes, and the next rollout runs with whatever the listener loaded."""
        alg = self.alg
        update, act = alg.update, alg.act
        if getattr(update, "counted_by", None) is not None:
            raise ValueError("this runner is already a member's (one RslRlTrainer per runner: each counts its updates)")

        def update_with_events() -> Any:
            if self._listener is not None:
                self._listener.rollout_done()
            losses = update()
            self.epoch += 1
            self.frame += self.frames_per_iteration
            self._update_untold = True
            return losses

        def act_with_events(*args: Any, **kwargs: Any) -> Any:
            self._tell_update_done()
            return act(*args, **kwargs)

        update_with_events.counted_by = self  # type: ignore[attr-defined]
        alg.update, alg.act = update_with_events, act_with_events

    def _tell_update_done(self) -> None:
        if not self._update_untold:
            return
        self._update_untold = False
        if self._listener is not None:
            import torch

            # rsl_rl acts under torch.inference_mode: a load there would make the optimizer's state inference
            # tensors, which its next step (outside that mode) may not update in place.
            with torch.inference_mode(False):
                self._listener.update_done()

    def train(self, total_iterations: int, init_at_random_ep_len: bool = False) -> None:
        """Run ``runner.learn`` until the member has completed ``total_iterations`` (its own count), starting at
        iteration index ``epoch``; returns early when a listener raises :class:`StopTraining`."""
        self.total_iterations = int(total_iterations)
        remaining = self.total_iterations - self.epoch
        if remaining <= 0:
            return
        self.runner.current_learning_iteration = self.epoch
        try:
            self.runner.learn(num_learning_iterations=remaining, init_at_random_ep_len=init_at_random_ep_len)
            self._tell_update_done()  # the last iteration's: no rollout follows it
        except StopTraining:
            pass

    def training_ends_now(self) -> str:
        """Non-empty when the iteration just completed is the last one :meth:`train` runs."""
        if self.total_iterations and self.epoch >= self.total_iterations:
            return f"training ends this iteration (max_iterations={self.total_iterations})"
        return ""

    # ------------------------------------------------------------------------------- state
    def abilities(self) -> TrainerAbilities:
        """Every key of :data:`~.live.LIVE_SETTERS` is live; weights load live unless recurrent or multi-GPU."""
        alg, why = self.alg, []
        models = [alg.policy] if self.layout.line == 3 else [alg.actor, alg.critic]
        if any(getattr(m, "is_recurrent", False) for m in models):
            why.append("recurrent policy: its hidden states belong to the old weights")
        if getattr(alg, "is_multi_gpu", False) and not self.in_group:
            why.append("multi-GPU member: every rank must load the donor together (a restart does that)")
        return TrainerAbilities(
            frozenset(LIVE_SETTERS), loads_weights=not why, why_not_live=tuple(why), trainer=self.name
        )

    def counters(self) -> TrainerCounters:
        return TrainerCounters(frame=self.frame, epoch=self.epoch)

    def learning_rate(self) -> float:
        return float(self.alg.learning_rate)

    def optimizer_learning_rates(self) -> list[float]:
        return [float(g["lr"]) for g in self.alg.optimizer.param_groups]

    def full_state(self) -> dict[str, Any]:
        """What ``runner.save`` would write now, with the member's counters in ``infos``."""
        state = self.layout.full_state(self.alg, last_index=max(self.epoch - 1, 0))
        state["infos"] = self._infos(self.counters())
        return state

    def _infos(self, counters: TrainerCounters) -> dict[str, Any]:
        own = self._runner_infos.saved(self.runner) if self._runner_infos is not None else {}
        return {**own, COUNTERS_KEY: {"frame": int(counters.frame), "epoch": int(counters.epoch)}}

    def with_metadata(self, state: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
        return checkpoint_io.with_pbt_metadata(state, metadata)

    def metadata(self, state: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return checkpoint_io.read_pbt_metadata(state)

    def checkpoint_bytes(self, state: Mapping[str, Any], path: Path | str = "<rsl_rl state>") -> bytes:
        return checkpoint_io.checkpoint_bytes(path, state, self.layout.kind)[0]

    def read_checkpoint(self, path: Path, sha256: str | None, trusted: bool, on_device: bool = False) -> dict[str, Any]:
        device = self.runner.device if on_device else "cpu"
        return checkpoint_io.load_checkpoint(
            path, self.layout.kind, trusted=trusted, map_location=device, expected_sha256=sha256
        )

    def check_fits(self, state: Mapping[str, Any]) -> None:
        mine = self.layout.model_weights(self.alg)
        for key, weights in mine.items():
            theirs = state.get(key)
            misfit = (
                "not in the checkpoint"
                if not isinstance(theirs, Mapping)
                else checkpoint_io.state_dict_misfit(weights, theirs)
            )
            if misfit:
                raise ValueError(f"donor {key} does not fit this member's model: {misfit}")
        optimizer = state.get("optimizer_state_dict")
        if not isinstance(optimizer, Mapping) or checkpoint_io.optimizer_groups_differ(
            self.alg.optimizer.state_dict(), optimizer
        ):
            raise ValueError("donor optimizer_state_dict has other parameter groups than this member's")

    def donor_learning_rate(self, state: Mapping[str, Any]) -> float | None:
        return optimizer_learning_rate(state)

    def recipient_state(
        self, donor: Mapping[str, Any], counters: TrainerCounters, metadata: Mapping[str, Any], learning_rate: float
    ) -> dict[str, Any]:
        """The donor's models, normalisers (inside the models), RND and optimizer moments at ``learning_rate``; the
        recipient's counters and runner ``infos`` (its env's state); ``metadata`` under ``"pbt"``: a file
        ``runner.load`` reads as any of its own."""
        state = {k: v for k, v in donor.items() if k not in ("iter", "infos", checkpoint_io.PBT_KEY)}
        optimizer = dict(state["optimizer_state_dict"])
        optimizer["param_groups"] = [dict(g, lr=float(learning_rate)) for g in optimizer["param_groups"]]
        state["optimizer_state_dict"] = optimizer
        state["iter"] = max(int(counters.epoch) - 1, 0)
        state["infos"] = self._infos(counters)
        return checkpoint_io.with_pbt_metadata(state, metadata)

    def load(self, state: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> None:
        """Load ``state`` (models, optimizer, its rate), take its counters when it has them, then set every live
        value of ``hyperparameters``: all of it applies from the next update on."""
        self.layout.load(self.alg, state)
        infos = state.get("infos")
        infos = infos if isinstance(infos, Mapping) else {}
        if self._runner_infos is not None and infos:
            self._runner_infos.restore(self.runner, infos)
        counters = infos.get(COUNTERS_KEY)
        if counters:
            self.epoch, self.frame = int(counters["epoch"]), int(counters["frame"])
        apply_live_hyperparameters(self.alg, hyperparameters)

    def fingerprint(self, state: Mapping[str, Any] | None = None) -> str:
        """sha256 of the models' weights (every model key's state dict, names prefixed by the key)."""
        models = self.layout.model_weights(self.alg) if state is None else {k: state[k] for k in self.layout.models}
        return checkpoint_io.model_fingerprint({f"{k}/{n}": t for k, sd in models.items() for n, t in sd.items()})

    def restart_overrides(self, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """Each value by the name the start reads typed values by (:func:`~.member_config.rsl_rl_key`)."""
        return {rsl_rl_key(k, self.override_prefix): v for k, v in hyperparameters.items()}

    def before_restart(self) -> None:
        """Flush and close rsl_rl's writer (3.x: ``runner.writer``; 5.x: ``runner.logger.writer``)."""
        runner = self.runner
        writer = getattr(runner, "writer", None) or getattr(getattr(runner, "logger", None), "writer", None)
        if writer is not None and hasattr(writer, "flush"):
            writer.flush()
            writer.close()

    def summary_source(self) -> SummarySource:
        return self._source
