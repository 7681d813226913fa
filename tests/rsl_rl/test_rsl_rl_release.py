"""The support matrix: which rsl-rl-lib lines a member trains with, and the one-line refusal of any other."""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.rsl_rl.release import SUPPORTED_TEXT, UnsupportedRslRl, installed_line, line_of

pytestmark = pytest.mark.rslrl_compat


@pytest.mark.parametrize(("version", "line"), [("3.1.2", 3), ("3.1.0", 3), ("5.4.2", 5), ("5.5.1", 5)])
def test_supported_lines(version, line):
    assert line_of(version) == line


@pytest.mark.parametrize("version", ["2.3.3", "3.0.1", "3.2.0", "4.0.1", "5.3.0", "6.0.0", "not-a-version"])
def test_other_lines_are_refused_in_one_line_naming_the_matrix(version):
    with pytest.raises(UnsupportedRslRl) as info:
        line_of(version)
    message = str(info.value)
    assert "\n" not in message and f"rsl-rl-lib {version} is not supported" in message and SUPPORTED_TEXT in message


def test_installed_line_is_the_one_imported():
    from importlib.util import find_spec

    # Line 3 builds one ActorCritic policy (rsl_rl.modules), line 5 actor and critic models (rsl_rl.models, new in
    # 4.0): what layout.py relies on.
    assert installed_line() == (5 if find_spec("rsl_rl.models") else 3)


def test_a_member_does_not_start_on_another_line(make_runner, monkeypatch, capsys):
    from async_pbt_isaaclab.examples.rsl_rl_train import main
    from async_pbt_isaaclab.rsl_rl import release
    from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer

    runner = make_runner()
    monkeypatch.setattr(release.metadata, "version", lambda name: "4.0.1")
    with pytest.raises(UnsupportedRslRl, match=r"rsl-rl-lib 4\.0\.1 is not supported"):
        RslRlTrainer(runner)
    with pytest.raises(SystemExit) as stopped:
        main(["--iterations", "1"])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and "\n" not in err and SUPPORTED_TEXT in err
