"""The files a research package ships beside its code: citation, notices, contributing, changelog, provenance,
limitations; and project text that speaks of the project and its users only."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import async_pbt_isaaclab

ROOT = Path(__file__).resolve().parents[1]
CFFCONVERT = Path(sys.executable).with_name("cffconvert")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".toml", ".cff"}


def _project_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.splitlines() if Path(p).suffix in TEXT_SUFFIXES and (ROOT / p).is_file()]


def _cffconvert() -> str:
    exe = str(CFFCONVERT) if CFFCONVERT.exists() else shutil.which("cffconvert")
    assert exe, "cffconvert is part of the test extra: pip install -e '.[test]'"
    return exe


def test_citation_cff_is_valid_and_names_this_version(tmp_path):
    proc = subprocess.run(
        [_cffconvert(), "--validate", "-i", str(ROOT / "CITATION.cff")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"] == async_pbt_isaaclab.__version__
    # The validator does reject a broken file (this check can fail).
    broken = tmp_path / "CITATION.cff"
    broken.write_text(
        (ROOT / "CITATION.cff").read_text().replace("cff-version: 1.2.0", "cff-version: 1.2.0\nauthors: 7")
    )
    proc = subprocess.run([_cffconvert(), "--validate", "-i", str(broken)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0


def test_every_file_derived_from_isaac_lab_is_listed_with_its_license():
    notices = (ROOT / "THIRD_PARTY_NOTICES.md").read_text()
    derived = [
        p
        for p in _project_files()
        if p.name != "THIRD_PARTY_NOTICES.md"
        and "The Isaac Lab Project Developers" in p.read_text(errors="replace")[:600]
    ]
    assert len(derived) >= 6, derived  # four task yamls and the two scripts
    for path in derived:
        assert f"`{path.relative_to(ROOT)}`" in notices, f"{path} carries Isaac Lab's notice but is not listed"
    # The license texts themselves, not only their names.
    assert "Copyright (c) 2022-2025, The Isaac Lab Project Developers." in notices
    assert "Redistributions of source code must retain the above copyright notice" in notices
    assert "Copyright (c) 2019 Denys88" in notices and "Permission is hereby granted, free of charge" in notices
    for source in ("DexPBT", "IsaacGymEnvs", "rl_games", "Isaac Lab"):
        assert source in notices


@pytest.mark.parametrize(
    "name, must_mention",
    [
        ("CONTRIBUTING.md", ["pip install", "python -m pytest", "async-pbt audit", "reproduc"]),
        ("CHANGELOG.md", ["## Unreleased", "## 0.1.0"]),
        ("docs/provenance.md", ["DexPBT", "IsaacGymEnvs", "Isaac Lab", "rl_games"]),
        (
            "docs/limitations.md",
            [
                "entropy",
                "gradient-norm",
                "KL",
                "mutation RNG",
                "Simulator state is not restored",
                "not bitwise deterministic",
                "not held-out evaluations",
                "not independent replications",
                "Not claimed",
            ],
        ),
    ],
)
def test_project_documents_exist_and_cover_their_subject(name, must_mention):
    text = (ROOT / name).read_text()
    for phrase in must_mention:
        assert phrase in text, f"{name} does not mention {phrase!r}"


def test_relative_links_in_the_readme_and_docs_resolve():
    for doc in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


PROCESS_TALK = re.compile(
    r"\(issue \d+|\bissue \d+\b|tracker|session that|this session|available here|wrote this|the lead\b", re.IGNORECASE
)


def test_project_text_speaks_of_the_project_and_its_users():
    offenders = []
    for path in _project_files():
        if path.parts[len(ROOT.parts)] == "tests" and path.name == "test_project_files.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PROCESS_TALK.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
