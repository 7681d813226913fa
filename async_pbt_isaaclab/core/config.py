"""Population configuration: the ``pbt:`` section of an rl_games agent yaml (agent_config.py reads the rest).

An Isaac Lab PBT section (``PbtCfg`` field names: ``enabled, policy_idx, num_policies, directory,
workspace, objective, interval_steps, threshold_std, threshold_abs, mutation_rate, change_range,
mutation``) loads unchanged and means the same thing. Our additions live beside those fields and
all have defaults, documented on :class:`PopulationConfig` and in ``docs/configuration.md``.

Every problem is collected and reported together in one :class:`ConfigError` whose lines name the
file, the key and the accepted values, before any training starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from async_pbt_isaaclab.core import rules
from async_pbt_isaaclab.core.evidence import RETURN_OBJECTIVE
from async_pbt_isaaclab.core.mutation import (
    ISAACLAB_KIND_NAMES,
    MUTATION_KINDS,
    SUPPORTED_HYPERPARAMETERS,
    MutationSpec,
)

SELECTION_RULES = rules.production_rules()
"""Selection rules a user may choose (from the registry in :mod:`async_pbt_isaaclab.core.rules`)."""

TEST_FIXTURE_RULES = rules.fixture_rules()
"""Rules for end-to-end tests only. Refused unless ``ASYNC_PBT_TEST_FIXTURE`` names the rule."""

TEST_FIXTURE_ENV = "ASYNC_PBT_TEST_FIXTURE"
"""Environment variable that must equal a fixture rule's name for that rule to be accepted."""

HPARAM_SOURCES = ("donor", "own")
"""Where an exploiting member's hyperparameters start from before mutation."""

EXPLOIT_MODES = ("auto", "inprocess", "restart")
"""Accepted values of ``exploit_mode``."""

OBJECTIVE_DIRECTIONS = ("max", "min")
"""Accepted values of ``objective_direction``."""

RETIRED_KEYS = {
    "frame_tolerance": "removed: a peer ahead of you is compared at its history entry at or before your frame, "
    "never excluded for being ahead (see history_length and max_frame_lag)",
    "gap_leader_fraction": "renamed to gap_donor_fraction: the required gap is relative to the donor's objective",
}
"""Keys earlier versions accepted, with what replaced them (a clearer error than 'unknown key')."""

