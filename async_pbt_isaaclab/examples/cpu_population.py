"""A CPU population: N rl_games or rsl_rl PPO members on a gymnasium task, as separate processes, under the launcher.

    python -m async_pbt.examples.cpu_population --members 2 --smoke --workspace ./runs/cpu-smoke
    python -m async_pbt.examples.cpu_population --trainer rsl_rl --members 2 --smoke --workspace ./runs/rsl-smoke
    python -m async_pbt.examples.cpu_population --task HalfCheetah-v5 --members 4 --workspace ./runs/hc
    python -m async_pbt.examples.cpu_population --task Humanoid-v5 --agent humanoid_ppo.yaml --members 4

``--task`` trains a task with its packaged agent yaml (Pendulum-v1, the default; HalfCheetah-v5 and Hopper-v5 need
the ``[mujoco]`` extra); ``--agent YAML`` trains any gymnasium task with your rl_games agent yaml, and
``--agent hopper_reward_search`` the packaged Hopper-v5 search of its reward weights, judged by distance travelled.
The presets are frames per member, rounded up to whole epochs of that yaml. HalfCheetah's episodes last 1,000 steps,
so its ``--smoke`` (3 epochs of 256 steps) ends before any episode does: pass ``--iterations 8`` or more to see
evidence and exploits.

Each member is ``python -m async_pbt.examples.cpu_member`` (``--trainer rsl_rl``: ``rsl_rl_member``, rsl_rl PPO on
the task's packaged rsl_rl config, searching ``desired_kl``, ``entropy_coef``, ``gamma``, ``clip_param``) with the
population flags added by the local launcher. With ``--slices M`` each process hosts M members on slices of one
vectorized env (``--members 4 --slices 4``: the whole population in one process; docs/slices.md). Members publish
evidence, select, copy donors' checkpoints and restart themselves with ``os.execv`` (slices copy in memory);
the launcher restarts a crashed process from its members' own last checkpoints.

``--smoke`` is a short run (about a minute on 2 cores) that exercises every step; without it the run is
long enough for the population to learn Pendulum (returns rise from about -1200 towards -200).
A new ``--workspace`` is a new experiment; an existing one is resumed (each member continues from its
own last checkpoint; a member that reached its ``--iterations`` has finished) and the example says which it did.
A workspace whose every member has finished trains nothing: pass more ``--iterations`` to train on.

Usage errors (a population of fewer than 2 members, ``--iterations 0``, a workspace path that is a file
or not writable, a workspace made for another population size, task or objective, a workspace another
launcher runs) are one line on stderr and exit code 2, before anything is written. The exit code is the
launcher's: 0 when every member finished, 1 when one was given up, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.console import OneLineParser
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig, objective_term
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.pbt_section import SELECTION_RULES, population_size_problem
from async_pbt_isaaclab.core.slices import SLICES_FLAG, slice_problems
from async_pbt_isaaclab.core.workspace.fsio import folder_problem
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError, population_conflicts
from async_pbt_isaaclab.core.workspace.member_progress import generation_changes
from async_pbt_isaaclab.core.workspace.retention import population_best
from async_pbt_isaaclab.core.workspace.state_files import load_state
from async_pbt_isaaclab.examples import rsl_rl_member
from async_pbt_isaaclab.examples.agents import DEFAULT_TASK, PACKAGED_AGENTS, PACKAGED_SEARCHES, agent_file
from async_pbt_isaaclab.examples.demo_presets import FULL, SMOKE, pbt_flags, preset, searched_overrides
from async_pbt_isaaclab.exit_codes import EXIT_OK, EXIT_USAGE
from async_pbt_isaaclab.pbt_flags import add_population_args, population_overrides
from async_pbt_isaaclab.rl_games.live import LIVE_SETTERS  # plain data: no torch, no rl_games

PROG = "python -m async_pbt.examples.cpu_population"
"""How users run the example (the name in its messages)."""
PROG_MEMBER = "python -m async_pbt.examples.cpu_member"
"""One member, alone or by hand."""
TRAINERS = ("rl_games", "rsl_rl")
"""``--trainer``: the member entry each trains with (``cpu_member``, ``rsl_rl_member``)."""
DEFAULT_WORKSPACE = "runs/cpu-population"
"""Where the population's workspace goes without ``--workspace`` (relative to the current folder)."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--members", type=int, default=2, help="population size, at least 2 (default 2)")
    p.add_argument(
        "--trainer",
        default="rl_games",
        choices=TRAINERS,
        help="the members' trainer (default rl_games; rsl_rl: rsl_rl's OnPolicyRunner, docs/rsl_rl.md)",
    )
    p.add_argument(
        "--slices",
        type=int,
        default=1,
        help="members per process, each on its own slice of one vectorized env (1, the default: one process per "
        "member; --members must be a multiple; docs/slices.md)",
    )
    p.add_argument(
        "--workspace",
        default=DEFAULT_WORKSPACE,
        help=f"the population's workspace folder: a new one is a new experiment, an existing one is resumed "
        f"(default {DEFAULT_WORKSPACE})",
    )
    p.add_argument(
        "--task",
        default=None,
        help=f"gymnasium task id, trained with its packaged agent yaml ({', '.join(PACKAGED_AGENTS)}; default "
        f"{DEFAULT_TASK}); any other gymnasium task with --agent",
    )
    p.add_argument(
        "--agent",
        default=None,
        metavar="YAML",
        help="your rl_games agent yaml (with a pbt: section or not; the keys it sets are kept, the demo sets the "
        "others for its preset), for any gymnasium task: its params.config.env_name, or --task; or a packaged one by "
        f"name ({', '.join(PACKAGED_SEARCHES)})",
    )
    p.add_argument("--smoke", action="store_true", help="short run that exercises every step")
    p.add_argument("--iterations", type=int, default=None, help="rl_games epochs per member (overrides the preset)")
    p.add_argument(
        "--rule",
        default=None,
        choices=SELECTION_RULES,
        help=f"selection rule (default: the agent yaml's pbt.rule, else the package's, {PopulationConfig.rule})",
    )
    p.add_argument("--progress-interval", type=float, default=15.0, help="seconds between progress tables (default 15)")
    p.add_argument(
        "--vec-env",
        default="gymnasium",
        choices=("gymnasium", "envpool"),
        help="every member's env backend (cpu_member --vec-env; envpool: the envpool extra, about 2x faster on MuJoCo)",
    )
    return p


