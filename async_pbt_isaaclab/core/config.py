"""Population configuration: :class:`PopulationConfig`, what the ``pbt:`` section of an agent yaml means.

An Isaac Lab PBT section (``PbtCfg`` field names: ``enabled, policy_idx, num_policies, directory,
workspace, objective, interval_steps, threshold_std, threshold_abs, mutation_rate, change_range,
mutation``) loads unchanged and means the same thing. Our additions live beside those fields and
all have defaults, documented on :class:`PopulationConfig` and in ``docs/configuration.md``.

Reading and checking a section is :mod:`async_pbt_isaaclab.core.pbt_section` (its ``mutation:`` mapping:
:mod:`async_pbt_isaaclab.core.mutation_section`; the rest of the agent yaml:
:mod:`async_pbt_isaaclab.core.agent_config`). Every problem is collected and reported together in one
:class:`ConfigError` whose lines name the file, the key and the accepted values, before any training starts.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from async_pbt_isaaclab.core.decision.mutation import MutationSpec
from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.state.evidence import RETURN_OBJECTIVE

HPARAM_SOURCES = ("donor", "own")
"""Where an exploiting member's hyperparameters start from before mutation."""

EXPLOIT_MODES = ("auto", "inprocess", "restart")
"""Accepted values of ``exploit_mode``."""

OBJECTIVE_DIRECTIONS = ("max", "min")
"""Accepted values of ``objective_direction``."""

LATE_PEER_INTERVALS = 8
"""``max_frame_lag: -1``: a peer whose newest entry lags more than this many ``interval_steps`` behind me is not
ranked against me. Members that train at one speed stay within an interval or two of each other, and restarts spread
them over up to about five (tests/core/test_matching_progress.py); one that started late or came back from a long
restart is further behind, and ranked against the members ahead it would take their worst
slot at every decision, so none of them would ever copy (it still decides itself, at its own progress)."""

REFERENCE_MEMBER = 0
"""The member that keeps the yaml's values at the diverse start (the population always holds the configuration you
wrote); with ``protect_reference`` it also keeps its own weights to the end."""


class ConfigError(ValueError):
    """The population config is invalid. ``problems`` lists every issue found, one line each."""

    def __init__(self, problems: list[str], source: str = ""):
        self.problems = problems
        self.source = source
        where = f" in {source}" if source else ""
        super().__init__(f"invalid population config{where}:\n  - " + "\n  - ".join(problems))


