"""What ``async-pbt evaluate`` reads from and writes to a population workspace.

A member's checkpoint (``WS/members/NNN/checkpoints/*.pth`` of a workspace with a ``population.json``) knows where
it comes from: :func:`workspace_defaults` (and :func:`checkpoint_setup`, which gives what the user named precedence)
gives the task (``population.json``) and the agent config its member was
built with (``WS/members/NNN/agent.yaml``), so ``evaluate`` needs neither ``--task`` nor ``--agent-yaml`` for it.
Its result is recorded as one JSON line in ``WS/evaluations.jsonl`` (:func:`evaluation_line`,
:func:`record_evaluation`), the file ``async-pbt report`` reads. Imports only the standard library and the pure core.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from async_pbt_isaaclab.commands.common import CliError


@dataclass(frozen=True)
class MemberCheckpoint:
    """Where a member's checkpoint lies: its workspace and member index."""

    workspace: Path
    member: int


@dataclass
class Evaluation:
    """Held-out returns of one checkpoint."""

    checkpoint: str
    """The checkpoint file evaluated."""
    task: str
    """The gymnasium task id it was played on."""
    seed: int
    """Seed of the first episode's env; episode ``i`` used ``seed + i``."""
    returns: list[float] = field(default_factory=list)
    """Undiscounted return of each episode, in seed order."""
    lengths: list[int] = field(default_factory=list)
    """Steps of each episode."""
    pbt: dict[str, Any] = field(default_factory=dict)
    """The checkpoint's PBT metadata (member, generation, frame); empty for a plain rl_games checkpoint."""
    objective: str = "episode_return"
    """The population objective the agent yaml names (``pbt.objective``), measured on each episode as members do."""
    objective_values: list[float] = field(default_factory=list)
    """Each episode's value of :attr:`objective` (its return for ``episode_return``), in seed order."""

    @property
    def mean(self) -> float:
        return statistics.fmean(self.returns) if self.returns else math.nan

    @property
    def std(self) -> float:
        return statistics.pstdev(self.returns) if len(self.returns) > 1 else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            episodes=len(self.returns),
            mean=self.mean,
            std=self.std,
            min=min(self.returns) if self.returns else math.nan,
            max=max(self.returns) if self.returns else math.nan,
            objective_mean=statistics.fmean(self.objective_values) if self.objective_values else math.nan,
        )
        out["pbt"] = {k: self.pbt[k] for k in ("member", "generation", "frame", "epoch") if k in self.pbt}
        return out


def member_workspace(checkpoint: str | Path) -> MemberCheckpoint | None:
    """The workspace and member of ``checkpoint`` when it lies in ``WS/members/NNN/checkpoints/`` of a workspace
    (one with a ``population.json``), else ``None``."""
    from async_pbt_isaaclab.core.workspace.layout import parse_member_dirname

    path = Path(checkpoint).resolve()
    folder, member_dir = path.parent, path.parent.parent
    if folder.name != "checkpoints" or member_dir.parent.name != "members":
        return None
    member = parse_member_dirname(member_dir.name)
    ws = member_dir.parent.parent
    if member is None or not (ws / "population.json").is_file():
        return None
    return MemberCheckpoint(ws, member)


def workspace_defaults(checkpoint: str | Path) -> tuple[str | None, Path | None]:
    """``(task, agent yaml)`` that the workspace of a member's ``checkpoint`` records (each ``None`` when it records
    none, or the checkpoint is not a member's): the population's task and the member's ``agent.yaml``."""
    from async_pbt_isaaclab.core.workspace.layout import AGENT_FILE, Workspace, WorkspaceError

    found = member_workspace(checkpoint)
    if found is None:
        return None, None
    ws = Workspace(found.workspace)
    try:
        task = ws.population_meta().get("task") or None
    except WorkspaceError:
        task = None
    agent = ws.member_dir(found.member) / AGENT_FILE
    return task, agent if agent.is_file() else None


def checkpoint_setup(
    checkpoint: str | Path, task: str | None, agent_yaml: str | Path | None
) -> tuple[str | None, str | Path | None]:
    """``(task, agent yaml)`` to play ``checkpoint`` with: what was given, else what the workspace of a member's
    checkpoint records (its population's task; the member's ``agent.yaml`` when the task is that one), else
    ``None`` (the defaults of :class:`~async_pbt_isaaclab.commands.evaluate.Evaluator`: the task's packaged yaml,
    the yaml's ``env_name``)."""
    ws_task, ws_agent = workspace_defaults(checkpoint)
    chosen = task or ws_task
    if agent_yaml is None and ws_agent is not None and chosen in (None, ws_task):
        agent_yaml = ws_agent
    return chosen, agent_yaml


def evaluation_line(result: Any, workspace: Path, label: str = "") -> dict[str, Any]:
    """The ``evaluations.jsonl`` object of an :class:`~async_pbt_isaaclab.commands.evaluate.Evaluation` (the format
    docs/observability.md documents)."""
    d = result.as_dict()
    path = Path(result.checkpoint).resolve()
    try:
        checkpoint = path.relative_to(workspace.resolve()).as_posix()
    except ValueError:
        checkpoint = str(path)
    line = {
        "objective": d["objective_mean"],
        "std": d["std"],
        "episodes": d["episodes"],
        "checkpoint": checkpoint,
        "task": result.task,
        "seed": result.seed,
        "label": label or f"evaluate seeds {result.seed}..{result.seed + d['episodes'] - 1}",
        "time": time.time(),
    }
    for key in ("member", "generation", "frame"):
        if key in d["pbt"]:
            line[key] = d["pbt"][key]
    return line


def record_evaluation(workspace: Path, line: dict[str, Any]) -> Path:
    """Append ``line`` to ``workspace/evaluations.jsonl`` in one write (concurrent evaluations never interleave
    within a line), refusing a planted link; returns the file."""
    from async_pbt_isaaclab.commands.population_history import EVALUATIONS_FILE
    from async_pbt_isaaclab.core.workspace import fsio

    target = workspace / EVALUATIONS_FILE
    data = (json.dumps(line, sort_keys=True, allow_nan=False) + "\n").encode()
    fd = fsio.open_nofollow(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return target


def record_targets(checkpoints: Sequence[str], record: bool | None, workspace: str | None) -> list[Path | None]:
    """The workspace each checkpoint is recorded into (``None``: not recorded), from ``--record``/``--no-record``
    (``record``: ``None`` when neither was given) and ``--workspace``; checked before anything runs."""
    from async_pbt_isaaclab.commands.common import open_workspace

    explicit = open_workspace(workspace).root if workspace else None
    if explicit is not None and record is False:
        raise CliError("--workspace names where to record, but --no-record says not to record")
    out: list[Path | None] = []
    for c in checkpoints:
        found = member_workspace(c)
        if record is False:
            out.append(None)
        elif explicit is not None:
            out.append(explicit)
        elif found is not None:
            out.append(found.workspace)
        elif record:
            raise CliError(
                f"--record: checkpoint {c} is not in a workspace's members/NNN/checkpoints/ folder; "
                f"name the workspace with --workspace WS"
            )
        else:
            out.append(None)
    return out
