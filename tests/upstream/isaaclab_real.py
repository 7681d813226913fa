"""The real Isaac Lab releases for the tests: fetched from PyPI, cached, importable with only the simulator stubbed.

``ensure(release)`` downloads the ``isaaclab`` wheel of a release (``pip download --no-deps``; 3.0.0 declares Python
3.12, so it is fetched for 3.12 and unpacked here as it is, pure Python) into the cache and unpacks it once:

* 2.3.2 (``isaaclab-2.3.2.post1``): the wheel carries Isaac Lab's source tree (``isaaclab/source/<package>/``); its
  package folders go on ``sys.path`` as ``./isaaclab.sh --install`` would make them importable, so the release is
  seen as a 2.x *source install* (extension version 0.54.2);
* 3.0.0: the wheel's top-level packages (``isaaclab``, ``isaaclab_rl``, ``isaaclab_tasks``, ...) and its dist-info go
  on ``sys.path`` as a pip install would.

``activate(release)`` does that and installs the simulator stand-ins (:mod:`simulator_stub`). The cache is
``$ASYNC_PBT_ISAACLAB_CACHE`` or ``~/.cache/async-pbt-isaaclab``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

ENTRY = HERE / "run_isaaclab.py"
"""The entry point that runs one of our scripts, or a probe, on a release (``run_isaaclab.py``)."""
TASK = "AsyncPbtTest-Reach-Direct-v0"
"""The single-agent test task (``reach_task.py``), registered by ``run_isaaclab.py``."""

RELEASES = {
    "2.3.2": {"requirement": "isaaclab==2.3.2.post1", "python": None},
    "3.0.0": {"requirement": "isaaclab==3.0.0", "python": "3.12"},
}
"""Isaac Lab releases the tests run against: the PyPI requirement and the Python the wheel is built for."""


def cache_dir() -> Path:
    return Path(os.environ.get("ASYNC_PBT_ISAACLAB_CACHE", Path.home() / ".cache" / "async-pbt-isaaclab"))


class Unavailable(RuntimeError):
    """The wheel could not be downloaded (no network to PyPI)."""


def wheel_path(release: str) -> Path:
    """The cached wheel of ``release``, downloading it first when missing."""
    wheels = cache_dir() / "wheels"
    name = RELEASES[release]["requirement"].replace("==", "-")
    found = sorted(wheels.glob(f"{name}-*.whl")) if wheels.is_dir() else []
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    # Into a folder of this process's own, then renamed into place: test workers running side by side (xdist)
    # may download the same wheel at once, and none may see another's half-written file.
    staging = Path(tempfile.mkdtemp(prefix=f".download-{release}-", dir=wheels))
    try:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(staging),
            RELEASES[release]["requirement"],
        ]
        if RELEASES[release]["python"]:
            cmd += ["--python-version", RELEASES[release]["python"], "--only-binary=:all:"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        downloaded = sorted(staging.glob(f"{name}-*.whl"))
        if proc.returncode != 0 or not downloaded:
            raise Unavailable(
                f"could not download {RELEASES[release]['requirement']} from PyPI: "
                f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
            )
        os.replace(downloaded[0], wheels / downloaded[0].name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return wheels / downloaded[0].name


def ensure(release: str) -> Path:
    """The unpacked release (downloaded and unpacked once; concurrent callers are safe)."""
    root = cache_dir() / f"isaaclab-{release}"
    if (root / ".complete").exists():
        return root
    wheel = wheel_path(release)
    staging = cache_dir() / f".isaaclab-{release}.{os.getpid()}"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(staging)
    (staging / ".complete").write_text(wheel.name)
    try:
        os.replace(staging, root)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return root


def import_paths(release: str) -> list[str]:
    """The ``sys.path`` entries that make the release importable."""
    root = ensure(release)
    if release.startswith("2."):
        source = root / "isaaclab" / "source"
        return sorted(str(p) for p in source.iterdir() if (p / p.name).is_dir())
    return [str(root)]


def headless(release: str) -> list[str]:
    """2.x has ``--headless`` (Kit opens a window otherwise); 3.0 refuses it (headless is its default)."""
    return ["--headless"] if release.startswith("2.") else []


def script_args(release: str, script: str, task: str) -> list[str]:
    """What follows the release on ``run_isaaclab.py``'s command line to run our ``scripts/<script>`` on ``task``
    as a user runs it on ``release``: headless, on the CPU (the tests' only device)."""
    return [str(HERE.parents[1] / "scripts" / script), "--task", task, *headless(release), "--device", "cpu"]


def run_two_slices(release: str, script: str, tmp_path: Path, iterations: int, *overrides: str) -> str:
    """Members 0 and 1 of a population of 2 as two slices of one run of ``scripts/<script>`` on :data:`TASK` (16 envs
    each, the test rule forcing an exploit, a decision every 1024 frames), workspace ``tmp_path/ws``, run in
    ``tmp_path``; returns its output once it exited 0, with the one line saying how the slices share the env
    (``AssertionError`` with the output's end otherwise)."""
    from async_pbt_isaaclab.testing.forced_exploit import forced_exploit_flags, member_env

    cmd = [sys.executable, str(ENTRY), release, *script_args(release, script, TASK), "--num_envs", "16"]
    cmd += ["--max_iterations", str(iterations), "--pbt-workspace", str(tmp_path / "ws"), "--pbt-members", "2"]
    cmd += ["--pbt-index", "0", "--pbt-slices", "2", *forced_exploit_flags(interval_steps=1024), *overrides]
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=member_env(OMP_NUM_THREADS="1"), stdout=log, stderr=subprocess.STDOUT, timeout=900
        )
    out = (tmp_path / "run.log").read_text()
    assert proc.returncode == 0, out[-6000:]
    assert "2 members (0..1) on one simulator of 32 envs, 16 each" in out
    return out


