"""End to end: two real rsl_rl members (rsl_rl PPO on Pendulum-v1, ``examples/rsl_rl_member``), one forced exploit,
by every exploit path: member 1 exploits member 0 through a real exec restart, in a second population inside the
running process, and in a third whose members are two slices of one process (``--pbt-slices 2``, run here so that
the live runners can be read: the recipient takes the donor's published state from memory). Everything asserted is
read back from what the members wrote (workspace, audit log, checkpoints, rsl_rl's own log), loaded by rsl_rl's own
``OnPolicyRunner.load``, or read from the running PPO.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rsl_rl_runners import runner as make_runner
from rsl_rl_runners import small_config

from async_pbt_isaaclab.checkpoint_io import model_fingerprint
from async_pbt_isaaclab.core.decision.mutation import SUPPORTED_HYPERPARAMETERS
from async_pbt_isaaclab.rsl_rl.layout import COUNTERS_KEY, LAYOUTS
from async_pbt_isaaclab.rsl_rl.release import installed_line
from async_pbt_isaaclab.testing.forced_exploit import RSL_RL_ITERATIONS, run_rsl_rl_population, slice_exploit

pytestmark = [pytest.mark.slow, pytest.mark.rslrl_compat]

MUTATIONS = (
    "agent.pbt.mutation.desired_kl=mutate_float",
    "agent.pbt.mutation.entropy_coef=mutate_float",
    "agent.pbt.mutation.gamma=mutate_discount",
)
"""Searched by both populations; the restart one searches ``num_steps_per_env`` too (:data:`RESTART_ONLY`)."""

RESTART_ONLY = ("agent.pbt.mutation.num_steps_per_env=int", "agent.runner.num_steps_per_env=16")
"""``num_steps_per_env``, a key only a restart sets, searched by the restart population, its start value typed on the
command line so the diverse start keeps it (``core/decision/start.py``): drawn from its bounds [4, 128], a rollout
of 4, 5 or 6 steps left member 1's 40 iterations short of its first decision at 4096 frames (a refused CI: no
exploit). The exploit still mutates it, and the restart must carry the new value past the typed one."""

ENVS = 16
"""Envs of each member (``run_rsl_rl_population``); the packaged config's rollout is 16 steps."""

SLICE_ITERATIONS = 28
"""Iterations of each slice: decisions every 8 (2048 frames), the first with evidence at 16 (Pendulum's episodes are
200 steps); the slices publish inline, so the one at 24 is certain to read member 0's and to find its state in memory
(``testing/forced_exploit.py``)."""


SLICES_TYPED = ("agent.runner.algorithm.gamma=0.98",)
"""A searched value the slices population types in rsl_rl's own name (kept out of the diverse start)."""


def _iterations(mode: str) -> int:
    """Iterations member 1 trained."""
    return SLICE_ITERATIONS if mode == "slices" else RSL_RL_ITERATIONS[1]


def _entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module", params=["restart", "inprocess", "slices"])
def population(tmp_path_factory, request):
    mode = request.param
    root = tmp_path_factory.mktemp(f"rsl_rl_{mode}")
    if mode == "slices":
        logs, runners = _slices_population(root)
        return root / "ws", logs, mode, runners
    extra = RESTART_ONLY if mode == "restart" else ()
    logs = run_rsl_rl_population(root, mode, (*MUTATIONS, *extra))
    return root / "ws", logs, mode, None


