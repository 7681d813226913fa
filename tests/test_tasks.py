"""PBT task registrations and their agent yamls.

Shown here, without Isaac Lab:

1. the ``isaaclab.tasks`` entry point group lists ``async_pbt_isaaclab.tasks``; loading it registers every id with
   gymnasium and imports neither isaaclab, isaacsim, omni, pxr, torch nor rl_games;
2. each registration has Isaac Lab's shape (``env_cfg_entry_point``, ``rl_games_cfg_entry_point`` strings,
   ``disable_env_checker``), upstream variants point at the upstream id, and building one without Isaac Lab fails with
   the install hint;
3. each agent yaml resolves the way Isaac Lab resolves ``module:file.yaml``, loads with Isaac Lab's YAML 1.1 loader,
   passes the population config checks with the population enabled, names an objective its ``pbt_summary`` can
   provide, and mutates within sensible bounds; that each keeps its base task's PPO settings is checked against the
   release's own yamls in tests/upstream/test_real_isaaclab.py;
4. the CPU task is not registered as an Isaac Lab task; its own registration and its yaml run on a CPU;
5. the real Isaac Lab releases resolve every variant's config: tests/upstream/test_real_isaaclab.py.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import warnings

import gymnasium as gym
import pytest
import yaml
from blocked_imports import run_blocked

import async_pbt_isaaclab.tasks as tasks_pkg
from async_pbt_isaaclab.core.agent_config import get_path, load_population_config
from async_pbt_isaaclab.core.config import objective_term
from async_pbt_isaaclab.core.decision.mutation import agent_path
from async_pbt_isaaclab.core.state.evidence import LENGTH_OBJECTIVE, RETURN_OBJECTIVE
from async_pbt_isaaclab.envs.isaaclab import ISAACLAB_INSTALL_HINT
from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
from async_pbt_isaaclab.tasks.registry import (
    TASK_IDS,
    TASKS,
    UpstreamEnvCfg,
    installed_series,
    register_tasks,
)

SERIES = installed_series()
ID = {t.id: t.id_for(SERIES) for t in TASKS}
"""2.x-style id -> the id registered here (without Isaac Lab: 3.0's convention)."""
UPSTREAM = {t.id_for(SERIES): t.base_for(SERIES) for t in TASKS}
"""Registered id -> the upstream task it delegates to on this release."""
FORBIDDEN = ("isaaclab", "isaaclab_rl", "isaaclab_tasks", "isaacsim", "omni", "pxr", "torch", "rl_games")


def _isaaclab_yaml(entry: str) -> tuple[str, dict]:
    """A ``module:file.yaml`` entry point read as Isaac Lab reads it (``dirname(module.__file__)/file``, YAML 1.1
    ``full_load``); the real loader reads them in tests/upstream."""
    module, file_name = entry.split(":")
    path = os.path.join(os.path.dirname(importlib.import_module(module).__file__), file_name)
    with open(path, encoding="utf-8") as fh:
        return path, yaml.full_load(fh)


def test_entry_point_group_lists_the_tasks_package():
    eps = importlib.metadata.entry_points(group="isaaclab.tasks")
    ours = [ep for ep in eps if ep.name == "async_pbt"]
    assert len(ours) == 1 and ours[0].value == "async_pbt_isaaclab.tasks"
    assert ours[0].load() is tasks_pkg


def test_loading_the_entry_point_registers_ids_without_heavy_imports():
    out = run_blocked(
        """
        import importlib.metadata
        (ep,) = [e for e in importlib.metadata.entry_points(group="isaaclab.tasks") if e.name == "async_pbt"]
        ep.load()
        import gymnasium
        ids = sorted(i for i in gymnasium.registry if i.startswith("AsyncPbt-"))
        print(json.dumps({"ids": ids, "attempts": attempts,
                          "loaded": sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)}))
    """,
        forbidden=FORBIDDEN,
    )
    assert out["ids"] == sorted(TASK_IDS)
    # Only the release detection looks isaaclab up (a find_spec reading metadata, no import).
    assert out["loaded"] == [] and set(out["attempts"]) <= {"isaaclab"}


def test_at_least_the_three_kinds_of_task_are_registered():
    assert set(UPSTREAM) == set(TASK_IDS)
    assert "AsyncPbt-TorchReach-v0" not in TASK_IDS, "not an Isaac Lab task: testing.torch_reach_task registers it"
    kinds = {"Allegro": "dexterous", "Anymal": "locomotion", "Cartpole": "classic"}
    assert all(any(k in t for t in TASK_IDS) for k in kinds)


@pytest.mark.parametrize("task_id", sorted(UPSTREAM))
def test_upstream_variant_registration_has_isaaclab_shape(task_id):
    spec = gym.spec(task_id)
    assert spec.disable_env_checker is True
    assert spec.entry_point == "async_pbt_isaaclab.tasks.registry:make_upstream_env"
    assert spec.kwargs["base_task"] == UPSTREAM[task_id]
    for key in ("env_cfg_entry_point", "rl_games_cfg_entry_point"):
        assert isinstance(spec.kwargs[key], str)
    module, attr = spec.kwargs["env_cfg_entry_point"].split(":")
    cfg_entry = getattr(importlib.import_module(module), attr)
    assert isinstance(cfg_entry, UpstreamEnvCfg) and cfg_entry.base_task == UPSTREAM[task_id]
    assert callable(cfg_entry)  # Isaac Lab's load_cfg_from_registry calls a callable entry point


def test_a_variant_builds_the_upstream_envs_own_class():
    """Delegation through the upstream id's registration (here a stand-in upstream: the pure-torch env)."""
    from async_pbt_isaaclab.testing.torch_reach_task import TorchReachEnv, TorchReachEnvCfg

    gym.register(
        id="Isaac-StandInUpstream-v0",
        entry_point="async_pbt_isaaclab.testing.torch_reach_task:TorchReachEnv",
        disable_env_checker=True,
        kwargs={"env_cfg_entry_point": "unused:Cfg"},
    )
    gym.register(
        id="AsyncPbt-StandInUpstream-v0",
        entry_point="async_pbt_isaaclab.tasks.registry:make_upstream_env",
        disable_env_checker=True,
        kwargs={"base_task": "Isaac-StandInUpstream-v0", "rl_games_cfg_entry_point": "x:agents/y.yaml"},
    )
    try:
        cfg = TorchReachEnvCfg()
        cfg.scene.num_envs = 3
        env = gym.make("AsyncPbt-StandInUpstream-v0", cfg=cfg)
        assert type(env.unwrapped) is TorchReachEnv and env.unwrapped.num_envs == 3
        assert env.unwrapped.spec.id == "AsyncPbt-StandInUpstream-v0"
    finally:
        del gym.registry["Isaac-StandInUpstream-v0"], gym.registry["AsyncPbt-StandInUpstream-v0"]


def test_building_an_upstream_variant_without_isaaclab_says_how_to_install():
    try:
        import isaaclab_tasks  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("isaaclab_tasks is installed")
    with pytest.raises(ImportError) as err:
        gym.make(ID["AsyncPbt-Cartpole-Direct-v0"])
    assert UPSTREAM[ID["AsyncPbt-Cartpole-Direct-v0"]] in str(err.value) and ISAACLAB_INSTALL_HINT in str(err.value)
    with pytest.raises(ImportError):
        UpstreamEnvCfg("AsyncPbt-Cartpole-Direct-v0")()


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_agent_yaml_loads_and_its_population_config_is_valid(task):
    entry = gym.spec(ID[task.id]).kwargs["rl_games_cfg_entry_point"]
    assert entry == f"async_pbt_isaaclab.tasks:agents/{task.agent_yaml}"
    path, agent = _isaaclab_yaml(entry)
    assert os.path.isfile(path)
    merged, cfg = load_population_config(agent, ["pbt.enabled=true", "pbt.workspace=/tmp/unused"], source=path)
    assert cfg.enabled and not agent["pbt"]["enabled"], "off by default: the task also trains alone"
    # Every number a mutation starts from was read as a number by the YAML 1.1 loader Isaac Lab uses.
    for key in cfg.mutation:
        value = get_path(agent, agent_path(key))
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)
    # The objective has a per-episode source.
    summary = SummaryCfg.from_agent_cfg(merged)
    term = objective_term(cfg.objective)
    assert term in (RETURN_OBJECTIVE, LENGTH_OBJECTIVE) or term in {t.name for t in summary.terms}, term
    # rl_games settings Isaac Lab's script and a population rely on.
    rl = merged["params"]["config"]
    assert rl["env_name"] == "rlgpu" and rl["num_actors"] == -1
    assert rl["torch_compile"] is False, "each exploit restarts the process: compiling would be paid every time"
    assert rl["lr_schedule"] in ("adaptive", "constant", None)


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_mutation_bounds_contain_the_starting_values(task):
    _, agent = _isaaclab_yaml(gym.spec(ID[task.id]).kwargs["rl_games_cfg_entry_point"])
    _, cfg = load_population_config(agent, ["pbt.enabled=true"])
    assert cfg.mutation, "a PBT variant mutates something"
    for key, spec in cfg.mutation.items():
        value = float(get_path(agent, agent_path(key)))
        if key == "entropy_coef" and value == 0.0:
            continue  # upstream trains without entropy bonus; the first explore lifts it to the (tiny) lower bound
        assert spec.low <= value <= spec.high, (task.id, key, value, spec)
        assert spec.low < spec.high


