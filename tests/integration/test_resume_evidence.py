"""Evidence survives a resume, and a finished member started again does not train.

Real rl_games members (Pendulum-v1 PPO, CPU) run in this process through ``train_member``, the same
function ``scripts/train_pbt.py`` and the CPU member call. What is shown here:
1. a member that finished and is started again with the same epoch limit exits at once: no epoch is
   trained, its record, evidence, state and checkpoints are left as they were, and it says why;
2. started again with a larger limit it resumes, and its first record (written before any episode of the
   new process has finished: Pendulum episodes last 200 steps, an epoch is 128) already carries the saved,
   settled window, so peers can compare it at once instead of waiting a whole window;
3. a stop while rl_games loads, after the member was claimed, releases it and says where it resumes;
4. a warm start (``--checkpoint`` on a member that never ran) from a file the member cannot load is refused
   before rl_games is loaded, and the member is released; from a plain rl_games checkpoint it trains from
   those weights, with a warning that says what such a file cannot tell it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

import async_pbt_isaaclab.examples as examples
from async_pbt_isaaclab.core.agent_config import load_population_config, load_yaml
from async_pbt_isaaclab.envs.vec_env_registry import register_gym_vecenv_for
from async_pbt_isaaclab.rl_games.runner import train_member

YAML = Path(examples.__file__).parent / "pendulum_ppo.yaml"


def _configs(tmp: Path, epochs: int):
    raw = load_yaml(YAML)
    raw["params"]["seed"] = 5
    raw["params"]["config"].update(max_epochs=epochs, print_stats=False)
    raw["pbt"] = {
        "enabled": True,
        "policy_idx": 0,
        "num_policies": 2,
        "workspace": str(tmp / "ws"),
        "interval_steps": 2048,
        "min_episodes": 8,
        "window": 32,
        "heartbeat_interval_s": 0.0,
    }
    agent_cfg, cfg = load_population_config(raw)
    return agent_cfg, cfg, register_gym_vecenv_for(agent_cfg)


class FirstRecord:
    """Reads record.json right after the member's first ``after_steps`` (its first heartbeat)."""

    def __init__(self, path: Path):
        self.path, self.record, self.epochs = path, None, 0

    def after_steps(self):
        self.epochs += 1
        if self.record is None:
            self.record = json.loads(self.path.read_text())


def _train(tmp: Path, epochs: int, probe=None, **kwargs):
    """``train_member`` on the test config in ``tmp`` (``kwargs`` passed on), torch's thread count kept."""
    agent_cfg, cfg, task = _configs(tmp, epochs)
    threads = torch.get_num_threads()
    try:
        return train_member(
            copy.deepcopy(agent_cfg),
            cfg,
            train_dir=str(tmp / "runs"),
            task=task,
            extra_observers=[probe] if probe else (),
            **kwargs,
        )
    finally:
        torch.set_num_threads(threads)


def test_finished_member_exits_at_once_and_resumes_with_its_evidence(tmp_path, capsys):
    mdir = tmp_path / "ws" / "members" / "000"
    observer = _train(tmp_path, epochs=3)
    assert observer.algo.epoch_num == 3
    state = json.loads((mdir / "state.json").read_text())
    assert state["finished"] == {"frame": 3 * 2048, "epoch": 3}
    saved = state["evidence"]["summary"]
    assert saved["settled"] and len(saved["values"]) >= 8

    def kept():
        """Every file but the lock and the audit log, and the state without its process-start count and log head."""
        out = {
            p: p.read_bytes()
            for p in mdir.rglob("*")
            if p.is_file() and p.name not in ("audit.jsonl", "lock", "state.json")
        }
        out["state"] = {
            k: v
            for k, v in json.loads((mdir / "state.json").read_text()).items()
            if k not in ("process_starts", "audit_head")
        }  # a start appends to the audit log
        return out

    files = kept()
    capsys.readouterr()

    # 1. Same limit: nothing is trained, nothing but the audit log changes.
    assert _train(tmp_path, epochs=3) is None
    assert "nothing to train: finished at epoch 3 >= max_epochs=3" in capsys.readouterr().out
    assert kept() == files
    last = json.loads((mdir / "audit.jsonl").read_text().splitlines()[-1])
    assert last["kind"] == "stop" and "max_epochs=3" in last["reason"]

    # 2. A larger limit resumes and publishes the saved window at once.
    probe = FirstRecord(mdir / "record.json")
    observer = _train(tmp_path, epochs=5, probe=probe)
    assert observer.session.start_mode == "resume" and observer.algo.epoch_num == 5
    first = probe.record
    assert first["frame"] == 3 * 2048 and first["evidence"]["settled"]
    assert first["evidence"]["values"] == saved["values"]


