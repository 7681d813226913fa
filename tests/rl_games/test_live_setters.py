"""One setter per live hyperparameter, used by every path that sets one on a running agent.

A real rl_games PPO agent (Pendulum-v1, the bounded exploration network, the adaptive schedule) is taken through
each path a member changes hyperparameters by: the in-process exploit, the restore after an exploit restart, the
restore at a resume, and the schedule replay. Each path is given different values for every key of the live table,
so a key one path forgot keeps the previous path's value and fails the comparison. After each, the running agent's
values (``last_lr`` and every optimizer group's rate, ``e_clip``, ``entropy_coef``, ``mini_epochs_num``, gamma/tau,
the scheduler's ``kl_threshold``, the network's log-std bounds ...) must be the recorded ones.
"""

from __future__ import annotations

import pytest

from async_pbt_isaaclab.core.agent_config import load_population_config
from async_pbt_isaaclab.core.decision.generation import PendingExploit
from async_pbt_isaaclab.core.decision.mutation import SUPPORTED_HYPERPARAMETERS
from async_pbt_isaaclab.core.state.evidence import EpisodeBatch
from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.state.schedule import Schedule, ScheduleStep
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.core.workspace.state_files import save_state
from async_pbt_isaaclab.member.executor import MemberExecutor
from async_pbt_isaaclab.member.publication import Publication
from async_pbt_isaaclab.member.session import start_member
from async_pbt_isaaclab.rl_games.checkpoint import save_checkpoint
from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration
from async_pbt_isaaclab.rl_games.exploration_config import NETWORK_NAME
from async_pbt_isaaclab.rl_games.live import BOUND_KEYS, LIVE_SETTERS, live_values
from async_pbt_isaaclab.rl_games.observer import PbtObserver
from async_pbt_isaaclab.rl_games.schedule_replay import ScheduleReplayObserver
from async_pbt_isaaclab.rl_games.trainer import RlGamesTrainer
from async_pbt_isaaclab.testing.tiny_agent import small_pendulum_agent_cfg, train_agent

PATHS = ("inprocess_exploit", "restart_restore", "resume", "replay")


def values_for(path: str) -> dict[str, object]:
    """Values of every live key, distinct per path and from the agent's yaml values, inside the default bounds."""
    i = PATHS.index(path) + 1
    return {
        "learning_rate": 1e-4 * (i + 1),
        "e_clip": 0.1 + 0.02 * i,
        "entropy_coef": 1e-3 * i,
        "critic_coef": 1.0 + 0.5 * i,
        "bounds_loss_coef": 1e-4 * i,
        "grad_norm": 0.5 + 0.1 * i,
        "gamma": 0.95 + 0.01 * i,
        "tau": 0.9 + 0.01 * i,
        "mini_epochs": 2 + i,
        "kl_threshold": 0.005 + 0.002 * i,
        "network.log_std_bounds.low": -5.0 - 0.25 * i,
        "network.log_std_bounds.high": 0.5 + 0.1 * i,
    }


def agent_yaml(tmp_path) -> dict:
    cfg = small_pendulum_agent_cfg(tmp_path, "live", max_epochs=1, lr_schedule="adaptive", kl_threshold=0.008)
    cfg["params"]["network"]["name"] = NETWORK_NAME
    cfg["params"]["network"]["log_std_bounds"] = {"low": -4.0, "high": 1.0}
    return cfg


@pytest.fixture(scope="module")
def algo(tmp_path_factory):
    register_bounded_exploration()
    return train_agent(agent_yaml(tmp_path_factory.mktemp("agent")))


def session_for(tmp_path, state: MemberState | None = None):
    """A claimed member (index 0 of 2) whose population mutates every live key; ``state`` is saved first."""
    raw = agent_yaml(tmp_path)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": 0,
        "num_policies": 2,
        "workspace": str(tmp_path / "ws"),
        "interval_steps": 10**9,
        "mutation": {key: SUPPORTED_HYPERPARAMETERS[key].spec.kind for key in LIVE_SETTERS},
    }
    agent_cfg, cfg = load_population_config(raw)
    if state is not None:
        ws = Workspace(cfg.workspace_path())
        ws.ensure(2, "episode_return", "Pendulum-v1")
        save_state(ws.member_dir(0) / "state.json", state)
    session, _ = start_member(agent_cfg, cfg, train_dir=str(tmp_path / "runs"), task="Pendulum-v1")
    return session


