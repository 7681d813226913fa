"""The shared workspace: a folder on a shared filesystem that members write and read. No server.

Layout (``docs/reliability.md`` explains the guarantees)::

    WORKSPACE/
      population.json            created by the first member (population seed and id); others check they agree
      launchers/                 member_NNN.lock: held by the launcher that runs member NNN (one launcher each)
      members/
        003/                     one folder per member, written only by the process holding its lock
          lock                   POSIX record lock (fcntl.lockf) + owner info (pid, host, since)
          record.json            the published MemberRecord (replaced atomically)
          state.json             the member's private state: generation, RNG, lineage, hyperparameters
          audit.jsonl            append-only, hash-chained decision log
          best.json              this member's historical best checkpoints, best first
          target.json            frame count at which the member's training stops (for status and ETA)
          pbt_scalars.jsonl      the member's pbt/* TensorBoard scalars, one line per frame (for the report)
          checkpoints/           g0002_f000001234567.pth ... (written atomically, sha256 in record)
          pins/                  pins other members hold on this member's checkpoints during an exploit

Every file is written through :mod:`async_pbt_isaaclab.core.workspace.fsio` (temp name in the same folder,
fsync, ``os.replace``). Readers never see partial files. The lock is a kernel record lock, so a lock
left by a killed process is released by the kernel and the next claim simply succeeds.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import yaml

from async_pbt_isaaclab.core.state.records import MemberRecord, RecordError, parse_record_bytes
from async_pbt_isaaclab.core.workspace import fsio

WORKSPACE_SCHEMA_VERSION = 1
"""Version of the workspace layout (``population.json``)."""

_MEMBER_DIR = re.compile(r"^\d{3,6}$")
CHECKPOINT_NAME = re.compile(r"^g(\d{4,})_f(\d{12,})\.pth$")
"""A member checkpoint's file name (:func:`checkpoint_name`): groups generation and frame."""

MEMBER_SUBFOLDERS = ("checkpoints", "pins", "incoming")
"""Folders inside a member folder (``incoming/``: donor copies of this member's exploits in flight)."""
MEMBER_FILES = (
    "lock",
    "record.json",
    "state.json",
    "audit.jsonl",
    "audit.jsonl.torn",
    "best.json",
    "target.json",
    "pbt_scalars.jsonl",
    "agent.yaml",
)
"""Files a member writes in its folder (``agent.yaml``: the trainer config it was built with, which
``async-pbt evaluate`` rebuilds its policy from)."""
AGENT_FILE = "agent.yaml"
"""In a member's folder: the agent config its latest process was built with (:data:`MEMBER_FILES`)."""
IN_PLACE_FILES = ("lock", "audit.jsonl", "audit.jsonl.torn", "pbt_scalars.jsonl")
"""Member files written in place (locked and rewritten, appended, truncated) rather than replaced: a hard link there
would have the member write into the file it shares its content with."""


class WorkspaceError(RuntimeError):
    """The workspace cannot be used as asked (not writable, claimed member, inconsistent layout)."""


def member_dirname(index: int) -> str:
    """``3`` -> ``"003"``. Refuses anything but a non-negative int, so no path can be smuggled in."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or index > 999_999:
        raise WorkspaceError(f"member index must be an integer in [0, 999999], got {index!r}")
    return f"{index:03d}"


def parse_member_dirname(name: str) -> int | None:
    """The member index of a folder name under ``members/`` (``003`` -> 3), else ``None``."""
    return int(name) if _MEMBER_DIR.match(name) else None


def checkpoint_name(generation: int, frame: int) -> str:
    """The file name of a member checkpoint (``g0001_f000000049152.pth``)."""
    return f"g{generation:04d}_f{frame:012d}.pth"


def checkpoint_frame(path: str) -> int | None:
    """The frame in a checkpoint's name (``.../g0001_f000000049152.pth`` -> 49152), else ``None``."""
    match = CHECKPOINT_NAME.match(os.path.basename(path))
    return int(match.group(2)) if match else None