BAKED_IN = {
    "minibatch_size": " (baked into the PPO dataset at start: a donor's optimizer state and buffers assume it)",
    "horizon_length": " (sizes the experience buffer at start)",
    "num_actors": " (the number of simulated envs; fixed by the simulator)",
    "seq_length": " (sizes RNN sequence buffers at start)",
}
"""Keys people try to mutate that cannot change, with why (shown in the error)."""


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
    change_range: tuple[float, float] = (1.1, 2.0)
    """Range of the multiplicative factor of ``log_float`` mutations (Isaac Lab's change_min, change_max)."""
    mutation: dict[str, MutationSpec] = field(default_factory=dict)
    """Hyperparameters to mutate, by short name (``learning_rate``) with kind and bounds."""

    # ---- our additions ----
    rule: str = "dexpbt"
    """Selection rule: ``dexpbt``, ``isaaclab`` or ``welch`` (see docs/selection.md)."""
    objective_direction: str = "max"
    """``max``: a larger objective is better (returns, success rates); ``min``: smaller is better (errors)."""
    window: int = 64
    """Evidence window: the last K completed episodes of the current generation."""
    min_episodes: int = 16
    """A member's evidence counts only with at least this many episodes in its window."""
    settle_max_steps: int = -1
    """Settling gate: evidence of a new generation counts once every env has finished an episode begun in
    it, or after this many env steps of the generation (for tasks whose episodes may never end); -1: no cap."""
    history_length: int = 12
    """Interval entries (frame, evidence stats, checkpoint) each member keeps in its record, so peers behind
    it can compare at matching progress; their checkpoints are kept on disk too. Should cover
    ``max_frame_lag`` / ``interval_steps``."""
    max_heartbeat_age_s: float = 600.0
    """A peer whose heartbeat is older than this (seconds) is stale and not compared."""
    max_clock_skew_s: float = 60.0
    """A heartbeat further than this in the future is refused as clock skew."""
    max_frame_lag: int = -1
    """A peer whose newest entry lags more than this many frames behind me is stale; -1: 10 ``interval_steps``."""
    worst_fraction: float = 0.25
    """``dexpbt``/``welch``: the bottom fraction of compared members that may exploit."""
    top_fraction: float = 0.25
    """``dexpbt``/``welch``: the top fraction from which a donor is drawn."""
    gap_std_fraction: float = 0.5
    """``dexpbt``: copy the donor only if the gap to it exceeds this fraction of the trimmed std..."""
    gap_donor_fraction: float = 0.05
    """``dexpbt``: ...and this fraction of the donor's absolute objective; a smaller gap explores in place."""
    trim_fraction: float = 0.2
    """``dexpbt``: fraction of the lowest objectives left out before taking the std (the low tail only)."""
    min_members: int = 2
    """Decide only when at least this many compatible live members (me included) have evidence."""
    start_grace_frames: int = -1
    """No decision before this many frames since the member's start; -1 means two ``interval_steps``."""
    restart_grace_frames: int = -1
    """No decision before this many frames of the current generation; -1 means two ``interval_steps``."""
    protect_interval_best: bool = True
    """``dexpbt``: keep a member whose best window mean this interval reaches the top group."""
    welch_alpha: float = 0.05
    """``welch``: significance level of the one-sided Welch t-test (donor better than me)."""
    explore_without_donor: bool = True
    """``isaaclab``: an underperformer with no leader explores from its own weights (Isaac Lab does)."""
    hparams_from: str = "donor"
    """Exploit starts from the ``donor``'s hyperparameters (PBT) or keeps its ``own`` before mutation."""
    exploit_mode: str = "auto"
    """``auto``: load the donor into the running agent when every changed value can be set live, else restart
    the process; ``inprocess``: never restart (an exploit that cannot be done live is aborted, with why);
    ``restart``: always the exec restart."""
    initial_mutation: bool = False
    """At a member's first start, mutate its yaml hyperparameters once (member 0 keeps them), as DexPBT can."""
    mutation_seed: int = -1
    """Seed of the member's mutation RNG; -1 derives it from ``policy_idx`` (distinct per member)."""
    keep_last_checkpoints: int = 3
    """Retention: the newest K checkpoints of each member stay (and every one its history references)."""
    keep_best_checkpoints: int = 3
    """Retention: each member's K best checkpoints (by objective) stay."""
    temp_grace_s: float = 600.0
    """Temp files older than this (left by killed writers) are removed."""
    heartbeat_interval_s: float = 10.0
    """How often (wall seconds) a member refreshes its heartbeat between publishes."""
    trusted_workspace: bool = False
    """Load checkpoints with full pickle. Only for workspaces whose writers you trust."""
    launcher_prefix: list[str] = field(default_factory=list)
    """Prefix for the restart command, e.g. ``[torchrun, --nproc_per_node=1]``; empty: this python."""
    max_restarts: int = -1
    """Stop exploiting after this many restarts of this member; -1 means no limit."""

    # ---- derived values ----
    def resolved_max_frame_lag(self) -> int:
        return 10 * self.interval_steps if self.max_frame_lag < 0 else self.max_frame_lag

    def resolved_start_grace(self) -> int:
        return 2 * self.interval_steps if self.start_grace_frames < 0 else self.start_grace_frames

    def resolved_restart_grace(self) -> int:
        return 2 * self.interval_steps if self.restart_grace_frames < 0 else self.restart_grace_frames

    def resolved_mutation_seed(self) -> int:
        # Distinct per member and stable across restarts; the persisted RNG state takes over after start.
        return 1_000_003 * (self.policy_idx + 1) if self.mutation_seed < 0 else self.mutation_seed

    def better(self, a: float, b: float) -> bool:
        """``a`` is strictly better than ``b`` under ``objective_direction``."""
        return a > b if self.objective_direction == "max" else a < b

    def score(self, value: float) -> float:
        """``value`` on a larger-is-better scale (negated under ``objective_direction: min``)."""
        return value if self.objective_direction == "max" else -value

    def workspace_path(self, train_dir: str | os.PathLike = "") -> Path:
        ws = Path(self.workspace).expanduser()
        if ws.is_absolute():
            return ws
        root = Path(self.directory).expanduser() if self.directory else Path(train_dir or ".")
        return (root / ws).absolute()

    def to_dict(self) -> dict[str, Any]:
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
            "worst_fraction top_fraction gap_std_fraction gap_donor_fraction trim_fraction min_members "
            "start_grace_frames restart_grace_frames protect_interval_best welch_alpha explore_without_donor "
            "hparams_from mutation max_restarts objective_direction"
        ).split()
        d = self.to_dict()
        return {k: d[k] for k in keys}


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(PopulationConfig))
_FIELD_TYPES = {f.name: f for f in dataclasses.fields(PopulationConfig)}


