"""``async-pbt check-config``: validate an agent yaml's ``pbt:`` section and print the effective values.

The one subcommand that reads a config rather than a workspace; kept apart from
:mod:`async_pbt_isaaclab.commands.workspace_views` because it needs the config loaders and the mutation table,
which the workspace views do not. Imports only the pure core.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from async_pbt_isaaclab.commands.common import emit_json, format_number, format_table
from async_pbt_isaaclab.core.agent_config import (
    current_hyperparameters,
    load_population_config,
    load_yaml,
    validate_agent_config,
)
from async_pbt_isaaclab.core.config import (
    LATE_PEER_INTERVALS,
    ConfigError,
    PopulationConfig,
    objective_term,
    shaped_return_problem,
)
from async_pbt_isaaclab.core.decision import catalog as rules
from async_pbt_isaaclab.core.decision.mutation import SUPPORTED_HYPERPARAMETERS, isaaclab_key, within_bounds
from async_pbt_isaaclab.core.decision.start import command_line_keys, kept_from_start
from async_pbt_isaaclab.exit_codes import EXIT_OK, EXIT_USAGE

RULE_SPECIFIC_KEYS: dict[str, tuple[str, ...]] = rules.rule_specific_keys()
"""Keys that only some selection rules read (from the rule registry); check-config warns when a yaml
sets one that the chosen rule ignores (e.g. an Isaac Lab yaml's threshold_std under rule dexpbt)."""

RL_GAMES_DEFAULT_TRAIN_DIR = "runs"
"""rl_games' default ``params.config.train_dir``."""


# ============================================================================ check-config


def add_check_config_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check-config",
        help="validate an agent yaml's pbt: section and print the effective values",
        description="Validate the population config of an rl_games agent yaml (its pbt: section, with "
        "overrides applied) as a member would use it, and print every effective value. Exit 2 with the "
        "reasons on stderr when it is invalid.",
    )
    p.add_argument("agent_yaml", help="rl_games agent yaml with a pbt: section")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="Hydra-style overrides, e.g. agent.pbt.num_policies=4 pbt.policy_idx=2 "
        "agent.params.config.learning_rate=3e-4",
    )
    p.add_argument(
        "--train-dir",
        default=None,
        help="train dir a relative workspace resolves against when pbt.directory is empty "
        "(default: params.config.train_dir, else rl_games' 'runs')",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check_config)


NO_VALUE_AT_MINUS_ONE = {
    "seed": "drawn from OS entropy when the workspace is created; recorded in population.json",
    "max_restarts": "no limit",
    "freeze_at_frame": "members may change generation until they stop",
}
"""Fields whose -1 resolves to no single value, with what it means."""


def _resolved_values(cfg: PopulationConfig) -> dict[str, tuple[Any, str]]:
    """Fields whose stored value is a placeholder, with the value it resolves to and why."""
    iv = cfg.interval_steps
    out: dict[str, tuple[Any, str]] = {}
    if cfg.max_frame_lag < 0:
        out["max_frame_lag"] = (
            cfg.resolved_max_frame_lag(),
            f"{LATE_PEER_INTERVALS} x interval_steps={iv}: a peer further behind decides at its own progress",
        )
    if cfg.settle_max_steps < 0:
        out["settle_max_steps"] = (
            "no cap",
            "evidence counts once every env finished an episode begun in its generation",
        )
    if cfg.start_grace_frames < 0:
        out["start_grace_frames"] = (
            cfg.resolved_start_grace(),
            f"2 x interval_steps={iv}; a member raises it to envs x episode length x (1 + ceil(window / envs)) "
            f"from its task, so the first decision reads no episode begun at frame 0",
        )
    if cfg.restart_grace_frames < 0:
        out["restart_grace_frames"] = (cfg.resolved_restart_grace(), f"2 x interval_steps={iv}")
    if cfg.mutation_seed < 0:
        out["mutation_seed"] = (None, f"the population seed with policy_idx={cfg.policy_idx}")
    for name, why in NO_VALUE_AT_MINUS_ONE.items():
        if getattr(cfg, name) < 0:
            out[name] = (None, why)
    if not cfg.launcher_prefix:
        out["launcher_prefix"] = (None, "restart with this python, sys.executable")
    term = objective_term(cfg.objective)
    if term != cfg.objective:
        out["objective"] = (term, "per-episode term; Isaac Lab's 'episode.' prefix dropped")
    return out


def _train_dir(agent_cfg: Mapping[str, Any], explicit: str | None) -> tuple[str, str]:
    if explicit is not None:
        return explicit, "--train-dir"
    params = agent_cfg.get("params")
    rl_cfg = params.get("config") if isinstance(params, Mapping) else None
    if isinstance(rl_cfg, Mapping) and rl_cfg.get("train_dir"):
        return str(rl_cfg["train_dir"]), "params.config.train_dir"
    return RL_GAMES_DEFAULT_TRAIN_DIR, "rl_games default"


def _fmt_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_number(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v) if v == "" else v
    return format_number(v)