def resolve_inside(root: Path, relative: str) -> Path:
    """``root / relative`` if it stays inside ``root``; a record pointing elsewhere (an absolute path, ``..``,
    a symbolic link anywhere below ``root``) is refused."""
    if not isinstance(relative, str) or not relative or os.path.isabs(relative) or "\x00" in relative:
        raise WorkspaceError(f"path {relative!r} must be relative to the workspace {root}")
    if ".." in Path(relative).parts:
        raise WorkspaceError(f"path {relative!r} must not contain '..' (workspace {root})")
    try:
        fsio.check_no_links(root, root / relative)
    except fsio.UnsafePathError as exc:
        raise WorkspaceError(f"path {relative!r} in workspace {root}: {exc}") from None
    full = (root / relative).resolve()
    if not full.is_relative_to(root.resolve()):
        raise WorkspaceError(f"path {relative!r} escapes the workspace {root}")
    return full


def save_agent_config(member_dir: Path, agent_cfg: dict[str, Any]) -> None:
    """Keep the agent config a member's process is built with in its folder (:data:`AGENT_FILE`, replaced at every
    start): what ``async-pbt evaluate`` rebuilds the member's policy from. A config YAML cannot represent is left out
    (evaluate then asks for ``--agent-yaml``)."""
    try:
        data = yaml.safe_dump(agent_cfg, sort_keys=False).encode()
    except yaml.YAMLError:
        return
    fsio.atomic_write_bytes(member_dir / AGENT_FILE, data)


def population_conflicts(
    meta: dict[str, Any],
    num_policies: int | None = None,
    objective: str | None = None,
    task: str | None = None,
    seed: int = -1,
) -> list[tuple[str, Any, Any]]:
    """``(key, recorded, asked)`` for each condition of a population that ``population.json`` (``meta``) records
    otherwise than asked: its size, objective term, task and (``seed`` >= 0) population seed (one a workspace
    written before seeds were recorded lacks). ``None`` (or a seed < 0) asks nothing of that key. The one rule a
    member's start (:meth:`Workspace.ensure`) and the launchers' checks before anything starts apply."""
    asked = {"num_policies": num_policies, "objective": objective, "task": task, "seed": seed if seed >= 0 else None}
    return [
        (key, meta.get(key), value)
        for key, value in asked.items()
        # A workspace written before seeds were recorded has none: any seed joins it.
        if value is not None and meta.get(key) != value and not (key == "seed" and meta.get(key) is None)
    ]


