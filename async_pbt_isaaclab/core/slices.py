"""Members that share one simulator: which members a process hosts, and what such a process refuses.

A process started with ``--pbt-slices M`` and ``--pbt-index F`` hosts members ``F .. F+M-1`` (contiguous), each a
full rl_games agent on its own contiguous slice of one vectorized env of ``M x num_envs`` envs
(``rl_games/slices.py``). The rollout is shared: every slice steps the env once per control step, so the
settings that shape it are the same for every slice and cannot be searched, and an exploit cannot restart the
process (that would restart every slice): it is carried out in memory, so every searched key must be settable on a
running agent. Pure Python: the checks run before anything is claimed or built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from async_pbt_isaaclab.core.decision.mutation_spec import is_env_key

ROLLOUT_KEYS = ("horizon_length", "minibatch_size", "num_actors")
"""Settings that shape the shared rollout (env steps per epoch, the PPO dataset, envs per slice): equal for every
slice of a process, never searched."""

SLICES_FLAG = "--pbt-slices"
"""The command-line flag (``scripts/train_pbt.py`` and the CPU member)."""

RL_GAMES_AUTO_THREADS = 4
"""rl_games' ``torch_threads: auto`` (its default): at most this many intra-op threads per training thread."""


@dataclass(frozen=True)
class SliceLayout:
    """Members ``first .. first+count-1`` of one process, member ``first+i`` on envs ``[i*n, (i+1)*n)``."""

    first: int
    """Index of the process's first member."""
    count: int
    """Number of members (slices) the process hosts."""
    envs_per_slice: int
    """Envs of each member (``num_actors`` of the agent yaml)."""

    @property
    def members(self) -> tuple[int, ...]:
        """The member indices the process hosts, in slice order."""
        return tuple(range(self.first, self.first + self.count))

    @property
    def num_envs(self) -> int:
        """Envs of the shared vectorized env."""
        return self.count * self.envs_per_slice

    def bounds(self, slot: int) -> tuple[int, int]:
        """``[start, stop)`` env indices of the member in slot ``slot`` (0-based within the process)."""
        if not 0 <= slot < self.count:
            raise IndexError(f"slice {slot} is not in [0, {self.count})")
        return slot * self.envs_per_slice, (slot + 1) * self.envs_per_slice

    def to_dict(self) -> dict[str, object]:
        """What the members' ``start`` audit entries record of the process they share."""
        return {
            "first": self.first,
            "count": self.count,
            "members": list(self.members),
            "envs_per_slice": self.envs_per_slice,
            "num_envs": self.num_envs,
        }


def slice_layout(first: int, count: int, num_policies: int, envs_per_slice: int) -> SliceLayout:
    """The layout of a process hosting ``count`` members from ``first``; ``ValueError`` naming the flag otherwise."""
    if count < 1:
        raise ValueError(f"{SLICES_FLAG} {count}: must be at least 1")
    if envs_per_slice < 1:
        raise ValueError(f"num_actors {envs_per_slice}: each slice needs at least 1 env")
    if first < 0 or first + count > num_policies:
        last = first + count - 1
        raise ValueError(
            f"{SLICES_FLAG} {count} with --pbt-index {first}: members {first}..{last} are not all in the population "
            f"of {num_policies} (--pbt-members); the index names the process's first member"
        )
    return SliceLayout(first, count, envs_per_slice)


def slice_problems(
    mutation_keys: Iterable[str],
    exploit_mode: str,
    live_keys: Iterable[str],
    count: int,
    agent_cfg: Mapping[str, Any] | None = None,
) -> list[str]:
    """Why a process of ``count`` slices cannot search ``mutation_keys`` with ``exploit_mode``, nor run the rl_games
    agent config ``agent_cfg`` when it is given (:func:`agent_problems`) (empty: it can). Every entry point asks this
    before anything is claimed.

    ``live_keys`` are the hyperparameters a running agent can take (``rl_games/live.py``); the caller passes them,
    so this module stays free of rl_games."""
    if count <= 1:
        return []
    problems = []
    live = set(live_keys)
    for key in mutation_keys:
        if is_env_key(str(key)):
            continue  # set on each slice's own envs where the env can; the shared env refuses it otherwise
        short = str(key).rsplit(".", 1)[-1] if str(key).startswith("params.config.") else str(key)
        if short in ROLLOUT_KEYS:
            problems.append(
                f"pbt.mutation.{key}: {short} shapes the rollout the {count} slices of this process share "
                f"({SLICES_FLAG} {count}); it is the same for every slice and cannot be searched: remove it from "
                f"pbt.mutation, or run members as separate processes"
            )
        elif short not in live:
            problems.append(
                f"pbt.mutation.{key}: cannot be set on a running agent, so an exploit would restart the process "
                f"and every one of its {count} slices ({SLICES_FLAG} {count}): remove it from pbt.mutation, or run "
                f"members as separate processes"
            )
    if exploit_mode == "restart":
        problems.append(
            f"pbt.exploit_mode: restart would restart all {count} slices of the process at every exploit "
            f"({SLICES_FLAG} {count}); slices exploit in memory: use auto or inprocess"
        )
    return problems + (agent_problems(agent_cfg, count) if agent_cfg is not None else [])


