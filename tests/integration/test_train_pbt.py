"""``scripts/train_pbt.py`` and ``scripts/play_pbt.py``: their code path end to end, with the simulator replaced.

The population test starts two members as separate processes through ``fake_isaaclab_entry.py``, which runs the
scripts' own ``main`` with a fake app launcher, Isaac Lab's config resolution, ``gym.make`` of the pure-torch task
``AsyncPbt-TorchReach-v0`` and a copy of ``RlGamesVecEnvWrapper``'s behaviour. Real rl_games PPO trains on a CPU; the
test fixture rule forces member 1 to exploit member 0 once; member 1's process replaces itself with ``os.execv`` of
the captured command line and continues from the recipient checkpoint. Member 0 is configured with Isaac Lab's own
``agent.pbt.*`` Hydra overrides, member 1 with the ``--pbt-*`` flags. Then the population's checkpoints, the exploit
recipient checkpoint included, are played through ``play_pbt``'s code path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("rl_games")

from async_pbt_isaaclab.core.audit import verify_log  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENTRY = HERE / "fake_isaaclab_entry.py"
TASK = "AsyncPbt-TorchReach-v0"

sys.path.insert(0, str(HERE))
import fake_isaaclab_entry as fake  # noqa: E402


BOUNDED = "pbt_bounded_actor_critic"
START_BOUNDS = "{low: -2.0, high: 0.5}"
BOUNDED_MUTATION = ("{learning_rate: {kind: log_float, low: 1.0e-5, high: 1.0e-2}, "
                    "network.log_std_bounds.low: {kind: log_shift, low: -3.0, high: -1.0}, "
                    "network.log_std_bounds.high: {kind: log_shift, low: -0.5, high: 1.0}}")


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------ command line (fast)


@pytest.mark.parametrize("script", ["train_pbt.py", "play_pbt.py"])
def test_help_works_without_isaaclab(script):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True,
                          timeout=480, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--task" in proc.stdout and "AppLauncher" in proc.stdout
    if script == "train_pbt.py":
        for flag in ("--pbt-workspace", "--pbt-members", "--pbt-index", "--checkpoint", "--max_iterations",
                     "--num_envs", "--seed", "--distributed", "--track", "--video"):
            assert flag in proc.stdout, flag
    else:
        for flag in ("--pbt-workspace", "--member", "--best", "--checkpoint"):
            assert flag in proc.stdout, flag


def test_training_without_isaaclab_explains_how_to_install():
    try:
        import isaaclab  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Isaac Lab is installed")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_pbt.py"), "--task", TASK],
                          capture_output=True, text=True, timeout=480, cwd=ROOT)
    assert proc.returncode == 2
    assert "pip install async-pbt-isaaclab[isaaclab] inside an Isaac Lab python" in proc.stderr


def _train(argv, tmp_path, monkeypatch) -> int:
    monkeypatch.chdir(tmp_path)
    return fake.load_script("train_pbt").main(argv, hooks=fake.fake_hooks())


def test_configuration_errors_stop_before_the_env_is_built(tmp_path, monkeypatch, capsys):
    assert _train(["--task", TASK, "--pbt-members", "2", "--pbt-index", "5"], tmp_path, monkeypatch) == 2
    assert "policy_idx: 5 is out of range" in capsys.readouterr().err
    assert _train(["--task", TASK, "--pbt-members", "2", "--distributed"], tmp_path, monkeypatch) == 2
    assert "async-pbt launch" in capsys.readouterr().err
    assert _train(["--task", TASK, "--pbt-members", "2", "agent.pbt.objective=consecutive_successes"],
                  tmp_path, monkeypatch) == 2
    assert "no per-episode source" in capsys.readouterr().err
    assert _train([], tmp_path, monkeypatch) == 2
    assert "--task is required" in capsys.readouterr().err
    assert all(launcher.closed for launcher in fake.FakeAppLauncher.instances)


def test_unknown_flags_are_refused(tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as exc:
        _train(["--task", TASK, "--no-such-flag"], tmp_path, monkeypatch)
    assert exc.value.code == 2


# ------------------------------------------------------------------ a population (slow)


def _wait_for_checkpoint(record: Path, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(record.read_text()).get("checkpoint"):
                return
        except (FileNotFoundError, ValueError):
            pass
        if proc.poll() is not None and not record.exists():
            return  # it failed; the fixture reports its log
        time.sleep(0.2)


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_pbt")
    ws = root / "ws"
    env = dict(os.environ, ASYNC_PBT_TEST_FIXTURE="fixture_forced_exploit", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1")
    common = [
        sys.executable, str(ENTRY), "--task", TASK, "--headless", "--device", "cpu", "--num_envs", "32",
        "--pbt-rule", "fixture_forced_exploit", "--pbt-interval-steps", "4096",
        "--pbt-start-grace-frames", "0", "--pbt-restart-grace-frames", "0", "--pbt-min-episodes", "8",
        "--pbt-heartbeat-interval-s", "0.5",
        "--pbt-keep-last-checkpoints", "100",
        "agent.pbt.mutation_rate=1.0", "agent.params.config.mini_epochs=2",
        # The bounded exploration network, named only in overrides: train_pbt.py must register it, and the
        # exploit must mutate its bounds (mutation_rate 1.0: every key changes).
        f"agent.params.network.name={BOUNDED}", f"agent.params.network.log_std_bounds={START_BOUNDS}",
        f"agent.pbt.mutation={BOUNDED_MUTATION}",
    ]
    per_member = {
        # Isaac Lab's own PBT overrides ...
        0: ["--max_iterations", "30", "agent.pbt.enabled=True", "agent.pbt.num_policies=2",
            "agent.pbt.policy_idx=0", f"agent.pbt.workspace={ws}"],
        # ... and the population flags mean the same thing.
        1: ["--max_iterations", "24", "--pbt-workspace", str(ws), "--pbt-members", "2", "--pbt-index", "1"],
    }
    procs = []
    for index, extra in per_member.items():
        log = open(root / f"member{index}.log", "w")
        procs.append((subprocess.Popen([*common, *extra], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT),
                      log))
        if index == 0:
            # This PPO runs ~20k frames/s: without an order, member 1 could finish before member 0 published
            # anything. Start it once the donor has a checkpoint (a finished donor stays a valid one).
            _wait_for_checkpoint(ws / "members" / "000" / "record.json", procs[0][0])
    for proc, log in procs:
        try:
            proc.wait(timeout=960)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    logs = {i: (root / f"member{i}.log").read_text() for i in (0, 1)}
    for i, (proc, _) in enumerate(procs):
        assert proc.returncode == 0, f"member {i} failed:\n{logs[i][-5000:]}"
    return root, ws, logs, [p.pid for p, _ in procs]


@pytest.mark.slow
def test_exploit_happened_and_the_audit_verifies(population):
    _, ws, logs, _ = population
    state = json.loads((ws / "members/001/state.json").read_text())
    assert state["restarts"] == 1 and state["generation"] == 1, logs[1][-3000:]
    assert state["lineage"][0]["donor"] == 0 and state["lineage"][0]["outcome"] == "exploit"
    audit = _entries(ws / "members/001/audit.jsonl")
    kinds = [e["kind"] for e in audit]
    assert "exploit_applied" in kinds and kinds.count("start") == 2
    for member in (0, 1):
        count, problems = verify_log(ws / f"members/{member:03d}/audit.jsonl")
        assert count > 0 and problems == [], problems
    assert json.loads((ws / "members/000/state.json").read_text())["restarts"] == 0


@pytest.mark.slow
def test_members_were_separate_processes_and_the_restart_reran_the_same_entry(population):
    _, ws, logs, pids = population
    assert pids[0] != pids[1]
    starts = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "start"]
    assert [s["mode"] for s in starts] == ["fresh", "exploit_applied"]
    assert starts[0]["pid"] == starts[1]["pid"] == pids[1], "os.execv keeps the pid"
    before, after = starts[0]["argv"], starts[1]["argv"]
    assert after[: len(before)] == before, "every flag survives the restart, in order"
    assert Path(before[1]) == ENTRY, "the restart re-runs the same (fake) entry"
    added = after[len(before):]
    assert added[0].startswith("--checkpoint=")
    assert all(a.startswith(("agent.params.config.", "agent.params.network.")) for a in added[1:]), added
    assert "[async-pbt] restarting:" in logs[1]


@pytest.mark.slow
def test_evidence_is_labelled_by_the_isaaclab_layer(population):
    _, ws, _, _ = population
    for member in (0, 1):
        record = json.loads((ws / f"members/{member:03d}/record.json").read_text())
        cond = record["condition"]
        assert cond["task"] == TASK and cond["objective"] == "success"
        assert cond["curriculum_stage"] == "0", "read from extras['log']['Curriculum/stage']"
        assert cond["reward_config"].startswith("sha256:")
        assert len(record["evidence"]["values"]) >= 8 and record["evidence"]["generation"] == record["generation"]
    r0 = json.loads((ws / "members/000/record.json").read_text())
    r1 = json.loads((ws / "members/001/record.json").read_text())
    assert r0["condition"] == r1["condition"], "members of one population compare like with like"


@pytest.mark.slow
def test_member_keeps_one_log_folder_across_the_restart(population):
    root, _, _, _ = population
    runs = root / "logs" / "rl_games" / "torch_reach_pbt"
    # One run folder per member (no timestamped second folder after member 1's restart).
    assert sorted(p.name for p in runs.iterdir()) == ["torch_reach_pbt_pbt_000", "torch_reach_pbt_pbt_001"]
    member1 = runs / "torch_reach_pbt_pbt_001"
    assert (member1 / "params" / "agent.yaml").is_file() and (member1 / "params" / "env.yaml").is_file()
    assert len(list((member1 / "summaries").iterdir())) >= 1


@pytest.mark.slow
def test_the_exploit_mutated_the_exploration_bounds_and_the_restart_trained_with_them(population):
    _, ws, logs, _ = population
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    state = json.loads((ws / "members/001/state.json").read_text())
    low, high = (state["hyperparameters"][f"network.log_std_bounds.{k}"] for k in ("low", "high"))
    assert (low, high) != (-2.0, 0.5), "mutation_rate 1.0: both bounds changed"
    assert -3.0 <= low <= -1.0 and -0.5 <= high <= 1.0, (low, high)
    changes = {c["key"]: c for c in state["lineage"][0]["changes"]}
    assert changes["network.log_std_bounds.low"]["new"] == low
    assert changes["network.log_std_bounds.high"]["new"] == high
    restart_argv = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "start"][1]["argv"]
    set_by_restart = {a.split("=", 1)[0]: float(a.split("=", 1)[1]) for a in restart_argv
                      if a.startswith("agent.params.network.log_std_bounds.")}
    assert set_by_restart == {"agent.params.network.log_std_bounds.low": low,
                              "agent.params.network.log_std_bounds.high": high}
    # The restarted process trained with the bounded network under the new bounds: its last checkpoint's
    # learned log-std lies inside them (the network projects it there).
    ckpt = load_checkpoint(ws / state["last_checkpoint"])
    sigma = ckpt["model"]["a2c_network.sigma"]
    assert bool(((sigma >= low - 1e-6) & (sigma <= high + 1e-6)).all()), (sigma, low, high)


# ------------------------------------------------------------------ playing the population's checkpoints (slow)


def _play(argv: list[str], cwd: Path):
    play = fake.load_script("play_pbt")
    parser = play.build_parser()
    fake.add_launcher_args(parser)
    args, hydra_args = parser.parse_known_args(argv)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return play.run(args, hydra_args, fake.fake_hooks())
    finally:
        os.chdir(old)


@pytest.mark.slow
def test_play_the_exploit_recipient_checkpoint(population):
    root, ws, _, _ = population
    applied = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "exploit_applied"][0]
    path = ws / applied["checkpoint"]
    result = _play(["--task", TASK, "--device", "cpu", "--num_envs", "16", "--num_steps", "120",
                    "--checkpoint", str(path)], root)
    assert result.steps == 120 and result.episodes >= 16
    assert result.pbt["member"] == 1 and result.pbt["generation"] == 1
    assert result.pbt["inherited_from"]["donor"] == 0
    assert result.objective == "success" and 0.0 <= result.mean_objective <= 1.0


@pytest.mark.slow
def test_play_builds_the_bounded_network_with_the_members_mutated_bounds(population, monkeypatch):
    root, ws, _, _ = population
    from async_pbt_isaaclab.rl_games.exploration import get_log_std_bounds

    play = fake.load_script("play_pbt")
    players = []
    restore = play.restore_player
    monkeypatch.setattr(play, "restore_player", lambda player, state: (players.append(player), restore(player, state)))
    monkeypatch.setattr(fake, "load_script", lambda name: play)
    result = _play(["--task", TASK, "--device", "cpu", "--num_envs", "8", "--num_steps", "110",
                    "--pbt-workspace", str(ws), "--member", "1",
                    f"agent.params.network.name={BOUNDED}", f"agent.params.network.log_std_bounds={START_BOUNDS}"],
                   root)
    hparams = json.loads((ws / "members/001/state.json").read_text())["hyperparameters"]
    assert result.episodes >= 8 and len(players) == 1
    assert get_log_std_bounds(players[0].model) == (hparams["network.log_std_bounds.low"],
                                                    hparams["network.log_std_bounds.high"])


@pytest.mark.slow
def test_play_a_member_and_the_best(population):
    root, ws, _, _ = population
    member = _play(["--task", TASK, "--device", "cpu", "--num_envs", "8", "--num_steps", "110",
                    "--pbt-workspace", str(ws), "--member", "1"], root)
    assert member.source.startswith("member 1") and member.pbt["member"] == 1 and member.episodes >= 8
    state = json.loads((ws / "members/001/state.json").read_text())
    assert Path(member.checkpoint) == ws / state["last_checkpoint"]
    best = _play(["--task", TASK, "--device", "cpu", "--num_envs", "8", "--num_steps", "110",
                  "--pbt-workspace", str(ws), "--best"], root)
    assert best.source.startswith("best (member") and best.episodes >= 8


def test_play_refuses_ambiguous_choices_and_damaged_files(tmp_path):
    play = fake.load_script("play_pbt")
    ns = argparse.Namespace(checkpoint=None, member=None, best=False, pbt_workspace=None)
    with pytest.raises(play.PlayError, match="exactly one"):
        play.select_checkpoint(ns)
    ns.member = 0
    with pytest.raises(play.PlayError, match="--pbt-workspace"):
        play.select_checkpoint(ns)
    ns.pbt_workspace = str(tmp_path / "nothing")
    with pytest.raises(play.PlayError, match="population.json"):
        play.select_checkpoint(ns)
    bad = tmp_path / "x.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(play.PlayError, match="differs from the published"):
        play.load_verified(bad, "0" * 64, trusted=False)
    with pytest.raises(play.PlayError):
        play.load_verified(bad, None, trusted=False)