def _slices_population(root: Path) -> tuple[dict[int, str], list]:
    """Members 0 and 1 as two slices of this process, by the CPU member's own ``--pbt-slices`` path; their log (one,
    shared) and the runners it built (member 0's, member 1's)."""
    import contextlib
    import io

    from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
    from async_pbt_isaaclab.examples import rsl_rl_member, rsl_rl_train
    from async_pbt_isaaclab.testing.forced_exploit import FIXTURE_RULE, rsl_rl_member_args

    runners: list = []
    build = rsl_rl_train.build_runner

    def recorded(*args, **kwargs):
        runners.append(build(*args, **kwargs))
        return runners[-1]

    flags = ["--pbt-index", "0", "--max_iterations", str(SLICE_ITERATIONS), "--pbt-slices", "2"]
    flags += ["--pbt-interval-steps", "2048", "agent.pbt.publish_in_background=false", *SLICES_TYPED]
    out, argv = io.StringIO(), [*rsl_rl_member_args(root / "ws", "inprocess", MUTATIONS), *flags]
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv(TEST_FIXTURE_ENV, FIXTURE_RULE)
        patch.setattr(rsl_rl_train, "build_runner", recorded)
        _as_from_a_shell(patch, argv)
        code = rsl_rl_member.main(argv)
    assert code == 0, out.getvalue()[-3000:]
    return {0: out.getvalue(), 1: out.getvalue()}, runners


def _as_from_a_shell(patch: pytest.MonkeyPatch, argv: list[str]) -> None:
    """The command line a member trained in this process reads its typed values from (``member/restart.py``'s
    ``capture_argv``), as it would be run from a shell, not pytest's: else a typed value is not seen and the diverse
    start draws it (a CI run: member 1's rollout drawn at 4 steps, no decision in its 24 iterations)."""
    from async_pbt_isaaclab.examples import rsl_rl_member
    from async_pbt_isaaclab.member import restart

    patch.setattr(restart, "_CAPTURED", [sys.executable, "-m", rsl_rl_member.__name__, *argv])
    patch.setattr(restart, "_CAPTURED_ENV", dict(os.environ))


def _applied(ws: Path) -> dict:
    (applied,) = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "exploit_applied"]
    return applied


def test_the_exploit_took_its_path_and_the_audit_verifies(population):
    ws, logs, mode, _ = population
    audit = _entries(ws / "members/001/audit.jsonl")
    starts = [e for e in audit if e["kind"] == "start"]
    applied = _applied(ws)
    assert applied["path"] == ("inprocess" if mode == "slices" else mode) and applied["donor"] == 0
    if mode == "restart":
        # os.execv: the same pid, a new process image, started from the recipient checkpoint.
        assert [s["mode"] for s in starts] == ["fresh", "exploit_applied"] and starts[0]["pid"] == starts[1]["pid"]
        assert "[async-pbt] restarting:" in logs[1]
    else:
        assert [s["mode"] for s in starts] == ["fresh"] and "in-process from" in logs[1]
    if mode == "slices":
        slice_exploit(ws, recipient=1, donor=0, interval_steps=2048, inline=True)
        # Both members in one process, on their own slots; the donor's state came from memory, and it is the one
        # the donor published (the same model fingerprint as its file, checked by the audit below).
        assert [s["slot"] for s in starts] == [1] and starts[0]["slices"]["members"] == [0, 1]
        (memory,) = [e for e in audit if e["kind"] == "donor_in_memory"]
        assert memory["donor"] == 0 and memory["checkpoint"] == applied["donor_checkpoint"]
        assert memory["model_sha256"] == applied["model_sha256"]
    done = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "all entries verified" in done.stdout, done.stdout + done.stderr


def test_a_value_typed_in_rsl_rls_own_name_is_kept_out_of_the_diverse_start(population):
    """Typed on the command line as rsl_rl's runner config names it (``agent.runner...``), a searched value stays
    the member's start, slices too; what is not typed is drawn (the in-process population types nothing)."""
    ws, _, mode, _ = population
    (draw,) = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "initial_draw"]
    typed = {"restart": {"num_steps_per_env": 16}, "slices": {"gamma": 0.98}}.get(mode, {})
    assert draw.get("pinned", []) == sorted(typed)
    for key, value in draw["start_hyperparameters"].items():
        assert (draw["new_hyperparameters"][key] == value) == (key in typed), key


