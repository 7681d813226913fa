"""The inheritance contract, field by field, on real rl_games agents (docs/checkpoint-restart.md has the table).

Two a2c_continuous agents (Pendulum-v1, in-process vec-env, different seeds) train a few epochs each so
that normalisers, sigma and Adam moments exist and differ; the donor trains 2 epochs, the recipient 3,
so every counter differs too. ``build_recipient_state`` must take the network, normalisers, sigma,
optimizer moments and env_state from the donor; epoch, frame and last_mean_rewards from the recipient;
and the learning rate from the new hyperparameters.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_games_line import restore_with_plain_rl_games

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

import async_pbt_isaaclab.examples as examples  # noqa: E402
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml, validate_agent_config  # noqa: E402
from async_pbt_isaaclab.core.config import ConfigError  # noqa: E402
from async_pbt_isaaclab.core.decision.generation import PendingExploit  # noqa: E402
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict  # noqa: E402
from async_pbt_isaaclab.core.state.member_state import MemberState  # noqa: E402
from async_pbt_isaaclab.core.workspace import fsio  # noqa: E402
from async_pbt_isaaclab.core.workspace.layout import Workspace  # noqa: E402
from async_pbt_isaaclab.core.workspace.state_files import save_state  # noqa: E402
from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from async_pbt_isaaclab.rl_games.inheritance import (  # noqa: E402
    DONOR_KEYS,
    RECIPIENT_KEYS,
    build_recipient_state,
    model_fingerprint,
)
from async_pbt_isaaclab.testing.tiny_agent import train_agent  # noqa: E402

YAML = Path(examples.__file__).parent / "pendulum_ppo.yaml"
NEW_LR = 2.5e-4
NORMALISER_KEYS = (
    "running_mean_std.running_mean",
    "running_mean_std.running_var",
    "running_mean_std.count",
    "value_mean_std.running_mean",
    "value_mean_std.running_var",
    "value_mean_std.count",
)


def agent_yaml(tmp: Path, name: str, seed: int, epochs: int, **config) -> dict:
    cfg = load_yaml(YAML)
    cfg["params"]["seed"] = seed
    cfg["params"]["config"].update(
        max_epochs=epochs, train_dir=str(tmp), full_experiment_name=name, print_stats=False, save_best_after=0, **config
    )
    return cfg


def train(cfg: dict, observers=()) -> object:
    """Build an agent with the rl_games Runner, train ``max_epochs`` epochs; returns the live agent."""
    agent = train_agent(cfg, observers, isaac_stats=True)
    agent.writer.flush()
    return agent


def snapshot(agent) -> dict:
    """A deep copy of an agent's full state (the live state dict shares storage with the model)."""
    return copy.deepcopy(agent.get_full_state_weights())


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inherit")
    donor = train(agent_yaml(tmp, "donor", seed=1, epochs=2))
    recipient = train(agent_yaml(tmp, "recipient", seed=2, epochs=3))
    donor_state = snapshot(donor)
    # A donor env_state carrying its curriculum stage (the gym env has none; Isaac Lab envs may).
    donor_state["env_state"] = dict(donor_state["env_state"], curriculum_stage=3)
    recipient_state = snapshot(recipient)
    return tmp, donor, recipient, donor_state, recipient_state


def counters_of(state: dict) -> dict:
    return {"epoch": state["epoch"], "frame": state["frame"], "last_mean_rewards": state["last_mean_rewards"]}


META = {
    "member": 1,
    "generation": 4,
    "hyperparameters": {"learning_rate": NEW_LR, "gamma": 0.99},
    "lineage": [{"generation": 4, "donor": 0}],
    "inherited_from": {"donor": 0},
}


@pytest.fixture
def built(agents):
    _, _, _, donor_state, recipient_state = agents
    return build_recipient_state(donor_state, counters_of(recipient_state), META, learning_rate=NEW_LR)


def test_agents_differ_in_every_inherited_field(agents):
    """Guard: the field-by-field checks below mean something only if donor and recipient differ."""
    _, _, _, d, r = agents
    for key in ("a2c_network.actor_mlp.0.weight", *NORMALISER_KEYS[:2], *NORMALISER_KEYS[3:5]):
        assert not torch.equal(d["model"][key], r["model"][key]), key
    assert (d["epoch"], d["frame"]) == (2, 4096) and (r["epoch"], r["frame"]) == (3, 6144)
    assert d["last_mean_rewards"] != r["last_mean_rewards"]
    assert d["optimizer"]["state"][0]["step"] != r["optimizer"]["state"][0]["step"]