def _check_type(key: str, value: Any, default: Any, problems: list[str], where: str) -> Any:
    """Coerce ``value`` to the type of ``default`` or record a problem."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        problems.append(f"{where}{key}: expected true or false, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        problems.append(f"{where}{key}: expected an integer, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer too large for a float
                number = math.inf
            if not math.isfinite(number):
                problems.append(f"{where}{key}: expected a finite number, got {value!r:.40}")
                return None
            return number
        problems.append(f"{where}{key}: expected a number, got {value!r}")
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        problems.append(f"{where}{key}: expected a string, got {value!r}")
    elif isinstance(default, list):
        if isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value):
            return list(value)
        if isinstance(value, str):
            return value.split()
        problems.append(f"{where}{key}: expected a list of strings, got {value!r}")
    else:
        return value
    return None


def _parse_mutation(raw: Any, problems: list[str], where: str) -> dict[str, MutationSpec]:
    """Read ``mutation:``: Isaac Lab form ``{agent.params.config.lr: mutate_float}`` or ours with bounds."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"{where}mutation: expected a mapping of hyperparameter -> kind, got {raw!r}")
        return {}
    specs: dict[str, MutationSpec] = {}
    supported = ", ".join(SUPPORTED_HYPERPARAMETERS)
    for raw_key, raw_spec in raw.items():
        key = normalise_hparam_key(str(raw_key))
        label = f"{where}mutation.{raw_key}"
        if key not in SUPPORTED_HYPERPARAMETERS:
            why = BAKED_IN.get(key, "")
            problems.append(f"{label}: {raw_key!r} is not a supported hyperparameter{why}; supported: {supported}")
            continue
        default = SUPPORTED_HYPERPARAMETERS[key].spec
        if isinstance(raw_spec, str):
            kind = ISAACLAB_KIND_NAMES.get(raw_spec, raw_spec)
            if kind not in MUTATION_KINDS:
                problems.append(
                    f"{label}: unknown mutation {raw_spec!r}; accepted: "
                    f"{', '.join(list(ISAACLAB_KIND_NAMES) + list(MUTATION_KINDS))}"
                )
                continue
            spec, why = _spec_for_kind(key, default, kind, raw_spec)
            if spec is None:
                problems.append(f"{label}: {why}")
            else:
                specs[key] = spec
            continue
        if not isinstance(raw_spec, Mapping):
            problems.append(f"{label}: expected a kind name or a mapping with kind/low/high, got {raw_spec!r}")
            continue
        unknown = set(raw_spec) - {"kind", "low", "high", "change_range", "step", "choices"}
        if unknown:
            problems.append(
                f"{label}: unknown keys {sorted(unknown)}; accepted: kind, low, high, change_range, step, choices"
            )
            continue
        raw_kind = raw_spec.get("kind", default.kind)
        if not isinstance(raw_kind, str):
            problems.append(
                f"{label}.kind: expected a kind name, got {raw_kind!r}; accepted: {', '.join(MUTATION_KINDS)}"
            )
            continue
        kind = ISAACLAB_KIND_NAMES.get(raw_kind, raw_kind)
        if kind not in MUTATION_KINDS:
            problems.append(
                f"{label}.kind: unknown kind {raw_kind!r}; accepted: "
                f"{', '.join(list(ISAACLAB_KIND_NAMES) + list(MUTATION_KINDS))}"
            )
            continue
        # The same key/kind check as the short form: mutate_float on mini_epochs is an int step, never a float.
        base, why = _spec_for_kind(key, default, kind, raw_kind)
        if base is None:
            problems.append(f"{label}.kind: {why}")
            continue
        default, kind = base, base.kind
        try:
            low = float(raw_spec.get("low", default.low))
            high = float(raw_spec.get("high", default.high))
        except (TypeError, ValueError, OverflowError):
            problems.append(f"{label}: low/high must be numbers, got {raw_spec.get('low')!r}/{raw_spec.get('high')!r}")
            continue
        if not (math.isfinite(low) and math.isfinite(high)):
            problems.append(f"{label}: low/high must be finite, got {low}/{high}")
            continue
        if low > high:
            problems.append(f"{label}: low {low} > high {high}; low must be <= high")
            continue
        if kind == "log_float" and low <= 0:
            problems.append(f"{label}: log_float needs low > 0 (it multiplies), got low={low}")
            continue
        if kind == "int" and math.ceil(low) > math.floor(high):
            problems.append(f"{label}: int needs an integer inside [low, high], got [{low}, {high}]")
            continue
        if kind == "discount" and not (0 <= low and high < 1):
            problems.append(f"{label}: discount needs 0 <= low and high < 1, got [{low}, {high}]")
            continue
        cr = raw_spec.get("change_range", default.change_range)
        if cr is not None:
            cr_ok = _valid_change_range(cr)
            if cr_ok is None:
                problems.append(f"{label}.change_range: expected [min, max] with 1 <= min <= max, got {cr!r}")
                continue
            cr = cr_ok
        step = raw_spec.get("step", default.step)
        if not isinstance(step, int) or step < 1:
            problems.append(f"{label}.step: expected an integer >= 1, got {step!r}")
            continue
        choices = raw_spec.get("choices", default.choices)
        if not isinstance(choices, (list, tuple)) or not all(
            c is None or isinstance(c, (str, bool, int)) or (isinstance(c, float) and math.isfinite(c)) for c in choices
        ):
            problems.append(f"{label}.choices: expected a list of strings, numbers or booleans, got {choices!r}")
            continue
        choices = tuple(choices)
        if kind == "choice" and len(choices) < 2:
            problems.append(f"{label}.choices: a choice mutation needs at least two choices, got {list(choices)}")
            continue
        specs[key] = MutationSpec(kind=kind, low=low, high=high, change_range=cr, step=step, choices=choices)
    return specs