class UsageError(Exception):
    """A bad argument or workspace: one line on stderr, exit code 2, nothing written."""


def agent_yaml(args: argparse.Namespace) -> Path:
    """The members' agent yaml: ``--agent``, else ``--task``'s packaged one (a task without one is a
    :class:`UsageError` saying ``--agent`` takes any gymnasium task); with ``--trainer rsl_rl`` an rsl_rl config."""
    if args.agent is not None:
        return agent_file(args.agent)
    task = args.task or DEFAULT_TASK
    if args.trainer == "rsl_rl":
        try:
            return Path(rsl_rl_member.config_path(None, task))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if task not in PACKAGED_AGENTS:
        raise UsageError(
            f"--task {task}: no packaged agent yaml for it (packaged: {', '.join(PACKAGED_AGENTS)}); any gymnasium "
            f"task trains with your rl_games agent yaml: --task {task} --agent YOUR.yaml"
        )
    return PACKAGED_AGENTS[task]


def preset_iterations(args: argparse.Namespace) -> int:
    """Epochs per member: ``--iterations``, else the preset's frames (in Pendulum epochs of 2,048) in the yaml's
    epochs, rounded up."""
    if args.iterations:
        return int(args.iterations)
    raw = load_yaml(agent_yaml(args))
    if args.trainer == "rsl_rl":
        per_epoch = int(raw["env"]["num_envs"]) * int(raw["runner"]["num_steps_per_env"])
    else:
        per_epoch = int(raw["params"]["config"]["num_actors"]) * int(raw["params"]["config"]["horizon_length"])
    return max(1, -(-preset(args.smoke)["iterations"] * 2048 // per_epoch))


def member_command(args: argparse.Namespace, workspace: Path) -> list[str]:
    """A member's command: the chosen yaml or task, the preset's epochs, and the demo's settings for what the yaml's
    ``pbt:`` section leaves unset (:mod:`~async_pbt_isaaclab.examples.demo_presets`)."""
    rsl_rl = args.trainer == "rsl_rl"
    chosen = [
        *([("--config" if rsl_rl else "--agent"), str(agent_yaml(args))] if args.agent else []),
        *(["--task", args.task] if args.task else []),
    ]
    section = load_yaml(agent_yaml(args)).get("pbt")
    pbt = section if isinstance(section, dict) else {}  # a bad pbt: section is the config check's to name
    return [
        sys.executable,
        "-m",
        f"async_pbt.examples.{'rsl_rl_member' if rsl_rl else 'cpu_member'}",
        *(chosen or ["--task", DEFAULT_TASK]),
        "--max_iterations",
        str(preset_iterations(args)),
        "--train-dir",
        str(workspace / "runs"),
        *pbt_flags(pbt, args.smoke, args.rule),
        *searched_overrides(pbt, rsl_rl),
        *([SLICES_FLAG, str(args.slices)] if args.slices != 1 else []),
        *(["--vec-env", args.vec_env] if args.vec_env != "gymnasium" else []),
    ]


def summarize(workspace: Path) -> list[str]:
    """What the user wants to see at the end: per member frames, objective, exploits; the best overall."""
    ws = Workspace(workspace)
    records, errors = ws.read_records()
    lines = [f"population in {workspace}: {len(records)} members"]
    total_exploits = total_explores = 0
    for index in sorted(set(records) | set(errors)):
        if index in errors:
            lines.append(f"  member {index}: unreadable record: {errors[index]}")
            continue
        r = records[index]
        state = load_state(ws.member_dir(index) / "state.json")
        lineage = state.lineage if state else []
        total_exploits += sum(1 for e in lineage if e.outcome == "exploit")
        total_explores += sum(1 for e in lineage if e.outcome == "explore")
        changes = ", ".join(
            f"gen {e.generation} <- "
            + (f"member {e.source.member}" if e.outcome == "exploit" else "explore")
            + f" applied at frame {e.frame}"
            for e in lineage
        )
        ev = r.evidence
        objective = f"{ev.mean:9.1f} over {ev.count} episodes" if ev.count else "no evidence yet"
        lines.append(
            f"  member {index}: {r.frame:>8} frames, generation {r.generation}, objective {objective}, "
            f"status {r.status}; {generation_changes(index, ws.member_dir(index) / 'audit.jsonl').words()}"
            + (f": {changes}" if changes else "")
        )
    best = population_best(ws, top=1)
    if best:
        b = best[0]
        lines.append(
            f"best checkpoint: member {b['member']} objective {b['objective']:.1f} -> {workspace / b['checkpoint']}"
        )
    lines.append(
        f"generation changes: {total_exploits} exploit{'' if total_exploits == 1 else 's'}, "
        f"{total_explores} explore{'' if total_explores == 1 else 's'}"
    )
    lines.append(f"inspect: async-pbt status {workspace} | async-pbt lineage {workspace} | async-pbt audit {workspace}")
    return lines


def check_arguments(args: argparse.Namespace) -> None:
    too_few = population_size_problem(args.members)
    if too_few:
        raise UsageError(f"--members {args.members}: {too_few}; to train one policy alone run {PROG_MEMBER}")
    if args.iterations is not None and args.iterations < 1:
        raise UsageError(
            f"--iterations {args.iterations}: must be at least 1 (omit it for the preset: "
            f"{SMOKE['iterations']} with --smoke, {FULL['iterations']} without)"
        )
    if args.slices < 1 or args.members % args.slices:
        raise UsageError(
            f"--slices {args.slices}: must divide --members {args.members} (each process hosts --slices members)"
        )
    if not args.progress_interval > 0:
        raise UsageError(f"--progress-interval {args.progress_interval:g}: must be a positive number of seconds")
    if args.agent is not None and not agent_file(args.agent).is_file():
        raise UsageError(f"--agent {args.agent}: no such file (packaged: {', '.join(PACKAGED_SEARCHES)})")
    agent_yaml(args)


def check_member_config(args: argparse.Namespace, workspace: Path) -> tuple[dict[str, Any], PopulationConfig]:
    """Validate the members' config exactly as a member will, before any process starts; returns the agent config
    (with the members' epoch limit) and the population config."""
    parser = argparse.ArgumentParser(add_help=False)
    add_population_args(parser)
    flags = [
        *member_command(args, workspace)[3:],
        "--pbt-workspace",
        str(workspace),
        "--pbt-members",
        str(args.members),
        "--pbt-index",
        "0",
    ]
    member_args, rest = parser.parse_known_args(flags)
    overrides = [o for o in rest if "=" in o]
    if args.trainer == "rsl_rl":
        return _rsl_rl_member_config(args, member_args, overrides)
    if args.task:
        overrides.insert(0, f"agent.params.config.env_name={args.task}")
    yaml_path = agent_yaml(args)
    try:
        agent_cfg, cfg = load_population_config(
            load_yaml(yaml_path), [*population_overrides(member_args), *overrides], source=str(yaml_path)
        )
    except ConfigError as exc:
        raise UsageError("; ".join(exc.problems)) from None
    problems = slice_problems(cfg.mutation, cfg.exploit_mode, LIVE_SETTERS, args.slices, agent_cfg)
    problems += _env_key_problems(agent_cfg, cfg)
    if problems:
        raise UsageError("; ".join(problems))
    agent_cfg["params"]["config"]["max_epochs"] = preset_iterations(args)
    return agent_cfg, cfg


def _env_key_problems(agent_cfg: dict[str, Any], cfg: PopulationConfig) -> list[str]:
    """The members' refusal of a searched env value their task is not built with (``cpu_member``), said before any
    member starts."""
    if not any(is_env_key(k) for k in cfg.mutation):
        return []
    from async_pbt_isaaclab.envs.env_parameters import env_key_problems

    return env_key_problems(str(agent_cfg["params"]["config"].get("env_name")), cfg.mutation)


def _rsl_rl_member_config(
    args: argparse.Namespace, member_args: argparse.Namespace, overrides: list[str]
) -> tuple[dict[str, Any], PopulationConfig]:
    """The rsl_rl members' config checked as :mod:`.rsl_rl_member` checks it; its core view (``params.config``)
    with the members' iteration limit."""
    from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

    member_args.config, member_args.task = str(agent_yaml(args)), args.task
    try:
        _, view, cfg = load_member_config(
            load_yaml(member_args.config), [*population_overrides(member_args), *overrides], source=member_args.config
        )
    except ConfigError as exc:
        raise UsageError("; ".join(exc.problems)) from None
    from async_pbt_isaaclab.rsl_rl.slices import check_slices

    problems = check_slices(cfg, args.slices)
    if problems:
        raise UsageError("; ".join(problems))
    view["params"]["config"]["max_epochs"] = preset_iterations(args)
    return view, cfg


def check_workspace(workspace: Path, agent_cfg: dict[str, Any], cfg: PopulationConfig) -> dict | None:
    """Refuse a workspace the members could not use or that another population made (its size, task, objective:
    the rule each member applies at its start); returns its ``population.json`` when it exists."""
    problem = folder_problem(workspace)
    if problem:
        raise UsageError(f"--workspace {workspace}: {problem}")
    if not (workspace / "population.json").exists():
        return None
    try:
        meta = Workspace(workspace).population_meta()
    except WorkspaceError as exc:
        raise UsageError(f"--workspace {workspace}: {exc}") from None
    task = agent_cfg["params"]["config"].get("env_name")
    conflicts = population_conflicts(meta, cfg.num_policies, objective_term(cfg.objective), task, cfg.seed)
    for key, recorded, value in conflicts:
        differs = {
            "num_policies": f"{recorded} members, not --members {value}; pass --members {recorded}",
            "task": f"task {recorded!r}, not --task {value}; pass --task {recorded}",
            "objective": f"objective {recorded!r}, not the members' pbt.objective {value!r}; train its yaml",
            "seed": f"population seed {recorded}, not pbt.seed={value}; leave pbt.seed unset",
        }[key]
        raise UsageError(f"--workspace {workspace}: was created for {differs} to resume it, or use a new --workspace")
    return meta


def resume_status(workspace: Path, agent_cfg: dict[str, Any], members: int) -> dict[int, str]:
    """Per member of an existing workspace, why it has finished (the limit it reached, as its own start would say)
    or ``""`` when it continues from its own last checkpoint."""
    rl_cfg = agent_cfg["params"]["config"]
    max_epochs, max_frames = int(rl_cfg.get("max_epochs", -1) or -1), int(rl_cfg.get("max_frames", -1) or -1)
    out = {}
    for index in range(members):
        state = load_state(Workspace(workspace).member_dir(index) / "state.json")
        finished = state.finished if state is not None and not state.pending_exploit else None
        out[index] = finished.still_reached(max_epochs, max_frames) if finished is not None else ""
    return out


def _start_words(workspace: Path, meta: dict | None, status: dict[int, str]) -> str:
    if meta is None:
        return f"[cpu-population] new experiment in {workspace}"
    done = [f"member {i} {why}" for i, why in status.items() if why]
    going = [str(i) for i, why in status.items() if not why]
    return (
        f"[cpu-population] resuming the existing workspace {workspace} (created {time.ctime(meta.get('created', 0))}): "
        + (f"{'; '.join(done)}: already finished; " if done else "")
        + f"member{'s' if len(going) > 1 else ''} {', '.join(going)} continue{'' if len(going) > 1 else 's'} from "
        f"{'their' if len(going) > 1 else 'its'} own last checkpoint. Use a new --workspace for an independent "
        f"experiment."
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workspace = Path(args.workspace).expanduser().absolute()
    try:
        check_arguments(args)
        agent_cfg, cfg = check_member_config(args, workspace)
        meta = check_workspace(workspace, agent_cfg, cfg)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    status = resume_status(workspace, agent_cfg, args.members) if meta is not None else {}
    if status and all(status.values()):
        print(
            f"[cpu-population] every member of {workspace} has already finished: "
            f"{'; '.join(f'member {i} {why}' for i, why in status.items())}. Nothing to train: pass more --iterations "
            f"to train on, or use a new --workspace for an independent experiment."
        )
        print("\n".join(summarize(workspace)))
        return EXIT_OK
    return _launch(args, workspace, _start_words(workspace, meta, status), resumed=meta is not None)


def _launch(args: argparse.Namespace, workspace: Path, start_words: str, resumed: bool) -> int:
    from async_pbt_isaaclab.core.workspace.launcher_lock import release_launcher_locks
    from async_pbt_isaaclab.launch.arguments import LaunchError
    from async_pbt_isaaclab.launch.backends import hold_workspace
    from async_pbt_isaaclab.launch.local_backend import launch_population

    started = time.time()
    held: list[Path] = []
    try:
        # The members' launcher locks first (as async-pbt launch takes them): a launch refused there (another
        # launcher runs them) says nothing of itself; launch_population takes them again, counted in this process.
        hold_workspace(workspace, list(range(args.members)), held)
        print(start_words, flush=True)
        result = launch_population(
            member_command(args, workspace),
            args.members,
            workspace,
            gpus=[],
            progress_interval_s=args.progress_interval,
            # With slices, one process per --slices members: the launcher starts each at its first member's index.
            indices=list(range(0, args.members, args.slices)),
        )
    except LaunchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        release_launcher_locks(held)
    how = f"stopped by {result.stopped_by}" if result.stopped_by else "done"
    print(
        f"\n[cpu-population] {how} after {time.time() - started:.0f}s "
        f"({'resumed' if resumed else 'new'} workspace); exit code {result.exit_code}"
    )
    for line in summarize(workspace):
        print(line)
    if result.stopped_by:
        print("resume: run the same command again (same --workspace and --members)")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