@dataclass
class PopulationConfig:
    """Everything a member needs to take part in a population. Defaults suit a small GPU population."""

    # ---- Isaac Lab PbtCfg fields (same names, same meaning) ----
    enabled: bool = False
    """Take part in the population; when False the member trains alone and publishes nothing."""
    policy_idx: int = 0
    """This member's index in ``[0, num_policies)``; the workspace folder is named after it."""
    num_policies: int = 8
    """Population size."""
    directory: str = ""
    """Root for a relative ``workspace``; empty means the rl_games train dir (``logs/rl_games/<name>``)."""
    workspace: str = "pbt_workspace"
    """Shared workspace folder: absolute, or relative to ``directory``."""
    objective: str = RETURN_OBJECTIVE
    """Per-episode quantity compared: ``episode_return``, ``episode_length`` or a term name (e.g. ``success``)."""
    interval_steps: int = 100_000
    """Env frames between two publish-and-decide points of this member."""
    threshold_std: float = 0.10
    """``isaaclab`` rule: k in mean +- max(k*std, threshold_abs) bands."""
    threshold_abs: float = 0.05
    """``isaaclab`` rule: absolute band half-width floor."""
    mutation_rate: float = 0.25
    """Probability that each mutable hyperparameter changes at an explore."""
    min_mutated_keys: int = 1
    """At least this many ``mutation`` keys change at every exploit and explore: when the per-key coin
    (``mutation_rate``) draws fewer, more are drawn uniformly among the rest. 0: the coin alone (Isaac Lab)."""
    resample_probability: float = 0.25
    """Random explore: probability that a key drawn for a change is drawn afresh from its whole bounds instead of
    multiplied by a factor (Ray's PBT ``resample_probability``); 0: never."""
    change_range: tuple[float, float] = (1.1, 2.0)
    """Range of the multiplicative factor of ``log_float`` mutations (Isaac Lab's change_min, change_max)."""
    mutation: dict[str, MutationSpec] = field(default_factory=dict)
    """Hyperparameters to mutate, by short name (``learning_rate``) with kind and bounds."""

    # ---- our additions ----
    rule: str = "dexpbt"
    """Selection rule: ``dexpbt``, ``isaaclab`` or ``welch`` (see docs/selection.md)."""
    objective_direction: str = "max"
    """``max``: a larger objective is better (returns, success rates); ``min``: smaller is better (errors)."""
    allow_shaped_return_objective: bool = False
    """Accept ``objective: episode_return`` while ``mutation`` searches env values (``env.*``), with a warning instead
    of the refusal. The return sums the reward those values shape, so the search could raise it by changing the
    reward rather than the policy: name an objective the env reports apart from its reward instead
    (``distance_travelled``, a success rate)."""
    window: int = 64
    """Evidence window: the last K completed episodes of the current generation."""
    min_episodes: int = 16
    """A member's evidence counts only with at least this many episodes in its window."""
    settle_max_steps: int = -1
    """Settling gate: evidence of a new generation counts once every env has finished an episode begun in
    it, or after this many env steps of the generation (for tasks whose episodes may never end); -1: no cap."""
    history_length: int = 12
    """Newest interval entries (frame, evidence stats, checkpoint) each member keeps in its record at full
    resolution, so peers behind it compare at matching progress; as many older entries are kept thinned out
    over the whole run (a member that starts late still finds one); their checkpoints stay on disk too."""
    max_heartbeat_age_s: float = 600.0
    """A peer whose heartbeat is older than this (seconds) is stale and not compared."""
    max_clock_skew_s: float = 60.0
    """A heartbeat further than this in the future is refused as clock skew."""
    max_frame_lag: int = -1
    """A peer whose newest entry lags more than this many frames behind me is not compared (it decides at its own
    progress, comparing itself with our entries at its frame); -1: ``LATE_PEER_INTERVALS`` x ``interval_steps``, so
    a member far behind never takes the worst slot of the members ahead of it."""
    worst_fraction: float = 0.25
    """``dexpbt``/``welch``: the bottom fraction of compared members that may exploit."""
    unsettled_fill_worst: bool = True
    """``dexpbt``/``welch``: a peer whose new generation has not settled yet (it left the worst group at its own
    decision) counts in the members the worst group is a fraction of and holds one of its slots, so at most
    ``worst_fraction`` of the population is replaced per settling period. False (the earlier default; audit entries
    written before the key replay with it): the worst group is a fraction of the compared members alone (with two
    of four members unsettled, the worse of the other two is replaced)."""
    top_fraction: float = 0.25
    """``dexpbt``/``welch``: the top fraction from which a donor is drawn."""
    gap_std_fraction: float = 0.5
    """``dexpbt``: copy the donor only if the gap to it exceeds this fraction of the trimmed std (the population's
    spread: the same decision whatever constant is added to every objective)..."""
    gap_donor_fraction: float = 0.0
    """``dexpbt``: ...and this fraction of the donor's absolute objective (0: off; when set, decisions depend on
    the objective's offset); a smaller gap explores in place."""
    gap_z: float = 1.64
    """``dexpbt``: ...and this many standard errors of the difference of the two windows' means
    (``sqrt(s_d^2/n_d + s_m^2/n_m)``; 1.64 is a one-sided 5 % test): a gap within the windows' own sampling noise
    explores instead of copying (0: off)."""
    trim_fraction: float = 0.2
    """``dexpbt``: fraction of the lowest objectives left out before taking the std (the low tail only)."""
    min_members: int = 2
    """Decide only when at least this many compatible live members (me included) have evidence."""
    start_grace_frames: int = -1
    """No decision before this many frames since the member's start; -1: long enough that the first decision's window
    holds no episode begun at frame 0 (from the task's episode length and envs per member, :func:`task_start_grace`),
    and at least two ``interval_steps``."""
    restart_grace_frames: int = -1
    """No decision before this many frames of the current generation; -1 means two ``interval_steps``."""
    freeze_at_frame: int = -1
    """From this frame on a member keeps its weights and values to the end, and holds no slot of its peers' worst
    group: values changed so late are not judged before the end. -1: a member may change until it stops."""
    protect_interval_best: bool = True
    """``dexpbt``: keep a member whose best window mean this interval reaches the top group."""
    welch_alpha: float = 0.05
    """``welch``: significance level of the one-sided Welch t-test (donor better than me)."""
    explore_without_donor: bool = True
    """``isaaclab``: an underperformer with no leader explores from its own weights (Isaac Lab does)."""
    explore: str = "pb2"
    """How a new generation's hyperparameters are proposed: a strategy of
    :mod:`async_pbt_isaaclab.core.decision.explore` (``pb2``: the GP bandit, which needs the ``pb2`` extra;
    ``random``: bounded random mutation). ``pb2`` won more of the validation study's cases (docs/sweep-study.md)."""
    hparams_from: str = "donor"
    """Exploit starts from the ``donor``'s hyperparameters (PBT) or keeps its ``own`` before mutation."""
    exploit_mode: str = "auto"
    """``auto``: load the donor into the running agent when every changed value can be set live, else restart
    the process; ``inprocess``: never restart (an exploit that cannot be done live is aborted, with why);
    ``restart``: always the exec restart."""
    initial_mutation: bool = False
    """At a member's first start, mutate its yaml hyperparameters once (member 0 keeps them), as DexPBT can;
    when true it replaces the diverse start (``start_spread``)."""
    start_spread: float = 1.0
    """Diverse start: at a member's first start its ``mutation`` keys are drawn within this fraction of their
    bounds' range around the yaml value (1: the whole bounds; 0: off, every member starts from the yaml)."""
    seed: int = -1
    """Population seed: each member's mutation RNG starts from (seed, index); -1 draws one from OS entropy
    when the workspace is created and records it in ``population.json``."""
    mutation_seed: int = -1
    """Seed of this member's mutation RNG when set (>= 0; it wins over ``seed``); -1: from ``seed``."""
    keep_last_checkpoints: int = 3
    """Retention: the newest K checkpoints of each member stay (and every one its history references)."""
    keep_best_checkpoints: int = 3
    """Retention: each member's K best checkpoints (by objective) stay."""
    temp_grace_s: float = 600.0
    """Temp files that killed writers of other hosts left are removed once older than this (a dead writer of this
    host's at the next start, whatever their age; a live writer's never: the temp name holds host and pid)."""
    heartbeat_interval_s: float = 10.0
    """How often (wall seconds) a member refreshes its heartbeat between publishes."""
    publish_in_background: bool = True
    """Write publishes and heartbeats (checkpoint, best list, decision, state, record) on a background thread, in
    order, while training goes on; ``false``: on the training thread, as the fsyncs happen."""
    trusted_workspace: bool = False
    """Load checkpoints with full pickle. Only for workspaces whose writers you trust."""
    launcher_prefix: list[str] = field(default_factory=list)
    """Prefix for the restart command, e.g. ``[torchrun, --nproc_per_node=1]``; empty: this python."""
    max_restarts: int = -1
    """Stop exploiting after this many restarts of this member; -1 means no limit."""
    protect_reference: bool = False
    """The reference member (member 0, the yaml's values) never exploits or explores: the population holds a run
    of the configuration you wrote from start to end, which the others' search is measured against. It still
    publishes, ranks and donates, and holds no slot of the worst group; one member fewer searches."""

    # ---- derived values ----
    def resolved_max_frame_lag(self) -> int:
        """``max_frame_lag`` with its placeholder (< 0) resolved: ``LATE_PEER_INTERVALS`` intervals."""
        return LATE_PEER_INTERVALS * self.interval_steps if self.max_frame_lag < 0 else self.max_frame_lag

    def resolved_start_grace(self) -> int:
        """``start_grace_frames`` with its placeholder (< 0) resolved without the task: 2 x ``interval_steps`` (a member
        resolves it from its task first, :func:`with_task_start_grace`)."""
        return 2 * self.interval_steps if self.start_grace_frames < 0 else self.start_grace_frames

    def resolved_restart_grace(self) -> int:
        """``restart_grace_frames`` with its placeholder (< 0) resolved: 2 x ``interval_steps``."""
        return 2 * self.interval_steps if self.restart_grace_frames < 0 else self.restart_grace_frames

    def resolved_mutation_seed(self) -> int:
        """``mutation_seed`` with its placeholder (< 0) resolved: a seed derived from ``policy_idx``."""
        # Distinct per member and stable across restarts; the persisted RNG state takes over after start.
        return 1_000_003 * (self.policy_idx + 1) if self.mutation_seed < 0 else self.mutation_seed

    def better(self, a: float, b: float) -> bool:
        """``a`` is strictly better than ``b`` under ``objective_direction``."""
        return a > b if self.objective_direction == "max" else a < b

    def score(self, value: float) -> float:
        """``value`` on a larger-is-better scale (negated under ``objective_direction: min``)."""
        return value if self.objective_direction == "max" else -value

    def workspace_path(self, train_dir: str | os.PathLike[str] = "") -> Path:
        """The workspace folder: ``workspace`` as given when absolute, else under ``directory`` or ``train_dir``."""
        ws = Path(self.workspace).expanduser()
        if ws.is_absolute():
            return ws
        root = Path(self.directory).expanduser() if self.directory else Path(train_dir or ".")
        return (root / ws).absolute()

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain JSON data (tuples as lists, the mutation specs as mappings, sorted by key)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "mutation":
                v = {k: s.to_dict() for k, s in sorted(v.items())}
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    def selection_dict(self) -> dict[str, Any]:
        """The fields a decision depends on (recorded in every audit entry, replayed by the verifier)."""
        keys = (
            "rule policy_idx num_policies objective interval_steps threshold_std threshold_abs mutation_rate "
            "change_range window min_episodes settle_max_steps max_heartbeat_age_s max_clock_skew_s max_frame_lag "
            "worst_fraction top_fraction gap_std_fraction gap_donor_fraction gap_z trim_fraction min_members "
            "start_grace_frames restart_grace_frames protect_interval_best welch_alpha explore_without_donor "
            "hparams_from mutation max_restarts objective_direction explore start_spread min_mutated_keys "
            "resample_probability allow_shaped_return_objective unsettled_fill_worst protect_reference freeze_at_frame"
        ).split()
        d = self.to_dict()
        return {k: d[k] for k in keys}


