"""The rl_games agent options users set, each on the path slices choose for it (``testing/agent_options.py``).

* **lean**: the rollout played together, each member acting through its lean action step
  (``rl_games/action_step.py``); **own**: the rollout played together, each member through rl_games' own
  ``get_action_values``. One slice gives rl_games' own ``play_steps`` value for value, and M members' lean steps
  give bit for bit what each member's own ``get_action_values`` gives on the same observations and RNG state.
* **steps**: one env step at a time (``rollout_problems`` names the option): rl_games' own ``play_steps`` on the
  slice's view of the shared env gives what it gives on an env of its own, value for value.
* refused: one line naming the key, before anything is claimed (``core/slices.py``).

Training on the fallback paths, and the refusals from the command line: ``tests/integration/test_slice_options.py``.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import pytest
import torch

from async_pbt_isaaclab.core.agent_config import apply_overrides, load_yaml
from async_pbt_isaaclab.core.slices import agent_problems
from async_pbt_isaaclab.envs.slice_env import SharedVecEnv
from async_pbt_isaaclab.examples.cpu_member import DEFAULT_AGENT
from async_pbt_isaaclab.rl_games.action_step import LeanActionStep, action_step
from async_pbt_isaaclab.rl_games.slice_rollout import SliceRollout, rollout_problems
from async_pbt_isaaclab.rl_games.slices import build_slice_agent
from async_pbt_isaaclab.testing.agent_options import (
    ACTION_MASKS_DO_NOT_BUILD,
    OPTIONS,
    REFUSED,
    AgentOption,
    masks_build_error,
)

pytestmark = pytest.mark.rlgames_compat  # also run by .ci/run with rl-games 1.6.1 + gym (Isaac Lab 2.x)

HORIZON = 24
ENV_SEED = 5
TOGETHER = [o for o in OPTIONS if o.path != "steps"]
STEPS = [o for o in OPTIONS if o.path == "steps"]


def _agent(option: AgentOption, vec_env: Any, n: int, seed: int, extra: Sequence[str] = ()) -> Any:
    """The packaged Pendulum agent with the option's overrides (and ``extra``), built on ``vec_env`` as a slice
    member's is, ready for a rollout (what ``train()`` does first). Seeds start at 1: rl_games skips seeding for 0."""
    from async_pbt_isaaclab.rl_games.exploration import register_bounded_exploration

    register_bounded_exploration()
    cfg = apply_overrides(load_yaml(DEFAULT_AGENT), [*option.overrides, *extra])
    cfg.pop("pbt", None)
    cfg["params"]["seed"] = seed
    cfg["params"]["config"].update(num_actors=n, horizon_length=HORIZON, minibatch_size=n * HORIZON, print_stats=False)
    agent = build_slice_agent(cfg, vec_env)
    agent.init_tensors()
    agent.obs = agent.env_reset()
    return agent


def _shared(option: AgentOption, n: int, slots: int) -> SharedVecEnv:
    total = n * slots
    shared = SharedVecEnv(option.make_env(total, ENV_SEED), total, [(i * n, (i + 1) * n) for i in range(slots)])
    shared.read_action_masks = option.path == "steps" and "use_action_masks=True" in " ".join(option.overrides)
    shared.reset()
    return shared


def _own_weights(agents: Sequence[Any], generator: torch.Generator) -> None:
    """Each member its own weights and normaliser statistics (fresh ones are alike: zero means, unit variances)."""
    with torch.no_grad():
        for agent in agents:
            for name, buffer in agent.model.named_buffers():
                if name.endswith("running_mean"):
                    buffer.copy_(torch.randn(buffer.shape, generator=generator))
                elif name.endswith("running_var"):
                    buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.1)
            for param in agent.model.parameters():
                param.add_(0.1 * torch.randn(param.shape, generator=generator))


def _reference_and_slice(option: AgentOption, n: int) -> tuple[Any, SharedVecEnv, Any]:
    """An agent on an env of its own, and the same agent (same weights, own ones) on the one slice of a shared env
    of the same envs and seed."""
    reference = _agent(option, option.make_env(n, ENV_SEED), n, seed=3)
    shared = _shared(option, n, 1)
    agent = _agent(option, shared.slices[0], n, seed=3)
    _own_weights([reference], torch.Generator().manual_seed(0))
    agent.model.load_state_dict(reference.model.state_dict())
    return reference, shared, agent


def _assert_same_batch(got: dict[str, Any], expected: dict[str, Any], *, exact_returns: bool) -> None:
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if key == "step_time":
            continue
        if key == "returns" and not exact_returns:  # gamma * tau: a float product in rl_games, a tensor one here
            torch.testing.assert_close(got[key], value, rtol=1e-6, atol=1e-5)
        elif isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("option", TOGETHER, ids=lambda o: o.name)