def test_network_weights_sigma_and_normalisers_come_from_the_donor(agents, built):
    _, _, _, donor_state, _ = agents
    model = built["model"]
    assert model.keys() == donor_state["model"].keys()
    for key in ("a2c_network.sigma", *NORMALISER_KEYS):
        assert key in model, key
    for key, value in model.items():
        assert torch.equal(value, donor_state["model"][key]), key


def test_optimizer_moments_come_from_the_donor_with_the_new_learning_rate(agents, built):
    _, _, _, donor_state, _ = agents
    opt, donor_opt = built["optimizer"], donor_state["optimizer"]
    assert opt["state"].keys() == donor_opt["state"].keys() and opt["state"]
    for idx, moments in opt["state"].items():
        assert set(moments) >= {"exp_avg", "exp_avg_sq", "step"}
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(moments[name], donor_opt["state"][idx][name]), (idx, name)
    assert len(opt["param_groups"]) == len(donor_opt["param_groups"])
    for group, donor_group in zip(opt["param_groups"], donor_opt["param_groups"], strict=True):
        assert group["lr"] == NEW_LR
        assert {k: v for k, v in group.items() if k != "lr"} == {k: v for k, v in donor_group.items() if k != "lr"}
    # The donor's dict is not modified in place.
    assert donor_opt["param_groups"][0]["lr"] != NEW_LR


def test_counters_come_from_the_recipient(agents, built):
    _, _, _, _, recipient_state = agents
    assert built["epoch"] == recipient_state["epoch"] == 3
    assert built["frame"] == recipient_state["frame"] == 6144
    assert built["last_mean_rewards"] == recipient_state["last_mean_rewards"]


def test_env_state_comes_from_the_donor(agents, built):
    _, _, _, donor_state, _ = agents
    assert built["env_state"] == donor_state["env_state"]
    assert built["env_state"]["curriculum_stage"] == 3


def test_pbt_metadata_is_a_copy(agents):
    _, _, _, donor_state, recipient_state = agents
    meta = copy.deepcopy(META)
    state = build_recipient_state(donor_state, counters_of(recipient_state), meta, learning_rate=NEW_LR)
    assert state["pbt"] == META
    meta["lineage"].append({"generation": 5})
    assert state["pbt"] == META
    assert set(state) == {k for k in DONOR_KEYS if k in donor_state} | set(RECIPIENT_KEYS) | {"pbt"}


def test_scaler_and_asymmetric_critic_come_from_the_donor():
    """Keys the Pendulum agent has not (mixed precision, central value net): taken from the donor when present."""
    donor = {
        "model": {"w": torch.ones(2)},
        "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": [0]}]},
        "scaler": {"scale": 1024.0},
        "assymetric_vf_nets": {"v": torch.zeros(3)},
        "assymetric_vf_optimizer": {"state": {}, "param_groups": []},
        "central_val_stats": {"m": torch.ones(1)},
        "env_state": None,
        "epoch": 9,
        "frame": 99,
        "last_mean_rewards": 5.0,
    }
    state = build_recipient_state(donor, {"epoch": 1, "frame": 10, "last_mean_rewards": -1.0}, {})
    for key in ("scaler", "assymetric_vf_nets", "assymetric_vf_optimizer", "central_val_stats", "env_state"):
        assert state[key] is donor[key], key
    assert (state["epoch"], state["frame"], state["last_mean_rewards"]) == (1, 10, -1.0)
    # No learning_rate among the new hyperparameters: the donor's optimizer lr is left as it was.
    assert state["optimizer"]["param_groups"][0]["lr"] == 1e-3


def test_refuses_incomplete_inputs(agents):
    _, _, _, donor_state, recipient_state = agents
    with pytest.raises(KeyError, match="last_mean_rewards"):
        build_recipient_state(donor_state, {"epoch": 1, "frame": 2}, {})
    no_opt = {k: v for k, v in donor_state.items() if k != "optimizer"}
    with pytest.raises(KeyError, match="optimizer"):
        build_recipient_state(no_opt, counters_of(recipient_state), {})


def test_live_recipient_takes_the_donors_weights_and_keeps_its_frame(agents, built):
    _, _donor, recipient, donor_state, recipient_state = agents
    recipient.set_full_state_weights(built, set_epoch=True)
    live = recipient.model.state_dict()
    for key, value in donor_state["model"].items():
        assert torch.equal(live[key], value), key
    assert model_fingerprint(live) == model_fingerprint(donor_state["model"])
    assert recipient.frame == recipient_state["frame"] and recipient.epoch_num == recipient_state["epoch"]
    assert recipient.last_mean_rewards == recipient_state["last_mean_rewards"]
    assert [g["lr"] for g in recipient.optimizer.param_groups] == [NEW_LR]
    live_opt = recipient.optimizer.state_dict()["state"]
    for idx, moments in donor_state["optimizer"]["state"].items():
        assert torch.equal(live_opt[idx]["exp_avg_sq"], moments["exp_avg_sq"])