def cmd_check_config(args: argparse.Namespace) -> int:
    source = str(args.agent_yaml)
    try:
        merged, cfg = _load_checked(source, args.overrides)
    except OSError as exc:  # a directory, no permission: load_yaml converts only a missing file
        print(f"async-pbt check-config: error: {source}: cannot read ({exc.strerror})", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        _print_config_error(exc, source)
        return EXIT_USAGE

    current = current_hyperparameters(merged, cfg)
    notes, warnings = _notes_and_warnings(merged, cfg, current, source)
    train_dir, train_dir_from = _train_dir(merged, args.train_dir)
    ws_path = cfg.workspace_path(train_dir)
    resolved = _resolved_values(cfg)
    hparams = _hyperparameter_table(cfg, current, args.overrides, "rsl_rl" in merged)
    if args.json:
        emit_json(
            {
                "source": source,
                "overrides": list(args.overrides),
                "valid": True,
                "config": cfg.to_dict(),
                "resolved": {k: {"value": v, "why": why} for k, (v, why) in resolved.items()},
                "workspace": str(ws_path),
                "hyperparameters": hparams,
                "warnings": warnings,
                "notes": notes,
            }
        )
    else:
        ov = f" with {len(args.overrides)} override(s)" if args.overrides else ""
        print(f"{source}{ov}: population config is valid")
        for note in notes:
            print(f"note: {note}")
        print("\n".join(format_table(_config_rows(cfg, resolved), indent="  ")))
        print(f"workspace: {ws_path}  ({_workspace_origin(cfg, train_dir, train_dir_from)})")
        if hparams:
            print("mutated hyperparameters:")
            print("\n".join(format_table(_hyperparameter_rows(hparams), indent="  ")))
    for w in warnings:
        print(f"async-pbt check-config: warning: {w}", file=sys.stderr)
    return EXIT_OK


def is_rsl_rl_config(raw: Any) -> bool:
    """``raw`` is an rsl_rl member's config (``env`` and ``runner``), not an rl_games agent yaml."""
    return isinstance(raw, Mapping) and isinstance(raw.get("runner"), Mapping) and isinstance(raw.get("env"), Mapping)


def _load_checked(source: str, overrides: list[str]) -> tuple[dict[str, Any], PopulationConfig]:
    """The agent yaml with ``overrides`` applied and its population config, checked as a member would use it."""
    agent_cfg = load_yaml(source)
    if is_rsl_rl_config(agent_cfg):
        # An rsl_rl member's config (env, runner, pbt): checked as its member start checks it, in the core's view.
        from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

        _, merged, cfg = load_member_config(agent_cfg, overrides, source=source)
        return merged, cfg
    merged, cfg = load_population_config(agent_cfg, overrides, source=source)
    # load_population_config checks the agent settings only for an enabled member; check-config
    # always checks them, as they would be used once pbt.enabled is true.
    if not cfg.enabled:
        validate_agent_config(merged, cfg, source)
    return merged, cfg


def _print_config_error(exc: ConfigError, source: str) -> None:
    where = exc.source or source  # "the command line" when every problem comes from an override
    if len(exc.problems) == 1:
        print(f"async-pbt check-config: error: {where}: {exc.problems[0]}", file=sys.stderr)
        return
    print(f"async-pbt check-config: error: invalid population config in {where}:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {where}: {problem}" if where == source else f"  {problem}", file=sys.stderr)


def _notes_and_warnings(
    merged: Mapping[str, Any], cfg: PopulationConfig, current: Mapping[str, Any], source: str
) -> tuple[list[str], list[str]]:
    """What a valid config may still get wrong: keys the chosen rule ignores, starting values outside the bounds."""
    warnings: list[str] = []
    notes: list[str] = []
    if not cfg.enabled:
        # A note, not a warning: a task yaml ships disabled on purpose so that it also trains alone, and
        # train_pbt.py's --pbt-workspace / --pbt-members turn the population on.
        notes.append(
            "pbt.enabled is false: this member trains alone and publishes nothing until "
            "--pbt-workspace / --pbt-members (or pbt.enabled=true) turn the population on; "
            "values below are checked as if it were true"
        )
    if not cfg.mutation:
        warnings.append("pbt.mutation is empty: exploit copies weights only and explore changes nothing")
    if cfg.allow_shaped_return_objective and shaped_return_problem(cfg):
        warnings.append(
            f"{source}: pbt.objective {cfg.objective!r} sums the reward that the searched env values shape "
            f"(accepted by allow_shaped_return_objective): the search may raise it by changing the reward instead of "
            f"the policy"
        )
    raw_pbt = merged.get("pbt") or {}
    for key, key_rules in RULE_SPECIFIC_KEYS.items():
        if key in raw_pbt and cfg.rule not in key_rules:
            warnings.append(
                f"{source}: pbt.{key} only acts under rule {' or '.join(key_rules)}, but pbt.rule is "
                f"{cfg.rule!r}; it is ignored"
                + (" (set pbt.rule=isaaclab for Isaac Lab's selection)" if key_rules == ("isaaclab",) else "")
            )
    for key, spec in sorted(cfg.mutation.items()):
        if spec.kind != "choice" and not within_bounds(current[key], spec):
            stays = (
                f"a log_float 0 stays 0 (set pbt.mutation.{key}.from_zero to let it move)"
                if spec.kind == "log_float" and current[key] == 0 and spec.from_zero is None
                else "it stays there until a mutation draws the key (member 0 starts from it)"
            )
            warnings.append(
                f"{source}: {isaaclab_key(key)[len('agent.') :]}={current[key]!r} is outside pbt.mutation.{key} "
                f"[{spec.low:g}, {spec.high:g}]; {stays}"
            )
        elif spec.kind == "choice" and current[key] not in spec.choices:
            warnings.append(f"{source}: {key}={current[key]!r} is not one of pbt.mutation.{key}.choices")
    return notes, warnings


def _workspace_origin(cfg: PopulationConfig, train_dir: str, train_dir_from: str) -> str:
    """How the workspace path was resolved, in words."""
    if Path(cfg.workspace).expanduser().is_absolute():
        return "absolute pbt.workspace"
    if cfg.directory:
        return f"pbt.workspace relative to pbt.directory {cfg.directory!r}"
    return (
        f"pbt.workspace relative to the train dir {train_dir!r} ({train_dir_from}; Isaac Lab's "
        f"train script sets it to logs/rl_games/<name>, pass --train-dir to match)"
    )


def _diverse_start(cfg: PopulationConfig, key: str, pinned: tuple[str, ...]) -> str:
    """What the diverse start does with ``key`` for members 1..N-1: ``drawn`` or ``kept (why)``."""
    if cfg.initial_mutation:
        return "mutated once (initial_mutation)"
    if cfg.start_spread <= 0:
        return "kept (start_spread is 0)"
    why = kept_from_start(key, cfg.mutation[key], pinned)
    return "drawn" if why is None else f"kept ({why})"


def _hyperparameter_table(
    cfg: PopulationConfig, current: Mapping[str, Any], overrides: Sequence[str] = (), rsl_rl: bool = False
) -> list[dict[str, Any]]:
    """One entry per mutated hyperparameter: its kind, bounds, change, current value, agent key and what the
    diverse start does with it (a value the ``overrides`` set is kept; ``rsl_rl``: an rsl_rl member's config, whose
    keys live in its runner config)."""
    from async_pbt_isaaclab.rsl_rl.member_config import rsl_rl_key

    pinned = command_line_keys(overrides, cfg.mutation, rsl_rl_key if rsl_rl else isaaclab_key)
    hparams = []
    for key, spec in sorted(cfg.mutation.items()):
        cr = spec.change_range or cfg.change_range
        hparams.append(
            {
                "name": key,
                "kind": spec.kind,
                "low": spec.low,
                "high": spec.high,
                "change_range": list(cr) if spec.kind in ("log_float", "discount", "log_shift") else None,
                "step": spec.step if spec.kind == "int" else None,
                "choices": list(spec.choices) if spec.kind == "choice" else None,
                "current": current[key],
                "agent_key": rsl_rl_key(key) if rsl_rl else isaaclab_key(key),
                "live": _live(key, rsl_rl),
                "diverse_start": _diverse_start(cfg, key, pinned),
            }
        )
    return hparams


def _live(key: str, rsl_rl: bool) -> bool:
    """Whether a searched key is set on the running trainer (an env value never is: a restart rebuilds the env)."""
    from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS as RSL_RL_LIVE

    if rsl_rl:
        return key in RSL_RL_LIVE
    known = SUPPORTED_HYPERPARAMETERS.get(key)
    return known is not None and known.live


def _config_rows(cfg: PopulationConfig, resolved: Mapping[str, tuple[Any, str]]) -> list[list[str]]:
    rows = []
    for name, value in cfg.to_dict().items():
        if name == "mutation":
            shown = f"{len(value)} hyperparameter(s), below" if value else "{} (none)"
        else:
            shown = _fmt_value(value)
        if name in resolved:
            rv, why = resolved[name]
            shown += f"  ({why})" if rv is None else f"  -> {_fmt_value(rv)} ({why})"
        rows.append([name, shown])
    return rows


def _hyperparameter_rows(hparams: list[dict[str, Any]]) -> list[list[str]]:
    rows = [["name", "kind", "low", "high", "change", "current", "agent key", "diverse start"]]
    for h in hparams:
        if h["change_range"] is not None:
            change = "x[" + ", ".join(format_number(x) for x in h["change_range"]) + "]"
        elif h["step"] is not None:
            change = f"+-1..{h['step']}"
        else:
            change = "of " + _fmt_value(h["choices"])
        rows.append(
            [
                h["name"],
                h["kind"],
                format_number(h["low"]),
                format_number(h["high"]),
                change,
                _fmt_value(h["current"]),
                h["agent_key"] + ("" if h["live"] else "  (restart)"),
                h["diverse_start"],
            ]
        )
    return rows
