"""The observer inside real rl_games training: hook forwarding, bad objective values, exploits that must abort.

Real members (Pendulum-v1 PPO on CPU through the in-process vec-env) train a few epochs each; what is
asserted is read back from the agent, the audit log, stderr and the workspace files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

import async_pbt_isaaclab.examples as examples  # noqa: E402
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml  # noqa: E402
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EpisodeBatch  # noqa: E402
from async_pbt_isaaclab.core.workspace import fsio  # noqa: E402
from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver  # noqa: E402
from async_pbt_isaaclab.rl_games.observer import PbtObserver  # noqa: E402
from async_pbt_isaaclab.testing.tiny_agent import train_agent  # noqa: E402

YAML = Path(examples.__file__).parent / "pendulum_ppo.yaml"
FRAMES_PER_EPOCH = 16 * 128
HOOKS = ("before_init", "after_init", "process_infos", "after_steps", "after_clear_stats", "after_print_stats")


# ------------------------------------------------------------------------------------------- helpers
def start(tmp: Path, *, index: int = 1, epochs: int = 4, env_config: dict | None = None, **pbt):
    """Claim member ``index`` of a 2-member workspace under ``tmp``; returns (session, agent_cfg)."""
    from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv_for
    from async_pbt_isaaclab.member.session import start_member

    raw = load_yaml(YAML)
    raw["params"]["seed"] = 11
    raw["params"]["config"].update(max_epochs=epochs, print_stats=False, env_config=dict(env_config or {}))
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": index,
        "num_policies": 2,
        "workspace": str(tmp / "ws"),
        "interval_steps": 10**9,
        "heartbeat_interval_s": 0.0,
        "min_episodes": 8,
        "window": 32,
        "start_grace_frames": 0,
        "mutation": {"learning_rate": "mutate_float"},
        **pbt,
    }
    agent_cfg, cfg = load_population_config(raw)
    task = register_gym_vecenv_for(agent_cfg)
    return start_member(agent_cfg, cfg, train_dir=str(tmp / "runs"), task=task)


def train(agent_cfg: dict, observers: list) -> object:
    """rl_games Runner with ``MultiObserver([*observers, IsaacAlgoObserver()])``; returns the live agent."""
    return train_agent(agent_cfg, observers, isaac_stats=True)


def audit(session) -> list[dict]:
    return [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]


def record(session) -> dict:
    return json.loads((session.dir / "record.json").read_text())


class Recorder:
    """Records every hook call it receives, with its arguments."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name):
        if name not in HOOKS:
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, args))

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


# ------------------------------------------------------------------------------------------- forwarding
def test_multi_observer_forwards_every_hook_in_order_with_the_same_arguments():
    from rl_games.common.algo_observer import AlgoObserver

    a, b = Recorder(), Recorder()
    base = AlgoObserver()  # the 1.6.5 base class has no after_clear_stats: skipped, not an error
    multi = MultiObserver([a, base, b])
    algo, infos, done = object(), {"time_outs": [0]}, [1]
    multi.before_init("base", {"cfg": 1}, "exp")
    multi.after_init(algo)
    multi.process_infos(infos, done)
    multi.after_steps()
    multi.after_clear_stats()
    multi.after_print_stats(2048, 1, 0.5)
    expected = [
        ("before_init", ("base", {"cfg": 1}, "exp")),
        ("after_init", (algo,)),
        ("process_infos", (infos, done)),
        ("after_steps", ()),
        ("after_clear_stats", ()),
        ("after_print_stats", (2048, 1, 0.5)),
    ]
    assert a.calls == expected and b.calls == expected
    assert a.calls[1][1][0] is algo and a.calls[2][1][0] is infos


class TeeStderr:
    """Keeps a copy of what is written to ``sys.stderr`` (module-scoped fixtures cannot use capfd)."""

    def __init__(self):
        self.parts: list[str] = []

    def __enter__(self):
        import sys

        self.orig = sys.stderr
        sys.stderr = self
        return self

    def __exit__(self, *exc):
        import sys

        sys.stderr = self.orig

    def write(self, text):
        self.parts.append(text)
        return self.orig.write(text)

    def flush(self):
        self.orig.flush()

    def text(self) -> str:
        return "".join(self.parts)


