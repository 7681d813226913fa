"""Smoke runs of benchmarks: the end-to-end emitter benchmark (``scripts/benchmarks/summary_emitter.py e2e``) and the
slices action step (``scripts/benchmarks/action_step.py``).

Tiny settings (64 envs, 8-step horizon, 3 epochs, one pair, no warm-up): it checks that the benchmark runs the
rl_games PPO loop through Isaac Lab's real RL-Games wrappers with and without the emitter wrapper and reports both
frames/s figures, their ratio and the direct added-time measure. No timing assertion: the machines are shared and
noisy.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "benchmarks" / "summary_emitter.py"
UPSTREAM = ROOT / "tests" / "upstream"


def _median(out: str, label: str) -> float:
    match = re.search(rf"^{re.escape(label)}\s+([0-9.]+)\s", out, re.MULTILINE)
    assert match, f"no {label!r} row in:\n{out}"
    return float(match.group(1))


@pytest.mark.timeout(3600)
def test_e2e_benchmark_reports_both_frame_rates():
    """On Isaac Lab 3.0.0's own RL-Games wrappers (the real wheel, as tests/upstream fetches it): in a child process,
    since the benchmark makes that release importable with the simulator modules stubbed."""
    sys.path.insert(0, str(UPSTREAM))
    import isaaclab_real

    try:
        isaaclab_real.ensure("3.0.0")
    except isaaclab_real.Unavailable as exc:
        pytest.skip(f"Isaac Lab 3.0.0 could not be fetched from PyPI: {exc}")
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "e2e",
            "--num-envs",
            "64",
            "--horizon",
            "8",
            "--epochs",
            "3",
            "--pairs",
            "1",
            "--warmup-epochs",
            "0",
            "--isaaclab",
            "3.0.0",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "vec-env wrapper isaaclab_rl.rl_games.rl_games.RlGamesVecEnvWrapper of Isaac Lab 3.0.0" in out, out[:2000]
    assert _median(out, "frames/s without emitter") > 0
    assert _median(out, "frames/s with emitter") > 0
    assert _median(out, "per-pair ratio with/without") > 0
    assert _median(out, "added work per env step, total (us)") > 0
    assert re.search(r"^(PASS|FAIL): direct measure 1 - added/epoch", out, re.MULTILINE), out
    assert re.search(r"^(PASS|FAIL): median A/B frames/s ratio", out, re.MULTILINE), out
    # Same seed, and the emitter draws no random numbers: both variants train exactly the same policy.
    assert (
        "training identical in both variants (same seed; final parameters and frames compared in every pair): yes"
        in out
    ), out


# ------------------------------------------------------------------ population vs independent study
STUDY = Path(__file__).resolve().parents[1] / "scripts" / "benchmarks" / "population_vs_independent.py"


def _load_script(path: Path):
    name = f"_async_pbt_bench_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _load_study():
    return _load_script(STUDY)


def _first_entry(path):
    """The first audit entry after the member's RNG was set up: its diverse start (or its start, without one)."""
    import json

    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return next(e for e in entries if e["kind"] in ("initial_draw", "start"))