def test_initial_mutation_perturbs_every_member_but_zero_once_and_is_replayable(tmp_path):
    """``initial_mutation: true``: at its first start a member mutates its yaml values (member 0 keeps them);
    a later start keeps what it drew; the audit replays the draw and the RNG stream continues from it."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.member.session import start_member

    def start(index: int):
        agent_cfg, cfg, task = _configs(tmp_path, epochs=1)
        agent_cfg["pbt"] = dict(
            agent_cfg["pbt"],
            policy_idx=index,
            initial_mutation=True,
            mutation={"learning_rate": "mutate_float", "gamma": "mutate_discount"},
        )
        agent_cfg, cfg = load_population_config(agent_cfg)
        session, built = start_member(agent_cfg, cfg, train_dir=str(tmp_path / "runs"), task=task)
        session.close()
        return session, built["params"]["config"]

    yaml_values = load_yaml(YAML)["params"]["config"]
    _, zero = start(0)
    assert (zero["learning_rate"], zero["gamma"]) == (yaml_values["learning_rate"], yaml_values["gamma"])
    session, one = start(1)
    assert one["learning_rate"] != yaml_values["learning_rate"] and one["gamma"] != yaml_values["gamma"]
    _, again = start(1)
    assert (again["learning_rate"], again["gamma"]) == (one["learning_rate"], one["gamma"])
    entries = [json.loads(x) for x in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in entries] == ["initial_mutation", "start", "start"]
    assert verify_log(session.dir / "audit.jsonl")[1] == []


def test_a_stop_while_rl_games_loads_releases_the_member_and_says_where_it_resumes(tmp_path, capsys):
    """Ctrl-C in the seconds after the member is claimed and before rl_games is loaded (here from the env
    registration that train_member calls there) is a stop like any other: the member is released and the line
    says where it resumes. The next start in this very process may claim it again, so nothing still holds it."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    assert _train(tmp_path, 1, register_env=interrupted) is None
    out = capsys.readouterr().out
    assert "[async-pbt] member 000 stopped before its first publish with no checkpoint yet" in out, out
    assert _train(tmp_path, 1) is not None
    assert json.loads((tmp_path / "ws" / "members" / "000" / "record.json").read_text())["status"] == "finished"


def test_a_warm_start_is_checked_before_rl_games_loads_and_starts_from_the_users_weights(tmp_path, capsys):
    from async_pbt_isaaclab.rl_games.checkpoint import CheckpointError, load_checkpoint
    from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint

    # A plain rl_games checkpoint: one of a member's own, without the PBT metadata rl_games does not write.
    donor = tmp_path / "donor"
    _train(donor, epochs=1)
    own = json.loads((donor / "ws/members/000/state.json").read_text())["last_checkpoint"]
    plain = load_checkpoint(donor / "ws" / own)
    assert plain.pop("pbt", None) is not None
    torch.save(plain, tmp_path / "plain.pth")

    bogus = tmp_path / "bogus.pth"
    bogus.write_text("not a checkpoint")
    loads = []
    with pytest.raises(CheckpointError, match="not a torch checkpoint"):
        # register_env is called just before rl_games is loaded.
        _train(tmp_path, 1, checkpoint=str(bogus), register_env=lambda: loads.append("rl_games"))
    assert loads == []

    # Released: the next start claims the member, and restores exactly the plain checkpoint's weights.
    observer = _train(tmp_path, 1, checkpoint=str(tmp_path / "plain.pth"))
    assert observer.session.start_mode == "warm_start"
    assert "is a plain rl_games checkpoint without PBT metadata" in capsys.readouterr().err
    entries = [json.loads(x) for x in (tmp_path / "ws/members/000/audit.jsonl").read_text().splitlines()]
    (restored,) = [e for e in entries if e["kind"] == "restored"]
    assert restored["mode"] == "warm_start" and restored["model_sha256"] == model_fingerprint(plain["model"])


def test_a_warm_start_from_a_members_checkpoint_keeps_its_saved_rate_unless_one_is_typed(tmp_path, monkeypatch, capsys):
    """A member's checkpoint carries the rate it reached (``pbt.last_lr``): a warm start trains on from it, as a
    resume does. A rate set on the command line is the user's choice, and replaces it (with a note saying so)."""
    from async_pbt_isaaclab.member import restart
    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    donor = tmp_path / "donor"
    _train(donor, epochs=1)
    checkpoint = str(donor / "ws" / json.loads((donor / "ws/members/000/state.json").read_text())["last_checkpoint"])
    saved_rate = load_checkpoint(checkpoint)["pbt"]["last_lr"]

    def restored_rate(folder: Path, argv: list[str], **config) -> float:
        monkeypatch.setattr(restart, "_CAPTURED", ["python", "train.py", *argv])
        agent_cfg, cfg, task = _configs(folder, 1)
        agent_cfg["params"]["config"].update(config)
        threads = torch.get_num_threads()
        try:
            train_member(agent_cfg, cfg, train_dir=str(folder / "runs"), task=task, checkpoint=checkpoint)
        finally:
            torch.set_num_threads(threads)
        entries = [json.loads(x) for x in (folder / "ws/members/000/audit.jsonl").read_text().splitlines()]
        (restored,) = [e for e in entries if e["kind"] == "restored"]
        assert restored["mode"] == "warm_start"
        return restored["last_lr"]

    assert restored_rate(tmp_path / "kept", [f"--checkpoint={checkpoint}"]) == pytest.approx(saved_rate)
    assert "as typed" not in capsys.readouterr().err
    typed = ["agent.params.config.learning_rate=3e-5", f"--checkpoint={checkpoint}"]
    assert saved_rate != pytest.approx(3e-5)
    assert restored_rate(tmp_path / "typed", typed, learning_rate=3e-5) == pytest.approx(3e-5)
    assert f"learning rate 3e-05 as typed, not {saved_rate:g} as saved" in capsys.readouterr().err
