"""What the exploit plan is told besides the decision: the trainer's abilities and counters, the member's mode.

Plain data on purpose. The core's exploit plan (:mod:`async_pbt_isaaclab.core.decision.exploit_plan`) reads it to choose
the exploit's path (in-process or restart) and the keys set on the running trainer, and the ``exploit_applied``
audit entry records it (``plan_inputs``), so the verifier replays that choice from the log alone. A trainer adapter
(``member/trainer.py``: rl_games, rsl_rl, a slice of either) describes itself with :class:`TrainerAbilities` and
:class:`TrainerCounters`; nothing here knows a trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key
from async_pbt_isaaclab.core.state.records import RecordError

EXPLOIT_MODES = ("auto", "inprocess", "restart")
"""``pbt.exploit_mode`` values (docs/checkpoint-restart.md, "Exploit without a reboot")."""

ENV_KEY_REASON = "the env is built with it (a restart rebuilds the env with the new value)"
"""Why a changed env value (``env.*``) is not set live, unless the trainer says otherwise in ``key_reasons``."""


@dataclass(frozen=True)
class TrainerAbilities:
    """What the running trainer can do without a process restart."""

    live_keys: frozenset[str] = frozenset()
    """Hyperparameters it can set on the running trainer now, each through its one setter."""
    loads_weights: bool = True
    """It can load another policy's weights into the running process."""
    why_not_live: tuple[str, ...] = ()
    """Why weights cannot be loaded live (a recurrent policy, a rank group that must load together); empty when
    they can."""
    restarts: bool = True
    """It can replace its process with one started from a checkpoint (``False`` for a slice of a shared process:
    a restart would restart every slice)."""
    key_reasons: Mapping[str, str] = field(default_factory=dict)
    """Why a hyperparameter it knows cannot be set live *now* (a key whose setter needs a part the model lacks)."""
    trainer: str = "trainer"
    """The trainer's name, in the reason given for a key it has no setter for."""

    def blockers(self, keys: Any) -> list[str]:
        """Why an in-process change of ``keys`` is impossible (empty: it is possible), weights first, then by key."""
        out = list(self.why_not_live)
        for key in sorted(keys):
            if key in self.live_keys:
                continue
            reason = self.key_reasons.get(key) or (ENV_KEY_REASON if is_env_key(key) else "")
            out.append(f"{key}: {reason}" if reason else f"{key} cannot be set on a running {self.trainer} agent")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the audit log's record of what the plan was given)."""
        return {
            "live_keys": sorted(self.live_keys),
            "loads_weights": self.loads_weights,
            "why_not_live": list(self.why_not_live),
            "restarts": self.restarts,
            "key_reasons": dict(sorted(self.key_reasons.items())),
            "trainer": self.trainer,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> TrainerAbilities:
        """Parse the JSON form; raises :class:`RecordError` naming ``where``."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected an object, got {data!r:.80}")
        keys, why, reasons = data.get("live_keys"), data.get("why_not_live", []), data.get("key_reasons", {})
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise RecordError(f"{where}.live_keys: expected a list of names, got {keys!r:.80}")
        if not isinstance(why, list) or not isinstance(reasons, Mapping):
            raise RecordError(f"{where}: why_not_live must be a list and key_reasons an object")
        flags = [data.get("loads_weights", True), data.get("restarts", True)]
        if not all(isinstance(f, bool) for f in flags):
            raise RecordError(f"{where}: loads_weights and restarts must be true or false")
        return cls(
            live_keys=frozenset(keys),
            loads_weights=flags[0],
            why_not_live=tuple(str(w) for w in why),
            restarts=flags[1],
            key_reasons={str(k): str(v) for k, v in reasons.items()},
            trainer=str(data.get("trainer", "trainer")),
        )


@dataclass(frozen=True)
class TrainerCounters:
    """The trainer's own progress, which a recipient keeps across an exploit."""

    frame: int
    """Env frames so far (for a member of several ranks: the group's total)."""
    epoch: int
    """Completed updates (rl_games epochs, rsl_rl learning iterations)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Other counters the trainer keeps in its checkpoint for the recipient (rl_games: ``last_mean_rewards``)."""


@dataclass(frozen=True)
class PlanInputs:
    """Everything the exploit plan reads besides the decision and the records it was taken on."""

    exploit_mode: str
    """``pbt.exploit_mode``: ``auto``, ``inprocess`` or ``restart``."""
    mutated_keys: frozenset[str]
    """The keys of ``pbt.mutation`` (a value outside them is the member's but is not set live)."""
    abilities: TrainerAbilities
    """What the trainer can do live."""
    ends_now: str = ""
    """Non-empty (why) when the trainer stops after this epoch: the exploit is not carried out."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``plan_inputs`` of pending exploits and ``exploit_applied`` entries)."""
        return {
            "exploit_mode": self.exploit_mode,
            "mutated_keys": sorted(self.mutated_keys),
            "abilities": self.abilities.to_dict(),
            "ends_now": self.ends_now,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> PlanInputs:
        """Parse the JSON form; raises :class:`RecordError` naming ``where``."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: expected an object, got {data!r:.80}")
        mode, keys = data.get("exploit_mode"), data.get("mutated_keys")
        if mode not in EXPLOIT_MODES:
            raise RecordError(f"{where}.exploit_mode: expected one of {', '.join(EXPLOIT_MODES)}, got {mode!r:.40}")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise RecordError(f"{where}.mutated_keys: expected a list of names, got {keys!r:.80}")
        return cls(
            exploit_mode=mode,
            mutated_keys=frozenset(keys),
            abilities=TrainerAbilities.from_dict(data.get("abilities"), f"{where}.abilities"),
            ends_now=str(data.get("ends_now", "")),
        )