def test_population_vs_independent_refuses_a_used_folder(tmp_path, capsys):
    study = _load_study()
    (tmp_path / "old.txt").write_text("x")
    assert study.main(["--smoke", "--out", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def test_the_report_names_where_each_seeds_final_figures_come_from():
    """A study whose seeds mix a hand-over with none (one reanalysed from older runs) says which seed is which."""
    _load_study()  # puts scripts/benchmarks on the path, as the study does
    from study_report import final_source

    def seeds(*episodes):
        return {"seeds": {str(i): ({"final": {"episodes": e}} if e else {}) for i, e in enumerate(episodes)}}

    assert final_source(seeds(64, 64)) == "hand-over on 64 + 64 new episodes per member"
    assert final_source(seeds(None, None)) == "last evaluation point"
    assert final_source(seeds(64, None, 8)) == (
        "hand-over on 64 + 64 new episodes per member (seeds 0); last evaluation point (seeds 1); "
        "hand-over on 8 + 8 new episodes per member (seeds 2)"
    )


@pytest.mark.parametrize("flag", [["--eval-episodes", "0"], ["--final-episodes", "-1"]])
def test_population_vs_independent_refuses_a_count_out_of_range_before_any_run(flag, tmp_path):
    study = _load_study()
    with pytest.raises(SystemExit, match=f"error: {flag[0]} must be >= "):
        study.main(["--smoke", "--out", str(tmp_path / "study"), *flag])
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize("case", ["hopper_standing", "rsl_rl_hopper_kl"])
def test_a_case_refuses_a_member_backend_it_cannot_train_on_before_any_run(case, tmp_path):
    """``hopper_standing`` is judged by the distance travelled, which only the gymnasium backend computes, and the
    rsl_rl member has no envpool backend: with ``--vec-env envpool`` every member would fail at its start."""
    study = _load_study()
    with pytest.raises(SystemExit, match=f"--vec-env envpool: case {case} trains on gymnasium only"):
        study.main(["--case", case, "--vec-env", "envpool", "--smoke", "--out", str(tmp_path / "s")])
    assert not (tmp_path / "s").exists()


def test_an_arm_that_wrote_no_checkpoint_stops_the_study_with_its_launcher_log(tmp_path):
    """An arm whose members all failed (a case run on a backend its objective needs another for, say) is an error
    naming the arm's launcher log, not a row of empty figures."""
    _load_study()  # puts scripts/benchmarks on the path, as the study does
    import study_analysis

    workspace = tmp_path / "seed0" / "population"
    (workspace / "members" / "000" / "checkpoints").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"population wrote a checkpoint.*seed0/population-launcher\.log"):
        study_analysis.evaluate_arm(None, workspace, 2, [4096], 4)


# The exploit-latency benchmark's smoke run is in tests/integration/test_exploit_paths.py: the same run also
# shows that both exploit paths build the same agent.


MUJOCO_CASES = sorted(c for c in _load_study().CASES if c.startswith(("halfcheetah_", "hopper_")))


@pytest.mark.parametrize("case", MUJOCO_CASES)
def test_every_mujoco_case_builds_a_population_config(case, tmp_path):
    """Each MuJoCo case's start values land in the study's own yaml, and that yaml with the case's mutation specs is
    a population config the members accept (what the smoke below trains, without the training)."""
    from async_pbt_isaaclab.core.agent_config import get_path, load_population_config, load_yaml, parse_override

    study = _load_study()
    spec = study.CASES[case]
    args = study.resolve(study.build_parser().parse_args(["--case", case, "--smoke", "--out", str(tmp_path)]))
    study.write_case_yaml(args, tmp_path)
    raw = load_yaml(args.agent_yaml)
    for item in spec.set_values:
        (override,) = study.value_overrides([item])  # the study's own reading of a short KEY
        parts, value = parse_override(override)  # the value read as the members read an override
        found = get_path(raw, parts)
        assert found == value, (item, found)
    pbt = [f"agent.pbt.{k}" for k in ("enabled=true", "num_policies=2", f"workspace={tmp_path / 'ws'}")]
    _, cfg = load_population_config(raw, [*pbt, *study.arms.agent_overrides(args)])
    assert sorted(cfg.mutation) == sorted(item.split("=", 1)[0] for item in spec.mutate)


def test_a_population_flag_reaches_the_population_arm_only_and_the_baselines_stay_reusable(tmp_path):
    """``--population-flag``: a variant of the search, judged against the same sweep and independent runs."""
    import json

    study = _load_study()
    flags = ["--case", "halfcheetah_lr", "--smoke", "--population-flag=--pbt-start-grace-frames=262144"]
    args = study.resolve(study.build_parser().parse_args([*flags, "--out", str(tmp_path / "variant")]))
    study.write_case_yaml(args, tmp_path)
    commands = {arm: study.arms.member_command(args, 0, tmp_path / arm, 3, arm) for arm in study.arms.ARMS}
    assert [arm for arm, cmd in commands.items() if "--pbt-start-grace-frames=262144" in cmd] == ["population"]
    # A finished study of the same case without the flag stands in for this one's baselines.
    plain = study.resolve(study.build_parser().parse_args([*flags[:3], "--out", str(tmp_path / "plain")]))
    study.write_case_yaml(plain, tmp_path)
    settings = {k: v for k, v in vars(plain).items()}
    seeds = {str(s): {"sweep": {}, "independent": {}} for s in plain.seeds}
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "results.json").write_text(json.dumps({"settings": settings, "seeds": seeds}, default=str))
    args.baselines_from = str(tmp_path / "plain")
    assert study.arms.reused_baselines(args)["seeds"] == seeds
    # Baselines that cannot stand in are refused before the study writes anything: --out stays free for the retry.
    refused = tmp_path / "refused"
    with pytest.raises(SystemExit, match="cannot stand in"):
        study.main(
            [
                *flags[:3],
                "--frames-per-member",
                "4096",
                "--out",
                str(refused),
                "--baselines-from",
                str(tmp_path / "plain"),
            ]
        )
    assert not refused.exists()
    args.member_flag = ["--pbt-window=32"]  # a flag every arm gets is not a variant: refused, naming it
    with pytest.raises(SystemExit, match=r"member_flag: \[\] there, \['--pbt-window=32'\] here"):
        study.arms.reused_baselines(args)


