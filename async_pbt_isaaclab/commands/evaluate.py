"""``async-pbt evaluate``: held-out episodes of any rl_games checkpoint, or an rsl_rl member's, on a gymnasium task.

    async-pbt evaluate CHECKPOINT [CHECKPOINT ...] [--task Pendulum-v1] [--agent-yaml YAML]
                       [--episodes 16] [--seed 100000] [--trusted] [--json]

Works on a population member's checkpoint (with PBT metadata) and on a plain rl_games checkpoint alike; an rsl_rl
member's checkpoint (its ``agent.yaml`` carries its rsl_rl config), or any rsl_rl checkpoint with ``--agent-yaml``
naming an rsl_rl config (``examples/rsl_rl_*.yaml`` form), is played by rsl_rl's own policy
(:mod:`~async_pbt_isaaclab.commands.evaluate_rsl_rl`) on the same episodes.
A member's checkpoint needs neither ``--task`` nor ``--agent-yaml``: its workspace records the population's task
and the agent config the member was built with (:mod:`~async_pbt_isaaclab.commands.evaluation_records`). The
policy is rebuilt from the agent yaml (else the task's packaged yaml, else the packaged Pendulum-v1 PPO yaml;
network keys a member mutated, ``network.*``, are taken from the checkpoint's metadata so the network is rebuilt
as it was trained); a checkpoint that does not fit is one line naming it, the task and the yaml. The weights and
input normaliser are loaded through the safe loader
(:func:`async_pbt_isaaclab.rl_games.checkpoint.load_checkpoint`), and the policy plays ``--episodes`` episodes
with the deterministic action (the Gaussian's mean), one gymnasium env per episode, env ``i`` reset with seed
``S + i``. The default ``S`` (100000) lies far from the training seeds rl_games and the CPU member use (the
yaml's ``params.seed`` plus the member index, then one seed per env), so the episodes are held out from
training. The return is the undiscounted sum of the env's own rewards (no reward shaping), the env built with the
yaml's ``env_config`` and the checkpoint's own searched env values (``env.<name>``: the reward it trained with); the
yaml's ``pbt.objective`` is measured on each episode as members measure it (``distance_travelled``, a term of the
last step's info) and shown beside it.

Recording: a member's checkpoint (one under ``WS/members/NNN/checkpoints/`` of a workspace with a
``population.json``) is recorded by default as one JSON line in ``WS/evaluations.jsonl``, the file
``async-pbt report`` reads (docs/observability.md, "Held-out evaluations"): ``objective`` (the objective's mean),
``member``, ``checkpoint`` (workspace-relative), ``frame``, ``generation``, ``episodes``, ``std``, ``task``,
``seed``, ``label`` and ``time``. ``--no-record`` turns that off; ``--record`` makes a checkpoint that is not a
member's (or one copied elsewhere) recorded into ``--workspace WS``.

rl_games' own lines while it builds the player (``self.seed = 42``, ``build mlp``, ``RunningMeanStd``) are
kept out of the output: the command prints only its table (or JSON) and errors; ``--verbose`` shows them on
stderr.

Only the command's parser lives at the top: torch, rl_games and gymnasium are imported inside
:class:`Evaluator`, so ``async-pbt --help`` stays light.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

from async_pbt_isaaclab.commands.common import CliError, emit_json, format_table
from async_pbt_isaaclab.commands.episodes import play_episodes
from async_pbt_isaaclab.commands.evaluation_records import (
    Evaluation,
    checkpoint_setup,
    evaluation_line,
    record_evaluation,
    record_targets,
)
from async_pbt_isaaclab.core.decision.mutation_spec import env_parameter, is_env_key

DEFAULT_AGENT_YAML = Path(__file__).resolve().parents[1] / "examples" / "pendulum_ppo.yaml"
"""The packaged Pendulum-v1 PPO agent yaml, used when ``--agent-yaml`` is not given."""
DEFAULT_EVAL_SEED = 100_000
"""First env seed of the held-out episodes: far above the training seeds (yaml seed + member index + env)."""


class Evaluator:
    """Builds the player once for a task and agent yaml, then evaluates checkpoints with it.

    Raises :class:`CliError` for an unreadable yaml, an unknown task or a checkpoint that does not fit.
    """

    def __init__(
        self,
        task: str | None = None,
        agent_yaml: str | Path | None = None,
        trusted: bool = False,
        verbose: bool = False,
    ):
        from async_pbt_isaaclab.core.agent_config import load_yaml
        from async_pbt_isaaclab.core.config import ConfigError, objective_term
        from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE
        from async_pbt_isaaclab.examples.agents import PACKAGED_AGENTS

        # Without a yaml: the task's packaged one (PACKAGED_AGENTS), else Pendulum's.
        default = PACKAGED_AGENTS.get(task or "", DEFAULT_AGENT_YAML)
        self.agent_yaml = Path(agent_yaml) if agent_yaml is not None else default
        try:
            cfg = load_yaml(self.agent_yaml)
        except ConfigError as exc:
            raise CliError(f"agent yaml {exc}") from None
        params = cfg.get("params")
        if (
            not isinstance(params, dict)
            or not isinstance(params.get("config"), dict)
            or not isinstance(params.get("network"), dict)
        ):
            raise CliError(
                f"agent yaml {self.agent_yaml}: not an rl_games agent config "
                f"(expected params.config and params.network)"
            )
        algo = (params.get("algo") or {}).get("name")
        if algo not in ("a2c_continuous", "a2c_discrete"):
            raise CliError(
                f"agent yaml {self.agent_yaml}: params.algo.name {algo!r} is not supported "
                f"(evaluate plays a2c_continuous and a2c_discrete PPO agents)"
            )
        self.task = task or params["config"].get("env_name")
        if not self.task:
            raise CliError(f"agent yaml {self.agent_yaml}: no params.config.env_name; pass --task")
        self.cfg = cfg
        self.objective = objective_term(str((cfg.get("pbt") or {}).get("objective") or RETURN_OBJECTIVE))
        self.trusted = trusted
        self.verbose = verbose
        """Show rl_games' own lines (on stderr) instead of keeping them out of the output."""
        self._player_cache: dict[str, Any] = {}
        self._spaces = self._task_spaces()

    def _make_env(self, env_values: Mapping[str, Any] | None = None):
        """One env of the task, built with the yaml's ``env_config`` and ``env_values`` (a checkpoint's own searched
        env values, ``env.<name>``, over the yaml's)."""
        import gymnasium

        from async_pbt_isaaclab.envs.gym_vec_env import task_kwargs

        kwargs = task_kwargs(self.cfg["params"]["config"].get("env_config"))
        kwargs.update({env_parameter(k): v for k, v in (env_values or {}).items()})
        try:
            return gymnasium.make(self.task, **kwargs)
        except gymnasium.error.Error as exc:
            raise CliError(f"task {self.task!r}: not a registered gymnasium env ({exc})") from None
        except TypeError as exc:
            raise CliError(
                f"task {self.task!r}: params.config.env_config of {self.agent_yaml} does not fit it ({exc})"
            ) from None

    def _task_spaces(self):
        import gymnasium
        import numpy as np

        env = self._make_env()
        obs_space, action_space = env.observation_space, env.action_space
        env.close()
        if not isinstance(obs_space, gymnasium.spaces.Box):
            raise CliError(f"task {self.task!r}: observation space {obs_space} is not a Box")
        # rl_games feeds observations as float32; report float64 Box spaces as float32 (as training does).
        obs_space = gymnasium.spaces.Box(
            obs_space.low.astype(np.float32), obs_space.high.astype(np.float32), dtype=np.float32
        )
        return obs_space, action_space

    def _player(self, network_overrides: dict[str, Any]):
        """An rl_games player for the task, built with the checkpoint's mutated ``network.*`` keys."""
        import copy

        key = json.dumps(network_overrides, sort_keys=True, default=str)
        if key in self._player_cache:
            return self._player_cache[key]
        from rl_games.torch_runner import Runner

        from async_pbt_isaaclab.core.agent_config import set_path
        from async_pbt_isaaclab.core.decision.mutation import agent_path
        from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration

        register_bounded_exploration()
        cfg = copy.deepcopy(self.cfg)
        for name, value in network_overrides.items():
            set_path(cfg, agent_path(name), value)
        params, config = cfg["params"], cfg["params"]["config"]
        params["load_checkpoint"] = False
        config.update(
            env_name=self.task, device="cpu", device_name="cpu", torch_compile=False, multi_gpu=False, num_actors=1
        )
        obs_space, action_space = self._spaces
        # With env_info given, the player builds its model without creating an env of its own.
        config["env_info"] = {
            "observation_space": obs_space,
            "action_space": action_space,
            "agents": 1,
            "value_size": 1,
        }
        try:
            # rl_games prints its own lines on stdout while building (self.seed, build mlp, RunningMeanStd): kept
            # out of our output (the table or --json), shown on stderr with --verbose or when the build fails.
            # Runner.load applies params.torch_threads process-wide, as training does: on a busy machine the
            # default thread count makes a small MLP's forward pass spin (measured 10x slower under load).
            chatter = sys.stderr if self.verbose else io.StringIO()
            with contextlib.redirect_stdout(chatter):
                runner = Runner()
                runner.load(cfg)
                player = runner.create_player()
        except Exception as exc:  # noqa: BLE001 - rl_games raises plain Exceptions for config problems
            said = chatter.getvalue().strip() if isinstance(chatter, io.StringIO) else ""
            raise CliError(
                f"agent yaml {self.agent_yaml}: rl_games cannot build a player ({type(exc).__name__}: {exc})"
                + (f"; rl_games said: {' | '.join(said.splitlines()[-5:])}" if said else "")
            ) from None
        player.has_batch_dimension = True
        self._player_cache[key] = player
        return player

    def evaluate(self, checkpoint: str | Path, episodes: int, seed: int) -> Evaluation:
        """Play ``episodes`` held-out episodes (env seeds ``seed, seed+1, ...``) with the deterministic policy."""
        if episodes < 1:
            raise CliError(f"--episodes must be >= 1, got {episodes}")
        player, meta = self._load(Path(checkpoint))
        searched = {k: v for k, v in (meta.get("hyperparameters") or {}).items() if is_env_key(k)}
        act = partial(player.get_action, is_deterministic=True)
        returns, lengths, values = play_episodes(self._make_env, act, episodes, seed, searched, self.objective)
        if not all(math.isfinite(v) for v in values):
            raise CliError(f"{checkpoint}: task {self.task!r} reported no value of the objective {self.objective!r}")
        return Evaluation(str(checkpoint), self.task, seed, returns, lengths, meta, self.objective, values)

    def _load(self, path: Path) -> tuple[Any, dict[str, Any]]:
        """The player with ``path``'s weights and its PBT metadata; one line naming the checkpoint, the task and the
        yaml when they do not fit together."""
        from async_pbt_isaaclab.rl_games.checkpoint import CheckpointError, load_checkpoint, read_pbt_metadata

        try:
            state = load_checkpoint(path, trusted=self.trusted, map_location="cpu")
            meta = read_pbt_metadata(state) or {}
        except CheckpointError as exc:
            raise CliError(str(exc)) from None
        network = {k: v for k, v in (meta.get("hyperparameters") or {}).items() if k.startswith("network.")}
        player = self._player(network)
        model_state = {
            (k[len("_orig_mod.") :] if k.startswith("_orig_mod.") else k): v for k, v in state["model"].items()
        }
        misfit = network_misfit(model_state, player.model.state_dict())
        try:
            if not misfit:
                player.model.load_state_dict(model_state)
                if getattr(player, "normalize_input", False) and "running_mean_std" in state:
                    player.model.running_mean_std.load_state_dict(state["running_mean_std"])
        except RuntimeError:
            misfit = "its weights do not load into that network"
        if misfit:
            raise CliError(
                f"{path}: does not fit task {self.task!r} with the network of {self.agent_yaml.name} ({misfit}); "
                f"pass the --task and --agent-yaml it was trained with"
            )
        player.model.eval()
        if player.is_rnn:
            raise CliError(f"agent yaml {self.agent_yaml}: recurrent policies are not supported by evaluate")
        return player, meta