def test_plain_rl_games_restore_accepts_the_saved_recipient_checkpoint(agents, built, tmp_path):
    _, _, recipient, donor_state, recipient_state = agents
    path = tmp_path / "recipient.pth"
    sha = save_checkpoint(path, built)
    assert sha == fsio.sha256_file(path)
    with torch.no_grad():
        for p in recipient.model.parameters():
            p.add_(1.0)
    recipient.frame = 0
    restore_with_plain_rl_games(recipient, path)  # rl_games' own loader (full pickle); the "pbt" key is ignored
    assert model_fingerprint(recipient.model.state_dict()) == model_fingerprint(donor_state["model"])
    assert recipient.frame == recipient_state["frame"]
    # And our safe loader reads the same file back, metadata included.
    loaded = load_checkpoint(path, expected_sha256=sha)
    assert loaded["pbt"] == META and loaded["frame"] == recipient_state["frame"]


# ------------------------------------------------------------------------------- learning rate schedules
def _pending_exploit(tmp: Path, schedule: str, recipient_ckpt: dict, epochs_before: int):
    """The workspace an exploit leaves before its exec: recipient checkpoint + state.json with a pending exploit."""
    raw = agent_yaml(tmp, "member", seed=5, epochs=epochs_before + 1, lr_schedule=schedule, learning_rate=1e-3)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": 0,
        "num_policies": 2,
        "workspace": str(tmp / "ws"),
        "interval_steps": 10**9,
        "heartbeat_interval_s": 3600,
        "mutation": {"learning_rate": "mutate_float"},
    }
    agent_cfg, cfg = load_population_config(raw)
    ws = Workspace(cfg.workspace_path())
    ws.ensure(cfg.num_policies, "episode_return", "Pendulum-v1")
    mdir = ws.member_dir(0)
    (mdir / "checkpoints").mkdir(parents=True)
    path = mdir / "checkpoints" / "g0001_f000000006144.pth"
    sha = save_checkpoint(path, recipient_ckpt)
    rel = ws.relative(path)
    save_state(
        mdir / "state.json",
        MemberState(
            member=0,
            generation=1,
            generation_start_frame=6144,
            restarts=1,
            process_starts=1,
            hyperparameters={"learning_rate": NEW_LR},
            experiment_name="member",
            last_checkpoint=rel,
            last_checkpoint_sha256=sha,
            pending_exploit=PendingExploit(
                checkpoint=rel, sha256=sha, generation=1, frame=6144, hyperparameters={"learning_rate": NEW_LR}
            ),
        ),
    )
    return agent_cfg, cfg, mdir


def _restart_into(tmp: Path, schedule: str, recipient_ckpt: dict, epochs_before: int):
    """What an exploit restart does: state.json with a pending exploit, start_member, observer restore, train."""
    from async_pbt_isaaclab.member.session import start_member
    from async_pbt_isaaclab.rl_games.observer import PbtObserver

    agent_cfg, cfg, mdir = _pending_exploit(tmp, schedule, recipient_ckpt, epochs_before)
    session, agent_cfg = start_member(agent_cfg, cfg, train_dir=str(tmp), task="Pendulum-v1")
    assert session.start_mode == "exploit_applied"
    assert agent_cfg["params"]["config"]["learning_rate"] == NEW_LR  # the restart's config carries the new lr

    class AfterRestore:
        """Runs after PbtObserver.after_init (the restore): what the agent starts training with."""

        def after_init(self, algo):
            self.last_lr = algo.last_lr
            self.optimizer_lr = [g["lr"] for g in algo.optimizer.param_groups]
            self.frame, self.epoch = algo.frame, algo.epoch_num

    observer, seen = PbtObserver(session), AfterRestore()
    try:
        agent = train(agent_cfg, observers=[observer, seen])
    finally:
        session.close()
    restored = [json.loads(line) for line in (mdir / "audit.jsonl").read_text().splitlines()]
    restored = [e for e in restored if e["kind"] == "restored"]
    return agent, seen, restored