def test_baselines_from_another_clone_are_reused_when_the_agent_yaml_is_the_same_file(tmp_path):
    """The agent yaml is compared by its bytes: the same packaged yaml in another clone's folder stands in, an edited
    copy is refused, named by path and content."""
    import json

    study = _load_study()
    flags = ["--case", "halfcheetah_lr", "--smoke"]
    plain = study.resolve(study.build_parser().parse_args([*flags, "--out", str(tmp_path / "plain")]))
    seeds = {str(s): {"sweep": {}, "independent": {}} for s in plain.seeds}
    (tmp_path / "plain").mkdir()
    results = {"settings": vars(plain), "seeds": seeds}
    (tmp_path / "plain" / "results.json").write_text(json.dumps(results, default=str))
    clone = tmp_path / "clone" / "halfcheetah_ppo.yaml"
    clone.parent.mkdir()
    clone.write_bytes(Path(plain.agent_source).read_bytes())
    again = ["--agent-yaml", str(clone), "--baselines-from", str(tmp_path / "plain"), "--out", str(tmp_path / "b")]
    args = study.resolve(study.build_parser().parse_args([*flags, *again]))
    assert args.agent_source != plain.agent_source
    assert study.arms.reused_baselines(args)["seeds"] == seeds
    clone.write_text(clone.read_text().replace("gamma: 0.99", "gamma: 0.98"))
    args = study.resolve(study.build_parser().parse_args([*flags, *again]))
    with pytest.raises(SystemExit, match=rf"agent_source: .* there, '{clone} \(sha256 [0-9a-f]{{12}}\)' here"):
        study.arms.reused_baselines(args)
    with pytest.raises(SystemExit, match=r"--agent-yaml .*missing.yaml: cannot read it"):
        study.resolve(
            study.build_parser().parse_args([*flags, "--agent-yaml", str(tmp_path / "missing.yaml"), "--out", "x"])
        )


def _screens():
    import study_cases  # on sys.path once the study script is loaded
    import study_screens

    _load_study()
    cases = {name: case for name, case in study_cases.CASES.items() if case.screen}
    return {**cases, **study_screens.SCREENS}


