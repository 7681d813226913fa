"""The ``async-pbt`` command: check a config, watch and audit a population workspace.

Subcommands::

    async-pbt check-config AGENT.yaml [KEY=VALUE ...] [--train-dir DIR] [--json]
    async-pbt status WORKSPACE [--json] [--stale-after SECONDS]
    async-pbt audit WORKSPACE [--member N] [--json]
    async-pbt best WORKSPACE [--top N] [--json]
    async-pbt lineage WORKSPACE [--member N] [--json]

Exit codes: 0 success; 1 the audit found a failing entry; 2 bad usage, an invalid config or a path
that is not a population workspace.

This module imports only the pure core (no torch, rl_games or Isaac Lab), so every subcommand here
runs on a laptop. A subcommand that needs heavy packages (``launch``, ``report``) imports them
inside its ``cmd_<name>`` function. Adding one takes two functions and one line::

    def add_launch_parser(subparsers) -> None:
        p = subparsers.add_parser("launch", help="...")
        p.add_argument(...)
        p.set_defaults(func=cmd_launch)

    def cmd_launch(args) -> int:
        from async_pbt_isaaclab.launch.local import main as launch_main   # lazy
        return launch_main(args)

    SUBCOMMANDS.append(add_launch_parser)   # or list it in SUBCOMMANDS below
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from async_pbt_isaaclab._version import __version__
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig, objective_term
from async_pbt_isaaclab.core.agent_config import current_hyperparameters, load_population_config, load_yaml, validate_agent_config
from async_pbt_isaaclab.core.mutation import SUPPORTED_HYPERPARAMETERS, isaaclab_key, within_bounds
from async_pbt_isaaclab.core.records import MemberRecord

EXIT_OK = 0
"""Success."""
EXIT_AUDIT_FAILED = 1
"""``audit``: at least one entry failed verification."""
EXIT_USAGE = 2
"""Bad usage, invalid config, or not a population workspace (argparse also exits 2)."""

RULE_SPECIFIC_KEYS: dict[str, tuple[str, ...]] = {
    "threshold_std": ("isaaclab",),
    "threshold_abs": ("isaaclab",),
    "explore_without_donor": ("isaaclab",),
    "worst_fraction": ("dexpbt", "welch"),
    "top_fraction": ("dexpbt", "welch"),
    "gap_std_fraction": ("dexpbt",),
    "gap_leader_fraction": ("dexpbt",),
    "trim_fraction": ("dexpbt",),
    "protect_interval_best": ("dexpbt",),
    "welch_alpha": ("welch",),
}
"""Keys that only one or two selection rules read (docs/selection.md); check-config warns when a yaml
sets one that the chosen rule ignores (e.g. an Isaac Lab yaml's threshold_std under rule dexpbt)."""

RL_GAMES_DEFAULT_TRAIN_DIR = "runs"
"""rl_games' default ``params.config.train_dir``."""


class CliError(Exception):
    """A user-facing error: printed as ``async-pbt <cmd>: error: <message>``, exit code 2."""


# ============================================================================ helpers


def _emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _fmt_num(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _fmt_age(seconds: float) -> str:
    """12 -> '12s', 303 -> '5m03s', 7800 -> '2h10m', 200000 -> '2d07h'; negative means in the future."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 0:
        return f"{_fmt_age(-seconds)} in the future"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns; the last column is not padded."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    out = []
    for r in rows:
        cells = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _open_workspace(path: str):
    """A :class:`Workspace` for ``path``, or :class:`CliError` when it is not a population workspace."""
    from async_pbt_isaaclab.core.workspace import Workspace

    root = Path(path).expanduser()
    if not root.exists():
        raise CliError(f"workspace {root} does not exist")
    if not root.is_dir():
        raise CliError(f"workspace {root} is not a directory")
    ws = Workspace(root)
    if not (ws.root / "population.json").exists() and not ws.members_dir.is_dir():
        raise CliError(
            f"{ws.root} is not a population workspace (neither population.json nor members/ is there); "
            f"pass the folder named by pbt.workspace (see `async-pbt check-config` for its resolved path)"
        )
    return ws


def _population_meta(ws) -> tuple[dict[str, Any] | None, str | None]:
    from async_pbt_isaaclab.core.workspace import WorkspaceError

    try:
        return ws.population_meta(), None
    except WorkspaceError as exc:
        return None, str(exc)


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
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Hydra-style overrides, e.g. agent.pbt.num_policies=4 pbt.policy_idx=2 "
                        "agent.params.config.learning_rate=3e-4")
    p.add_argument("--train-dir", default=None,
                   help="train dir a relative workspace resolves against when pbt.directory is empty "
                        "(default: params.config.train_dir, else rl_games' 'runs')")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check_config)


def _resolved_values(cfg: PopulationConfig) -> dict[str, tuple[Any, str]]:
    """Fields whose stored value is a placeholder, with the value it resolves to and why."""
    iv = cfg.interval_steps
    out: dict[str, tuple[Any, str]] = {}
    if cfg.frame_tolerance < 0:
        out["frame_tolerance"] = (cfg.resolved_frame_tolerance(), "one interval_steps")
    if cfg.max_frame_lag < 0:
        out["max_frame_lag"] = (cfg.resolved_max_frame_lag(), f"10 x interval_steps={iv}")
    if cfg.start_grace_frames < 0:
        out["start_grace_frames"] = (cfg.resolved_start_grace(), f"2 x interval_steps={iv}")
    if cfg.restart_grace_frames < 0:
        out["restart_grace_frames"] = (cfg.resolved_restart_grace(), f"2 x interval_steps={iv}")
    if cfg.mutation_seed < 0:
        out["mutation_seed"] = (cfg.resolved_mutation_seed(), f"derived from policy_idx={cfg.policy_idx}")
    if cfg.max_restarts < 0:
        out["max_restarts"] = (None, "no limit")
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
        return "[" + ", ".join(_fmt_num(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v) if v == "" else v
    return _fmt_num(v)


def cmd_check_config(args: argparse.Namespace) -> int:
    source = str(args.agent_yaml)
    try:
        agent_cfg = load_yaml(source)
        merged, cfg = load_population_config(agent_cfg, args.overrides, source=source)
        # load_population_config checks the agent settings only for an enabled member; check-config
        # always checks them, as they would be used once pbt.enabled is true.
        if not cfg.enabled:
            validate_agent_config(merged, cfg, source)
    except OSError as exc:  # a directory, no permission: load_yaml converts only a missing file
        print(f"async-pbt check-config: error: {source}: cannot read ({exc.strerror})", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"async-pbt check-config: error: invalid population config in {source}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {source}: {problem}", file=sys.stderr)
        return EXIT_USAGE

    warnings: list[str] = []
    if not cfg.enabled:
        warnings.append("pbt.enabled is false: this member trains alone and publishes nothing "
                        "(set pbt.enabled=true to take part); values below are checked as if it were true")
    if not cfg.mutation:
        warnings.append("pbt.mutation is empty: exploit copies weights only and explore changes nothing")
    raw_pbt = merged.get("pbt") or {}
    for key, rules in RULE_SPECIFIC_KEYS.items():
        if key in raw_pbt and cfg.rule not in rules:
            warnings.append(f"{source}: pbt.{key} only acts under rule {' or '.join(rules)}, but pbt.rule is "
                            f"{cfg.rule!r}; it is ignored" + (" (set pbt.rule=isaaclab for Isaac Lab's selection)"
                                                             if rules == ("isaaclab",) else ""))
    current = current_hyperparameters(merged, cfg)
    for key, spec in sorted(cfg.mutation.items()):
        if spec.kind != "choice" and not within_bounds(current[key], spec):
            warnings.append(
                f"{source}: {isaaclab_key(key)[len('agent.'):]}={current[key]!r} is outside pbt.mutation.{key} "
                f"[{spec.low:g}, {spec.high:g}]; the first exploit/explore clips it into the bounds"
            )
        elif spec.kind == "choice" and current[key] not in spec.choices:
            warnings.append(f"{source}: {key}={current[key]!r} is not one of pbt.mutation.{key}.choices")

    train_dir, train_dir_from = _train_dir(merged, args.train_dir)
    ws_path = cfg.workspace_path(train_dir)
    if Path(cfg.workspace).expanduser().is_absolute():
        ws_how = "absolute pbt.workspace"
    elif cfg.directory:
        ws_how = f"pbt.workspace relative to pbt.directory {cfg.directory!r}"
    else:
        ws_how = (f"pbt.workspace relative to the train dir {train_dir!r} ({train_dir_from}; Isaac Lab's "
                  f"train script sets it to logs/rl_games/<name>, pass --train-dir to match)")
    resolved = _resolved_values(cfg)
    hparams = []
    for key, spec in sorted(cfg.mutation.items()):
        cr = spec.change_range or cfg.change_range
        hparams.append({
            "name": key,
            "kind": spec.kind,
            "low": spec.low,
            "high": spec.high,
            "change_range": list(cr) if spec.kind in ("log_float", "discount", "log_shift") else None,
            "step": spec.step if spec.kind == "int" else None,
            "choices": list(spec.choices) if spec.kind == "choice" else None,
            "current": current[key],
            "agent_key": isaaclab_key(key),
            "live": SUPPORTED_HYPERPARAMETERS[key].live,
        })

    if args.json:
        _emit_json({
            "source": source,
            "overrides": list(args.overrides),
            "valid": True,
            "config": cfg.to_dict(),
            "resolved": {k: {"value": v, "why": why} for k, (v, why) in resolved.items()},
            "workspace": str(ws_path),
            "hyperparameters": hparams,
            "warnings": warnings,
        })
    else:
        ov = f" with {len(args.overrides)} override(s)" if args.overrides else ""
        print(f"{source}{ov}: population config is valid")
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
        print("\n".join(_table(rows, indent="  ")))
        print(f"workspace: {ws_path}  ({ws_how})")
        if hparams:
            print("mutated hyperparameters:")
            rows = [["name", "kind", "low", "high", "change", "current", "agent key"]]
            for h in hparams:
                if h["change_range"] is not None:
                    change = "x[" + ", ".join(_fmt_num(x) for x in h["change_range"]) + "]"
                elif h["step"] is not None:
                    change = f"+-1..{h['step']}"
                else:
                    change = "of " + _fmt_value(h["choices"])
                rows.append([h["name"], h["kind"], _fmt_num(h["low"]), _fmt_num(h["high"]), change,
                             _fmt_value(h["current"]), h["agent_key"] + ("" if h["live"] else "  (restart)")])
            print("\n".join(_table(rows, indent="  ")))
    for w in warnings:
        print(f"async-pbt check-config: warning: {w}", file=sys.stderr)
    return EXIT_OK


# ============================================================================ status


def add_status_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "status",
        help="one line per member: frames, generation, objective, heartbeat, last decision",
        description="Summarise every member record in a workspace. Unreadable records are listed with "
        "the reason; they never stop the listing.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--stale-after", type=float, default=PopulationConfig.max_heartbeat_age_s, metavar="S",
                   help="flag running members whose heartbeat is older than S seconds "
                        "(default: %(default)g, pbt.max_heartbeat_age_s's default)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_status)


def status_data(ws, now: float, stale_after: float) -> dict[str, Any]:
    """Everything ``status`` shows, as plain data (also the ``--json`` output)."""
    meta, meta_error = _population_meta(ws)
    records, errors = ws.read_records()
    members = []
    for index in ws.member_indices():
        if index in records:
            rec: MemberRecord = records[index]
            ev = rec.evidence
            age = now - rec.heartbeat
            members.append({
                "member": index,
                "state": "ok",
                "frame": rec.frame,
                "epoch": rec.epoch,
                "generation": rec.generation,
                "restarts": rec.restarts,
                "objective": ev.objective,
                "objective_mean": ev.mean if ev.count else None,
                "objective_std": ev.std if ev.count else None,
                "episodes": ev.count,
                "evidence_generation": ev.generation,
                "heartbeat": rec.heartbeat,
                "heartbeat_age_s": age,
                "stale": rec.status == "running" and age > stale_after,
                "status": rec.status,
                "last_decision": rec.last_decision,
                "checkpoint": rec.checkpoint,
                "host": rec.host,
                "pid": rec.pid,
                "hyperparameters": rec.hyperparameters,
            })
        elif index in errors:
            members.append({"member": index, "state": "unreadable", "error": errors[index]})
        else:
            members.append({"member": index, "state": "no_record",
                            "error": "no record.json yet (member not started or not yet published)"})
    return {"workspace": str(ws.root), "population": meta, "population_error": meta_error, "now": now,
            "members": members}


def cmd_status(args: argparse.Namespace) -> int:
    ws = _open_workspace(args.workspace)
    data = status_data(ws, time.time(), args.stale_after)
    if args.json:
        _emit_json(data)
        return EXIT_OK
    meta = data["population"]
    if meta is not None:
        task = f", task {meta.get('task')}" if meta.get("task") else ""
        print(f"workspace {ws.root}: {meta.get('num_policies')} members, objective {meta.get('objective')}{task}")
    else:
        print(f"workspace {ws.root}")
        print(f"async-pbt status: warning: {data['population_error']}", file=sys.stderr)
    if not data["members"]:
        print("no members yet")
        return EXIT_OK
    rows = [["member", "frames", "gen", "objective mean ± std", "n", "heartbeat", "status", "last decision"]]
    problems = []
    for m in data["members"]:
        if m["state"] != "ok":
            problems.append(f"{m['member']:03d}  {m['state']}: {m['error']}")
            continue
        if m["objective_mean"] is None:
            obj = "-"
        else:
            obj = f"{m['objective_mean']:.4g} ± {m['objective_std']:.3g}"
        if m["evidence_generation"] != m["generation"]:
            obj += f" (gen {m['evidence_generation']})"
        status = m["status"] + (" (stale?)" if m["stale"] else "")
        rows.append([f"{m['member']:03d}", str(m["frame"]), str(m["generation"]), obj, str(m["episodes"]),
                     _fmt_age(m["heartbeat_age_s"]), status, m["last_decision"] or "-"])
    if len(rows) > 1:
        print("\n".join(_table(rows)))
    for line in problems:
        print(line)
    return EXIT_OK


# ============================================================================ audit


def add_audit_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "audit",
        help="verify every member's hash-chained audit log and replay its decisions",
        description="Check the hash chain of each members/NNN/audit.jsonl and recompute every decision "
        "entry from its recorded inputs. Exit 1 when any entry fails.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--member", type=int, default=None, metavar="N", help="only this member")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_audit)


def _member_list(ws, member: int | None) -> list[int]:
    indices = ws.member_indices()
    if member is None:
        return indices
    if member not in indices:
        raise CliError(f"member {member} has no folder in {ws.members_dir} (members: "
                       f"{', '.join(str(i) for i in indices) or 'none'})")
    return [member]


def audit_data(ws, member: int | None = None) -> dict[str, Any]:
    from async_pbt_isaaclab.core.audit import verify_log

    out = []
    for index in _member_list(ws, member):
        path = ws.member_dir(index) / "audit.jsonl"
        torn = path.with_name(path.name + ".torn")
        item: dict[str, Any] = {"member": index, "path": str(path), "exists": path.exists(),
                                "entries": 0, "problems": [], "torn_tails": 0}
        if torn.exists():
            try:
                item["torn_tails"] = sum(1 for line in torn.read_bytes().splitlines() if line.strip())
            except OSError:
                item["torn_tails"] = -1
        if path.exists():
            try:
                count, problems = verify_log(path)
            except OSError as exc:
                item["problems"].append({"line": None, "seq": None, "problem": f"cannot read: {exc.strerror}"})
            else:
                item["entries"] = count
                item["problems"] = [{"line": p.line, "seq": p.seq, "problem": p.problem} for p in problems]
        out.append(item)
    failed = [m["member"] for m in out if m["problems"]]
    return {"workspace": str(ws.root), "members": out, "ok": not failed, "failed_members": failed}


def cmd_audit(args: argparse.Namespace) -> int:
    ws = _open_workspace(args.workspace)
    data = audit_data(ws, args.member)
    if args.json:
        _emit_json(data)
        return EXIT_OK if data["ok"] else EXIT_AUDIT_FAILED
    if not data["members"]:
        print(f"{ws.root}: no members")
    for m in data["members"]:
        name = f"member {m['member']:03d}"
        if not m["exists"]:
            print(f"{name}: no audit log ({m['path']})")
            continue
        n_prob = len(m["problems"])
        verdict = "ok" if not n_prob else f"{n_prob} problem(s)"
        print(f"{name}: {m['entries']} entries checked, {verdict}  ({m['path']})")
        for p in m["problems"]:
            where = f"line {p['line']}" if p["line"] is not None else "file"
            if p["seq"] is not None:
                where += f" (seq {p['seq']})"
            print(f"  {name} {where}: {p['problem']}")
        if m["torn_tails"]:
            print(f"  {name}: note: {m['path']}.torn keeps {m['torn_tails']} torn tail(s) of interrupted appends "
                  f"(incomplete entries, never acted on)")
    if data["ok"]:
        print("audit: all entries verified")
        return EXIT_OK
    print(f"audit: FAILED for member(s) {', '.join(f'{i:03d}' for i in data['failed_members'])}")
    return EXIT_AUDIT_FAILED


# ============================================================================ best


def add_best_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "best",
        help="the population's historical best checkpoints",
        description="List the best checkpoints across all members (from each member's best.json), best first.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--top", type=int, default=10, metavar="N", help="how many (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_best)


def best_data(ws, top: int) -> list[dict[str, Any]]:
    from async_pbt_isaaclab.core.workspace import WorkspaceError, population_best

    out = []
    for rank, e in enumerate(population_best(ws, top), start=1):
        e = dict(e, rank=rank)
        ckpt = e.get("checkpoint")
        e["path"] = None
        e["exists"] = False
        if isinstance(ckpt, str):
            try:
                full = ws.checkpoint_path(ckpt)
                e["path"] = str(full)
                e["exists"] = full.exists()
            except WorkspaceError as exc:
                e["path_error"] = str(exc)
        out.append(e)
    return out


def cmd_best(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise CliError(f"--top must be >= 1, got {args.top}")
    ws = _open_workspace(args.workspace)
    entries = best_data(ws, args.top)
    if args.json:
        _emit_json({"workspace": str(ws.root), "best": entries})
        return EXIT_OK
    if not entries:
        print(f"{ws.root}: no best checkpoints recorded yet (members write members/NNN/best.json)")
        return EXIT_OK
    rows = [["rank", "member", "objective", "frame", "gen", "checkpoint"]]
    for e in entries:
        path = e["path"] or e.get("path_error") or "-"
        if e["path"] and not e["exists"]:
            path += "  (missing)"
        rows.append([str(e["rank"]), f"{e['member']:03d}", _fmt_num(float(e["objective"])),
                     _fmt_num(e.get("frame")), _fmt_num(e.get("generation")), path])
    print("\n".join(_table(rows)))
    return EXIT_OK


# ============================================================================ lineage


def add_lineage_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lineage",
        help="per member, the chain of generations: who copied whom, when, what changed",
        description="Read each member's audit log and list its generations: exploits (donor, donor "
        "generation, frame) and explores, with the hyperparameter changes. Decisions that were never "
        "applied are shown as such.",
    )
    p.add_argument("workspace", help="population workspace folder")
    p.add_argument("--member", type=int, default=None, metavar="N", help="only this member")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_lineage)


def _donor_generation(entry: Mapping[str, Any], donor: Any) -> Any:
    try:
        for p in entry["inputs"]["peers"]:
            if p.get("member") == donor:
                return p.get("generation")
    except (KeyError, TypeError, AttributeError):
        pass
    return None


def lineage_events(member: int, entries: Iterable[tuple[int, Mapping[str, Any] | None, str | None]]
                   ) -> dict[str, Any]:
    """Generations of one member from its audit entries ``(line, entry or None, error or None)``.

    Each event: ``generation`` (the new one), ``frame``, ``outcome`` (exploit/explore), ``donor``,
    ``donor_generation``, ``donor_checkpoint``, ``changes``, ``state`` (``applied``; ``aborted``;
    ``not applied``: a later decision came first; ``pending``: decided, nothing after it yet),
    ``seq`` and ``line`` of the entry it comes from.
    """
    events: list[dict[str, Any]] = []
    unreadable: list[str] = []
    start: dict[str, Any] | None = None
    pending: dict[str, Any] | None = None

    def close(state: str, **extra: Any) -> None:
        nonlocal pending
        if pending is not None:
            pending.update(state=state, **extra)
            events.append(pending)
            pending = None

    for line, entry, err in entries:
        if entry is None:
            unreadable.append(f"line {line}: {err}")
            continue
        kind = entry.get("kind")
        if kind == "start" and start is None:
            start = {"generation": entry.get("generation", 0), "frame": entry.get("frame"),
                     "mode": entry.get("mode"), "checkpoint": entry.get("checkpoint"),
                     "seq": entry.get("seq"), "line": line, "time": entry.get("time")}
        elif kind == "decision":
            decision = entry.get("decision") if isinstance(entry.get("decision"), Mapping) else {}
            outcome = decision.get("outcome")
            if outcome not in ("exploit", "explore"):
                continue
            close("not applied")
            me = (entry.get("inputs") or {}).get("me") or {}
            donor = decision.get("donor")
            gen = me.get("generation")
            pending = {
                "generation": gen + 1 if isinstance(gen, int) else None,
                "frame": me.get("frame"),
                "outcome": outcome,
                "donor": donor,
                "donor_generation": _donor_generation(entry, donor) if donor is not None else None,
                "donor_checkpoint": None,
                "changes": entry.get("changes") or [],
                "reason": (decision.get("reasons") or [""])[-1],
                "seq": entry.get("seq"),
                "line": line,
                "time": entry.get("time"),
            }
        elif kind == "exploit_applied":
            donor = entry.get("donor")
            ev = dict(pending) if pending is not None else {
                "outcome": "explore" if donor is None or donor == member else "exploit", "reason": ""}
            pending = None
            for key in ("generation", "frame", "donor", "donor_generation", "donor_checkpoint", "changes"):
                if entry.get(key) is not None:
                    ev[key] = entry[key]
                else:
                    ev.setdefault(key, None)
            ev.update(state="applied", seq=entry.get("seq"), line=line, time=entry.get("time"))
            if "hyperparameters" in entry:
                ev["hyperparameters"] = entry["hyperparameters"]
            events.append(ev)
        elif kind == "exploit_aborted":
            why = entry.get("reason") or entry.get("error") or ""
            if pending is not None:
                close("aborted", abort_reason=why, abort_seq=entry.get("seq"))
            else:
                events.append({"generation": entry.get("generation"), "frame": entry.get("frame"),
                               "outcome": "exploit", "donor": entry.get("donor"),
                               "donor_generation": entry.get("donor_generation"), "donor_checkpoint": None,
                               "changes": entry.get("changes") or [], "reason": "", "state": "aborted",
                               "abort_reason": why, "seq": entry.get("seq"), "line": line,
                               "time": entry.get("time")})
    close("pending")
    return {"member": member, "start": start, "events": events, "unreadable": unreadable}


def _fmt_changes(changes: Any) -> str:
    if not changes:
        return "no hyperparameter changed"
    parts = []
    if isinstance(changes, Mapping):
        for k, v in sorted(changes.items()):
            if isinstance(v, Mapping) and "new" in v:
                parts.append(f"{k} {_fmt_num(v.get('old'))} -> {_fmt_num(v.get('new'))}")
            else:
                parts.append(f"{k} -> {_fmt_num(v)}")
    elif isinstance(changes, list):
        for c in changes:
            if isinstance(c, Mapping) and "key" in c:
                f = c.get("factor")
                fs = f" (x{f:.3g})" if isinstance(f, (int, float)) and not isinstance(f, bool) else ""
                parts.append(f"{c['key']} {_fmt_num(c.get('old'))} -> {_fmt_num(c.get('new'))}{fs}")
            else:
                parts.append(str(c))
    else:
        parts.append(str(changes))
    return ", ".join(parts)


def lineage_data(ws, member: int | None = None) -> list[dict[str, Any]]:
    from async_pbt_isaaclab.core.audit import read_entries

    out = []
    for index in _member_list(ws, member):
        path = ws.member_dir(index) / "audit.jsonl"
        if not path.exists():
            out.append({"member": index, "start": None, "events": [], "unreadable": [], "no_log": True})
            continue
        try:
            item = lineage_events(index, read_entries(path))
        except OSError as exc:
            item = {"member": index, "start": None, "events": [],
                    "unreadable": [f"cannot read {path}: {exc.strerror}"]}
        item["no_log"] = False
        out.append(item)
    return out


def cmd_lineage(args: argparse.Namespace) -> int:
    ws = _open_workspace(args.workspace)
    data = lineage_data(ws, args.member)
    if args.json:
        _emit_json({"workspace": str(ws.root), "members": data})
        return EXIT_OK
    if not data:
        print(f"{ws.root}: no members")
    for m in data:
        name = f"member {m['member']:03d}"
        if m["no_log"]:
            print(f"{name}: no audit log")
            continue
        applied = sum(1 for e in m["events"] if e["state"] == "applied")
        print(f"{name}: {applied} change(s) of generation")
        rows = []
        s = m["start"]
        if s is None:
            rows.append(["gen 0", "frame -", "start (no start entry)", ""])
        else:
            mode = s.get("mode") or ""
            if mode == "warm_start" and s.get("checkpoint"):
                mode += f" from {s['checkpoint']}"
            first_gen = s.get("generation") if isinstance(s.get("generation"), int) else 0
            rows.append([f"gen {first_gen}", f"frame {_fmt_num(s.get('frame'))}",
                         f"start ({mode})" if mode else "start", f"[seq {s.get('seq')}]"])
        for e in m["events"]:
            if e["outcome"] == "exploit":
                dg = f" gen {e['donor_generation']}" if e.get("donor_generation") is not None else ""
                what = f"exploit <- member {_fmt_num(e.get('donor'))}{dg}"
            else:
                what = "explore (own weights)"
            state = e["state"]
            if state == "aborted" and e.get("abort_reason"):
                state += f": {e['abort_reason']}"
            rows.append([f"gen {_fmt_num(e.get('generation'))}", f"frame {_fmt_num(e.get('frame'))}", what,
                         f"{_fmt_changes(e.get('changes'))}  [{state}, seq {e.get('seq')}]"])
        print("\n".join(_table(rows, indent="  ")))
        for u in m["unreadable"]:
            print(f"  {name}: skipped unreadable audit entry at {u} (run `async-pbt audit`)")
    return EXIT_OK


# ============================================================================ entry point

from async_pbt_isaaclab.launch.local import add_launch_parser  # noqa: E402  (stdlib + core only)

SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_check_config_parser,
    add_status_parser,
    add_audit_parser,
    add_best_parser,
    add_lineage_parser,
    add_launch_parser,
]
"""Parser builders, one per subcommand, in ``--help`` order. Each sets ``func`` to its ``cmd_<name>``."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="async-pbt",
        description="Asynchronous population-based training for RL-Games / Isaac Lab: check configs, "
        "watch and audit population workspaces.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``async-pbt`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code) if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"async-pbt {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # e.g. `async-pbt status WS | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