def _spec_for_kind(key: str, default: MutationSpec, kind: str, raw: str) -> tuple[MutationSpec | None, str]:
    """A key's default spec with the kind a string asked for, or why that kind does not fit the key.

    Isaac Lab's ``mutate_float`` means "multiply or divide by a factor": on an integer hyperparameter
    (mini_epochs) that is our ``int`` step, so rl_games keeps getting an int.
    """
    if kind == default.kind:
        return default, ""
    if raw == "mutate_float" and default.kind in ("int", "log_shift", "discount"):
        return default, ""
    if kind == "discount" and not (0 <= default.low and default.high < 1):
        return None, (
            f"{raw!r} mutates 1-x and suits values in [0, 1) such as gamma and tau; {key} has bounds "
            f"[{default.low}, {default.high}]; accepted here: mutate_float or {default.kind}"
        )
    if default.kind == "int" or kind in ("int", "choice", "log_shift"):
        return None, f"kind {kind!r} does not fit {key} (a {default.kind} hyperparameter); accepted: {default.kind}"
    if kind == "log_float" and default.low <= 0:
        return None, f"log_float needs positive bounds; {key} has [{default.low}, {default.high}]"
    # A new kind gets the population's change range, not the default kind's own (discount uses 1.1-1.2).
    return dataclasses.replace(default, kind=kind, change_range=None), ""


def _valid_change_range(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError, OverflowError):
            return None
        if math.isfinite(lo) and math.isfinite(hi) and 1.0 <= lo <= hi:
            return (lo, hi)
    return None