@pytest.mark.parametrize("name", sorted(_screens()))
def test_every_screened_configuration_is_a_config_its_member_accepts(name, tmp_path):
    """What ``screen_case.py --case NAME`` trains, without the training: each configuration's values replace keys
    the task's config has, land where the member reads them, and make a population config the member accepts."""
    import study_cases

    from async_pbt_isaaclab.core.agent_config import get_path, load_population_config, load_yaml, parse_override
    from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

    screen = _screens()[name]
    trainer = getattr(screen, "trainer", "rl_games")
    config = study_cases.case_config(screen)
    branches = getattr(screen, "branches", None)
    runs = (*screen.screen, *(branches.runs if branches else ()))
    assert len({label for label, _ in runs}) == len(runs)  # a label names one run folder
    assert not branches or branches.source in dict(screen.screen)
    pbt = [f"agent.pbt.{k}" for k in ("enabled=true", "num_policies=2", f"workspace={tmp_path / 'ws'}")]
    for _, values in runs:
        overrides = study_cases.value_overrides(values, trainer)
        if trainer == "rsl_rl":
            agent, _, _ = load_member_config(load_yaml(config), [*pbt, *overrides], str(config))
        else:
            agent, _ = load_population_config(load_yaml(config), [*pbt, *overrides])
        for override in overrides:
            parts, value = parse_override(override)
            assert get_path(agent, parts) == value, override
            if "env_config" not in parts and parts[0] != "pbt":  # the env checks its own keyword arguments
                get_path(load_yaml(config), parts)  # a misspelt key would be added, and the trainer would ignore it


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seeds", "1", "0"], "--seeds 0: rl_games reads a seed of 0 as unset"),
        (["--held-out", "-1"], "--held-out -1: episodes per checkpoint, 0 for none"),
        (["--frames", "0"], "--frames 0: must be at least 1"),
        (["--parallel", "0"], "--parallel 0: must be at least 1"),
    ],
)
def test_screen_case_refuses_bad_flags_before_any_run(flags, message, tmp_path, capsys):
    screen = _load_script(STUDY.parent / "screen_case.py")
    out = tmp_path / "screen"
    with pytest.raises(SystemExit) as exit_info:
        screen.main(["--case", "hopper_decay", "--out", str(out), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()  # nothing was started or written


TRAINED_CASE = "gamma"
"""The one case the smoke below trains (the study's default, on Pendulum, the cheapest task): every case runs the same
study code; what differs, the task, start values and mutation specs, every MuJoCo case has checked without training
above (the HalfCheetah member itself trains in tests/integration/test_mujoco_member.py, a Hopper population in
tests/integration/test_env_value_search.py)."""


@pytest.mark.slow
def test_population_vs_independent_smoke_writes_consistent_figures(tmp_path, capsys, monkeypatch):
    """``--case gamma --smoke``: real members under the launcher in the three arms train the case's task from the
    case's start (the study's own copy of the yaml), held-out evaluation on the same env, table, JSON, plot.

    Checks that the outputs exist and agree with each other; the study's goal is not asserted (a smoke run
    is far too short for any arm to learn).
    """
    import json
    import math
    import statistics

    from async_pbt_isaaclab.core.agent_config import load_yaml

    study = _load_study()
    spec = study.CASES[TRAINED_CASE]
    out = tmp_path / "study"
    # --out relative to the working folder, as a user types it (the arms' launchers run in other folders).
    monkeypatch.chdir(tmp_path)
    assert study.main(["--case", TRAINED_CASE, "--smoke", "--out", "study", "--target", "-1300"]) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert (out / "population_vs_independent.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["settings"]["task"] == spec.task and results["settings"]["set_values"] == list(spec.set_values)
    assert results["frames_per_member"] == 12288
    points = results["eval_points"]
    assert points == [4096, 8192, 12288]
    (run,) = results["seeds"].values()
    assert run["launcher_exit"] == {"population": 0, "sweep": 0, "independent": 0}
    for arm in ("population", "sweep", "independent"):
        assert sorted(run[arm]["members"]) == ["0", "1"]
        for member in run[arm]["members"].values():
            # Retention was off: every member has a checkpoint evaluated at every point.
            assert [p["frame"] for p in member["points"]] == points
            assert all(
                p["checkpoint"] and math.isfinite(p["report"]) and math.isfinite(p["selection"])
                for p in member["points"]
            )
            assert all(-16.3 * 200 <= p["report"] <= 0 for p in member["points"])  # Pendulum's reward range
    # Selection really was off in the independent and sweep arms, and only there.
    for arm in ("independent", "sweep"):
        assert all(m["exploits"] == 0 and m["generation"] == 0 for m in run[arm]["members"].values())
        assert run[arm]["changes_decided"] == 0
    # The audit's decided changes (counted per arm, and per seed for the population): at least those applied.
    applied = sum(m["exploits"] + m["explores"] for m in run["population"]["members"].values())
    assert run["changes_decided"] == run["population"]["changes_decided"] >= applied
    assert 0 <= run["changes_decided_with_unsettled_peers"] <= run["changes_decided"]
    assert "exploits and explores decided per seed; of them while a peer's new generation had not settled" in printed
    # The case's start is the study's own yaml (a value typed on a member's command line would be kept out of the
    # diverse start), which every arm trains; the independent runs start there, the sweep where the population did
    # (its generation-0 draw: the same values per member).
    config = load_yaml(results["settings"]["agent_yaml"])["params"]["config"]
    for item in spec.set_values:
        key, value = item.split("=", 1)
        assert str(config[key]) == value or config[key] == float(value), (item, config[key])
    ws = out / "seed0"
    for m in ("000", "001"):
        draws = [_first_entry(ws / arm / "members" / m / "audit.jsonl") for arm in ("population", "sweep")]
        assert draws[0]["new_hyperparameters"] == draws[1]["new_hyperparameters"]
    # screen_case.py's held-out figure is the study's: member 0's checkpoints, played on the selection episodes.
    screen = _load_script(STUDY.parent / "screen_case.py")
    held_out = dict(screen.held_out(ws / "independent", results["settings"]["eval_episodes"]))
    assert sorted(held_out) == points
    for row in run["independent"]["members"]["0"]["points"]:
        assert held_out[row["frame"]] == pytest.approx(row["selection"])
    # The final hand-over (--final-episodes, 2 in a smoke run): every member's final checkpoint of every arm on new
    # episodes, the pick leading on the first half; the final figures and verdicts are its report figures.
    handover = run["final_handover"]
    for arm in study.arms.ARMS:
        rows = handover[arm]["members"]
        assert sorted(rows) == ["0", "1"] and handover[arm]["episodes"] == 2
        assert handover[arm]["picked"] == max(rows, key=lambda m: rows[m]["selection"])
        assert handover[arm]["report"] == rows[handover[arm]["picked"]]["report"]
        assert all(row["checkpoint"] == run[arm]["members"][m]["points"][-1]["checkpoint"] for m, row in rows.items())
    assert run["final"]["population"] == handover["population"]["report"]
    assert run["final"]["independent_best_of_arm"] == handover["independent"]["report"]
    assert run["final"]["independent_runs"] == {
        m: row["report"] for m, row in handover["independent"]["members"].items()
    }
    assert run["against_sweep"]["final"]["sweep_best"] == handover["sweep"]["report"]
    assert "final held-out return (hand-over on 2 + 2 new episodes per member)" in printed
    assert "final: hand-over on 2 + 2 new episodes per member)" in printed
    # study_handover.py judges a finished study the same way (the same episodes: the same figures).
    rejudge = _load_script(STUDY.parent / "study_handover.py")
    assert rejudge.main([str(out), "--episodes", "2"]) == 0
    judged = json.loads((out / "handover_2.json").read_text())["seeds"]["0"]
    assert {arm: judged[arm] for arm in ("population", "sweep")} == {
        arm: handover[arm] for arm in ("population", "sweep")
    }
    assert judged["no_worse_than_sweep"] == (judged["population"]["report"] >= judged["sweep"]["report"])
    # A study reusing these baselines takes their hand-over where it played as many episodes, else plays it again.
    from async_pbt_isaaclab.commands.evaluate import make_evaluator

    args = study.resolve(study.build_parser().parse_args(["--case", TRAINED_CASE, "--smoke", "--out", str(out)]))
    evaluator = make_evaluator(args.task, results["settings"]["agent_yaml"])
    earlier = json.loads(json.dumps(results))
    earlier["seeds"]["0"]["final_handover"]["sweep"]["picked"] = "taken from the reused study"
    rerun = {"baselines_reused_from": str(ws)}
    study.play_final_handover(args, evaluator, rerun, 0, out, results["frames_per_member"], earlier)
    assert rerun["final_handover"]["sweep"]["picked"] == "taken from the reused study"
    assert rerun["final_handover"]["population"] == handover["population"]  # played again: the same episodes
    args.final_episodes = 3
    study.play_final_handover(args, evaluator, rerun, 0, out, results["frames_per_member"], earlier)
    assert {h["episodes"] for h in rerun["final_handover"].values()} == {3}
    assert rerun["final_handover"]["sweep"]["picked"] in ("0", "1")
    member1 = _first_entry(ws / "independent" / "members" / "001" / "audit.jsonl")
    assert member1["kind"] == "start" and member1["hyperparameters"]["gamma"] == pytest.approx(config["gamma"])
    # Against the sweep: the best sweep run picked on selection episodes, as the population's member is.
    sweep = run["against_sweep"]
    for k, value in enumerate(sweep["curve"]):
        rows = [m["points"][k] for m in run["sweep"]["members"].values()]
        assert value == max(rows, key=lambda r: r["selection"])["report"]
    assert sweep["final"]["population"] == run["final"]["population"]
    assert "against the sweep" in printed and "case goal" in printed
    # The population's curve is the report return of its member with the best selection return.
    for k, value in enumerate(run["curves"]["population"]):
        rows = [m["points"][k] for m in run["population"]["members"].values()]
        assert value == max(rows, key=lambda r: r["selection"])["report"]
    runs = run["curves"]["independent_runs"]
    assert run["curves"]["independent_median"] == [
        statistics.median(c[k] for c in runs.values()) for k in range(len(points))
    ]
    # Frames to target: the first point at or above the target, null when never reached.
    target = results["settings"]["target"]
    for curve, ftt in (
        (run["curves"]["population"], run["frames_to_target"]["population"]),
        *((runs[m], run["frames_to_target"]["independent_runs"][m]) for m in runs),
    ):
        reached = [p for p, v in zip(points, curve, strict=True) if v >= target]
        assert ftt == (reached[0] if reached else None)
    pop, med = run["frames_to_target"]["population"], run["frames_to_target"]["independent_median"]
    r = run["ratio_population_over_median_independent"]
    if pop is not None and med is not None:
        assert r == {"value": pytest.approx(pop / med), "relation": "="}
    else:
        assert r["relation"] in ("<", ">", "n/a")
    assert results["summary"]["final_return"]["population"]["median"] == run["final"]["population"]
    assert f"{run['final']['population']:.1f}" in printed
    assert "frames to target: per member (total in the arm = members x per member)" in printed
    assert re.search(r"^(PASS|FAIL): goal population <= 0.5 x median independent", printed, re.MULTILINE)
    for t, cell in run["target_sweep"].items():
        reached = [p for p, v in zip(points, run["curves"]["population"], strict=True) if v >= float(t)]
        assert cell["population"] == (reached[0] if reached else None)

    # --reanalyze: the same evaluated checkpoints against another target, no training.
    assert study.main(["--out", str(out), "--reanalyze", "--target", "1e9", "--sweep", "-5000"]) == 0
    printed = capsys.readouterr().out
    assert "ratio population / median independent (frames per member): median n/a; per seed: n/a" in printed
    assert re.search(
        r"target\s+-5000.0: population 4k \(8k total\)\s+independent median run 4k \(8k total\)\s+"
        r"ratio 1.00",
        printed,
    ), printed
    assert (out / "population_vs_independent_target1e+09.png").is_file()


RSL_RL_CASES = sorted(c for c, spec in _load_study().CASES.items() if spec.trainer == "rsl_rl")


@pytest.mark.parametrize("case", RSL_RL_CASES)
def test_every_rsl_rl_case_is_a_config_its_members_accept(case, tmp_path):
    """An rsl_rl case's start values land in the study's own copy of its rsl_rl config, where rsl_rl's runner reads
    them, and that config with the case's mutation specs is one the rsl_rl member starts with."""
    from async_pbt_isaaclab.core.agent_config import get_path, load_yaml, parse_override
    from async_pbt_isaaclab.rsl_rl.member_config import load_member_config

    study = _load_study()
    spec = study.CASES[case]
    args = study.resolve(study.build_parser().parse_args(["--case", case, "--smoke", "--out", str(tmp_path)]))
    study.write_case_yaml(args, tmp_path)
    raw = load_yaml(args.agent_yaml)
    assert set(raw) >= {"env", "runner", "pbt"}
    for item in spec.set_values:
        (override,) = study.value_overrides([item], "rsl_rl")
        parts, value = parse_override(override)
        assert parts[0] == "runner" and get_path(raw, parts) == value, (item, override)
    pbt = [f"agent.pbt.{k}" for k in ("enabled=true", "num_policies=2", f"workspace={tmp_path / 'ws'}")]
    _, _, cfg = load_member_config(raw, [*pbt, *study.arms.agent_overrides(args)], args.agent_yaml)
    assert sorted(cfg.mutation) == sorted(item.split("=", 1)[0] for item in spec.mutate)


@pytest.mark.slow
def test_an_rsl_rl_case_trains_rsl_rl_members_and_plays_their_checkpoints(tmp_path, capsys):
    """``--case rsl_rl_hopper_kl --smoke``: every arm's members are rsl_rl members (rsl_rl's config, rsl_rl's
    checkpoints), the independent runs keep the case's start, the sweep draws the population's start, and a figure of
    the study is what ``async-pbt evaluate`` plays for that checkpoint."""
    import json
    import math
    import statistics

    from async_pbt_isaaclab.checkpoint_io import load_checkpoint
    from async_pbt_isaaclab.commands.evaluate import DEFAULT_EVAL_SEED, evaluate_checkpoints
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.rsl_rl.layout import LAYOUTS
    from async_pbt_isaaclab.rsl_rl.release import installed_line

    study = _load_study()
    out = tmp_path / "study"
    assert study.main(["--case", "rsl_rl_hopper_kl", "--smoke", "--out", str(out)]) == 0
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["trainer"] == "rsl_rl" and results["frames_per_epoch"] == 4 * 64
    (run,) = results["seeds"].values()
    assert run["launcher_exit"] == {"population": 0, "sweep": 0, "independent": 0}
    ws = out / "seed0"
    for arm in ("population", "sweep", "independent"):
        for m, member in run[arm]["members"].items():
            assert all(p["checkpoint"] and math.isfinite(p["report"]) for p in member["points"])
            folder = ws / arm / "members" / f"{int(m):03d}"
            config = load_yaml(folder / "agent.yaml")["rsl_rl"]
            assert config["runner"]["actor"]["obs_normalization"] is True  # the case's start, in rsl_rl's config
            for path in (folder / "checkpoints").glob("*.pth"):  # rsl_rl's own layout of the installed line
                load_checkpoint(path, LAYOUTS[installed_line()].kind)
    start = _first_entry(ws / "independent" / "members" / "001" / "audit.jsonl")
    assert start["kind"] == "start" and start["hyperparameters"]["desired_kl"] == pytest.approx(0.001)
    draws = [_first_entry(ws / arm / "members" / "001" / "audit.jsonl") for arm in ("population", "sweep")]
    assert draws[0]["new_hyperparameters"] == draws[1]["new_hyperparameters"]
    point = run["population"]["members"]["0"]["points"][-1]
    episodes = results["settings"]["eval_episodes"]
    (played,) = evaluate_checkpoints([ws / "population" / point["checkpoint"]], episodes=2 * episodes)
    assert played.seed == DEFAULT_EVAL_SEED
    assert statistics.fmean(played.objective_values[:episodes]) == pytest.approx(point["selection"])
    assert statistics.fmean(played.objective_values[episodes:]) == pytest.approx(point["report"])


def test_action_step_benchmark_reports_every_variant():
    """``scripts/benchmarks/action_step.py`` on Pendulum's packaged agent, tiny: every variant is timed."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmarks" / "action_step.py"),
            "--task",
            "Pendulum-v1",
            "--members",
            "3",
            "--num-envs",
            "4",
            "--repeats",
            "2",
            "--calls",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("per member", "lean", "vmap", "one agent on all envs"):
        match = re.search(rf"^  {name}\s+([0-9]+) \[", proc.stdout, re.MULTILINE)
        assert match and int(match.group(1)) > 0, proc.stdout


def test_a_screens_branches_go_on_from_the_source_runs_checkpoint_with_their_own_values(tmp_path, monkeypatch):
    """``screen_case.py`` on a screen with branches (a Pendulum one here, the cheapest task): the screen's own run
    stops at the branch frame; the branch is a warm start from that run's checkpoint there, trains with its own
    learning rate (not the rate saved in the checkpoint) and goes on counting frames to ``--frames``."""
    import json

    import study_screens

    screen = _load_script(STUDY.parent / "screen_case.py")
    rate = ("lr_schedule=constant",)
    branches = study_screens.Branches("high", 2048, (("high-then-low", ("learning_rate=3e-5", *rate)),))
    planted = study_screens.Screen("branches", "Pendulum-v1", (("high", ("learning_rate=1e-3", *rate)),), branches)
    monkeypatch.setitem(study_screens.SCREENS, "test_branches", planted)
    out = tmp_path / "screen"
    flags = ["--frames", "4096", "--interval", "2048", "--held-out", "0", "--seeds", "1"]
    assert screen.main(["--case", "test_branches", "--out", str(out), *flags]) == 0
    from async_pbt_isaaclab.core.workspace.retention import list_checkpoints

    runs = json.loads((out / "screen.json").read_text())["runs"]
    assert runs["high-seed1"]["exit"] == 0 and runs["high-then-low-seed1"]["exit"] == 0
    for label, frames in (("high-seed1", [2048]), ("high-then-low-seed1", [4096])):
        assert [at for _, at, _ in list_checkpoints(out / label / "members" / "000" / "checkpoints")] == frames
    source = screen.branch_checkpoint(out / "high-seed1", 2048)
    audit = (out / "high-then-low-seed1" / "members" / "000" / "audit.jsonl").read_text().splitlines()
    (restored,) = [e for e in map(json.loads, audit) if e["kind"] == "restored"]
    assert restored["mode"] == "warm_start" and restored["checkpoint"] == str(source)
    assert restored["last_lr"] == pytest.approx(3e-5)
