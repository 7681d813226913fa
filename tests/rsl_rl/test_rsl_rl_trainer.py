"""The rsl_rl trainer adapter against the real rsl_rl of the installed line: counters, checkpoints in rsl_rl's own
layout (loaded by rsl_rl's own ``runner.load``), safe loading, fit check, recipient state, loads between updates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rsl_rl_runners import small_config

from async_pbt_isaaclab.checkpoint_io import CheckpointError, DisallowedGlobalError, read_pbt_metadata
from async_pbt_isaaclab.member.trainer import Trainer, TrainerCounters
from async_pbt_isaaclab.rsl_rl.live import LIVE_SETTERS
from async_pbt_isaaclab.rsl_rl.release import installed_line
from async_pbt_isaaclab.rsl_rl.trainer import RslRlTrainer, StopTraining

pytestmark = pytest.mark.rslrl_compat

FRAMES = 4 * 8
"""Frames of one iteration of the small config (4 envs x 8 steps)."""


class Recorder:
    """An iteration listener that records what the trainer says at each event; optionally acts at one."""

    def __init__(self, trainer: RslRlTrainer, at_update: dict[int, object] | None = None):
        self.trainer, self.at_update, self.seen = trainer, at_update or {}, []

    def rollout_done(self) -> None:
        t = self.trainer
        self.seen.append(("rollout", t.epoch, t.frame, t.fingerprint()))

    def update_done(self) -> None:
        t = self.trainer
        self.seen.append(("update", t.epoch, t.frame, t.training_ends_now()))
        action = self.at_update.get(t.epoch)
        if callable(action):
            action()


def save(trainer: RslRlTrainer, state: dict, path: Path) -> str:
    import hashlib

    data = trainer.checkpoint_bytes(state)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def test_the_trainer_is_the_protocols(make_runner):
    runner = make_runner()
    trainer = RslRlTrainer(runner)
    assert isinstance(trainer, Trainer) and trainer.name == "rsl_rl"
    abilities = trainer.abilities()
    assert abilities.live_keys == frozenset(LIVE_SETTERS) and abilities.loads_weights and abilities.restarts
    with pytest.raises(ValueError, match="already a member's"):
        RslRlTrainer(runner)


def test_counters_are_the_members_own_and_no_iteration_index_repeats_across_a_restart(make_runner, tmp_path):
    first = RslRlTrainer(make_runner(seed=0))
    events = Recorder(first)
    first.attach(events)
    first.train(3)
    assert first.counters() == TrainerCounters(frame=3 * FRAMES, epoch=3)
    # rsl_rl's own counter holds the last index run, not the next one.
    assert first.runner.current_learning_iteration == 2
    assert [e[1:3] for e in events.seen if e[0] == "rollout"] == [(0, 0), (1, FRAMES), (2, 2 * FRAMES)]
    assert [e[3] for e in events.seen if e[0] == "update"][-1].startswith("training ends this iteration")

    state = first.full_state()
    assert state["iter"] == 2  # what rsl_rl's own save would have written
    sha = save(first, state, tmp_path / "member.pt")
    log_dir = tmp_path / "run"
    second = RslRlTrainer(make_runner(seed=1, log_dir=log_dir), line=installed_line())
    second.load(second.read_checkpoint(tmp_path / "member.pt", sha, trusted=False), {})
    assert second.counters() == first.counters() and second.fingerprint() == first.fingerprint()

    resumed = Recorder(second)
    second.attach(resumed)
    second.train(5)
    # Iterations 3 and 4 ran, each once: rsl_rl's loop started at the member's next index.
    assert [e[1] for e in resumed.seen if e[0] == "rollout"] == [3, 4]
    assert second.counters() == TrainerCounters(frame=5 * FRAMES, epoch=5)
    assert second.runner.current_learning_iteration == 4
    assert (log_dir / "model_4.pt").is_file() and not (log_dir / "model_2.pt").exists()


def test_a_member_checkpoint_plays_with_rsl_rls_own_load(make_runner, tmp_path):
    member = RslRlTrainer(make_runner(seed=0))
    member.attach(Recorder(member))
    member.train(2)
    metadata = {"member": 3, "generation": 1}
    state = member.recipient_state(member.full_state(), member.counters(), metadata, member.learning_rate())
    save(member, state, tmp_path / "best.pt")

    player = make_runner(seed=7)
    infos = player.load(str(tmp_path / "best.pt"))  # rsl_rl's own load, as Isaac Lab's and mjlab's play scripts
    assert infos == state["infos"] and player.current_learning_iteration == 1
    assert RslRlTrainer(player).fingerprint() == member.fingerprint()
    obs = member.runner.env.get_observations()
    with torch.no_grad():
        assert torch.equal(player.get_inference_policy()(obs), member.runner.get_inference_policy()(obs))
    assert read_pbt_metadata(torch.load(tmp_path / "best.pt", weights_only=True)) == metadata


class Planted:
    def __reduce__(self):
        return (print, ("planted code ran",))


def test_safe_load_refuses_a_planted_global_and_checks_the_checksum(make_runner, tmp_path):
    member = RslRlTrainer(make_runner())
    state = member.full_state()
    path = tmp_path / "planted.pt"
    torch.save(dict(state, infos={"x": Planted()}), path)
    with pytest.raises(DisallowedGlobalError, match="print"):
        member.read_checkpoint(path, None, trusted=False)
    sha = save(member, state, tmp_path / "ok.pt")
    with pytest.raises(Exception, match="does not match"):
        member.read_checkpoint(tmp_path / "ok.pt", "0" * 64, trusted=False)
    assert member.read_checkpoint(tmp_path / "ok.pt", sha, trusted=False)["iter"] == 0
    torch.save({"weights": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not an rsl_rl checkpoint: missing key"):
        member.read_checkpoint(tmp_path / "other.pt", None, trusted=False)


def test_a_donor_of_another_architecture_does_not_fit(make_runner):
    cfg = small_config()
    for model in ("actor", "critic"):
        cfg["runner"][model]["hidden_dims"] = [16, 16]
    member, other = RslRlTrainer(make_runner()), RslRlTrainer(make_runner(cfg=cfg))
    member.check_fits(member.full_state())
    with pytest.raises(ValueError, match=r"does not fit this member's model: .*donor \(16"):
        member.check_fits(other.full_state())


def test_the_recipient_takes_the_donors_weights_and_keeps_its_counters(make_runner):
    donor, recipient = RslRlTrainer(make_runner(seed=0)), RslRlTrainer(make_runner(seed=1))
    for trainer, iterations in ((donor, 2), (recipient, 4)):
        trainer.attach(Recorder(trainer))
        trainer.train(iterations)
    donor_state = donor.full_state()
    assert recipient.donor_learning_rate(donor_state) == pytest.approx(donor.learning_rate())
    state = recipient.recipient_state(donor_state, recipient.counters(), {"member": 1}, 3e-4)
    assert state["iter"] == 3 and recipient.fingerprint(state) == donor.fingerprint()
    assert {g["lr"] for g in state["optimizer_state_dict"]["param_groups"]} == {3e-4}

    recipient.load(state, {"entropy_coef": 0.02})
    assert recipient.fingerprint() == donor.fingerprint() and recipient.counters().epoch == 4
    assert recipient.learning_rate() == 3e-4 and recipient.alg.entropy_coef == 0.02
    assert {g["lr"] for g in recipient.alg.optimizer.param_groups} == {3e-4}


def test_a_load_after_an_update_trains_the_next_rollout_with_the_loaded_weights(make_runner):
    donor = RslRlTrainer(make_runner(seed=0))
    donor.attach(Recorder(donor))
    donor.train(2)
    donor_state, donor_print = donor.full_state(), donor.fingerprint()

    member = RslRlTrainer(make_runner(seed=1))
    events = Recorder(member, at_update={2: lambda: member.load(donor_state, {})})
    member.attach(events)
    member.train(4)
    rollouts = [e for e in events.seen if e[0] == "rollout"]
    assert [e[3] == donor_print for e in rollouts] == [False, False, True, False]
    assert member.counters() == TrainerCounters(frame=4 * FRAMES, epoch=4)


def test_a_listener_stops_training(make_runner):
    member = RslRlTrainer(make_runner())

    def stop() -> None:
        raise StopTraining

    member.attach(Recorder(member, at_update={2: stop}))
    member.train(10)
    assert member.counters().epoch == 2 and not member.training_ends_now()