@pytest.mark.parametrize("schedule", ["constant", "adaptive"])
def test_learning_rate_schedules_after_restore(agents, schedule, tmp_path):
    _, _, _, donor_state, recipient_state = agents
    ckpt = build_recipient_state(donor_state, counters_of(recipient_state), META, learning_rate=NEW_LR)
    agent, seen, restored = _restart_into(tmp_path, schedule, ckpt, recipient_state["epoch"])
    # Right after the restore, before any update: the new hyperparameter everywhere.
    assert seen.last_lr == NEW_LR and seen.optimizer_lr == [NEW_LR]
    assert (seen.frame, seen.epoch) == (recipient_state["frame"], recipient_state["epoch"])
    assert len(restored) == 1 and restored[0]["last_lr"] == NEW_LR and restored[0]["optimizer_lr"] == [NEW_LR]
    assert restored[0]["model_sha256"] == model_fingerprint(donor_state["model"])
    # One training epoch later.
    assert agent.epoch_num == recipient_state["epoch"] + 1
    assert agent.frame == recipient_state["frame"] + 2048
    lrs = [g["lr"] for g in agent.optimizer.param_groups]
    if schedule == "constant":
        assert agent.last_lr == NEW_LR and lrs == [NEW_LR]
    else:
        # The adaptive scheduler moved on from the new value (x or / 1.5 per minibatch) and the optimizer follows.
        assert lrs == [agent.last_lr]
        assert 1e-6 <= agent.last_lr <= 1e-2


def test_linear_schedule_is_refused_with_the_key_named():
    raw = load_yaml(YAML)
    raw["params"]["config"]["lr_schedule"] = "linear"
    cfg = population_config_from_dict(
        {"enabled": True, "num_policies": 2, "mutation": {"learning_rate": "mutate_float"}}
    )
    with pytest.raises(ConfigError) as err:
        validate_agent_config(raw, cfg)
    assert "params.config.lr_schedule" in str(err.value) and "linear" in str(err.value)
    # The same through the override path a user takes on the command line.
    with pytest.raises(ConfigError, match=r"params\.config\.lr_schedule"):
        load_population_config(
            load_yaml(YAML),
            ["agent.pbt.enabled=true", "agent.pbt.num_policies=2", "agent.params.config.lr_schedule=linear"],
        )
    # Constant and adaptive are accepted.
    for schedule in ("constant", "adaptive", None):
        raw["params"]["config"]["lr_schedule"] = schedule
        validate_agent_config(raw, cfg)


def test_numpy_last_mean_rewards_is_kept_as_the_recipients_value(agents):
    """rl_games writes last_mean_rewards as numpy float32; the recipient's value passes through unchanged."""
    _, _, _, donor_state, recipient_state = agents
    assert isinstance(recipient_state["last_mean_rewards"], (np.floating, float))
    state = build_recipient_state(donor_state, counters_of(recipient_state), {})
    assert state["last_mean_rewards"] is recipient_state["last_mean_rewards"]


def test_sigma_flag_does_not_overwrite_the_inherited_sigma_after_a_restart(agents, tmp_path):
    """The restart keeps every flag, ``--sigma`` included; rl_games applies it after our restore in after_init.

    ``train_member`` must pass it on a fresh start only, or every exploit would replace the donor's sigma.
    """
    from async_pbt_isaaclab.rl_games.runner import train_member

    _, _, _, donor_state, recipient_state = agents
    donor_state = copy.deepcopy(donor_state)
    donor_state["model"]["a2c_network.sigma"].fill_(-0.7)
    ckpt = build_recipient_state(donor_state, counters_of(recipient_state), META, learning_rate=NEW_LR)
    agent_cfg, cfg, _ = _pending_exploit(tmp_path, "adaptive", ckpt, recipient_state["epoch"])

    class SigmaAtFirstStep:
        """The sigma the agent trains its first rollout with (after the Runner's sigma override)."""

        sigma = None

        def process_infos(self, infos, done_indices):
            if self.sigma is None:
                self.sigma = self.algo.model.a2c_network.sigma.detach().clone()

        def after_init(self, algo):
            self.algo = algo

    from rl_games.common.algo_observer import IsaacAlgoObserver

    probe = SigmaAtFirstStep()
    threads = torch.get_num_threads()
    try:
        observer = train_member(
            agent_cfg,
            cfg,
            train_dir=str(tmp_path),
            task="Pendulum-v1",
            sigma=0.3,
            extra_observers=[IsaacAlgoObserver(), probe],
        )
    finally:
        torch.set_num_threads(threads)
    assert observer.session.start_mode == "exploit_applied"
    assert torch.equal(probe.sigma, torch.full_like(probe.sigma, -0.7))