def test_one_slice_plays_what_rl_games_plays(option):
    reference, shared, agent = _reference_and_slice(option, 4)
    assert rollout_problems({0: agent}) == []
    rollout = SliceRollout(shared, {0: agent})
    assert (0 in rollout.own_calls) == (option.path == "own"), rollout.own_calls
    for _ in range(3):  # later rollouts start from the state the first one handed back
        torch.manual_seed(11)
        expected = reference.play_steps()
        torch.manual_seed(11)
        _assert_same_batch(rollout([0])[0], expected, exact_returns=False)
        for name in ("current_rewards", "current_shaped_rewards", "current_lengths", "dones"):
            assert torch.equal(getattr(agent, name), getattr(reference, name)), name
    assert reference.game_rewards.current_size > 0  # episodes finished: the statistics were compared with data
    torch.testing.assert_close(agent.game_rewards.get_mean(), reference.game_rewards.get_mean())


@pytest.mark.parametrize("option", TOGETHER, ids=lambda o: o.name)
def test_every_members_step_is_its_own_get_action_values_bit_for_bit(option):
    """Two members with their own weights and statistics, a rollout with each one's lean step and the same rollout
    with each one's own get_action_values (same observations, same RNG state): the same bits."""
    n, slots = 3, 2
    runs = []
    for lean in (True, False):
        shared = _shared(option, n, slots)
        agents = {s: _agent(option, shared.slices[s], n, seed=s + 1) for s in range(slots)}
        _own_weights(list(agents.values()), torch.Generator().manual_seed(1))
        rollout = SliceRollout(shared, agents, lean=lean)
        torch.manual_seed(7)
        runs.append([rollout([0, 1]), rollout([0, 1])])
    assert isinstance(action_step(agents[0])[0], LeanActionStep) == (option.path == "lean")
    for lean_batches, own_batches in zip(*runs, strict=True):
        for s in range(slots):
            _assert_same_batch(lean_batches[s], own_batches[s], exact_returns=True)
    assert not torch.equal(runs[0][0][0]["values"], runs[0][0][1]["values"])  # two members, not copies


def test_members_with_different_networks_each_act_as_their_own_model():
    """Members of one process whose networks differ (widths, activations, sigma, D2RL, the bounded network)."""
    by_name = {o.name: o for o in OPTIONS}
    networks = [by_name[k] for k in ("default", "learned-sigma-tanh", "d2rl", "bounded-exploration")]
    n, runs = 2, []
    for lean in (True, False):
        shared = _shared(networks[0], n, len(networks))
        agents = {s: _agent(o, shared.slices[s], n, seed=s + 1) for s, o in enumerate(networks)}
        _own_weights(list(agents.values()), torch.Generator().manual_seed(2))
        rollout = SliceRollout(shared, agents, lean=lean)
        assert rollout_problems(agents) == []
        torch.manual_seed(3)
        runs.append(rollout(list(range(len(networks)))))
    for s in range(len(networks)):
        _assert_same_batch(runs[0][s], runs[1][s], exact_returns=True)


def _play_steps_in_a_thread(shared: SharedVecEnv, agent: Any, rollouts: int) -> list[dict[str, Any]]:
    """rl_games' own play_steps on the slice, in a member thread, while this thread steps the shared env."""
    batches: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def member() -> None:
        try:
            batches.extend(agent.play_steps() for _ in range(rollouts))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)
        finally:
            shared.leave(0)

    thread = threading.Thread(target=member)
    thread.start()
    shared.run()
    thread.join()
    assert not errors, errors
    return batches


@pytest.mark.parametrize("option", STEPS, ids=lambda o: o.name)
def test_one_slice_steps_what_rl_games_steps(option):
    if option.name == "action-masks" and ACTION_MASKS_DO_NOT_BUILD:
        error = masks_build_error(lambda: _agent(option, option.make_env(4, ENV_SEED), 4, seed=3))
        assert error is not None and "bool" in str(error), error  # the upstream fact: nothing to compare here
        return
    reference, shared, agent = _reference_and_slice(option, 4)
    problems = rollout_problems({0: agent})
    assert problems and all(p.startswith("slot 0: ") for p in problems), problems
    torch.manual_seed(11)
    expected = [reference.play_steps() for _ in range(3)]
    torch.manual_seed(11)
    got = _play_steps_in_a_thread(shared, agent, 3)
    for g, e in zip(got, expected, strict=True):
        _assert_same_batch(g, e, exact_returns=True)
    assert reference.game_rewards.current_size > 0
    torch.testing.assert_close(agent.game_rewards.get_mean(), reference.game_rewards.get_mean())
    if "action_masks" in expected[0]:  # the masks reached the agent, and bound some steps
        assert not expected[0]["action_masks"].all()


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_what_slices_refuse_is_one_line_naming_the_key(key):
    cfg = apply_overrides(load_yaml(DEFAULT_AGENT), [REFUSED[key]])
    problems = agent_problems(cfg, 2)
    assert len(problems) == 1 and problems[0].startswith(f"{key}: ") and "\n" not in problems[0], problems
    assert "--pbt-slices 2" in problems[0] and "run members as separate processes" in problems[0]
    assert agent_problems(cfg, 1) == []  # one member per process: nothing is shared
    assert agent_problems(load_yaml(DEFAULT_AGENT), 2) == []