def test_counters_continue_and_no_iteration_index_repeats_or_is_skipped(population):
    ws, logs, mode, _ = population
    audit = _entries(ws / "members/001/audit.jsonl")
    state = json.loads((ws / "members/001/state.json").read_text())
    restored = [e for e in audit if e["kind"] == "restored"][-1]
    (start,) = [e for e in audit if e["kind"] == "start"][:1]
    steps_before = start["hyperparameters"].get("num_steps_per_env", 16)
    steps_after = state["hyperparameters"].get("num_steps_per_env", 16)
    # The recipient keeps its own counters: the iterations it completed, at its own rollout length.
    assert restored["frame"] == state["lineage"][0]["frame"] == restored["epoch"] * ENVS * steps_before
    # rsl_rl's own log, across both process images on the restart path: every index once, in order.
    indices = [int(i) for i in re.findall(r"Learning iteration (\d+)/", logs[1])]
    if mode == "slices":  # both members' logs, interleaved: each index once per member
        indices = sorted(indices)[::2]
    assert indices == list(range(_iterations(mode))), indices
    record = json.loads((ws / "members/001/record.json").read_text())
    assert record["status"] == "finished" and record["epoch"] == _iterations(mode)
    assert record["frame"] == restored["frame"] + (_iterations(mode) - restored["epoch"]) * ENVS * steps_after


def test_the_restart_carries_the_planned_values_in_rsl_rls_own_names(population):
    ws, _, mode, _ = population
    state = json.loads((ws / "members/001/state.json").read_text())
    changes = {c["key"]: c["new"] for c in state["lineage"][0]["changes"]}
    assert changes and set(changes) <= set(state["hyperparameters"])
    for key, value in changes.items():
        spec = SUPPORTED_HYPERPARAMETERS[key].spec
        assert spec.low <= value <= spec.high and state["hyperparameters"][key] == value
    if mode != "restart":
        return
    assert "num_steps_per_env" in changes  # mutation_rate 1.0: a key only a restart can set
    starts = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "start"]
    added = [a for a in starts[1]["argv"] if a not in starts[0]["argv"]]
    where = {"num_steps_per_env": "agent.runner.num_steps_per_env"}
    for key, value in changes.items():
        name = where.get(key, f"agent.runner.algorithm.{key}")
        (arg,) = [a for a in added if a.startswith(f"{name}=")]
        assert float(arg.split("=", 1)[1]) == pytest.approx(value)
    # The value typed at the first start is replaced, not left beside the new one for a parser to choose between.
    (typed,) = [a for a in starts[1]["argv"] if a.startswith("agent.runner.num_steps_per_env=")]
    assert int(typed.split("=", 1)[1]) == changes["num_steps_per_env"]


def test_the_recipient_checkpoint_is_rsl_rls_own_and_holds_the_donors_weights(population, tmp_path):
    ws, _, _, _ = population
    applied = _applied(ws)
    recipient = torch.load(ws / applied["checkpoint"], weights_only=True)
    donor_ckpt = torch.load(ws / applied["donor_checkpoint"], weights_only=True)
    layout = LAYOUTS[installed_line()]
    assert set(layout.written) <= set(recipient) and recipient["pbt"]["member"] == 1
    for key in layout.models:
        assert model_fingerprint(recipient[key]) == model_fingerprint(donor_ckpt[key])
    assert recipient["infos"][COUNTERS_KEY]["frame"] == applied["frame"]
    assert recipient["iter"] == recipient["infos"][COUNTERS_KEY]["epoch"] - 1
    # rsl_rl's own load, unchanged, of the member's best checkpoint.
    best = json.loads((ws / "members/000/best.json").read_text())[0]
    played = make_runner(small_config(), seed=3, log_dir=tmp_path)
    infos = played.load(str(ws / best["checkpoint"]))
    saved = torch.load(ws / best["checkpoint"], weights_only=True)
    assert infos[COUNTERS_KEY]["epoch"] == saved["infos"][COUNTERS_KEY]["epoch"]
    for key, weights in layout.model_weights(played.alg).items():
        assert model_fingerprint(weights) == model_fingerprint(saved[key])