@pytest.fixture(scope="module")
def missing_objective_run(tmp_path_factory):
    """A real member whose objective names a term its env does not emit; it also records the hooks it gets."""
    tmp = tmp_path_factory.mktemp("missing_objective")
    session, agent_cfg = start(tmp, objective="success")
    observer, recorder, counter = PbtObserver(session), Recorder(), DrainCounter()
    counter.observer = observer
    try:
        with TeeStderr() as err:
            agent = train(agent_cfg, [observer, counter, recorder])
        yield SimpleNamespace(
            session=session,
            agent=agent,
            observer=observer,
            recorder=recorder,
            stderr=err.text(),
            episodes_drained=counter.episodes,
            nonempty_drains=counter.nonempty,
        )
    finally:
        session.close()


class DrainCounter:
    """Placed after the PbtObserver: wraps the summary source it found, counting what its drains return."""

    observer: PbtObserver
    episodes = nonempty = 0

    def after_init(self, algo):
        source = self.observer.publisher.summary_source

        def drain():
            batch = source.drain()
            self.episodes += len(batch)
            self.nonempty += len(batch) > 0
            return batch

        self.observer.publisher.summary_source = SimpleNamespace(drain=drain, start_generation=source.start_generation)


def test_real_training_goes_through_every_hook_and_clear_stats_reaches_both_observers(missing_objective_run):
    run = missing_objective_run
    names = run.recorder.names()
    assert names[:2] == ["before_init", "after_init"]
    assert names.count("after_steps") == names.count("after_print_stats") == 4
    assert names.count("process_infos") == 4 * 128
    # The agent's clear_stats path ends in after_clear_stats on every observer (the 1.6.5 base lacks it).
    isaac = run.agent.algo_observer.observers[-2]
    isaac.mean_scores.update(torch.ones(1, 1))
    assert isaac.mean_scores.current_size > 0
    with mock.patch.object(run.observer, "after_clear_stats", wraps=run.observer.after_clear_stats) as ours:
        run.agent.clear_stats()
    ours.assert_called_once_with()
    assert run.recorder.names()[-1] == "after_clear_stats"
    assert isaac.mean_scores.current_size == 0  # IsaacAlgoObserver.after_clear_stats ran


def test_missing_objective_term_is_reported_once_and_training_continues(missing_objective_run):
    run = missing_objective_run
    assert run.agent.epoch_num == 4 and run.agent.frame == 4 * FRAMES_PER_EPOCH
    # Two drains returned completed episodes (after epochs 2 and 4: Pendulum episodes last 200 steps), and
    # none of them entered the window.
    assert run.nonempty_drains == 2 and run.episodes_drained == 32
    assert run.observer.publisher.window.episodes_seen == 0 and len(run.observer.publisher.window) == 0
    lines = [line for line in run.stderr.splitlines() if "is not among the completed-episode values" in line]
    assert len(lines) == 1, run.stderr
    assert "'success'" in lines[0] and "episode_return" in lines[0] and "episode_length" in lines[0]
    warnings = [e for e in audit(run.session) if e["kind"] == "warning"]
    assert len(warnings) == 1
    assert "'success'" in warnings[0]["message"] and "['episode_return', 'episode_length']" in warnings[0]["message"]
    rec = record(run.session)
    assert rec["evidence"]["values"] == [] and rec["status"] == "running"


# ------------------------------------------------------------------------------------------- NaN / inf
def test_nan_objective_values_from_the_env_are_counted_reported_once_and_kept_out(tmp_path, capfd):
    # Pendulum's info has no "is_success": every episode's term is NaN.
    session, agent_cfg = start(tmp_path, objective="is_success", env_config={"pbt_terms": ["is_success"]})
    observer = PbtObserver(session)
    try:
        agent = train(agent_cfg, [observer])
    finally:
        session.close()
    assert agent.epoch_num == 4
    assert observer.publisher.window.rejected_non_finite == 32 and len(observer.publisher.window) == 0
    err = capfd.readouterr().err
    assert err.count("had NaN or infinite values") == 1, err
    warnings = [e for e in audit(session) if e["kind"] == "warning"]
    assert len(warnings) == 1 and "'is_success'" in warnings[0]["message"]
    rec = record(session)
    assert rec["evidence"]["values"] == [] and rec["evidence"]["rejected_non_finite"] == 32


