"""Torch checkpoint files of any trainer: atomic saves with a checksum, safe loads, PBT metadata, fingerprints.

Every trainer writes its checkpoints with ``torch.save`` (rl_games' ``get_full_state_weights`` dict, rsl_rl's
``runner.save`` dict); a member adds one key, ``"pbt"``: plain data (dicts with str keys, lists, str, int, float,
bool, None) describing the member that wrote it. Neither trainer reads unknown keys, so a PBT checkpoint stays
loadable by the trainer's own restore and play scripts. A :class:`CheckpointKind` names what one trainer's dict
must hold; ``rl_games/checkpoint.py`` and ``rsl_rl/layout.py`` each define theirs.

**Safe loading.** A checkpoint from a shared workspace was written by another process, possibly another user:
unpickling it in full would run any code it names. :func:`load_checkpoint` therefore uses
``torch.load(weights_only=True)`` plus an explicit allowlist (:func:`numpy_scalar_globals`, the few numpy globals
trainers' checkpoints contain). Anything else is refused *before* it is called, with :class:`DisallowedGlobalError`
naming the file and the global. Full pickle happens only with ``trusted=True``, which the user opts into for a
workspace they trust.

**Atomic writes.** :func:`save_checkpoint` serialises to memory, hashes the bytes, and writes them with
:func:`async_pbt_isaaclab.core.workspace.fsio.atomic_write_bytes` (temp file in the same folder, fsync,
``os.replace``), so readers never see a partial checkpoint and the returned sha256 is exactly the file's, ready to be
published in the member record.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from async_pbt_isaaclab.core.workspace.fsio import ChecksumMismatch, atomic_write_bytes
from async_pbt_isaaclab.member.trainer import UnreadableCheckpoint

#: Key of the checkpoint dict that holds the PBT metadata.
PBT_KEY = "pbt"
#: How errors tell the user to opt into full unpickling.
TRUSTED_HINT = (
    "if every process writing to this workspace is yours, load it as a trusted workspace "
    "(pbt.trusted_workspace: true in the agent yaml, or trusted=True here), which uses full pickle"
)

_ZIP_MAGIC = b"PK\x03\x04"
# torch's legacy (pre-1.6, _use_new_zipfile_serialization=False) format starts with a pickled
# magic number: protocol 2, LONG1 of 10 bytes, 0x1950a86a20f9469cfc6c little-endian.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


@dataclass(frozen=True)
class CheckpointKind:
    """What one trainer's checkpoint dict holds (the structure check of a load and a save)."""

    trainer: str
    """The trainer's name, in messages (``rl_games``, ``rsl_rl``)."""
    required: tuple[str, ...]
    """Keys that must be present, each a state dict (a mapping of tensors)."""
    known: tuple[str, ...]
    """Every key the trainer writes (named in the message when a required one is missing)."""


class CheckpointError(UnreadableCheckpoint):
    """A checkpoint cannot be read or written as one; the message names the file and what was expected (the member
    loop's :class:`~async_pbt_isaaclab.member.trainer.UnreadableCheckpoint`, a ``RuntimeError``)."""

    def __init__(self, message: str, path: Path | str | None = None):
        super().__init__(message)
        self.path = None if path is None else Path(path)


class DisallowedGlobalError(CheckpointError):
    """A checkpoint names a Python global outside the allowlist; it was refused, never called."""

    def __init__(self, message: str, path: Path | str, globals_: list[str]):
        super().__init__(message, path)
        self.globals = list(globals_)
        """The disallowed globals, as ``module.qualname`` strings."""


# ----------------------------------------------------------------------------- allowlist
def _numpy_scalar_reconstructor() -> Any:
    # numpy 2 moved numpy.core to numpy._core; touching np.core there warns, so prefer _core.
    core = getattr(np, "_core", None)
    multiarray = getattr(core, "multiarray", None) if core is not None else None
    if multiarray is None or not hasattr(multiarray, "scalar"):
        multiarray = importlib.import_module("numpy.core.multiarray")  # numpy 1.x without the _core alias
    return multiarray.scalar


def _torch_at_least(major: int, minor: int) -> bool:
    nums = re.findall(r"\d+", torch.__version__)[:2]
    return tuple(int(n) for n in nums) >= (major, minor)