def normalise_hparam_key(key: str) -> str:
    """``agent.params.config.learning_rate`` / ``params.config.learning_rate`` -> ``learning_rate``."""
    for prefix in ("agent.params.config.", "params.config.", "config."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    for prefix in ("agent.params.", "params."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def population_config_from_dict(
    raw: Mapping[str, Any] | None, source: str = "", allow_test_fixture: bool = False
) -> PopulationConfig:
    """Build and validate a :class:`PopulationConfig` from a ``pbt:`` mapping. Raises :class:`ConfigError`.

    ``allow_test_fixture`` is for the audit verifier replaying a recorded fixture decision only.
    """
    problems: list[str] = []
    where = "pbt."
    raw = dict(raw or {})
    defaults = PopulationConfig()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in RETIRED_KEYS:
            problems.append(f"{where}{key}: {RETIRED_KEYS[key]}")
            continue
        if key not in _FIELD_TYPES:
            close = difflib.get_close_matches(str(key), FIELD_NAMES, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(f"{where}{key}: unknown key; {hint}accepted keys: {', '.join(FIELD_NAMES)}")
            continue
        if key == "mutation":
            values[key] = _parse_mutation(value, problems, where)
        elif key == "change_range":
            cr = _valid_change_range(value)
            if cr is None:
                problems.append(f"{where}change_range: expected [min, max] with 1 <= min <= max, got {value!r}")
            else:
                values[key] = cr
        else:
            checked = _check_type(key, value, getattr(defaults, key), problems, where)
            if checked is not None:
                values[key] = checked
    if "rule" not in raw and ("threshold_std" in raw or "threshold_abs" in raw):
        # Those thresholds only mean something to Isaac Lab's band rule: an Isaac Lab yaml keeps its meaning.
        values["rule"] = "isaaclab"
    cfg = dataclasses.replace(defaults, **values)
    problems.extend(_validate_values(cfg, where, allow_test_fixture))
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _validate_values(cfg: PopulationConfig, where: str, allow_test_fixture: bool = False) -> list[str]:
    p: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            p.append(where + msg)

    need(cfg.num_policies >= 1, f"num_policies: must be >= 1, got {cfg.num_policies}")
    need(
        0 <= cfg.policy_idx < max(cfg.num_policies, 1),
        f"policy_idx: {cfg.policy_idx} is out of range; accepted: 0..{cfg.num_policies - 1} "
        f"(num_policies={cfg.num_policies})",
    )
    need(cfg.interval_steps >= 1, f"interval_steps: must be >= 1, got {cfg.interval_steps}")
    for name in ("mutation_rate", "worst_fraction", "top_fraction"):
        v = getattr(cfg, name)
        need(0.0 <= v <= 1.0, f"{name}: {v} is outside [0, 1]")
    need(0.0 <= cfg.trim_fraction < 1.0, f"trim_fraction: {cfg.trim_fraction} is outside [0, 1)")
    need(
        cfg.objective_direction in OBJECTIVE_DIRECTIONS,
        f"objective_direction: {cfg.objective_direction!r} is not accepted; "
        f"accepted: {', '.join(OBJECTIVE_DIRECTIONS)}",
    )
    need(
        cfg.exploit_mode in EXPLOIT_MODES,
        f"exploit_mode: {cfg.exploit_mode!r} is not accepted; accepted: {', '.join(EXPLOIT_MODES)}",
    )
    need(cfg.history_length >= 1, f"history_length: must be >= 1, got {cfg.history_length}")
    need(0.0 < cfg.welch_alpha < 1.0, f"welch_alpha: {cfg.welch_alpha} is outside (0, 1)")
    for name in (
        "threshold_std",
        "threshold_abs",
        "gap_std_fraction",
        "gap_donor_fraction",
        "max_heartbeat_age_s",
        "max_clock_skew_s",
        "temp_grace_s",
        "heartbeat_interval_s",
    ):
        v = getattr(cfg, name)
        need(v >= 0, f"{name}: must be >= 0, got {v}")
    need(cfg.window >= 1, f"window: must be >= 1, got {cfg.window}")
    need(1 <= cfg.min_episodes <= cfg.window, f"min_episodes: {cfg.min_episodes} must be in [1, window={cfg.window}]")
    need(cfg.min_members >= 2, f"min_members: must be >= 2 (a member needs a peer), got {cfg.min_members}")
    for name in (
        "max_frame_lag",
        "start_grace_frames",
        "restart_grace_frames",
        "settle_max_steps",
        "mutation_seed",
        "max_restarts",
    ):
        v = getattr(cfg, name)
        need(v >= -1, f"{name}: must be >= 0, or -1 for the default, got {v}")
    need(cfg.keep_last_checkpoints >= 1, f"keep_last_checkpoints: must be >= 1, got {cfg.keep_last_checkpoints}")
    need(cfg.keep_best_checkpoints >= 0, f"keep_best_checkpoints: must be >= 0, got {cfg.keep_best_checkpoints}")
    need(
        cfg.hparams_from in HPARAM_SOURCES,
        f"hparams_from: {cfg.hparams_from!r} is not accepted; accepted: {', '.join(HPARAM_SOURCES)}",
    )
    need(bool(cfg.objective.strip()), "objective: must name a per-episode quantity, e.g. episode_return or success")
    low_b, high_b = cfg.mutation.get("network.log_std_bounds.low"), cfg.mutation.get("network.log_std_bounds.high")
    if low_b is not None and high_b is not None and low_b.high >= high_b.low:
        p.append(
            f"{where}mutation: network.log_std_bounds.low may reach {low_b.high} but "
            f"network.log_std_bounds.high may fall to {high_b.low}; the ranges must not overlap "
            f"(low's high < high's low), or a mutation could produce low >= high"
        )
    if cfg.rule in TEST_FIXTURE_RULES:
        need(
            allow_test_fixture or os.environ.get(TEST_FIXTURE_ENV) == cfg.rule,
            f"rule: {cfg.rule!r} is a test fixture that forces exploits; it is refused unless the environment "
            f"variable {TEST_FIXTURE_ENV}={cfg.rule} is set (never in a real run)",
        )
    else:
        need(cfg.rule in SELECTION_RULES, f"rule: {cfg.rule!r} is not accepted; accepted: {', '.join(SELECTION_RULES)}")
    return p


def objective_term(objective: str) -> str:
    """Isaac Lab objectives address ``infos`` (``episode.Episode_Reward/success``); ours name the term."""
    return objective[len("episode.") :] if objective.startswith("episode.") else objective