class Workspace:
    """A population workspace rooted at ``root``."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).absolute()
        """Absolute path of the workspace folder."""
        self.members_dir = self.root / "members"
        """Folder holding one sub-folder per member."""

    # ------------------------------------------------------------ population metadata
    def ensure(self, num_policies: int, objective: str, task: str = "", seed: int = -1) -> dict[str, Any]:
        """Create the workspace (or check an existing one agrees). Returns ``population.json``'s content.

        ``seed`` is ``pbt.seed``: the population seed recorded when the workspace is created (-1: one drawn from
        OS entropy). Later members read it from there; one that asks for another seed is refused. A workspace
        written before seeds were recorded has none (its members keep their own streams)."""
        try:
            self.members_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(f"cannot create workspace {self.root}: {exc.strerror}") from None
        if not os.access(self.members_dir, os.W_OK | os.X_OK):
            raise WorkspaceError(f"workspace {self.root} is not writable by this user (uid {os.getuid()})")
        meta_path = self.root / "population.json"
        wanted = {
            "schema_version": WORKSPACE_SCHEMA_VERSION,
            "num_policies": num_policies,
            "objective": objective,
            "task": task,
        }
        if not meta_path.exists():
            population_seed = seed if seed >= 0 else secrets.randbits(63)
            meta = dict(wanted, created=time.time(), seed=population_seed, id=secrets.token_hex(16))
            self._create_population_meta(meta_path, meta)
        meta = self.population_meta()
        for key, recorded, asked in population_conflicts(meta, num_policies, objective, task or None, seed):
            if key == "seed":
                raise WorkspaceError(
                    f"{meta_path}: this population's seed is {recorded!r} but this member runs with pbt.seed={seed}; "
                    f"leave pbt.seed unset (or set it to {recorded!r}) to join it, or use a new workspace"
                )
            raise WorkspaceError(
                f"{meta_path}: this workspace was created with {key}={recorded!r} but this member runs "
                f"with {key}={asked!r}; use a new workspace for an independent experiment"
            )
        return meta

    def _create_population_meta(self, meta_path: Path, meta: dict[str, Any]) -> None:
        """Publish ``population.json`` once, complete or not at all: a temporary file hard-linked to the final
        name (the link fails if another member published first). A member killed at any point leaves no
        ``population.json`` or a complete one. Without hard links: an atomic rename (racing members wrote
        the same settings; the last one wins)."""
        tmp = fsio.temp_name(meta_path)
        try:
            with open(tmp, "xb") as fh:
                fh.write(fsio.canonical_json(meta))
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, meta_path)
            except FileExistsError:
                pass  # another member won the race; its population.json is checked below
            except OSError:
                os.replace(tmp, meta_path)
            fsio.fsync_dir(self.root)
        except OSError as exc:
            raise WorkspaceError(f"cannot create {meta_path}: {exc.strerror or exc}") from None
        finally:
            tmp.unlink(missing_ok=True)
        # An older layout made population.json behind an exclusive marker file; a member killed between the
        # two left the marker alone and the workspace stuck. The marker means nothing now: remove it.
        meta_path.with_name(".population.json.init").unlink(missing_ok=True)

    def population_id(self, meta: dict[str, Any]) -> str | None:
        """The population id ``population.json`` records (random, drawn at creation); every member's audit chain
        is bound to it (:func:`~async_pbt_isaaclab.core.workspace.audit.genesis_hash`). ``None`` for a workspace created
        before ids were recorded."""
        value = meta.get("id")
        return value if isinstance(value, str) and value else None

    def population_seed(self, meta: dict[str, Any]) -> int | None:
        """The seed ``population.json`` records (``None`` for a workspace written before seeds were recorded)."""
        seed = meta.get("seed")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else None

    def population_meta(self) -> dict[str, Any]:
        """``population.json`` (the population size and settings fixed at creation); :class:`WorkspaceError` when
        missing, unsafe or unreadable."""
        path = self.root / "population.json"
        try:
            meta = json.loads(fsio.read_bytes_nofollow(path))
        except FileNotFoundError:
            raise WorkspaceError(f"{path}: missing; {self.root} is not a population workspace") from None
        except fsio.UnsafePathError as exc:
            raise WorkspaceError(str(exc)) from None
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, 4300+ digit ints
            # It holds only the population settings, which every member checks its own against: removing it
            # lets the next member recreate it from its config.
            raise WorkspaceError(
                f"{path}: corrupt ({exc}); if the file was damaged, remove it (rm {path}) and "
                f"start the members again: the first one recreates it"
            ) from None
        if not isinstance(meta, dict) or meta.get("schema_version") != WORKSPACE_SCHEMA_VERSION:
            raise WorkspaceError(
                f"{path}: schema_version {meta.get('schema_version') if isinstance(meta, dict) else None!r} "
                f"is not supported (expected {WORKSPACE_SCHEMA_VERSION})"
            )
        return meta

    SHARED_FOLDERS = ("", "cluster", "cluster/ray")
    """Folders every member and launcher writes (atomically, so killed writers leave temp files there)."""

    def clear_temp_files(self, grace_s: float) -> list[Path]:
        """Remove the temp files killed writers left in the shared folders (:data:`SHARED_FOLDERS`): a dead process
        of this host's at once, another host's once older than ``grace_s``, a live writer's never
        (:func:`~async_pbt_isaaclab.core.workspace.fsio.remove_stale_temp_files`). A folder that is a link is left
        alone."""
        removed: list[Path] = []
        for sub in self.SHARED_FOLDERS:
            folder = self.root / sub if sub else self.root
            try:
                fsio.check_no_links(self.root, folder)
                removed += fsio.remove_stale_temp_files(folder, grace_s)
            except OSError:
                continue  # a planted link or an unreadable folder: the writers there refuse it themselves
        return removed

    # ------------------------------------------------------------ members
    def member_dir(self, index: int) -> Path:
        """``members/NNN`` of member ``index`` (not checked; see :meth:`checked_member_dir`)."""
        return self.members_dir / member_dirname(index)

    def checked_member_dir(self, index: int, subfolder: str = "", create: bool = False) -> Path:
        """``members/NNN[/subfolder]``, refused (:class:`WorkspaceError` naming the path) when it or a folder
        above it inside the workspace is a symbolic link or not a folder. ``create`` makes missing folders."""
        path = self.member_dir(index) / subfolder if subfolder else self.member_dir(index)
        if subfolder and subfolder not in MEMBER_SUBFOLDERS:
            raise WorkspaceError(f"unknown member subfolder {subfolder!r}")
        try:
            fsio.check_no_links(self.root, path)
            if create:
                path.mkdir(parents=True, exist_ok=True)
                fsio.check_no_links(self.root, path)  # made by someone else between the check and mkdir
        except fsio.UnsafePathError as exc:
            raise WorkspaceError(f"member {index}: {exc}") from None
        except OSError as exc:
            raise WorkspaceError(f"member {index}: cannot create {path}: {exc.strerror}") from None
        for folder in (self.members_dir, self.member_dir(index), path):
            try:
                if not stat.S_ISDIR(os.lstat(folder).st_mode):
                    raise WorkspaceError(f"member {index}: {folder} is not a folder")
            except FileNotFoundError:
                break
        return path

    def check_member(self, index: int) -> None:
        """Before a member claims its folder: refuse it when the folder, a subfolder or one of its files is a
        symbolic link, or a file it writes in place is a hard link (either would make the member read, write or
        delete outside the workspace)."""
        for sub in ("", *MEMBER_SUBFOLDERS):
            self.checked_member_dir(index, sub)
        for name in MEMBER_FILES:
            path = self.member_dir(index) / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            why = ""
            if stat.S_ISLNK(st.st_mode):
                why = "it is a symbolic link"
            elif name in IN_PLACE_FILES and st.st_nlink > 1:
                why = f"it is a hard link ({st.st_nlink} names share its content)"
            if why:
                raise WorkspaceError(str(fsio.UnsafePathError(path, why)))

    def member_indices(self) -> list[int]:
        """Indices of the member folders present, in order."""
        try:
            names = os.listdir(self.members_dir)
        except FileNotFoundError:
            return []
        return sorted(i for i in (parse_member_dirname(n) for n in names) if i is not None)

    def read_records(self, num_policies: int | None = None) -> tuple[dict[int, MemberRecord], dict[int, str]]:
        """Every member's record. Unreadable ones go to the second dict with the reason.

        With ``num_policies``, a folder whose index is outside ``[0, num_policies)`` is reported, not used.
        """
        records: dict[int, MemberRecord] = {}
        errors: dict[int, str] = {}
        for index in self.member_indices():
            path = self.members_dir / member_dirname(index) / "record.json"
            try:
                if stat.S_ISLNK(os.lstat(path.parent).st_mode):
                    raise fsio.UnsafePathError(path.parent, "it is a symbolic link")
                data = fsio.read_bytes_nofollow(path)  # no exists() first: one system call less, and no race
            except FileNotFoundError:
                continue  # a member folder before its first publish
            except fsio.UnsafePathError as exc:
                errors[index] = str(exc)
                continue
            except OSError as exc:
                errors[index] = f"{path}: cannot read ({exc.strerror})"
                continue
            if num_policies is not None and index >= num_policies:
                errors[index] = f"{path}: member index {index} is out of range for num_policies={num_policies}"
                continue
            try:
                rec = parse_record_bytes(data, str(path))
            except RecordError as exc:
                errors[index] = str(exc)
                continue
            if rec.member != index:
                errors[index] = f"{path}: record says member {rec.member}, folder says {index}"
                continue
            records[index] = rec
        return records, errors

    def checkpoint_path(self, relative: str) -> Path:
        """A workspace-relative path from a record, resolved inside the workspace (:class:`WorkspaceError` when it
        would leave it or pass a symbolic link)."""
        return resolve_inside(self.root, relative)

    def relative(self, path: Path) -> str:
        """``path`` relative to the workspace root, as records store it."""
        return str(Path(path).absolute().relative_to(self.root))