def _train_here(flags: list[str], log_dir: Path) -> list:
    """Member 1 trained in this process by the CPU member's own code (its parser, config, ``train_member``);
    returns the runners it built (a restart raises ``SystemExit`` naming the new command line)."""
    from rsl_rl_runners import runner as build_runner

    from async_pbt_isaaclab.examples import rsl_rl_member
    from async_pbt_isaaclab.rsl_rl.member import train_member

    args, overrides = rsl_rl_member.build_parser().parse_with_overrides(flags)
    rsl_cfg, _, cfg = rsl_rl_member.load(args, overrides)
    runners: list = []

    def build(config: dict, folder: str) -> object:
        runners.append(build_runner(config, int(config["runner"]["seed"]), folder))
        return runners[-1]

    with pytest.MonkeyPatch.context() as patch:
        _as_from_a_shell(patch, flags)
        train_member(rsl_cfg, cfg, build, train_dir=str(log_dir), exit_on_restart=True)
    return runners


def test_the_recipients_live_values_are_the_planned_ones(population, tmp_path, monkeypatch):
    """Member 1 again, in this process, against the finished donor of the population: after its exploit (loaded
    live, or by the restarted start) the running PPO holds exactly the values its state records."""
    import ast
    import shutil

    from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
    from async_pbt_isaaclab.rsl_rl.live import live_values
    from async_pbt_isaaclab.testing.forced_exploit import FIXTURE_RULE, rsl_rl_member_args

    source, _, mode, runners = population
    if mode == "slices":
        # The recipient slice's own runner as the population left it (runners[1]: built for slot 1).
        state = json.loads((source / "members/001/state.json").read_text())
        record = json.loads((source / "members/001/record.json").read_text())
        assert state["generation"] == 1 and state["lineage"][0]["donor"] == 0
        alg = runners[1].alg
        assert live_values(alg, state["hyperparameters"]) == pytest.approx(state["hyperparameters"])
        rates = [group["lr"] for group in alg.optimizer.param_groups]
        assert (
            rates == pytest.approx([alg.learning_rate] * len(rates))
            and alg.learning_rate == record["live_learning_rate"]
        )
        return
    ws = tmp_path / "ws"
    shutil.copytree(source, ws, ignore=shutil.ignore_patterns("001", "runs"))
    monkeypatch.setenv(TEST_FIXTURE_ENV, FIXTURE_RULE)
    extra = RESTART_ONLY if mode == "restart" else ()
    flags = [*rsl_rl_member_args(ws, mode, (*MUTATIONS, *extra)), "--pbt-index", "1", "--max_iterations", "24"]
    # The donor finished when the fixture ran, which on a busy machine can be minutes before this test: its
    # heartbeat must not make it stale (a CI run failed so: no exploit, no restart).
    flags += ["--pbt-max-heartbeat-age-s", "100000000"]
    if mode == "restart":
        with pytest.raises(SystemExit, match="restart requested") as exited:
            _train_here(flags, tmp_path / "runs")
        argv = ast.literal_eval(str(exited.value).split(": ", 1)[1])
        flags += [a for a in argv if a.startswith(("--checkpoint=", "agent.runner."))]
        (draw,) = [e for e in _entries(ws / "members/001/audit.jsonl") if e["kind"] == "initial_draw"]
        assert draw.get("pinned") == ["num_steps_per_env"], "the typed rollout length was drawn"
    runner = _train_here(flags, tmp_path / "runs")[-1]
    state = json.loads((ws / "members/001/state.json").read_text())
    assert state["generation"] == 1 and state["lineage"][0]["donor"] == 0
    planned = {k: v for k, v in state["hyperparameters"].items() if k != "num_steps_per_env"}
    assert live_values(runner.alg, planned) == pytest.approx(planned)
    assert runner.cfg["num_steps_per_env"] == state["hyperparameters"].get("num_steps_per_env", 16)