def numpy_scalar_globals() -> list[Any]:
    """The globals a trainer's checkpoint needs beyond torch's weights_only defaults, and no more.

    Found by saving real ``a2c_continuous`` checkpoints (input and value normalisation, adaptive LR,
    Adam state, ``last_mean_rewards``) and listing their pickle globals. Tensors, storages,
    ``OrderedDict``, ints, floats, strings, lists, dicts and tuples are allowed by torch already.

    * ``numpy.core.multiarray.scalar`` (numpy 1.x name) and ``numpy._core.multiarray.scalar``
      (numpy 2 name), the same function: it rebuilds numpy scalars. rl_games stores
      ``last_mean_rewards`` as a ``numpy.float32`` (a mean taken through ``.cpu().numpy()``).
      Isaac Lab ships numpy 1.26, so checkpoints written there carry the 1.x name.
    * ``numpy.dtype``: the scalar's dtype is pickled as ``numpy.dtype('f4')``.
    * ``numpy.dtypes.Float32DType`` and ``numpy.dtypes.Float64DType``: the dtype's state is restored
      with BUILD, which torch only permits on allowlisted types; float32 is what rl_games writes,
      float64 is what an env or rl_games version computing rewards in double precision writes.

    Not included: integer and bool dtypes (rl_games writes epoch and frame as Python ints) and any
    class; a checkpoint needing them loads only as trusted.
    """
    scalar = _numpy_scalar_reconstructor()
    entries: list[Any] = [scalar, np.dtype]
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25
    if dtypes is not None:
        entries += [dtypes.Float32DType, dtypes.Float64DType]
    if _torch_at_least(2, 6):
        # (object, "name") entries: match pickles that name the function by its other numpy path.
        for name in ("numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"):
            entries.append((scalar, name))
    return entries


def allow_numpy_scalars() -> None:
    """Allow :func:`numpy_scalar_globals` in every weights_only load of this process (adding them again is a
    no-op). Not torch's ``safe_globals`` context: its allowlist is one set for the whole process, so a thread leaving
    the context took the entries away from another thread's load in progress (slice members load in threads; a long
    run's exploits were refused so, naming ``numpy._core.multiarray.scalar``)."""
    torch.serialization.add_safe_globals(numpy_scalar_globals())


# ----------------------------------------------------------------------------------- save
def _plain(obj: Any, where: str) -> Any:
    """A copy of ``obj`` made of dict/list/str/int/float/bool/None only; raise naming the bad path.

    numpy scalars become Python numbers and tuples become lists, so that the metadata loads under
    ``weights_only`` and serialises to JSON unchanged. Non-finite floats are kept (pickle holds them).
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise CheckpointError(f"{where}: keys must be strings, got {k!r}")
            out[k] = _plain(v, f"{where}.{k}")
        return out
    if isinstance(obj, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    raise CheckpointError(
        f"{where}: {type(obj).__name__} is not plain data (use dict, list, str, int, float, bool, None)"
    )


def with_pbt_metadata(state: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``state`` with ``metadata`` (validated, plain) under :data:`PBT_KEY`."""
    out = dict(state)
    out[PBT_KEY] = _plain(metadata, PBT_KEY)
    return out


def checkpoint_bytes(path: Path | str, state: Mapping[str, Any], kind: CheckpointKind) -> tuple[bytes, str]:
    """The bytes :func:`save_checkpoint` would write to ``path`` for ``state``, and their sha256; nothing is written.

    The bytes are a copy of every tensor (on the CPU, whatever the device): training may change the live
    tensors right after, and these bytes stay what was published (the background writer writes them later).
    ``path`` only names the file in error messages.
    """
    path = Path(path)
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{path}: expected a checkpoint dict, got {type(state).__name__}", path)
    _require_keys(path, state, kind, f"refusing to save a checkpoint without {kind.trainer} key(s)")
    state = dict(state)
    if PBT_KEY in state and state[PBT_KEY] is not None:
        state[PBT_KEY] = _plain(state[PBT_KEY], f"{path}: {PBT_KEY}")
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def save_checkpoint(path: Path | str, state: Mapping[str, Any], kind: CheckpointKind) -> str:
    """Write ``state`` with ``torch.save`` atomically to ``path``; return the sha256 of the file's bytes.

    ``state`` must hold ``kind``'s required keys. Its ``"pbt"`` entry, if any, must be plain data (it is normalised:
    numpy scalars to numbers, tuples to lists). The path is used as given (no suffix is appended).
    """
    data, sha = checkpoint_bytes(path, state, kind)
    atomic_write_bytes(Path(path), data)
    return sha


# ----------------------------------------------------------------------------------- load
def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint file does not exist", path) from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, expected a torch checkpoint file", path) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint ({exc})", path) from None