def own_checkpoint(session, algo, values) -> tuple[str, str]:
    """The agent's own weights saved as a member checkpoint whose ``pbt.last_lr`` is ``values``' rate."""
    folder = session.ws.member_dir(0) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "g0001_f000000002048.pth"
    state = RlGamesTrainer(algo).full_state()
    state["pbt"] = {"last_lr": values["learning_rate"], "hyperparameters": dict(values)}
    return session.ws.relative(path), save_checkpoint(path, state)


def assert_agent_holds(algo, values) -> None:
    got = live_values(algo, LIVE_SETTERS)
    assert got.keys() == values.keys()
    for key, value in values.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key
    assert type(got["mini_epochs"]) is int
    assert [g["lr"] for g in algo.optimizer.param_groups] == pytest.approx([values["learning_rate"]])
    assert algo.scheduler.kl_threshold == pytest.approx(values["kl_threshold"])


def test_the_live_table_covers_every_live_hyperparameter():
    live = {key for key, default in SUPPORTED_HYPERPARAMETERS.items() if default.live}
    assert set(LIVE_SETTERS) == live | set(BOUND_KEYS)


def test_every_path_leaves_the_recorded_values_on_the_running_agent(algo, tmp_path):
    class NoEpisodes:
        def drain(self):
            return EpisodeBatch()

        def start_generation(self, generation):
            pass

    # 1. In-process exploit: the executor loads the recipient state with a pending exploit naming the values.
    values = values_for("inprocess_exploit")
    session = session_for(tmp_path / "inprocess")
    try:
        rel, sha = own_checkpoint(session, algo, values)
        agent = RlGamesTrainer(algo, NoEpisodes())
        publication = Publication(session.cfg, session.member, session.condition, session.state.generation)
        publication.summary_source = agent.summary_source()
        pending = PendingExploit(
            rel, sha, 1, agent.frame, hyperparameters=values, last_lr=values["learning_rate"], path="inprocess"
        )
        session.state.pending_exploit = pending
        MemberExecutor(session, agent, publication).load_in_process(pending, agent.full_state())
    finally:
        session.close()
    assert_agent_holds(algo, values)

    # 2. and 3. The restore at a start: after an exploit restart (pending exploit) and at a resume.
    for path in ("restart_restore", "resume"):
        values = values_for(path)
        folder = tmp_path / path
        probe = session_for(folder)  # creates the workspace; its state is replaced below
        rel, sha = own_checkpoint(probe, algo, values)
        probe.close()
        state = MemberState(member=0, hyperparameters=dict(values), experiment_name="live", last_checkpoint=rel)
        state.last_checkpoint_sha256 = sha
        if path == "restart_restore":
            state.pending_exploit = PendingExploit(rel, sha, 1, 2048, hyperparameters=values, path="restart")
        session = session_for(folder, state)
        try:
            assert session.start_mode == ("exploit_applied" if path == "restart_restore" else "resume")
            observer = PbtObserver(session, summary_source=NoEpisodes())
            observer.after_init(algo)  # the agent was built with other values: only the setters can explain these
        finally:
            session.close()
        assert_agent_holds(algo, values)

    # 4. The schedule replay, at the epoch boundary its step names.
    values = values_for("replay")
    replay = ScheduleReplayObserver(Schedule(0, (ScheduleStep(0, dict(values), 0, 0, 0, "start"),)), verbose=False)
    replay.after_init(algo)
    replay.after_steps()
    assert replay.applied and replay.applied[0][1] == values
    assert_agent_holds(algo, values)


def test_the_rl_games_trainer_is_a_member_trainer_and_says_what_it_sets_live(algo):
    """The member loop drives any ``Trainer``; rl_games' says it can set every key of the live table on this agent
    (a bounded exploration network: the log-std bounds too), load weights live and restart."""
    from async_pbt_isaaclab.member.trainer import Trainer

    trainer = RlGamesTrainer(algo)
    assert isinstance(trainer, Trainer)
    abilities = trainer.abilities()
    assert abilities.live_keys == frozenset(LIVE_SETTERS) and abilities.loads_weights and abilities.restarts
    assert abilities.blockers(["gamma", "horizon_length"]) == [
        "horizon_length cannot be set on a running rl_games agent"
    ]
    assert trainer.learning_rate() == algo.last_lr and trainer.optimizer_learning_rates() == [algo.last_lr]
