"""The GPUs a launch spreads members over, and how a member is put on its GPU.

Member ``i`` gets ``gpus[i % len(gpus)]`` (round-robin, so members share GPUs when there are more members than
GPUs; a process of ``--pbt-slices M`` members starting at ``k*M`` counts as one: it gets ``gpus[k % len(gpus)]``),
either by ``--device cuda:<i>`` (Isaac Lab 2.x: masking breaks its renderer's GPU index, Isaac Lab issue #2756) or by
``CUDA_VISIBLE_DEVICES``, so that the member sees exactly one GPU as ``cuda:0``
(:data:`GPU_PLACEMENTS`).

Imports only the standard library and the pure core (the Isaac Lab release is looked up lazily, without
importing Isaac Lab).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping, Sequence

from async_pbt_isaaclab.launch.arguments import LaunchError


def parse_nvidia_smi_list(text: str) -> list[str]:
    """Device ids from ``nvidia-smi -L`` output, usable as ``CUDA_VISIBLE_DEVICES`` values.

    A plain GPU is its index (``"0"``); a GPU split into MIG instances contributes one entry per
    instance, its ``MIG-...`` UUID, because CUDA only addresses MIG slices by UUID.
    """
    gpus: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("GPU ") and ":" in line:
            gpus.append((line[4 : line.index(":")].strip(), []))
        elif line.startswith("MIG ") and gpus and "UUID:" in line:
            gpus[-1][1].append(line.split("UUID:", 1)[1].strip().rstrip(")").strip())
    out: list[str] = []
    for index, migs in gpus:
        out.extend(migs or [index])
    return out


def detect_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs to spread members over: ``CUDA_VISIBLE_DEVICES`` when set (empty or ``-1``: none),
    else ``nvidia-smi -L`` when it is on the PATH, else none (CPU machine)."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        # The user already chose (possibly "no GPU"); split their choice, never widen it.
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        return [] if ids in ([], ["-1"]) else ids
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return []
    try:
        proc = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi_list(proc.stdout) if proc.returncode == 0 else []


GPU_PLACEMENTS = ("auto", "device", "mask")
"""How members are put on their GPU: ``device`` passes ``--device cuda:<i>`` and leaves ``CUDA_VISIBLE_DEVICES``
alone (needed on Isaac Lab 2.x, whose renderer indexes the unmasked GPU list: upstream issue isaac-sim/IsaacLab#2756);
``mask`` sets ``CUDA_VISIBLE_DEVICES`` so each member sees one GPU as ``cuda:0`` (fine on 3.0 and for plain
CUDA programs); ``auto`` picks ``device`` when the Isaac Lab importable here is 2.x, else ``mask``."""


def resolve_gpu_placement(placement: str) -> str:
    """``device`` or ``mask`` for ``placement`` (``auto`` looks at the Isaac Lab release importable here)."""
    if placement not in GPU_PLACEMENTS:
        raise LaunchError(f"gpu placement must be one of {', '.join(GPU_PLACEMENTS)}, got {placement!r}")
    if placement != "auto":
        return placement
    from async_pbt_isaaclab.envs.isaaclab.release import SERIES_2, UnsupportedIsaacLab, detect

    try:
        release = detect()
    except UnsupportedIsaacLab:
        release = None
    return "device" if release is not None and release.series == SERIES_2 else "mask"


def device_index(gpu: str, gpu_ids: Sequence[str], environ: Mapping[str, str]) -> int:
    """The ``cuda:<i>`` index of GPU ``gpu`` for a member that inherits the launcher's ``CUDA_VISIBLE_DEVICES``."""
    if environ.get("CUDA_VISIBLE_DEVICES"):
        return list(gpu_ids).index(gpu)  # positions within the visible list
    if not gpu.isdigit():
        raise LaunchError(f"GPU {gpu!r} has no cuda:<index>; use --gpu-placement mask for MIG or UUID devices")
    return int(gpu)


def place_member(
    index: int,
    command: list[str],
    env: dict[str, str],
    gpu_ids: Sequence[str],
    placement: str,
    environ: Mapping[str, str],
) -> str | None:
    """Put process ``index`` on ``gpu_ids[index % len(gpu_ids)]`` by editing its ``command`` (``device``) or ``env``
    (``mask``) in place; the GPU it got, or ``None`` without GPUs. ``index`` is the member index, or with
    ``--pbt-slices M`` the first member's index divided by M. ``environ``: the environment the member inherits."""
    if not gpu_ids:
        return None
    gpu = gpu_ids[index % len(gpu_ids)]
    if placement == "mask":
        env["CUDA_VISIBLE_DEVICES"] = gpu
    else:
        command += ["--device", f"cuda:{device_index(gpu, gpu_ids, environ)}"]
    return gpu


def check_device_flag(command: Sequence[str], gpu_ids: Sequence[str], placement: str) -> None:
    """Refuses a member command with its own ``--device`` when the launcher passes one to each member."""
    if gpu_ids and placement == "device" and any(t == "--device" or t.startswith("--device=") for t in command):
        raise LaunchError(
            "the member command contains --device; the launcher passes --device cuda:<i> to each "
            "member itself, remove it"
        )


def describe_placement(assigned: Mapping[int, str | None], gpu_ids: Sequence[str], placement: str) -> str:
    """One line for the launch banner: which member went to which GPU, and how."""
    if not gpu_ids:
        return "no GPU assignment (CUDA_VISIBLE_DEVICES passed through)"
    members = ", ".join(f"{i:03d}->{assigned[i]}" for i in sorted(assigned))
    how = "--device cuda:<i>" if placement == "device" else "CUDA_VISIBLE_DEVICES"
    text = f"GPUs {','.join(gpu_ids)} round-robin by {how} ({members})"
    if len(assigned) > len(gpu_ids):
        text += "; members share GPUs"
    return text
