"""A new user's first hour: the README's quick-start population, run as the README says, prints what the README
shows it printing, and running it again says it has already finished.

The README's command and its shown output are read from README.md, not copied here, so the two cannot drift apart:
each line of the output block is a pattern in which numbers stand for any number (they vary from run to run),
``...`` for any text the README leaves out, and the README's workspace for the run's. The launcher's lines must
appear in the README's order; the summary must be the README's line for line. A member's line may take any of the
forms the README shows for it (a member that exploited, one that did not), since which happens varies by run.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
EXAMPLE = "python -m async_pbt.examples.cpu_population"
SUMMARY_START = "[cpu-population] done"
"""The first line of the summary, in the README and in the output."""


def readme_command() -> list[str]:
    """The quick start's population command (its arguments after the module)."""
    found = re.search(re.escape(EXAMPLE) + r" ([^\n`&|]*--smoke[^\n`&|]*)", README.read_text())
    assert found, f"README.md has no `{EXAMPLE} ... --smoke` command"
    return shlex.split(found.group(1))


def readme_output() -> list[str]:
    """The lines of the block the README shows that command printing."""
    text = README.read_text()
    block = re.search(r"What you see for command 1:.*?```\n(.*?)```", text, re.S)
    assert block, "README.md has no output block after 'What you see for command 1:'"
    return block.group(1).splitlines()


def shape(line: str, workspace: str) -> str:
    """``line`` with what varies between runs made uniform: the workspace, numbers with their sign (and the plural
    after a count), the list of generation changes, runs of spaces."""
    line = " ".join(line.replace(workspace, "WS").split())
    line = re.sub(r"-?\d+(?:[.,:]\d+)*k?", "N", line)
    line = re.sub(r"\bN (\w+?)s\b", r"N \1", line)
    change = r"gen N <- (?:member N|explore) applied at frame N"
    return re.sub(rf"{change}(?:, {change})*", "gen N <- CHANGE applied at frame N", line)


def pattern(line: str, workspace: str) -> re.Pattern[str]:
    """A README line as a pattern of the output's shaped lines (``...`` stands for any text)."""
    return re.compile(".*".join(re.escape(part) for part in shape(line, workspace).split("...")))


def is_member_line(shaped: str) -> bool:
    return bool(re.match(r"(?:\[launch N\] )?member N[ :]", shaped))


def split(lines: list[str]) -> tuple[list[str], list[str]]:
    """(launcher part, summary part) without blank lines."""
    lines = [line for line in lines if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(SUMMARY_START))
    return lines[:at], lines[at:]


def check_part(shown: list[str], printed: list[str], ws_shown: str, ws_printed: str, in_order_only: bool) -> None:
    """Every non-member line shown matches a printed one, in order (``in_order_only``: other printed lines may come
    between; else the lines correspond one to one); every printed member line of the part's last table matches one
    of the member lines shown."""
    shown_lines = [line for line in shown if line.strip() != "..."]
    members_shown = [pattern(line, ws_shown) for line in shown_lines if is_member_line(shape(line, ws_shown))]
    others_shown = [pattern(line, ws_shown) for line in shown_lines if not is_member_line(shape(line, ws_shown))]
    shaped = [shape(line, ws_printed) for line in printed]
    others = [s for s in shaped if not is_member_line(s)]
    position = 0
    for p in others_shown:
        while position < len(others) and not p.fullmatch(others[position]):
            assert in_order_only, f"README line {p.pattern!r} is not printed here:\n{others[position]!r}"
            position += 1
        assert position < len(others), f"README line {p.pattern!r} is not printed (in this order)"
        position += 1
    assert in_order_only or position == len(others), f"printed but not in the README: {others[position:]}"
    # The member lines of the part's last table: the launcher's last progress table, the summary's members.
    last_table = shaped
    if in_order_only:
        last_table = shaped[max(i for i, s in enumerate(shaped) if s.endswith("] progress:")) + 1 :]
    printed_members = [s for s in last_table if is_member_line(s)]
    assert len(printed_members) == len(members_shown), (printed_members, [p.pattern for p in members_shown])
    for s in printed_members:
        assert any(p.fullmatch(s) for p in members_shown), f"no README member line has this form:\n{s}"


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The quick start's population, run from a fresh folder exactly as the README says."""
    folder = tmp_path_factory.mktemp("first_hour")
    argv = [sys.executable, "-m", EXAMPLE.split()[-1], *readme_command()]
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder, argv, proc.stdout


def test_the_quick_start_prints_what_the_readme_shows(first_run):
    folder, argv, stdout = first_run
    shown, printed = readme_output(), stdout.splitlines()
    ws_shown, ws_printed = shown[0].split(" in ", 1)[1], printed[0].split(" in ", 1)[1]
    assert Path(ws_printed).resolve() == (folder / argv[argv.index("--workspace") + 1]).resolve()
    assert shape(printed[0], ws_printed) == shape(shown[0], ws_shown)
    launcher_shown, summary_shown = split(shown)
    launcher_printed, summary_printed = split(printed)
    check_part(launcher_shown, launcher_printed, ws_shown, ws_printed, in_order_only=True)
    check_part(summary_shown, summary_printed, ws_shown, ws_printed, in_order_only=False)


def test_running_it_again_says_every_member_has_already_finished(first_run):
    folder, argv, _ = first_run
    journal = folder / "runs" / "cpu-smoke" / "launcher.jsonl"
    before = journal.read_bytes()
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = proc.stdout.splitlines()[0]
    assert "has already finished" in first and "continues from" not in proc.stdout, proc.stdout
    assert "member 0 finished at epoch 24 >= max_epochs=24" in first and "member 1 finished" in first
    assert journal.read_bytes() == before  # nothing launched
