"""``async-pbt evaluate`` of an rsl_rl member's checkpoint: held-out episodes of its gymnasium task.

The rsl_rl twin of :class:`~async_pbt_isaaclab.commands.evaluate.Evaluator`, picked by :func:`rsl_rl_config` when the
config a checkpoint is played with is an rsl_rl one: a member's ``agent.yaml`` (which carries its rsl_rl config under
``rsl_rl``) or a config of the ``examples/rsl_rl_*.yaml`` form (``env``, ``runner``). The policy is the installed
rsl-rl-lib's own: an ``OnPolicyRunner`` built from that config on one CPU env, the checkpoint loaded as
``runner.load`` loads it (:mod:`async_pbt_isaaclab.rsl_rl.layout`, through the safe loader), and the actions of
``runner.get_inference_policy()`` (the Gaussian's mean). The episodes, seeds, return and objective are
:func:`~async_pbt_isaaclab.commands.episodes.play_episodes`', the rl_games player's, so both trainers are judged alike.
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys
from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab.commands.common import CliError
from async_pbt_isaaclab.commands.evaluation_records import Evaluation
from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key


def rsl_rl_config(cfg: Any) -> dict[str, Any] | None:
    """The rsl_rl config in ``cfg`` (itself, or the one a member's ``agent.yaml`` keeps under ``rsl_rl``), else
    ``None``: ``cfg`` is an rl_games agent yaml."""
    if isinstance(cfg, Mapping) and isinstance(cfg.get("rsl_rl"), Mapping):
        cfg = cfg["rsl_rl"]
    if isinstance(cfg, Mapping) and isinstance(cfg.get("env"), Mapping) and isinstance(cfg.get("runner"), Mapping):
        return copy.deepcopy(dict(cfg))
    return None


class RslRlEvaluator:
    """Builds rsl_rl's runner once for a config, then evaluates checkpoints with it (the interface of
    :class:`~async_pbt_isaaclab.commands.evaluate.Evaluator`)."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        source: str | Path,
        task: str | None = None,
        trusted: bool = False,
        verbose: bool = False,
    ):
        from async_pbt_isaaclab.core.config import objective_term
        from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE
        from async_pbt_isaaclab.rsl_rl.release import UnsupportedRslRl, installed_line

        self.agent_yaml = Path(source)
        self.cfg = copy.deepcopy(dict(cfg))
        self.task = task or str(self.cfg["env"].get("id") or "")
        if not self.task:
            raise CliError(f"rsl_rl config {source}: no env.id; pass --task")
        self.objective = objective_term(str((self.cfg.get("pbt") or {}).get("objective") or RETURN_OBJECTIVE))
        self.trusted = trusted
        self.verbose = verbose
        """Show rsl_rl's own lines while it builds (on stderr) instead of keeping them out of the output."""
        try:
            self.line = installed_line()
        except UnsupportedRslRl as exc:
            raise CliError(str(exc)) from None
        self._runner = self._build_runner()

    def _make_env(self, env_values: Mapping[str, Any] | None = None) -> Any:
        """One env of the task with the config's ``env.env_config`` and a checkpoint's searched env values."""
        import gymnasium

        from async_pbt_isaaclab.envs.gym_vec_env import task_kwargs

        kwargs = task_kwargs(self.cfg["env"].get("env_config"))
        kwargs.update({env_parameter(k): v for k, v in (env_values or {}).items()})
        try:
            return gymnasium.make(self.task, **kwargs)
        except (gymnasium.error.Error, TypeError) as exc:
            raise CliError(f"task {self.task!r} with env.env_config of {self.agent_yaml}: {exc}") from None

    def _build_runner(self) -> Any:
        from async_pbt_isaaclab.envs.rsl_rl_vec_env import RslRlGymVecEnv
        from async_pbt_isaaclab.examples.rsl_rl_train import build_runner

        cfg = copy.deepcopy(self.cfg)
        cfg["runner"] = dict(cfg["runner"], device="cpu")
        cfg["env"] = dict(cfg["env"], id=self.task)
        chatter = sys.stderr if self.verbose else io.StringIO()
        try:
            with contextlib.redirect_stdout(chatter):
                env = RslRlGymVecEnv(self.task, 1, **(cfg["env"].get("env_config") or {}))
                return build_runner(cfg, seed=0, env=env)
        except Exception as exc:  # noqa: BLE001 - rsl_rl raises plain errors for config problems
            raise CliError(
                f"rsl_rl config {self.agent_yaml}: rsl_rl cannot build a runner for {self.task!r} "
                f"({type(exc).__name__}: {exc})"
            ) from None

    def evaluate(self, checkpoint: str | Path, episodes: int, seed: int) -> Evaluation:
        """Play ``episodes`` held-out episodes (env seeds ``seed, seed+1, ...``) with the deterministic policy."""
        import math

        from tensordict import TensorDict

        from async_pbt_isaaclab.commands.episodes import play_episodes
        from async_pbt_isaaclab.envs.rsl_rl_vec_env import OBS_GROUP

        if episodes < 1:
            raise CliError(f"--episodes must be >= 1, got {episodes}")
        meta = self._load(Path(checkpoint))
        policy = self._runner.get_inference_policy(device="cpu")

        def act(obs: Any) -> Any:
            return policy(TensorDict({OBS_GROUP: obs}, batch_size=[obs.shape[0]]))

        searched = {k: v for k, v in (meta.get("hyperparameters") or {}).items() if is_env_key(k)}
        returns, lengths, values = play_episodes(self._make_env, act, episodes, seed, searched, self.objective)
        if not all(math.isfinite(v) for v in values):
            raise CliError(f"{checkpoint}: task {self.task!r} reported no value of the objective {self.objective!r}")
        return Evaluation(str(checkpoint), self.task, seed, returns, lengths, meta, self.objective, values)

    def _load(self, path: Path) -> dict[str, Any]:
        """Load ``path`` into the runner as ``runner.load`` does; its PBT metadata. One line naming the checkpoint,
        the task and the config when they do not fit."""
        from async_pbt_isaaclab.checkpoint_io import CheckpointError, load_checkpoint, read_pbt_metadata
        from async_pbt_isaaclab.rsl_rl.layout import LAYOUTS

        layout = LAYOUTS[self.line]
        try:
            state = load_checkpoint(path, layout.kind, trusted=self.trusted, map_location="cpu")
            meta = read_pbt_metadata(state) or {}
        except CheckpointError as exc:
            raise CliError(str(exc)) from None
        try:
            layout.load(self._runner.alg, state)
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CliError(
                f"{path}: does not fit task {self.task!r} with the networks of {self.agent_yaml.name} "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]}); pass the --task and --agent-yaml it was "
                f"trained with"
            ) from None
        return meta