class ScriptedSource:
    """A summary source that returns prepared batches, one per drain."""

    def __init__(self, batches):
        self.batches = list(batches)
        self.generations: list[int] = []

    def drain(self):
        return self.batches.pop(0) if self.batches else EpisodeBatch()

    def start_generation(self, generation):
        self.generations.append(generation)


def test_nan_and_inf_values_never_enter_the_evidence(tmp_path, capfd):
    # Inline writer: each heartbeat's record is written before the next step, so the last one holds every batch.
    session, _ = start(tmp_path, index=0, objective="success", publish_in_background=False)
    cond = ConditionLabel(task="Pendulum-v1", objective="success")

    def batch(values):
        n = len(values)
        return EpisodeBatch(
            returns=[-1.0] * n, lengths=[200] * n, terms={"success": values}, truncated=[True] * n, condition=cond
        )

    source = ScriptedSource([batch([1.0, math.nan, 0.0]), batch([math.inf, 1.0, -math.inf]), batch([math.nan, 0.5])])
    observer = PbtObserver(session, summary_source=source)
    algo = SimpleNamespace(frame=0, epoch_num=0, last_lr=3e-4)
    try:
        observer.after_init(algo)
        for epoch in range(1, 5):
            observer.after_steps()
            algo.frame, algo.epoch_num = epoch * FRAMES_PER_EPOCH, epoch
    finally:
        session.close()
    assert list(observer.publisher.window.summary().values) == [1.0, 0.0, 1.0, 0.5]
    assert observer.publisher.window.rejected_non_finite == 4 and observer.publisher.window.episodes_seen == 8
    assert capfd.readouterr().err.count("had NaN or infinite values") == 1
    assert [e["kind"] for e in audit(session)].count("warning") == 1
    rec = record(session)
    assert rec["evidence"]["values"] == [1.0, 0.0, 1.0, 0.5] and rec["evidence"]["rejected_non_finite"] == 4
    assert all(math.isfinite(v) for v in rec["evidence"]["values"])


# ------------------------------------------------------------------------------------------- aborted exploits
def run_with_donor(tmp: Path, publish_donor, spoil):
    """Member 1 trains 4 epochs and decides once (at frame 4096); the donor's checkpoint is spoiled first."""
    session, agent_cfg = start(tmp, interval_steps=2 * FRAMES_PER_EPOCH, heartbeat_interval_s=3600.0)
    path, donor = publish_donor(session.ws.root, frame=2 * FRAMES_PER_EPOCH)
    spoil(path)
    observer = PbtObserver(session, exit_on_restart=True)  # a restart would raise SystemExit here
    try:
        agent = train(agent_cfg, [observer])
    finally:
        session.close()
    entries = audit(session)
    decisions = [e for e in entries if e["kind"] == "decision"]
    assert len(decisions) == 1
    assert decisions[0]["decision"]["outcome"] == "exploit" and decisions[0]["decision"]["donor"] == 0
    aborted = [e for e in entries if e["kind"] == "exploit_aborted"]
    assert len(aborted) == 1 and aborted[0]["donor"] == 0
    assert entries.index(aborted[0]) == entries.index(decisions[0]) + 1
    # The member kept training as it was: to the end of its run, same generation, nothing pending.
    assert agent.epoch_num == 4 and agent.frame == 4 * FRAMES_PER_EPOCH
    state = json.loads((session.dir / "state.json").read_text())
    assert state["generation"] == 0 and state["restarts"] == 0 and state["pending_exploit"] is None
    assert state["lineage"] == []
    assert not list((session.dir / "incoming").iterdir())  # no partial or unverified copy left
    assert not list((session.ws.member_dir(0) / "pins").glob("*.pin"))  # the pin was released
    return aborted[0], donor


def test_donor_checkpoint_that_disappears_aborts_the_exploit(tmp_path, publish_donor, capfd):
    aborted, donor = run_with_donor(tmp_path, publish_donor, spoil=lambda p: p.unlink())
    assert donor["checkpoint"] in aborted["reason"]
    assert "No such file" in aborted["reason"]
    assert "exploit aborted, keeps training" in capfd.readouterr().err