def test_objectives_suit_their_tasks():
    def pbt(task_id):
        doc = _isaaclab_yaml(gym.spec(task_id).kwargs["rl_games_cfg_entry_point"])[1]
        return doc["pbt"], SummaryCfg.from_agent_cfg(doc)

    allegro, s = pbt(ID["AsyncPbt-Repose-Cube-Allegro-Direct-v0"])
    assert allegro["objective"] == "successes"
    assert [(t.name, t.source, t.mode) for t in s.terms] == [("successes", "attr:successes", "last")]
    flat, s = pbt(ID["AsyncPbt-Velocity-Flat-Anymal-C-v0"])
    assert flat["objective"] == "track_lin_vel_xy_exp"
    assert ("track_lin_vel_xy_exp", "reward:track_lin_vel_xy_exp") in [(t.name, t.source) for t in s.terms]
    rough, s = pbt(ID["AsyncPbt-Velocity-Rough-Anymal-C-v0"])
    assert rough["objective"] == "episode_return"
    assert s.curriculum == "log:Curriculum/terrain_levels" and s.curriculum_bin == 1.0
    cartpole, _ = pbt(ID["AsyncPbt-Cartpole-Direct-v0"])
    assert cartpole["objective"] == "episode_return"


def test_cpu_task_is_the_envs_own_registration_with_the_packaged_yaml():
    from async_pbt_isaaclab.testing import torch_reach_task

    torch_reach_task.register_torch_envs()
    spec = gym.spec("AsyncPbt-TorchReach-v0")
    assert spec.entry_point == "async_pbt_isaaclab.testing.torch_reach_task:TorchReachEnv"
    env = gym.make("AsyncPbt-TorchReach-v0", num_envs=3)
    assert env.unwrapped.num_envs == 3
    _, agent = _isaaclab_yaml("async_pbt_isaaclab.tasks:agents/torch_reach_pbt.yaml")
    assert agent["params"]["config"]["device"] == "cpu"