def _shape(tensor: Any) -> str:
    return "x".join(str(n) for n in tuple(tensor.shape)) or "scalar"


def network_misfit(checkpoint: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    """Why the ``checkpoint``'s model weights cannot load into the network built from the task and the agent yaml,
    whose weights are ``expected``, in a few words (the observation and action sizes when those differ; else the first
    layer whose shape differs); ``""`` when they fit."""
    missing = [k for k in expected if k not in checkpoint]
    unexpected = [k for k in checkpoint if k not in expected]
    differ = [k for k in expected if k in checkpoint and tuple(checkpoint[k].shape) != tuple(expected[k].shape)]
    words = []
    for key, what in (("running_mean_std.running_mean", "observations"), ("a2c_network.mu.bias", "actions")):
        if key in differ:
            words.append(f"{what}: {checkpoint[key].shape[0]} in the checkpoint, {expected[key].shape[0]} in the task")
    if not words and differ:
        key = differ[0]
        words.append(f"{key} is {_shape(checkpoint[key])} in the checkpoint, {_shape(expected[key])} in the yaml's")
    if missing or unexpected:
        words.append(f"layers: {len(unexpected)} only in the checkpoint, {len(missing)} only in the yaml's network")
    return "; ".join(words)


def make_evaluator(
    task: str | None = None, agent_yaml: str | Path | None = None, trusted: bool = False, verbose: bool = False
) -> Any:
    """The player of checkpoints trained with ``agent_yaml``: rsl_rl's
    (:class:`~async_pbt_isaaclab.commands.evaluate_rsl_rl.RslRlEvaluator`) when it is an rsl_rl config (an rsl_rl
    member's ``agent.yaml``, or the ``examples/rsl_rl_*.yaml`` form), else rl_games' (:class:`Evaluator`)."""
    from async_pbt_isaaclab.commands.evaluate_rsl_rl import RslRlEvaluator, rsl_rl_config
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.core.config import ConfigError

    if agent_yaml is not None:
        try:
            cfg = rsl_rl_config(load_yaml(agent_yaml))
        except ConfigError:
            cfg = None  # unreadable: Evaluator names the file and the problem
        if cfg is not None:
            return RslRlEvaluator(cfg, agent_yaml, task, trusted=trusted, verbose=verbose)
    return Evaluator(task, agent_yaml, trusted=trusted, verbose=verbose)


def evaluate_checkpoints(
    checkpoints: Sequence[str | Path],
    task: str | None = None,
    agent_yaml: str | Path | None = None,
    episodes: int = 16,
    seed: int = DEFAULT_EVAL_SEED,
    trusted: bool = False,
    verbose: bool = False,
) -> list[Evaluation]:
    """Evaluate each checkpoint on the same held-out episodes (with the task and yaml :func:`checkpoint_setup`
    finds for it); what ``async-pbt evaluate`` prints."""
    evaluators: dict[tuple[str | None, str | None], Any] = {}
    results = []
    for checkpoint in checkpoints:
        chosen_task, chosen_yaml = checkpoint_setup(checkpoint, task, agent_yaml)
        key = (chosen_task, None if chosen_yaml is None else str(chosen_yaml))
        if key not in evaluators:
            evaluators[key] = make_evaluator(chosen_task, chosen_yaml, trusted=trusted, verbose=verbose)
        results.append(evaluators[key].evaluate(checkpoint, episodes, seed))
    return results


# ============================================================================ command line


def add_evaluate_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="play held-out episodes of rl_games checkpoints with the deterministic policy",
        description="Evaluate rl_games checkpoints (a member's or any plain one) on held-out gymnasium "
        "episodes: deterministic policy (action = mean), one env per episode seeded SEED, SEED+1, ...; "
        "prints mean, std, min and max of the undiscounted return.",
    )
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT", help="rl_games checkpoint file(s)")
    p.add_argument(
        "--task",
        default=None,
        help="gymnasium task id (default: for a member's checkpoint, the task its workspace records; else "
        "params.config.env_name of the agent yaml)",
    )
    p.add_argument(
        "--agent-yaml",
        default=None,
        help="rl_games agent yaml the checkpoint was trained with (default: for a member's checkpoint, the config "
        "its member was built with, WS/members/NNN/agent.yaml; else the task's packaged yaml, else "
        f"{DEFAULT_AGENT_YAML.name})",
    )
    p.add_argument("--episodes", type=int, default=16, help="episodes per checkpoint (default 16)")
    p.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_EVAL_SEED,
        help=f"env seed of the first episode; episode i uses SEED+i (default {DEFAULT_EVAL_SEED}, "
        f"away from training seeds)",
    )
    p.add_argument(
        "--trusted", action="store_true", help="load with full pickle (only for checkpoints whose writers you trust)"
    )
    p.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append each result to WS/evaluations.jsonl, which `async-pbt report` shows (default: on for a member's "
        "checkpoint, WS/members/NNN/checkpoints/*.pth; --no-record: never)",
    )
    p.add_argument(
        "--workspace",
        default=None,
        metavar="WS",
        help="with --record: the workspace to record into (default: the checkpoint's own workspace)",
    )
    p.add_argument("--label", default="", help="label of the recorded results (default: the env seeds)")
    p.add_argument("--verbose", action="store_true", help="show rl_games' own lines (on stderr) while it builds")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_evaluate)