def rollout_key_problems(agent_cfg: Mapping[str, Any], count: int) -> list[str]:
    """The slice refusal of :func:`slice_problems` for the rollout keys an agent config's raw ``pbt.mutation``
    names: checked before the config is read, whose own refusal of those keys does not mention slices."""
    pbt = agent_cfg.get("pbt") if isinstance(agent_cfg, Mapping) else None
    mutation = pbt.get("mutation") if isinstance(pbt, Mapping) else None
    if not isinstance(mutation, Mapping):
        return []
    keys = [k for k in mutation if str(k).rsplit(".", 1)[-1] in ROLLOUT_KEYS]
    return slice_problems(keys, "auto", (), count)


def agent_problems(agent_cfg: Mapping[str, Any], count: int) -> list[str]:
    """Why the rl_games agent config cannot run as ``count`` slices of one process (empty: it can): what no member
    can do on an env it shares with others, one line per setting, naming it. Checked before anything is claimed.

    Every other rl_games setting runs, each either on the rollout played together or, where that cannot play it,
    one env step at a time (``rl_games/slice_rollout.py``, ``rollout_problems``)."""
    if count <= 1:
        return []
    params = _section(agent_cfg, "params")
    network, config = _section(params, "network"), _section(params, "config")
    where = f"({SLICES_FLAG} {count}): remove it, or run members as separate processes"
    problems = []
    if network.get("rnn"):
        problems.append(
            f"params.network.rnn: a recurrent policy cannot be a slice {where}: slices exploit in memory, and a "
            f"recurrent member's hidden states belong to the weights it had (a process member restarts instead)"
        )
    if config.get("multi_gpu"):
        problems.append(f"params.config.multi_gpu: a multi-GPU member cannot be a slice {where}")
    resets = config.get("epochs_between_resets", 0)
    if not isinstance(resets, (int, float)) or resets > 0:
        problems.append(
            f"params.config.epochs_between_resets: {resets} resets the env every {resets} epochs, but the {count} "
            f"slices of this process share one env, which one member cannot reset for the others {where}"
        )
    return problems


def _section(mapping: Any, key: str) -> Mapping[str, Any]:
    """``mapping[key]`` when both are mappings, else an empty one (a malformed yaml is the config reader's to name)."""
    value = mapping.get(key) if isinstance(mapping, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def member_threads(torch_threads: Any, count: int, cores: int) -> int:
    """Torch intra-op threads for each of ``count`` members' training threads on ``cores`` cores: their PPO updates
    run at the same time, so the cores are shared out instead of each member taking what a process would.

    ``torch_threads`` is the agent yaml's ``params.torch_threads``: ``auto`` (rl_games' default) caps each member
    at :data:`RL_GAMES_AUTO_THREADS` as rl_games does, a number caps it there, ``0`` (rl_games: torch's default)
    leaves only the cores' share; every member gets at least one."""
    if torch_threads is None or torch_threads == "auto":
        cap = RL_GAMES_AUTO_THREADS
    elif int(torch_threads) <= 0:
        cap = cores
    else:
        cap = int(torch_threads)
    return max(1, min(cap, cores // max(1, count)))


def process_members(command: Iterable[str], first: int) -> list[int]:
    """The members a training command started at ``--pbt-index first`` hosts: ``first`` alone, or with
    ``--pbt-slices M`` in the command (its last value wins, as argparse reads it) ``first .. first+M-1``."""
    args = list(command)
    count = 1
    for i, arg in enumerate(args):
        value = None
        if arg == SLICES_FLAG and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(SLICES_FLAG + "="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                count = max(1, int(value))
            except ValueError:
                count = 1
    return list(range(first, first + count))
