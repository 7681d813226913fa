"""What every ``async-pbt`` subcommand shares: :class:`CliError`, output and workspace helpers.

Separate from the subcommand modules so that :mod:`async_pbt_isaaclab.cli` (which turns a :class:`CliError` into
exit code 2) and each subcommand group use the same definitions without importing one another. The exit codes
are :mod:`async_pbt_isaaclab.exit_codes`, the one-line parser :mod:`async_pbt_isaaclab.console`. Imports only the
pure core.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence


class CliError(Exception):
    """A user-facing error: printed as ``async-pbt <cmd>: error: <message>``, exit code 2."""


# ============================================================================ helpers


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


def format_number(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def format_table(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns; the last column is not padded."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(len(r) for r in rows))]
    out = []
    for r in rows:
        cells = [c.ljust(widths[i]) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def open_workspace(path: str):
    """A :class:`Workspace` for ``path``, or :class:`CliError` when it is not a population workspace."""
    from async_pbt_isaaclab.core.workspace.layout import Workspace

    root = Path(path).expanduser()
    if not root.exists():
        raise CliError(f"workspace {root} does not exist")
    if not root.is_dir():
        raise CliError(f"workspace {root} is not a directory")
    ws = Workspace(root)
    # cluster/: a SLURM or Ray launch whose members have not started yet.
    if (
        not (ws.root / "population.json").exists()
        and not ws.members_dir.is_dir()
        and not (ws.root / "cluster").is_dir()
    ):
        raise CliError(
            f"{ws.root} is not a population workspace (neither population.json nor members/ is there); "
            f"pass the folder named by pbt.workspace (see `async-pbt check-config` for its resolved path)"
        )
    return ws


def read_population_meta(ws) -> tuple[dict[str, Any] | None, str | None]:
    from async_pbt_isaaclab.core.workspace.layout import WorkspaceError

    try:
        return ws.population_meta(), None
    except WorkspaceError as exc:
        return None, str(exc)


def member_list(ws, member: int | None) -> list[int]:
    """The member indices a command covers: every member folder of ``ws``, or ``member`` alone (refused, naming the
    members there are, when it has no folder)."""
    indices = ws.member_indices()
    if member is None:
        return indices
    if member not in indices:
        raise CliError(
            f"member {member} has no folder in {ws.members_dir} (members: "
            f"{', '.join(str(i) for i in indices) or 'none'})"
        )
    return [member]