def task_start_grace(cfg: PopulationConfig, envs: int, episode_steps: int) -> int:
    """Frames before a member's first decision can rest on no episode begun at frame 0: every env finishes its first
    episode (begun at frame 0) within ``episode_steps`` steps, and the window then needs ``ceil(window / envs)`` more
    rounds of episodes begun after that, ``envs x episode_steps x (1 + ceil(window / envs))`` frames in all (episodes
    that end early only shorten it); at least 2 x ``interval_steps``. HalfCheetah (1,000 steps, 64 envs, window 64):
    128,000."""
    rounds = 1 + -(-cfg.window // max(envs, 1))
    return max(2 * cfg.interval_steps, max(envs, 1) * max(episode_steps, 1) * rounds)


def with_task_start_grace(cfg: PopulationConfig, envs: Any, episode_steps: Any) -> PopulationConfig:
    """``cfg`` with ``start_grace_frames: -1`` resolved from the member's task (:func:`task_start_grace`); unchanged
    when it is set or the task's shape is unknown (``None``, not a positive number). The resolved number is what
    decisions record and replay."""
    try:
        envs, steps = int(envs), int(episode_steps)
    except (TypeError, ValueError, OverflowError):
        return cfg
    if cfg.start_grace_frames >= 0 or envs < 1 or steps < 1:
        return cfg
    return dataclasses.replace(cfg, start_grace_frames=task_start_grace(cfg, envs, steps))


def shaped_return_problem(cfg: PopulationConfig) -> str:
    """Why ``cfg`` judges its members by a return its own search reshapes (``""`` when it does not): the objective is
    the return while ``mutation`` searches env values. A problem unless ``allow_shaped_return_objective``, then a
    warning (check-config)."""
    env_keys = sorted(k for k in cfg.mutation if is_env_key(k))
    if not env_keys or objective_term(cfg.objective) != RETURN_OBJECTIVE:
        return ""
    return (
        f"objective: {cfg.objective!r} sums the reward that the searched env values {', '.join(env_keys)} shape, so "
        f"the search could raise it by changing the reward instead of the policy; name an objective the env reports "
        f"apart from its reward (distance_travelled, a success rate), or set allow_shaped_return_objective: true"
    )


def objective_term(objective: str) -> str:
    """Isaac Lab objectives address ``infos`` (``episode.Episode_Reward/success``); ours name the term."""
    return objective[len("episode.") :] if objective.startswith("episode.") else objective
