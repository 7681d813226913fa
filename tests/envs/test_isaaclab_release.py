"""The support matrix: which Isaac Lab is installed, and a one-line refusal of an unsupported one.

The real releases are detected in tests/upstream (2.3.2 as a source tree, 3.0.0 as a wheel); here the layouts that
must be refused are built as files (a package folder and its version metadata), which is all detection reads.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from async_pbt_isaaclab.envs.isaaclab.release import SUPPORTED, UnsupportedIsaacLab, classify

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "version, source, series",
    [
        ("0.33.0", True, "2"),
        ("0.54.2", True, "2"),
        ("28.0.0", True, "3"),
        ("3.0.0", False, "3"),
        ("3.0.2", False, "3"),
    ],
)
def test_supported_releases_are_classified(version, source, series):
    assert classify(version, source).series == series


@pytest.mark.parametrize(
    "version, source",
    [
        ("2.3.2.post1", False),
        ("2.0.0", False),
        ("0.30.1", True),
        ("0.60.0", True),
        ("3.1.0", False),
        ("1.4.1", False),
    ],
)
def test_unsupported_releases_are_refused_naming_the_matrix(version, source):
    with pytest.raises(UnsupportedIsaacLab) as err:
        classify(version, source)
    message = str(err.value)
    assert "\n" not in message and version in message and SUPPORTED in message


def _layout(root: Path, kind: str) -> Path:
    """An importable ``isaaclab`` as a 2.x wheel (dist-info 2.3.2.post1) or a 2.x source tree (extension.toml)."""
    if kind == "wheel-2.x":
        (root / "isaaclab").mkdir(parents=True)
        (root / "isaaclab" / "__init__.py").write_text("")
        info = root / "isaaclab-2.3.2.post1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: isaaclab\nVersion: 2.3.2.post1\n")
        return root
    tree = root / "source" / "isaaclab"
    (tree / "isaaclab").mkdir(parents=True)
    (tree / "isaaclab" / "__init__.py").write_text("")
    (tree / "config").mkdir()
    (tree / "config" / "extension.toml").write_text('[package]\nversion = "0.54.2"\n')
    return tree


def _detect(path: Path) -> str:
    code = "from async_pbt_isaaclab.envs.isaaclab.release import detect; r = detect(); print(r.series, r.version)"
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(path)!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stdout.strip() or proc.stderr.strip().splitlines()[-1]


def test_detection_reads_a_source_tree_and_refuses_a_2x_wheel(tmp_path):
    assert _detect(_layout(tmp_path / "src", "source-2.x")) == "2 0.54.2"
    refusal = _detect(_layout(tmp_path / "whl", "wheel-2.x"))
    assert "2.x wheels are not supported" in refusal and SUPPORTED in refusal


def test_the_scripts_refuse_an_unsupported_release_in_one_line(tmp_path):
    path = _layout(tmp_path, "wheel-2.x")
    env = {"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"}
    for script in ("train_pbt.py", "play_pbt.py"):
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / script), "--task", "X"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: found isaaclab 2.3.2.post1") and SUPPORTED in lines[0]
