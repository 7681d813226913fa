"""Slices train on every path an rl_games option takes them to, and refuse the others in one line.

* The step-by-step path (action masks, a central value network): one slice trains exactly as rl_games trains alone on
  an env of its own, weights bit for bit after real PPO epochs; two members train side by side to the end.
* The rollout with rl_games' own action step (discrete actions): two members train side by side to the end.
* Refused options: the CPU member exits 2 with one line naming the key, before anything is claimed.

The per-rollout checks of every option: ``tests/rl_games/test_slice_configs.py``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from rl_games.common.algo_observer import AlgoObserver

from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
from async_pbt_isaaclab.rl_games.inheritance import model_fingerprint
from async_pbt_isaaclab.rl_games.slices import build_slice_agent
from async_pbt_isaaclab.testing.agent_options import (
    ACTION_MASKS_DO_NOT_BUILD,
    OPTIONS,
    REFUSED,
    AgentOption,
    masks_build_error,
    train_two_slices,
)

pytestmark = pytest.mark.slow

BY_NAME = {o.name: o for o in OPTIONS}
N, HORIZON = 8, 32
"""Envs per member and steps per rollout: 256 frames an epoch, two minibatches of 128."""


def _rl_config(option: AgentOption, epochs: int, seed: int) -> dict[str, Any]:
    cfg = apply_overrides(load_yaml(DEFAULT_AGENT), option.overrides)
    cfg.pop("pbt", None)
    cfg["params"]["seed"] = seed
    cfg["params"]["config"].update(
        num_actors=N,
        horizon_length=HORIZON,
        minibatch_size=N * HORIZON // 2,
        mini_epochs=2,
        max_epochs=epochs,
        print_stats=False,
        save_frequency=0,
    )
    return cfg


def _model(option: AgentOption, tmp_path: Path, *, alone: bool, epochs: int) -> dict[str, torch.Tensor]:
    """The weights after ``epochs`` of rl_games' own ``train()``, on an env of its own or on the one slice of a
    shared env (its thread steps one env step at a time, the main thread steps the env)."""
    cfg = _rl_config(option, epochs, seed=3)
    cfg["params"]["config"].update(train_dir=str(tmp_path / ("alone" if alone else "slice")))
    if alone:
        agent = build_slice_agent(cfg, option.make_env(N, 5))
        torch.manual_seed(17)
        agent.train()
        return agent.model.state_dict()
    shared = SharedVecEnv(option.make_env(N, 5), N, [(0, N)])
    agent = build_slice_agent(cfg, shared.slices[0])
    shared.read_action_masks = bool(agent.use_action_masks)
    shared.reset()
    errors: list[BaseException] = []

    def member() -> None:
        try:
            agent.train()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)
        finally:
            shared.leave(0)

    torch.manual_seed(17)  # the member thread draws from torch's one generator; the env steps draw none of it
    thread = threading.Thread(target=member)
    thread.start()
    shared.run()
    thread.join()
    assert not errors, errors
    return agent.model.state_dict()


@pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)
@pytest.mark.parametrize("name", ["action-masks", "central-value"])
def test_one_slice_stepping_trains_as_rl_games_alone(tmp_path, name):
    option = BY_NAME[name]
    if name == "action-masks" and ACTION_MASKS_DO_NOT_BUILD:
        agent_cfg, env = _rl_config(option, 4, seed=3), option.make_env(N, 5)
        error = masks_build_error(lambda: build_slice_agent(agent_cfg, env).init_tensors())
        assert error is not None and "bool" in str(error), error  # the upstream fact: nothing to compare here
        return
    alone = _model(option, tmp_path, alone=True, epochs=4)
    sliced = _model(option, tmp_path, alone=False, epochs=4)
    assert sorted(alone) == sorted(sliced)
    assert [k for k in alone if not torch.equal(alone[k], sliced[k])] == []
    untrained = build_slice_agent(_rl_config(option, 4, seed=3), option.make_env(N, 5)).model.state_dict()
    assert model_fingerprint(untrained) != model_fingerprint(alone)  # four PPO epochs changed the weights


class MaskProbe(AlgoObserver):
    """After each rollout (before the update): every stored action is one its stored mask allowed."""

    def __init__(self) -> None:
        super().__init__()
        self.algo: Any = None
        self.checked = 0
        self.masked = 0

    def after_init(self, algo: Any) -> None:
        self.algo = algo

    def after_steps(self) -> None:
        values = self.algo.dataset.values_dict
        if "action_masks" not in values:
            return
        masks, actions = values["action_masks"], values["actions"].long()
        assert masks.gather(1, actions.unsqueeze(1)).all()
        self.checked += int(actions.numel())
        self.masked += int((~masks).any(dim=1).sum())


@pytest.mark.parametrize("name", ["discrete", "action-masks", "central-value"])
def test_members_train_side_by_side_on_every_path(tmp_path, capsys, name):
    option, ws, epochs = BY_NAME[name], tmp_path / "ws", 4
    if name == "action-masks" and ACTION_MASKS_DO_NOT_BUILD:
        agent_cfg, env = _rl_config(option, 4, seed=3), option.make_env(N, 5)
        error = masks_build_error(lambda: build_slice_agent(agent_cfg, env).init_tensors())
        assert error is not None and "bool" in str(error), error  # the upstream fact: nothing to train here
        return
    overrides = [
        "pbt.interval_steps=512",
        *option.overrides,
        f"params.config.horizon_length={HORIZON}",
        f"params.config.minibatch_size={N * HORIZON // 2}",
        "params.config.mini_epochs=2",
        f"params.config.max_epochs={epochs}",
    ]
    probes = {m: MaskProbe() for m in (0, 1)}
    make_env = option.make_env
    host = train_two_slices(
        tmp_path, overrides, lambda n: make_env(n, 11), envs_per_slice=N, observers=lambda m: [probes[m]], task=name
    )
    assert {m.status for m in host.members.values()} == {"finished"}
    records, errors = Workspace(ws).read_records()
    assert not errors and [records[m].status for m in (0, 1)] == ["finished", "finished"]
    assert [records[m].frame for m in (0, 1)] == [epochs * N * HORIZON] * 2
    for m in (0, 1):
        _, problems = verify_log(ws / "members" / f"{m:03d}" / "audit.jsonl")
        assert problems == []
    said = capsys.readouterr().out
    assert ("one step at a time" in said) == (option.path == "steps"), said[-2000:]
    assert ("act through rl_games' get_action_values" in said) == (option.path == "own"), said[-2000:]
    if name == "action-masks":  # every rollout's actions obeyed their masks, and the masks did bind
        assert all(p.checked == epochs * N * HORIZON and p.masked > 0 for p in probes.values())


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_slice_process_refuses_an_option_in_one_line(tmp_path, key):
    ws = tmp_path / "ws"
    override = f"agent.{REFUSED[key]}"
    cmd = [sys.executable, "-m", "async_pbt_isaaclab.examples.cpu_member", "--pbt-workspace", str(ws)]
    cmd += ["--pbt-members", "2", "--pbt-slices", "2", override]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (ws / "members").exists()