def activate(release: str) -> None:
    """Make the release importable in this process, the simulator modules stubbed."""
    sys.path.insert(0, str(HERE))
    import simulator_stub

    simulator_stub.install()
    for path in reversed(import_paths(release)):
        if path not in sys.path:
            sys.path.insert(1, path)


LINE_RELEASE = {"1.6.1": "2.3.2", "1.6.5": "3.0.0"}
"""The release each rl-games line is tested with by default: the line that release's users have (2.x pins rl-games
1.6.1 with ``gym``; 3.0 runs the gymnasium line, 1.6.5). CI's two jobs install one line each, so every check here
runs on both releases, each once, with its users' rl-games."""


def releases_under_test() -> tuple[str, ...]:
    """The releases the tests run against: ``ASYNC_PBT_TEST_RELEASES`` (comma-separated, e.g. ``2.3.2,3.0.0`` for
    both on the installed line); by default the one of the installed rl-games line (``LINE_RELEASE``), 3.0.0 for a
    line not listed there."""
    chosen = os.environ.get("ASYNC_PBT_TEST_RELEASES")
    if chosen:
        return tuple(chosen.split(","))
    from importlib import metadata

    try:
        line = metadata.version("rl-games")
    except metadata.PackageNotFoundError:
        line = ""
    return (LINE_RELEASE.get(line, "3.0.0"),)


def fetched_or_skip(release: str) -> str:
    """``release``, fetched and unpacked; the calling test is skipped when PyPI cannot be reached."""
    import pytest

    try:
        ensure(release)
    except Unavailable as exc:
        pytest.skip(f"Isaac Lab {release} could not be fetched from PyPI: {exc}")
    return release


def run_entry(
    release: str, *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``run_isaaclab.py release *args`` (one intra-op thread, unbuffered output, ``env`` added to the
    environment) and capture what it prints."""
    return subprocess.run(
        [sys.executable, str(ENTRY), release, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or HERE.parents[1],
        env=dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(env or {})),
    )


if __name__ == "__main__":
    # `python tests/upstream/isaaclab_real.py`: fetch and unpack every release into the cache (.ci/run does, before the
    # tests, so that no test depends on reaching PyPI itself); exits non-zero, saying why, when one cannot be fetched.
    for name in RELEASES:
        try:
            print(f"isaaclab_real: Isaac Lab {name} at {ensure(name)}")
        except Unavailable as exc:
            sys.exit(f"isaaclab_real: Isaac Lab {name}: {exc}")