def test_registration_is_idempotent_and_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert register_tasks() == TASK_IDS
        assert register_tasks() == TASK_IDS


def test_ids_follow_the_installed_release_convention():
    for task in TASKS:
        assert task.id.endswith("-v0") and not task.id_3.endswith("-v0")
        assert task.id_for("2") == task.id and task.id_for("3") == task.id_3
        assert task.base_for("2").endswith("-v0") and not task.base_for("3").endswith("-v0")
    assert TASK_IDS == tuple(t.id_for(SERIES) for t in TASKS)


def test_isaaclab_pbt_overrides_apply_to_our_yamls():
    """Isaac Lab's documented PBT flags (agent.pbt.*) work unchanged on a packaged yaml."""
    _, agent = _isaaclab_yaml(gym.spec(ID["AsyncPbt-Cartpole-Direct-v0"]).kwargs["rl_games_cfg_entry_point"])
    _, cfg = load_population_config(
        agent,
        [
            "agent.pbt.enabled=True",
            "agent.pbt.num_policies=8",
            "agent.pbt.policy_idx=3",
            "agent.pbt.workspace=cartpole_pbt",
            "agent.pbt.directory=/shared",
            "agent.pbt.objective=episode.episode_return",
        ],
    )
    assert (cfg.enabled, cfg.num_policies, cfg.policy_idx) == (True, 8, 3)
    assert str(cfg.workspace_path("logs")) == "/shared/cartpole_pbt"
    assert objective_term(cfg.objective) == "episode_return"
