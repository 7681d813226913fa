"""``async-pbt evaluate`` on a real rsl_rl member's checkpoints: the workspace says it is an rsl_rl member, the policy
plays exactly as rsl_rl's own ``runner.load`` + ``get_inference_policy`` play it on the same held-out episodes, and
a checkpoint that does not fit the config named is one line naming the file."""

from __future__ import annotations

import contextlib
import io

import pytest

from async_pbt_isaaclab.cli import main

pytestmark = pytest.mark.rslrl_compat

FRAMES_PER_ITERATION = 8 * 16
"""8 envs x the packaged Pendulum config's 16 steps."""


@pytest.fixture(scope="module")
def member(tmp_path_factory):
    """(workspace, its two checkpoints) of member 0 after 4 iterations of real rsl_rl PPO on Pendulum-v1."""
    from async_pbt_isaaclab.examples import rsl_rl_member

    ws = tmp_path_factory.mktemp("rsl_rl_evaluate") / "ws"
    argv = ["--pbt-workspace", str(ws), "--pbt-members", "2", "--pbt-index", "0", "--pbt-max-restarts", "0"]
    argv += ["--num_envs", "8", "--max_iterations", "4", "--pbt-interval-steps", str(2 * FRAMES_PER_ITERATION)]
    argv += ["--pbt-keep-last-checkpoints", "10", "agent.pbt.publish_in_background=false"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = rsl_rl_member.main(argv)
    assert code == 0, out.getvalue()[-3000:]
    checkpoints = sorted((ws / "members" / "000" / "checkpoints").glob("*.pth"))
    assert len(checkpoints) == 2
    return ws, checkpoints


def _played_by_rsl_rl(ws, checkpoint, episodes: int, seed: int) -> list[float]:
    """The returns of rsl_rl's own play: a runner of the member's config, ``runner.load(path)`` as rsl_rl's and Isaac
    Lab's play scripts call it, its inference policy on one gymnasium env per episode, stepped one env at a time."""
    import gymnasium
    import torch
    from tensordict import TensorDict

    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.examples.rsl_rl_train import build_runner

    cfg = load_yaml(ws / "members" / "000" / "agent.yaml")["rsl_rl"]
    with contextlib.redirect_stdout(io.StringIO()):
        runner = build_runner(cfg, seed=7)
    runner.load(str(checkpoint))
    policy = runner.get_inference_policy(device="cpu")
    returns = []
    for i in range(episodes):
        env = gymnasium.make(cfg["env"]["id"])
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            batch = torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0)
            with torch.inference_mode():
                action = policy(TensorDict({"policy": batch}, batch_size=[1]))[0].numpy()
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def test_a_members_checkpoint_plays_as_rsl_rls_own_load_plays_it(member):
    from async_pbt_isaaclab.commands.evaluate import evaluate_checkpoints
    from async_pbt_isaaclab.commands.evaluate_rsl_rl import RslRlEvaluator
    from async_pbt_isaaclab.core.agent_config import load_yaml

    ws, checkpoints = member
    results = evaluate_checkpoints(checkpoints, episodes=3, seed=100_000)
    for checkpoint, result in zip(checkpoints, results, strict=True):
        assert result.task == "Pendulum-v1" and result.lengths == [200, 200, 200]
        assert result.pbt["frame"] == int(checkpoint.stem.split("_f")[1])
        assert result.returns == pytest.approx(_played_by_rsl_rl(ws, checkpoint, 3, 100_000), rel=1e-6)
    # Each checkpoint's own weights were played (not the first one loaded, twice).
    assert results[0].returns != pytest.approx(results[1].returns, rel=1e-6)
    # The same played through the evaluator built from the member's rsl_rl config directly (examples/ form).
    evaluator = RslRlEvaluator(load_yaml(ws / "members" / "000" / "agent.yaml")["rsl_rl"], "agent.yaml")
    assert evaluator.evaluate(checkpoints[0], 3, 100_000).returns == results[0].returns


def test_the_command_reads_the_member_from_its_workspace(member, capsys):
    _, checkpoints = member
    code = main(["evaluate", str(checkpoints[-1]), "--episodes", "2", "--no-record"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.splitlines()[0].startswith("held-out return on Pendulum-v1, deterministic policy")


def test_a_checkpoint_that_does_not_fit_the_config_is_one_line_naming_it(member, tmp_path, capsys):
    import yaml

    ws, checkpoints = member
    cfg = yaml.safe_load((ws / "members" / "000" / "agent.yaml").read_text())["rsl_rl"]
    cfg["runner"]["actor"]["hidden_dims"] = [16]
    wider = tmp_path / "other_network.yaml"
    wider.write_text(yaml.safe_dump(cfg))
    code = main(["evaluate", str(checkpoints[0]), "--episodes", "1", "--no-record", "--agent-yaml", str(wider)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"async-pbt evaluate: error: {checkpoints[0]}: does not fit task 'Pendulum-v1'")
    assert "other_network.yaml" in line
