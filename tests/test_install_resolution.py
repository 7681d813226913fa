"""Installing this package into an Isaac Lab environment changes none of the distributions already there.

pip's own resolver decides (``pip install --dry-run --report``), run against a throwaway environment that holds the
distributions of an Isaac Lab 2.3.2 source install (extension versions, rl-games 1.6.1 with gym, numpy 1.26) or of a
pip-installed Isaac Lab 3.0.0 (the real ``isaaclab`` 3.0.0 wheel, installed without its dependencies, next to the
torch/gymnasium/rl-games it pins). Those others are metadata-only stand-ins (a ``dist-info`` with name and version):
what is tested is how pip resolves *our* requirements against what is installed, not those packages' code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "upstream"))
import isaaclab_real  # noqa: E402

COMMON = {
    "torch": None,
    "gymnasium": None,
    "numpy": None,
    "pyyaml": "6.0.2",
    "tensorboard": "2.20.0",
    "hydra-core": "1.3.2",
    "omegaconf": "2.3.0",
}

ISAACLAB_2_3_2_SOURCE = {
    **COMMON,
    # ./isaaclab.sh --install: the extensions as editable installs, at their extension versions.
    "isaaclab": "0.54.2",
    "isaaclab_rl": "0.4.7",
    "isaaclab_tasks": "0.11.12",
    "isaaclab_assets": "0.2.4",
    "isaaclab_mimic": "1.0.16",
    "isaaclab_contrib": "0.0.2",
    "torch": "2.7.0",
    "gymnasium": "1.2.0",
    "numpy": "1.26.0",
    "rl-games": "1.6.1",
    "gym": "0.23.1",
}
ISAACLAB_3_0_0_PIP = {
    **COMMON,
    # isaaclab itself is the real wheel (installed below); these are what it pins or what users add for rl_games.
    "torch": "2.11.0",
    "torchvision": "0.26.0",
    "gymnasium": "1.2.1",
    "numpy": "2.3.4",
    "scipy": "1.16.2",
    "rl-games": "1.6.5",
    "warp-lang": "1.17.0",
}


def _site_packages(venv: Path) -> Path:
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return venv / rel


def _fake_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def _environment(tmp_path: Path, dists: dict[str, str], real_wheel: Path | None = None) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = _site_packages(venv)
    for name, version in dists.items():
        _fake_dist(site, name, version)
    if real_wheel is not None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(python),
                "install",
                "--no-deps",
                "--no-compile",  # what is resolved is the question here; byte-compiling the wheel cost seconds of CPU
                "-q",
                "--ignore-requires-python",
                "--disable-pip-version-check",
                str(real_wheel),
            ],
            check=True,
            timeout=600,
            capture_output=True,
        )
    return python


def _would_install(python: Path, requirement: str, tmp_path: Path, *pins: str) -> list[tuple[str, str]]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--dry-run",
            "-q",
            "--disable-pip-version-check",
            "--report",
            str(report),
            requirement,
            *pins,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    items = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"]) for i in items]


def _check(installed: dict[str, str], plan: list[tuple[str, str]]) -> None:
    names = {n.lower().replace("_", "-") for n in installed}
    touched = sorted((n, v) for n, v in plan if n in names)
    assert not touched, f"the install would change distributions of the Isaac Lab environment: {touched}"
    assert "async-pbt-isaaclab" in {n for n, _ in plan}


ISAACLABS = ["2.3.2 source", "3.0.0 pip"]


def _isaaclab(which: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A throwaway environment of ``which`` (one of :data:`ISAACLABS`) and the distributions installed in it."""
    if which == "2.3.2 source":
        return _environment(tmp_path, ISAACLAB_2_3_2_SOURCE), ISAACLAB_2_3_2_SOURCE
    try:
        wheel = isaaclab_real.wheel_path("3.0.0")
    except isaaclab_real.Unavailable as exc:
        pytest.skip(str(exc))
    return _environment(tmp_path, ISAACLAB_3_0_0_PIP, real_wheel=wheel), {**ISAACLAB_3_0_0_PIP, "isaaclab": "3.0.0"}


# The plain install (no extra), for `explore: random`. `pip install async-pbt-isaaclab[isaaclab]` resolves the same
# requirements, since that extra names nothing; a test below keeps it that way.
@pytest.mark.parametrize("which", ISAACLABS)
def test_installing_into_an_isaaclab_environment_changes_nothing_there(tmp_path, which):
    python, installed = _isaaclab(which, tmp_path)
    _check(installed, _would_install(python, str(ROOT), tmp_path))


def test_the_isaaclab_extra_adds_no_requirement():
    """So ``[isaaclab]`` resolves exactly as the plain install checked above (it exists for old install lines)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["isaaclab"] == []


# docs/isaaclab.md's install, for the default `explore: pb2`: the pb2 extra with Isaac Lab's numpy pinned. Without the
# pin, scikit-learn's newest scipy needed a numpy newer than 2.3.2's 1.26.0 and pip replaced it with 2.x.
@pytest.mark.parametrize("which", ISAACLABS)
def test_the_pb2_extra_with_numpy_pinned_changes_nothing_in_an_isaaclab_environment(tmp_path, which):
    python, installed = _isaaclab(which, tmp_path)
    plan = _would_install(python, f"{ROOT}[pb2]", tmp_path, f"numpy=={installed['numpy']}")
    _check(installed, plan)
    assert "scikit-learn" in {n for n, _ in plan}
