"""The diverse start (core/decision/start.py), the population seed and the mutation semantics around them."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import MutationSpec, default_spec
from async_pbt_isaaclab.core.decision.start import initial_draw, stratum
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError

SPECS = {
    "learning_rate": default_spec("learning_rate"),
    "gamma": default_spec("gamma"),
    "mini_epochs": default_spec("mini_epochs"),
    "network.log_std_bounds.low": default_spec("network.log_std_bounds.low"),
    "optimizer": MutationSpec(kind="choice", choices=("adam", "sgd", "lamb")),
}
YAML = {
    "learning_rate": 3e-4,
    "gamma": 0.99,
    "mini_epochs": 5,
    "network.log_std_bounds.low": -5.0,
    "optimizer": "adam",
    "unsearched": 1.5,
}


def _cfg(**kw) -> PopulationConfig:
    return dataclasses.replace(PopulationConfig(), mutation=dict(SPECS), **kw)


def _draw(member: int, seed: int = 11, **kw):
    return initial_draw(member, YAML, _cfg(**kw), MemberRng.for_member(seed, member).get_state())


def test_draw_is_reproducible_from_seed_and_index_and_differs_between_seeds_and_members():
    assert _draw(1).new_hyperparameters == _draw(1).new_hyperparameters
    assert _draw(1).rng_after == _draw(1).rng_after
    assert _draw(1).new_hyperparameters != _draw(2).new_hyperparameters
    assert _draw(1, seed=11).new_hyperparameters != _draw(1, seed=12).new_hyperparameters
    # The stream comes from (seed, index): not the index-only stream of 0.1.x.
    assert MemberRng.for_member(11, 1).get_state() != MemberRng.for_member(12, 1).get_state()
    assert MemberRng.for_member(11, 1).get_state() != MemberRng.for_member(11, 2).get_state()


def test_member_zero_keeps_the_yaml_and_draws_nothing():
    step = _draw(0)
    assert step.new_hyperparameters == YAML and step.changes == () and step.rng_after == step.rng_before


@pytest.mark.parametrize("member", range(1, 40))
def test_every_kind_lands_inside_its_bounds(member):
    step = _draw(member)
    for key, spec in SPECS.items():
        value = step.new_hyperparameters[key]
        if spec.kind == "choice":
            assert value in spec.choices
        else:
            assert spec.low <= value <= spec.high, (key, value)
        if spec.kind == "int":
            assert isinstance(value, int)
    assert step.new_hyperparameters["unsearched"] == 1.5
    assert {c.key for c in step.changes} <= set(SPECS)


def test_draws_cover_the_bounds_on_their_scales():
    lrs = [_draw(m).new_hyperparameters["learning_rate"] for m in range(1, 200)]
    logs = [math.log10(v) for v in lrs]  # bounds 1e-6 .. 1e-2: log-uniform puts ~1/4 of draws per decade
    assert sum(v < -5 for v in logs) > 20 and sum(v > -3 for v in logs) > 20
    gammas = [_draw(m).new_hyperparameters["gamma"] for m in range(1, 200)]
    assert sum(g < 0.99 for g in gammas) > 20 and sum(g > 0.999 for g in gammas) > 20  # uniform on log(1-x)


def test_spread_zero_is_off():
    step = _draw(3, start_spread=0.0)
    assert step.new_hyperparameters == YAML and step.changes == ()


@pytest.mark.parametrize("member", range(1, 30))
def test_a_narrowed_spread_stays_within_its_fraction_around_the_yaml_value(member):
    step = _draw(member, start_spread=0.1)
    lr_span = math.log(1e-2) - math.log(1e-6)
    assert abs(math.log(step.new_hyperparameters["learning_rate"]) - math.log(3e-4)) <= 0.05 * lr_span + 1e-9
    g_span = math.log(1 - 0.9) - math.log(1 - 0.9999)
    assert abs(math.log(1 - step.new_hyperparameters["gamma"]) - math.log(1 - 0.99)) <= 0.05 * g_span + 1e-9
    shift = step.new_hyperparameters["network.log_std_bounds.low"]
    assert abs(shift - -5.0) <= 0.05 * 7.0 + 1e-9


def test_a_yaml_value_near_a_bound_gets_a_window_moved_inside_the_bounds():
    cfg = dataclasses.replace(_cfg(), start_spread=0.2)
    for member in range(1, 30):
        rng = MemberRng.for_member(5, member).get_state()
        value = initial_draw(member, dict(YAML, learning_rate=1e-2), cfg, rng).new_hyperparameters["learning_rate"]
        span = math.log(1e-2) - math.log(1e-6)
        assert math.log(1e-2) - 0.2 * span - 1e-9 <= math.log(value) <= math.log(1e-2)


def test_a_log_float_zero_stays_zero_unless_from_zero_and_is_recorded_from_zero():
    ent = {"entropy_coef": default_spec("entropy_coef")}
    cfg = dataclasses.replace(PopulationConfig(), mutation=ent)
    step = initial_draw(1, {"entropy_coef": 0.0}, cfg, MemberRng.for_member(1, 1).get_state())
    assert step.new_hyperparameters["entropy_coef"] == 0.0 and step.changes == ()
    jump = {"entropy_coef": dataclasses.replace(default_spec("entropy_coef"), from_zero=1e-3)}
    cfg = dataclasses.replace(PopulationConfig(), mutation=jump)
    step = initial_draw(1, {"entropy_coef": 0.0}, cfg, MemberRng.for_member(1, 1).get_state())
    assert 1e-6 <= step.new_hyperparameters["entropy_coef"] <= 0.1
    assert [c.to_dict()["from_zero"] for c in step.changes] == [True]


def test_initial_draw_is_replayed_and_a_forged_one_is_caught(tmp_path):
    # Only supported keys: the verifier reads the recorded config back through pbt_section.
    cfg = dataclasses.replace(PopulationConfig(), mutation={k: v for k, v in SPECS.items() if k != "optimizer"})
    step = initial_draw(2, YAML, cfg, MemberRng.for_member(3, 2).get_state())
    log = AuditLog.open(tmp_path / "audit.jsonl")
    log.append("initial_draw", step.audit_body(2, cfg))
    log.append("start", {"mode": "fresh", "rng_state": step.rng_after})
    assert verify_log(tmp_path / "audit.jsonl") == (2, [])

    forged = step.audit_body(2, cfg)
    forged["new_hyperparameters"] = dict(forged["new_hyperparameters"], learning_rate=0.005)
    bad = AuditLog.open(tmp_path / "forged.jsonl")
    bad.append("initial_draw", forged)
    _, problems = verify_log(tmp_path / "forged.jsonl")
    assert any("initial draw (diverse start) does not reproduce: new_hyperparameters" in p.problem for p in problems)

    # A start whose RNG does not continue the draw's rng_after (a restarted stream) is caught too.
    broken = AuditLog.open(tmp_path / "broken.jsonl")
    broken.append("initial_draw", step.audit_body(2, cfg))
    broken.append("start", {"mode": "fresh", "rng_state": step.rng_before})
    _, problems = verify_log(tmp_path / "broken.jsonl")
    assert any("RNG stream broken" in p.problem for p in problems)


def test_values_the_user_pinned_stay_and_the_draw_replays(tmp_path):
    """A key set on the command line (``pinned``) or with ``diverse_start: false`` keeps its value for every member;
    ``diverse_start: true`` draws it even when pinned; the other keys are drawn as before (same strata), and the
    entry, which records the pinned keys, replays."""
    specs = {k: v for k, v in SPECS.items() if k != "optimizer"}
    cfg = dataclasses.replace(PopulationConfig(), mutation=specs, num_policies=4)
    rng = MemberRng.for_member(3, 2).get_state()
    free = initial_draw(2, YAML, cfg, rng, 3)
    pinned = initial_draw(2, YAML, cfg, rng, 3, pinned=["learning_rate"])
    kept, drawn = pinned.new_hyperparameters["learning_rate"], free.new_hyperparameters["learning_rate"]
    assert kept == YAML["learning_rate"] != drawn
    assert pinned.pinned == ("learning_rate",) and "learning_rate" not in {c.key for c in pinned.changes}
    keyed = dataclasses.replace(
        cfg, mutation={**specs, "gamma": dataclasses.replace(specs["gamma"], diverse_start=False)}
    )
    assert initial_draw(2, YAML, keyed, rng, 3).new_hyperparameters["gamma"] == YAML["gamma"]
    forced = dataclasses.replace(
        cfg, mutation={**specs, "learning_rate": dataclasses.replace(specs["learning_rate"], diverse_start=True)}
    )
    assert initial_draw(2, YAML, forced, rng, 3, ["learning_rate"]).new_hyperparameters == free.new_hyperparameters
    log = AuditLog.open(tmp_path / "audit.jsonl")
    body = pinned.audit_body(2, cfg)
    assert body["pinned"] == ["learning_rate"]
    log.append("initial_draw", body)
    assert verify_log(tmp_path / "audit.jsonl") == (1, [])
    forged = AuditLog.open(tmp_path / "forged.jsonl")
    forged.append("initial_draw", dict(body, pinned=[]))
    assert verify_log(tmp_path / "forged.jsonl")[1]


def test_command_line_keys_are_the_overrides_of_searched_values():
    from async_pbt_isaaclab.core.decision.start import command_line_keys

    cfg = dataclasses.replace(PopulationConfig(), mutation={k: v for k, v in SPECS.items() if k != "optimizer"})
    argv = [
        "python",
        "--pbt-index",
        "1",
        "agent.params.config.learning_rate=3e-4",
        "+params.config.gamma=0.9",
        "agent.params.config.horizon_length=64",
        "--pbt-rule=dexpbt",
        "agent.pbt.mutation.gamma=discount",
    ]
    assert command_line_keys(argv, cfg.mutation) == ("gamma", "learning_rate")


def test_command_line_keys_follow_the_trainers_names_and_an_env_keys_own():
    """An rsl_rl member names its runner config's keys (a CPU member under ``agent.runner.``, Isaac Lab's under
    ``agent.``): the trainer hands its names, and a value typed in them is found (a refused CI run: an rsl_rl member's
    typed rollout length was drawn afresh, 4 steps, and it never reached its first decision). An env key is typed by
    its own name (Isaac Lab's Hydra override of the env config); under the agent's config it is another value."""
    from async_pbt_isaaclab.core.decision.start import command_line_keys

    searched = {
        "gamma": SPECS["gamma"],
        "num_steps_per_env": MutationSpec(kind="int", low=4, high=128),
        "env.rewards.reach.weight": MutationSpec(kind="log_float", low=0.1, high=10.0),
    }
    cfg = dataclasses.replace(PopulationConfig(), mutation=searched)
    cpu = {"gamma": "agent.runner.algorithm.gamma", "num_steps_per_env": "agent.runner.num_steps_per_env"}

    def named(key: str) -> str:
        return cpu.get(key, "agent.runner.unused")

    assert command_line_keys(["python", "agent.runner.num_steps_per_env=16"], cfg.mutation, named) == (
        "num_steps_per_env",
    )
    assert command_line_keys(["runner.algorithm.gamma=0.9"], cfg.mutation, named) == ("gamma",)  # check-config's form
    # rl_games' names are not an rsl_rl member's, and a flag or an agent key of another name sets nothing searched.
    assert command_line_keys(["agent.params.config.gamma=0.9", "--num_steps_per_env=8"], cfg.mutation, named) == ()
    assert command_line_keys(["env.rewards.reach.weight=2.0"], cfg.mutation, named) == ("env.rewards.reach.weight",)
    assert command_line_keys(["agent.env.rewards.reach.weight=2.0"], cfg.mutation, named) == ()
    # With rl_games' names (the default) an env key is found by its own name too.
    assert command_line_keys(["env.rewards.reach.weight=2.0"], cfg.mutation) == ("env.rewards.reach.weight",)


def _strata_of(seed: int, members: int, key: str, spec: MutationSpec, yaml: dict) -> list[int]:
    """Which stratum (0..members-2) each non-reference member's stratified draw of ``key`` landed in."""
    cfg = dataclasses.replace(PopulationConfig(), mutation={key: spec}, num_policies=members)
    lo, hi = math.log(spec.low), math.log(spec.high)
    found = []
    for m in range(1, members):
        rng = MemberRng.for_member(seed, m).get_state()
        value = initial_draw(m, yaml, cfg, rng, strata_seed=seed).new_hyperparameters[key]
        found.append(min(int((math.log(value) - lo) / (hi - lo) * (members - 1)), members - 2))
    return found


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("members", [2, 4, 8])
def test_a_stratified_start_puts_one_member_in_each_part_of_the_range(seed, members):
    """Latin hypercube: the non-reference members' learning rates cover every part of the log range once; with
    independent draws, some seeds leave all of them in the lower half (the study's no_learn miss)."""
    found = _strata_of(seed, members, "learning_rate", default_spec("learning_rate"), {"learning_rate": 1e-5})
    assert sorted(found) == list(range(members - 1))


def test_stratified_deals_differ_between_seeds_and_keys_and_every_member_computes_the_same_deal():
    deals = {tuple(stratum(seed, 8, m, 0).index for m in range(1, 8)) for seed in range(20)}
    assert len(deals) > 10  # the seed shuffles which member gets which part
    assert [stratum(3, 8, m, 0).index for m in range(1, 8)] != [stratum(3, 8, m, 1).index for m in range(1, 8)]
    assert stratum(3, 8, 5, 1) == stratum(3, 8, 5, 1)


@pytest.mark.parametrize("member", range(1, 8))
def test_a_stratified_draw_of_every_kind_stays_in_bounds_and_replays(tmp_path, member):
    cfg = dataclasses.replace(
        PopulationConfig(), mutation={k: v for k, v in SPECS.items() if k != "optimizer"}, num_policies=8
    )
    step = initial_draw(member, YAML, cfg, MemberRng.for_member(9, member).get_state(), strata_seed=9)
    for key, spec in cfg.mutation.items():
        assert spec.low <= step.new_hyperparameters[key] <= spec.high
    assert isinstance(step.new_hyperparameters["mini_epochs"], int)
    body = step.audit_body(member, cfg)
    assert body["strata_seed"] == 9
    log = AuditLog.open(tmp_path / "audit.jsonl")
    log.append("initial_draw", body)
    assert verify_log(tmp_path / "audit.jsonl") == (1, [])
    # The same draw claimed without its strata (independent draws) does not reproduce.
    del body["strata_seed"]
    bad = AuditLog.open(tmp_path / "unstratified.jsonl")
    bad.append("initial_draw", body)
    _, problems = verify_log(tmp_path / "unstratified.jsonl")
    assert any("new_hyperparameters" in p.problem for p in problems)


def test_a_stratified_choice_deals_every_choice_when_members_match_the_choices():
    spec = MutationSpec(kind="choice", choices=("adam", "sgd", "lamb"))
    cfg = dataclasses.replace(PopulationConfig(), mutation={"optimizer": spec}, num_policies=4)
    got = {
        initial_draw(m, YAML, cfg, MemberRng.for_member(4, m).get_state(), strata_seed=4).new_hyperparameters[
            "optimizer"
        ]
        for m in range(1, 4)
    }
    assert got == {"adam", "sgd", "lamb"}


def test_start_spread_and_seed_are_checked():
    cfg = population_config_from_dict({"start_spread": 0.5, "seed": 42})
    assert (cfg.start_spread, cfg.seed) == (0.5, 42)
    assert PopulationConfig().start_spread == 1.0 and PopulationConfig().seed == -1
    with pytest.raises(ConfigError, match=r"start_spread: 1.5 is outside \[0, 1\]"):
        population_config_from_dict({"start_spread": 1.5})
    with pytest.raises(ConfigError, match="seed: must be >= 0, or -1"):
        population_config_from_dict({"seed": -2})
    with pytest.raises(ConfigError, match="from_zero: only a log_float"):
        population_config_from_dict({"mutation": {"gamma": {"kind": "discount", "from_zero": 0.9}}})
    with pytest.raises(ConfigError, match=r"from_zero: expected a number inside \[low, high\]"):
        population_config_from_dict({"mutation": {"entropy_coef": {"from_zero": 5.0}}})
    cfg = population_config_from_dict({"mutation": {"entropy_coef": {"from_zero": 1e-4}}})
    assert cfg.mutation["entropy_coef"].from_zero == 1e-4
    assert cfg.selection_dict()["mutation"]["entropy_coef"]["from_zero"] == 1e-4


def test_population_json_records_a_seed_and_refuses_an_explicit_other_one(tmp_path):
    ws = Workspace(tmp_path / "a")
    meta = ws.ensure(2, "episode_return")
    assert isinstance(meta["seed"], int) and meta["seed"] >= 0
    assert ws.ensure(2, "episode_return")["seed"] == meta["seed"]  # every member reads the same one
    assert ws.ensure(2, "episode_return", seed=meta["seed"])["seed"] == meta["seed"]
    with pytest.raises(WorkspaceError, match=rf"seed is {meta['seed']} but this member runs with pbt.seed=7"):
        ws.ensure(2, "episode_return", seed=7)
    # Two populations differ by default; an explicit seed is recorded as given.
    assert Workspace(tmp_path / "b").ensure(2, "episode_return")["seed"] != meta["seed"]
    assert Workspace(tmp_path / "c").ensure(2, "episode_return", seed=7)["seed"] == 7


def test_a_workspace_written_before_seeds_keeps_working(tmp_path):
    ws = Workspace(tmp_path / "old")
    ws.ensure(2, "episode_return")
    meta_path = ws.root / "population.json"
    meta = json.loads(meta_path.read_text())
    del meta["seed"]
    meta_path.write_text(json.dumps(meta))
    assert "seed" not in ws.ensure(2, "episode_return", seed=7)  # no recorded seed: nothing to disagree with
    assert ws.population_seed(ws.population_meta()) is None


def test_a_new_member_in_an_old_workspace_derives_its_stream_from_its_index(tmp_path):
    from async_pbt_isaaclab.member.session import _first_rng

    cfg = dataclasses.replace(PopulationConfig(), policy_idx=3)
    assert _first_rng(cfg, None).get_state() == MemberRng(cfg.resolved_mutation_seed()).get_state()
    assert _first_rng(cfg, 9).get_state() == MemberRng.for_member(9, 3).get_state()
    explicit = dataclasses.replace(cfg, mutation_seed=5)
    assert _first_rng(explicit, 9).get_state() == MemberRng(5).get_state()  # mutation_seed wins


def test_a_first_start_killed_before_it_saved_its_state_keeps_its_draw(tmp_path, start_pendulum_member):
    """Killed between the initial_draw entry and state.json: the next start reuses the draw (one entry, the RNG
    stream continuous), and the audit verifies."""
    mutation = {"learning_rate": "mutate_float", "gamma": "mutate_discount"}
    session = start_pendulum_member(tmp_path, mutation)
    drawn = dict(session.state.hyperparameters)
    (session.dir / "state.json").unlink()  # as if killed before the first save
    log = session.dir / "audit.jsonl"
    log.write_text(log.read_text().splitlines(keepends=True)[0])  # only the initial_draw entry was written
    session = start_pendulum_member(tmp_path, mutation)
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["initial_draw", "start"]
    assert session.state.hyperparameters == drawn
    assert verify_log(log)[1] == []


def test_a_member_keeps_a_value_its_command_line_set(tmp_path, monkeypatch, capsys, start_pendulum_member):
    """A real member start whose command line sets the learning rate: the diverse start keeps it (and says so),
    draws the discount, and the initial_draw entry records the pin so the audit replays it."""
    from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
    from async_pbt_isaaclab.member import restart

    monkeypatch.setattr(restart, "_CAPTURED", ["python", "train.py", "agent.params.config.learning_rate=0.002"])
    mutation = {"learning_rate": "mutate_float", "gamma": "mutate_discount"}
    session = start_pendulum_member(tmp_path, mutation, overrides=["agent.params.config.learning_rate=0.002"])
    assert session.state.hyperparameters["learning_rate"] == 0.002
    assert session.state.hyperparameters["gamma"] != 0.95  # drawn
    assert "learning_rate=0.002 kept out of the diverse start: set on the command line" in capsys.readouterr().err
    entries = [json.loads(line) for line in (session.dir / "audit.jsonl").read_text().splitlines()]
    assert entries[0]["kind"] == "initial_draw" and entries[0]["pinned"] == ["learning_rate"]
    assert verify_log(session.dir / "audit.jsonl")[1] == []


def test_command_line_keys_find_a_value_typed_as_the_trainers_own_flag():
    """mjlab's parser (tyro) takes a runner value as a flag (``--agent.algorithm.learning-rate 1e-3``): a value typed
    so is as typed as an override, with a hyphen or an underscore, and with its value after ``=`` or apart. A flag of
    another name, a prefix of the name, or a trainer that names no flags sets nothing searched."""
    from async_pbt_isaaclab.core.decision.start import command_line_keys

    searched = {"learning_rate": SPECS["learning_rate"], "env.rewards.reach.weight": SPECS["learning_rate"]}

    def override(key: str) -> str:
        return f"agent.runner.algorithm.{key}"

    def flag(key: str) -> str | None:
        return None if key.startswith("env.") else f"agent.algorithm.{key}"

    for argv in (
        ["Mjlab-Cartpole-Balance", "--agent.algorithm.learning-rate", "1e-3"],
        ["Mjlab-Cartpole-Balance", "--agent.algorithm.learning_rate=1e-3"],
        ["--gpu-ids", "None", "--agent.algorithm.learning-rate=1e-3", "--agent.logger", "tensorboard"],
    ):
        assert command_line_keys(argv, searched, override, flag) == ("learning_rate",), argv
    for argv in (
        ["--agent.algorithm.learning-rate-schedule", "x"],
        ["--agent.algorithm", "x"],
        ["--env.rewards.reach.weight", "2.0"],
        ["--", "agent.algorithm.learning_rate"],
    ):
        assert command_line_keys(argv, searched, override, flag) == (), argv
    assert command_line_keys(["--agent.algorithm.learning-rate", "1e-3"], searched, override) == ()