def _sniff(path: Path, data: bytes) -> str:
    """``"zip"`` or ``"legacy"`` torch format; CheckpointError for anything that is not a torch checkpoint."""
    if not data:
        raise CheckpointError(f"{path}: file is empty, expected a torch checkpoint (torch.save zip archive)", path)
    if data.startswith(_ZIP_MAGIC):
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise CheckpointError(
                f"{path}: truncated or corrupted torch checkpoint (zip archive incomplete: no central directory)",
                path,
            )
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, struct.error, NotImplementedError) as exc:
            # ValueError includes a file name that is not valid UTF-8 in a damaged central directory.
            raise CheckpointError(f"{path}: corrupted torch checkpoint ({exc})", path) from None
        if not any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
            raise CheckpointError(
                f"{path}: a zip archive but not a torch checkpoint (no data.pkl record; expected a torch.save file)",
                path,
            )
        return "zip"
    if data.startswith(_LEGACY_MAGIC):
        return "legacy"
    raise CheckpointError(
        f"{path}: not a torch checkpoint (expected a torch.save zip archive, file starts with {data[:8]!r})", path
    )


_GLOBAL_PATTERNS = (
    re.compile(r"GLOBAL (\S+?)(?: was not| whose module|\s|$)"),
    re.compile(r"but got <class '([^']+)'>"),
    re.compile(r"unrecognized function (\S+)"),
)


def _disallowed_globals(data: bytes, fmt: str, message: str) -> list[str]:
    """Names of the globals that made a weights_only load fail; static scan, nothing is executed."""
    names: list[str] = []
    if fmt == "zip":
        finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
        if finder is not None:
            try:
                allow_numpy_scalars()  # the same allowlist as the load: only globals it does not cover are named
                names = list(finder(io.BytesIO(data)))
            except Exception:  # noqa: BLE001 - the scan is a diagnostic: fall back to torch's message
                names = []
    if not names:
        for pattern in _GLOBAL_PATTERNS:
            names += [m.rstrip(".,") for m in pattern.findall(message)]
    return list(dict.fromkeys(names))


def _weights_only_detail(message: str) -> str:
    """The informative part of torch's long weights_only error message."""
    detail = message.split("WeightsUnpickler error:")[-1]
    detail = detail.split("Check the documentation of torch.load")[0]
    return " ".join(detail.split()) or message.strip().splitlines()[0]


def _unpickle(path: Path, data: bytes, fmt: str, trusted: bool, map_location: Any) -> Any:
    """``torch.load`` of ``data``: weights_only with the allowlist unless ``trusted``; every failure named."""
    try:
        if trusted:
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
        if not hasattr(torch.serialization, "safe_globals"):
            raise CheckpointError(
                f"{path}: safe loading needs torch >= 2.5 (torch.serialization.safe_globals); "
                f"this is torch {torch.__version__}; {TRUSTED_HINT}",
                path,
            )
        allow_numpy_scalars()
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except CheckpointError:
        raise
    except pickle.UnpicklingError as exc:
        raise _unpickling_error(path, data, fmt, trusted, str(exc)) from None
    except _CORRUPTION_ERRORS as exc:
        raise CheckpointError(
            f"{path}: truncated or corrupted torch checkpoint ({type(exc).__name__}: {str(exc).strip()[:300]})",
            path,
        ) from None


_CORRUPTION_ERRORS = (
    RuntimeError,
    EOFError,
    OSError,
    ValueError,
    zipfile.BadZipFile,
    KeyError,
    # A damaged pickle stream also surfaces as these (the unpickler's stack or struct reads fail,
    # or a rebuild function gets the wrong arguments): still a corrupted checkpoint.
    IndexError,
    TypeError,
    AttributeError,
    OverflowError,
    struct.error,
    RecursionError,
    AssertionError,  # torch checks some archive invariants with assert
)


def _unpickling_error(path: Path, data: bytes, fmt: str, trusted: bool, message: str) -> CheckpointError:
    if not trusted and "Weights only load failed" in message:
        names = _disallowed_globals(data, fmt, message)
        if names:
            return DisallowedGlobalError(
                f"{path}: refusing to unpickle disallowed global(s) {', '.join(names)} "
                f"(safe loading allows tensors, plain data and numpy scalars); {TRUSTED_HINT}",
                path,
                names,
            )
        return CheckpointError(
            f"{path}: cannot be read with weights_only=True ({_weights_only_detail(message)}); "
            f"the file may be corrupted; {TRUSTED_HINT}",
            path,
        )
    return CheckpointError(f"{path}: corrupted torch checkpoint ({message.strip()[:300]})", path)