def test_donor_checkpoint_with_wrong_bytes_aborts_with_the_checksum_named(tmp_path, publish_donor):
    def flip_a_byte(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    aborted, donor = run_with_donor(tmp_path, publish_donor, spoil=flip_a_byte)
    assert donor["checkpoint_sha256"] in aborted["reason"]
    assert "does not match the published" in aborted["reason"]
    actual = fsio.sha256_file(tmp_path / "ws" / donor["checkpoint"])
    assert actual in aborted["reason"]


def test_donor_whose_network_does_not_fit_aborts_before_anything_is_written(tmp_path, publish_donor):
    """A donor of another architecture passes the weights-only load; the strict dry run catches it, so the
    recipient keeps training instead of crash-looping after a restart."""
    aborted, _donor = run_with_donor(tmp_path, publish_donor, spoil=lambda p: None)
    assert "does not fit this member's model" in aborted["reason"]
    assert "unexpected ['w']" in aborted["reason"] and "missing" in aborted["reason"]


def test_exploit_under_adaptive_schedule_starts_from_the_donors_live_learning_rate(tmp_path, monkeypatch):
    """Donor trains with lr_schedule: adaptive (its rate drifts from the configured 1e-3) and publishes; the
    recipient exploits it (forced by the test fixture) with a learning-rate mutation. After the restart the
    optimizer's rate is the donor's live rate at the compared entry x the mutation factor, clipped."""
    from async_pbt_isaaclab.core.decision.mutation import clip
    from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV

    monkeypatch.setenv(TEST_FIXTURE_ENV, "fixture_forced_exploit")
    # Bounds wider than the adaptive scheduler's own [1e-6, 1e-2], which the donor's rate may have reached.
    pbt = dict(
        interval_steps=2 * FRAMES_PER_EPOCH,
        rule="fixture_forced_exploit",
        mutation_rate=1.0,
        # A multiplied rate, never one resampled from the whole bounds (which would not start from the live rate).
        resample_probability=0.0,
        heartbeat_interval_s=3600.0,
        exploit_mode="restart",
        mutation={"learning_rate": {"kind": "mutate_float", "low": 1e-6, "high": 0.1}},
    )
    donor_session, donor_cfg = start(tmp_path, index=0, epochs=3, **pbt)
    try:
        train(donor_cfg, [PbtObserver(donor_session)])
    finally:
        donor_session.close()
    donor_entry = record(donor_session)["history"][0]
    live = donor_entry["hyperparameters"]["learning_rate"]
    assert donor_entry["frame"] == 2 * FRAMES_PER_EPOCH and live != 1e-3  # the adaptive schedule moved it

    session, agent_cfg = start(tmp_path, index=1, epochs=4, **pbt)
    with pytest.raises(SystemExit, match="restart requested"):
        train(agent_cfg, [PbtObserver(session, exit_on_restart=True)])
    session.close()
    decision = next(e for e in audit(session) if e["kind"] == "decision")
    assert decision["decision"]["outcome"] == "exploit" and decision["decision"]["donor_entry"] == donor_entry
    assert decision["start_hyperparameters"]["learning_rate"] == live
    (change,) = [c for c in decision["changes"] if c["key"] == "learning_rate"]
    spec = session.cfg.mutation["learning_rate"]
    expected = clip(live * change["factor"], spec.low, spec.high)
    assert decision["new_hyperparameters"]["learning_rate"] == pytest.approx(expected, rel=1e-12)

    class AfterRestore:
        def after_init(self, algo):
            self.last_lr = algo.last_lr
            self.optimizer_lr = [g["lr"] for g in algo.optimizer.param_groups]

    again, agent_cfg = start(tmp_path, index=1, epochs=4, **pbt)
    assert again.start_mode == "exploit_applied"
    seen = AfterRestore()
    try:
        train(agent_cfg, [PbtObserver(again), seen])
    finally:
        again.close()
    assert seen.last_lr == pytest.approx(expected, rel=1e-12)
    assert seen.optimizer_lr == [pytest.approx(expected, rel=1e-12)]


# ------------------------------------------------------------------------------------------- explore weights
class Fingerprints:
    """What each training step starts from: the model's fingerprint as an epoch is entered (after the restore at
    start, and after the previous epoch's ``after_print_stats``, where an in-process explore loads its weights), and
    the fingerprint of its parameters alone at ``after_steps`` (the rollout moves the normalisers' statistics, not
    the parameters). Observers after the PbtObserver."""

    def __init__(self):
        self.entering: list[tuple[int, str]] = []
        self.rollout_params: list[tuple[int, str]] = []

    def _entering(self):
        from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint

        self.entering.append((int(self.algo.frame), model_fingerprint(self.algo.model.state_dict())))

    def after_init(self, algo):
        self.algo = algo
        self._entering()

    def after_print_stats(self, frame, epoch_num, total_time):
        self._entering()

    def after_steps(self):
        params = dict(self.algo.model.named_parameters())
        self.rollout_params.append((int(self.algo.frame), params_fingerprint(params)))


def params_fingerprint(state: dict) -> str:
    from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint

    return model_fingerprint({k: v for k, v in state.items() if not k.split(".")[-1].startswith(("running", "count"))})


@pytest.mark.parametrize("mode", ["inprocess", "restart"])
def test_an_explore_records_the_weights_training_continues_from(tmp_path, monkeypatch, publish_donor, mode):
    """An explore decided at frame 4096 (after epoch 2's rollout) is carried out once that epoch's update is done.
    Its ``exploit_applied`` entry names the checkpoint published at the decision and the fingerprint of the weights
    the next training step runs with; both are those weights (the checkpoint's model has that fingerprint)."""
    from async_pbt_isaaclab.core.pbt_section import TEST_FIXTURE_ENV
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint
    from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint

    monkeypatch.setenv(TEST_FIXTURE_ENV, "fixture_explore_every_decision")
    pbt = dict(
        interval_steps=2 * FRAMES_PER_EPOCH,
        rule="fixture_explore_every_decision",
        mutation_rate=1.0,
        heartbeat_interval_s=3600.0,
        exploit_mode=mode,
        restart_grace_frames=10**9,
        # The yaml's learning rate, far from its bounds, and a fixed population seed: the explore changes it.
        start_spread=0.0,
        seed=7,
    )
    session, agent_cfg = start(tmp_path, epochs=4, **pbt)
    publish_donor(session.ws.root, frame=2 * FRAMES_PER_EPOCH)  # a live peer with evidence
    seen = Fingerprints()
    try:
        if mode == "inprocess":
            train(agent_cfg, [PbtObserver(session), seen])
        else:
            with pytest.raises(SystemExit, match="restart requested"):
                train(agent_cfg, [PbtObserver(session, exit_on_restart=True), seen])
    finally:
        session.close()
    if mode == "restart":  # the restarted process: a new start applies the pending explore
        session, agent_cfg = start(tmp_path, epochs=4, **pbt)
        try:
            train(agent_cfg, [PbtObserver(session), seen])
        finally:
            session.close()
    entries = audit(session)
    decision = next(e for e in entries if e["kind"] == "decision")
    assert decision["decision"]["outcome"] == "explore" and decision["changes"]
    (applied,) = [e for e in entries if e["kind"] == "exploit_applied"]
    assert applied["path"] == mode and applied["frame"] == 3 * FRAMES_PER_EPOCH
    # The next training step (epoch 4's rollout and update) runs with the recorded weights...
    entering = [fp for frame, fp in seen.entering if frame == 3 * FRAMES_PER_EPOCH]
    assert entering[-1] == applied["model_sha256"]
    # ...which are those of the checkpoint the entry names as its source, published at the decision (frame 4096)...
    source = load_checkpoint(session.ws.root / applied["donor_checkpoint"], expected_sha256=applied["donor_sha256"])
    assert model_fingerprint(source["model"]) == applied["model_sha256"] and applied["donor_frame"] == 4096
    rollout = dict(seen.rollout_params)
    assert rollout[3 * FRAMES_PER_EPOCH] == params_fingerprint(source["model"]) == rollout[2 * FRAMES_PER_EPOCH]
    # (epoch 4's rollout ran with the parameters of epoch 3's: the update in which the decision fell is not kept)
    restored = [e for e in entries if e["kind"] == "restored" and e["mode"] in ("exploit_inprocess", "exploit_applied")]
    assert restored[-1]["model_sha256"] == applied["model_sha256"]
    from async_pbt_isaaclab import cli

    assert cli.main(["audit", str(session.ws.root)]) == 0