def _print_results(results: Sequence[Evaluation], args: argparse.Namespace, recorded: Sequence[Path]) -> None:
    """The table (with a task column when the checkpoints were played on several) and where results were recorded."""
    tasks = sorted({r.task for r in results})
    several = len(tasks) > 1
    # The population's objective beside the return when it is another one (distance_travelled, a success term).
    objectives = sorted({r.objective for r in results} - {"episode_return"})
    rows = [["checkpoint", *(["task"] if several else []), "episodes", "mean", "std", "min", "max", *objectives]]
    for r in results:
        d = r.as_dict()
        figures = [f"{d[k]:.2f}" for k in ("mean", "std", "min", "max")]
        named = [f"{d['objective_mean']:.3f}" if r.objective == name else "" for name in objectives]
        rows.append([r.checkpoint, *([r.task] if several else []), str(d["episodes"]), *figures, *named])
    on = "" if several else f" on {tasks[0]}"
    print(f"held-out return{on}, deterministic policy, env seeds {args.seed}..{args.seed + args.episodes - 1}:")
    for line in format_table(rows, indent="  "):
        print(line)
    for target in sorted(set(recorded)):
        n = recorded.count(target)
        print(f"recorded {n} result{'s' if n > 1 else ''} in {target} (async-pbt report shows them; --no-record: not)")
    sys.stdout.flush()


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise CliError(f"--episodes must be >= 1, got {args.episodes}")
    for c in args.checkpoints:
        if not Path(c).is_file():
            raise CliError(
                f"checkpoint {c} does not exist" if not Path(c).exists() else f"checkpoint {c} is not a file"
            )
    targets = record_targets(args.checkpoints, args.record, args.workspace)
    results = evaluate_checkpoints(
        args.checkpoints, args.task, args.agent_yaml, args.episodes, args.seed, args.trusted, args.verbose
    )
    recorded: list[Path] = []
    for result, ws in zip(results, targets, strict=True):
        if ws is not None:
            try:
                recorded.append(record_evaluation(ws, evaluation_line(result, ws, args.label)))
            except OSError as exc:
                raise CliError(f"cannot record into {ws}: {exc}") from None
    if args.json:
        emit_json([r.as_dict() for r in results])
    else:
        _print_results(results, args, recorded)
    return 0
