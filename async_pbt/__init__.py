"""async_pbt: the stable public name of asynchronous population-based training for RL-Games.

``import async_pbt`` gives the pure core's public API (no torch, rl_games or Isaac Lab is imported)::

    import async_pbt
    agent_cfg, cfg = async_pbt.load_population_config(async_pbt.load_yaml("agent.yaml"), ["pbt.num_policies=4"])
    decision = async_pbt.decide(me, peers, cfg, rng, now)            # pure selection
    params, changes = async_pbt.mutate(params, cfg.mutation, cfg.mutation_rate, cfg.change_range, rng)
    step = async_pbt.pbt_step(async_pbt.PopulationView(me, peers, now), cfg, rng_state)   # the whole step
    ws = async_pbt.Workspace("runs/pbt"); records, errors = ws.read_records()
    entries, problems = async_pbt.verify_log("runs/pbt/members/000/audit.jsonl")

The implementation lives in one package, ``async_pbt_isaaclab`` (also the pip distribution, the Isaac Lab
extension and the ``isaaclab.tasks`` entry point). Every module of it is reachable under this name too:
``async_pbt.<path>`` *is* ``async_pbt_isaaclab.<path>`` -- the same module object, not a copy -- so
``python -m async_pbt.examples.cpu_population`` runs the example and ``async_pbt.core.config.ConfigError``
is the class the implementation raises. See docs/configuration.md ("Package names").
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from async_pbt_isaaclab._version import __version__
from async_pbt_isaaclab.core.agent_config import apply_overrides, load_population_config, load_yaml
from async_pbt_isaaclab.core.config import ConfigError, PopulationConfig
from async_pbt_isaaclab.core.decision.mutation import MutationSpec, mutate
from async_pbt_isaaclab.core.decision.selection import Decision, Outcome
from async_pbt_isaaclab.core.decision.step import PopulationView, StepResult, decide, pbt_step
from async_pbt_isaaclab.core.pbt_section import population_config_from_dict
from async_pbt_isaaclab.core.state.evidence import ConditionLabel, EpisodeBatch, EvidenceSummary, EvidenceWindow
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.records import HistoryEntry, MemberRecord
from async_pbt_isaaclab.core.workspace.audit import AuditLog
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError
from async_pbt_isaaclab.core.workspace.retention import population_best

_IMPLEMENTATION = "async_pbt_isaaclab"
"""The package every ``async_pbt.<path>`` module resolves to."""


class _AliasLoader(importlib.abc.Loader):
    """Loads ``async_pbt.<path>`` by importing ``async_pbt_isaaclab.<path>`` and handing back that module."""

    def __init__(self, target: str):
        self.target = target
        self.target_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.target_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Already executed under its implementation name; running it again would make a second copy.
        # The import system has just stamped the alias spec on the module: give it its own back, so
        # reload(), pickle and tracebacks keep seeing the implementation module.
        module.__spec__ = self.target_spec

    def get_code(self, fullname: str):
        # ``python -m async_pbt.x.y`` (runpy) runs the implementation's code as __main__.
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        return loader.get_code(self.target) if isinstance(loader, importlib.abc.InspectLoader) else None

    def is_package(self, fullname: str) -> bool:
        spec = importlib.util.find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves ``async_pbt.<path>`` to the implementation module ``async_pbt_isaaclab.<path>``."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(__name__ + "."):
            return None
        real = _IMPLEMENTATION + fullname[len(__name__) :]
        real_spec = importlib.util.find_spec(real)
        if real_spec is None:
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname,
            _AliasLoader(real),
            origin=real_spec.origin,
            is_package=real_spec.submodule_search_locations is not None,
        )
        if real_spec.submodule_search_locations is not None:
            spec.submodule_search_locations = list(real_spec.submodule_search_locations)
        return spec


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    # First in line: the default path finder would otherwise find ``async_pbt.core.config`` through the
    # implementation package's ``__path__`` and load the file a second time under the alias name.
    sys.meta_path.insert(0, _AliasFinder())

__all__ = [
    "AuditLog",
    "ConditionLabel",
    "ConfigError",
    "Decision",
    "EpisodeBatch",
    "EvidenceSummary",
    "EvidenceWindow",
    "HistoryEntry",
    "MemberRecord",
    "MemberRng",
    "MutationSpec",
    "Outcome",
    "PopulationConfig",
    "PopulationView",
    "StepResult",
    "Workspace",
    "WorkspaceError",
    "__version__",
    "apply_overrides",
    "decide",
    "load_population_config",
    "load_yaml",
    "mutate",
    "pbt_step",
    "population_best",
    "population_config_from_dict",
    "verify_log",
]