def load_checkpoint(
    path: Path | str,
    kind: CheckpointKind,
    *,
    trusted: bool = False,
    map_location: Any = "cpu",
    expected_sha256: str | None = None,
) -> dict[str, Any]:
    """Load a ``kind`` checkpoint safely; returns the checkpoint dict.

    With ``trusted=False`` (the default) this is ``torch.load(weights_only=True)`` with
    :func:`numpy_scalar_globals` allowed. A checkpoint naming any other global raises
    :class:`DisallowedGlobalError` (file and globals named, trusted-workspace hint given); the global
    is never imported or called. With ``trusted=True`` the file is unpickled in full.

    Either way, :class:`CheckpointError` naming the file is raised when it does not exist, is empty,
    is not a torch checkpoint, is truncated or corrupted, or does not hold a dict with ``kind``'s required
    state dicts.

    ``expected_sha256`` (the checksum a member record published): the bytes are hashed first and a
    mismatch raises :class:`~async_pbt_isaaclab.core.workspace.fsio.ChecksumMismatch`. torch itself does not
    checksum tensor data, so a file damaged inside a tensor would otherwise load silently.

    The file is read once into memory and everything (sniffing, hashing, unpickling) works on those
    bytes, so a concurrent ``os.replace`` of the file cannot make the verified and the loaded
    content differ.
    """
    path = Path(path)
    data = _read(path)
    fmt = _sniff(path, data)
    if expected_sha256 is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected_sha256:
            raise ChecksumMismatch(f"{path}: sha256 {actual} does not match the expected {expected_sha256}; not loaded")
    state = _unpickle(path, data, fmt, trusted, map_location)
    _check_structure(path, state, kind)
    return state


def _require_keys(path: Path, state: Mapping[str, Any], kind: CheckpointKind, problem: str, hint: str = "") -> None:
    """``CheckpointError`` naming the file, ``problem`` and the missing keys when ``state`` lacks a required one."""
    missing = [k for k in kind.required if k not in state]
    if missing:
        hint = f" {hint}" if hint else ""
        raise CheckpointError(f"{path}: {problem} {missing}{hint}; got {sorted(map(str, state))}", path)


def _check_structure(path: Path, state: Any, kind: CheckpointKind) -> None:
    first = kind.required[0]
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{path}: expected an {kind.trainer} checkpoint dict with key {first!r}, got {type(state).__name__}", path
        )
    expected = f"(expected {list(kind.known)})"
    _require_keys(path, state, kind, f"not an {kind.trainer} checkpoint: missing key(s)", expected)
    for key in kind.required:
        if not isinstance(state[key], Mapping):
            raise CheckpointError(
                f"{path}: {key!r} should be a state dict (mapping of tensors), got {type(state[key]).__name__}",
                path,
            )


# ------------------------------------------------------------------------------- metadata
def read_pbt_metadata(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The PBT metadata stored in a checkpoint dict, or None for a checkpoint the trainer wrote alone."""
    meta = state.get(PBT_KEY) if isinstance(state, Mapping) else None
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise CheckpointError(f"checkpoint {PBT_KEY!r} entry: expected a mapping, got {type(meta).__name__}")
    return _plain(meta, PBT_KEY)


# ------------------------------------------------------------------------- model identity
def model_fingerprint(state_dict: Mapping[str, Any]) -> str:
    """sha256 over a model state dict's names, dtypes, shapes and bytes (device independent)."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        # Raw bytes through a uint8 view: works for every dtype, bfloat16 included.
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def state_dict_misfit(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """What ``load_state_dict(strict=True)`` of ``theirs`` into a model whose state dict is ``mine`` would refuse
    (missing and unexpected names, shape mismatches, the first few of each), or ``""`` when it fits."""
    missing = sorted(set(mine) - set(theirs))
    unexpected = sorted(set(theirs) - set(mine))
    shapes = [
        f"{k}: donor {tuple(getattr(theirs[k], 'shape', ()))} vs mine {tuple(mine[k].shape)}"
        for k in sorted(set(mine) & set(theirs))
        if tuple(getattr(theirs[k], "shape", ())) != tuple(mine[k].shape)
    ]
    parts = ([f"missing {missing[:4]}"] if missing else []) + ([f"unexpected {unexpected[:4]}"] if unexpected else [])
    return "; ".join(parts + shapes[:4])


def optimizer_groups_differ(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether two optimizer state dicts have different parameter groups (count or sizes)."""
    return [len(g.get("params", [])) for g in theirs.get("param_groups") or []] != [
        len(g["params"]) for g in mine["param_groups"]
    ]
