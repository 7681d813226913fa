"""The study's cases (``population_vs_independent.py --case``, ``screen_case.py --case``): each fixes its start, the
keys a population searches, their tuned values, its targets and, for the cases added after the first rounds, the
configurations screened before any population ran on it (``screen``; the measurements are in the case's summary and
in docs/sweep-study.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GAMMA_SPEC = "gamma={kind: mutate_discount, low: 0.5, high: 0.995, change_range: [1.2, 2.0]}"
"""The discount's search range: it contains the mis-set 0.8, so the population has to find a good discount by
search, not by the mutation clipping it into the default bounds [0.9, 0.9999]."""


@dataclass(frozen=True)
class Case:
    """A named study case: the start the members get, what the population searches, and the bars fixed before
    any run of it (from the tuned reference's curve)."""

    summary: str
    """One line: what is mis-set and why it matters."""
    set_values: tuple[str, ...]
    """Starting values (``KEY=VALUE``; a short KEY means ``agent.params.config.KEY``) of both arms."""
    mutate: tuple[str, ...]
    """Mutation specs (``KEY=SPEC`` -> ``agent.pbt.mutation.KEY=SPEC``): the keys the population searches."""
    tuned: dict[str, float]
    """The tuned values of the searched keys (the packaged yaml's), against which their end points are read."""
    targets: tuple[float, ...]
    """Held-out returns to reach, the first being the headline target."""
    goal: str
    """``faster``: reach each target with <= 0.5 x the frames of the best independent run; ``no_worse``: end
    within the independent runs' noise."""
    task: str = "Pendulum-v1"
    """The gymnasium task; trained with its packaged agent yaml (``async_pbt_isaaclab.examples.agents``)."""
    full: dict[str, int] = field(default_factory=dict)
    """Settings of the full study that differ from :data:`FULL` (frames, interval, evaluation)."""
    smoke_set: tuple[str, ...] = ()
    """With ``--smoke`` only: agent yaml overrides that shrink the rollout (actors, horizon, episode length), written
    into the study's own copy of the yaml so that training and the held-out evaluation see the same env."""
    screen: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Configurations screened with one plain run each before any population ran on the case (``screen_case.py``):
    a label and its values on top of the packaged yaml."""
    trainer: str = "rl_games"
    """The members' trainer (:data:`TRAINERS`): ``rl_games`` (``cpu_member``) or ``rsl_rl`` (``rsl_rl_member``)."""
    config: str | None = None
    """The config every arm starts from (a path next to this script), where not the task's packaged one."""
    vec_envs: tuple[str, ...] = ("gymnasium", "envpool")
    """The member env backends (``--vec-env``) the case can train on."""


MUJOCO_FULL = {
    "frames_per_member": 524_288,
    "interval": 32_768,
    "eval_every": 2,
    "eval_episodes": 8,
}
"""MuJoCo cases: 524,288 frames per member (32 HalfCheetah epochs of 64 x 256, 128 Hopper epochs of 64 x 64: about
half of the 1M frames published PPO figures are read at, so that 3 cases x 3 seeds x 8 members of one task train in
about an hour on 2 quiet cores), a decision every 32,768 frames, a held-out evaluation every 65,536 on 8 + 8
episodes of up to 1,000 steps; the final hand-over is every case's (``FULL``: 64 + 64, about 45 s an arm and seed)."""
MUJOCO_SMOKE_SET = (
    "num_actors=4",
    "horizon_length=64",
    "minibatch_size=256",
    "env_config.max_episode_steps=64",
)
"""MuJoCo smoke: 256 frames per epoch and 64-step episodes, so a smoke trains, publishes and evaluates in seconds."""
MUJOCO_LR = "learning_rate=mutate_float"
"""The MuJoCo cases search the learning rate with the package's default spec, [1e-6, 1e-2] on a log scale."""


HALFCHEETAH_TARGETS = (250.0, -150.0, 550.0)
HALFCHEETAH_MEASURED = (
    "Targets from the tuned start's 12 independent runs (halfcheetah_tuned, seeds 0-2, 4 runs each; held-out return "
    "over 8 report episodes): the median run at 393k / 262k / 524k frames (262 / -105 / 591), rounded down to a "
    "multiple of 50. The first targets (-250 / -600 / -150, from one run of the packaged yaml: -957 at 66k was a bad "
    "weight seed) were met by every arm at the first evaluation point; raised before the mis-set cases' reruns."
)
"""HalfCheetah-v5 targets, fixed from the tuned start's independent runs before the mis-set cases' runs."""
HALFCHEETAH_LR_SCREEN = (
    "screened after the first seed's runs, before the others, since one of that seed's independent runs at 5e-5 "
    "ended above the tuned reference: training return at 524k frames, agent seeds 0 and 1001, one run each: "
    "5e-5 constant -390 / -199, tuned 100 / 896, 1.5e-5 constant -320 / -528; kept"
)
"""What the HalfCheetah mis-set start does alone (docs/validation.md, MuJoCo study cases)."""
HOPPER_TARGETS = (2000.0, 1500.0, 2500.0)
HOPPER_MEASURED = (
    "Targets from the tuned reference (one run of the packaged yaml, seed 5, held-out return over 16 episodes): "
    "289 / 737 / 1111 / 1018 / 2133 / 2649 / 1774 at 66k / 131k / 197k / 262k / 328k / 393k / 524k frames (2913 at "
    "1M): 1500 and 2000 reached at 328k, 2500 at 393k. All three are above what a policy that stands still scores "
    "(about 1000: Hopper pays 1 a step for staying healthy), which the first targets (1000, 700, 2000) did not "
    "separate from hopping; raised before the runs of docs/validation.md's second round."
)
"""Hopper-v5 targets, fixed from the tuned reference before any population run of these cases."""


def _mujoco_cases(
    prefix: str, task: str, targets: tuple[float, ...], measured: str, lr_screen: str
) -> dict[str, "Case"]:
    """The three cases of a MuJoCo task, on its packaged yaml (rl_games' tuned config: learning rate 5e-4 under
    the adaptive schedule); ``targets`` were fixed before the mis-set cases ran (``measured`` says from what)."""
    common = {"task": task, "full": MUJOCO_FULL, "smoke_set": MUJOCO_SMOKE_SET}
    tuned = {"learning_rate": 5e-4}
    return {
        f"{prefix}_lr": Case(
            f"{task}: learning rate 10x too low (5e-5, tuned 5e-4) under the constant schedule, which cannot "
            f"correct it (rl_games' adaptive schedule would): an independent run should learn, slowly (not measured "
            f"before choosing; {lr_screen}). {measured}",
            ("learning_rate=5e-5", "lr_schedule=constant"),
            (MUJOCO_LR,),
            tuned,
            targets,
            "faster",
            **common,
        ),
        f"{prefix}_no_learn": Case(
            f"{task}: learning rate 100x too low (5e-6, tuned 5e-4) under the constant schedule: an independent "
            f"run should barely move within the budget (not measured before choosing)",
            ("learning_rate=5e-6", "lr_schedule=constant"),
            (MUJOCO_LR,),
            tuned,
            targets,
            "faster",
            **common,
        ),
        f"{prefix}_tuned": Case(
            f"{task}: rl_games' tuned config as packaged: what searching costs",
            (),
            (MUJOCO_LR,),
            tuned,
            targets,
            "no_worse",
            **common,
        ),
    }


HOPPER_MANY_START = ("learning_rate=5e-5", "lr_schedule=constant", "gamma=0.93", "entropy_coef=0.01", "e_clip=0.06")
"""``hopper_many``: four keys mis-set at once (tuned: 5e-4 adaptive, 0.99, 0, 0.2)."""
HOPPER_MOVING_START = ("learning_rate=3e-3", "lr_schedule=constant", "entropy_coef=0.01")
"""``hopper_moving``: a learning rate 6x above the tuned one and an entropy bonus, both constant."""
ENTROPY_SPEC = "entropy_coef={kind: log_float, low: 1.0e-6, high: 0.1}"
"""The entropy bonus searched on a log scale; the packaged yaml's 0 is not a start the cases use."""

SCREENED_MANY = (
    "Screened with screen_case.py (one run per configuration, agent seed 0, training return of the last 64 episodes, "
    "no population): all four mis-set 26 / 170 / 356 at 65k / 196k / 524k frames; the tuned yaml 308 / 1099 / 1479 "
    "(2261 at 327k); the learning rate alone mis-set 27 / 135 / 448. Discount, entropy and clip alone were stopped at "
    "131k (353, 742, 315 against the tuned 749) when the session's time ran out."
)
"""``hopper_many`` measured before any population ran on it (docs/sweep-study.md, "Cases a sweep cannot reach")."""
SCREENED_MOVING = (
    "Screened with screen_case.py (as SCREENED_MANY): constant 3e-3 without entropy leads the constant rates from "
    "262k to 458k frames (1099 / 1322 / 1599 / 1696) and falls apart at 524k (417); constant 1e-3: 874 / 902 / 1001 "
    "/ 1122 / 1057; the case's start (3e-3 with entropy 0.01): 751 / 922 / 1041 / 1163 / 1344; 3e-4 and the tuned "
    "yaml were stopped at 131k (209, 656) when the session's time ran out."
)
"""``hopper_moving`` measured before any population ran on it."""

SWEEP_UNREACHABLE = {
    "hopper_many": Case(
        "Hopper-v5: four keys mis-set together (learning rate 5e-5 constant, gamma 0.93, entropy 0.01, clip 0.06; "
        "tuned 5e-4 adaptive, 0.99, 0, 0.2), all four searched: a sweep of 3 drawn starts (member 0 keeps the "
        "case's values) lands in the good region of all four keys at once about one population in thirty (one "
        "in four for the learning rate, one in five for the discount, about half for entropy and clip), so its "
        "best run bounds nothing. " + SCREENED_MANY,
        HOPPER_MANY_START,
        ("learning_rate=mutate_float", "gamma=mutate_discount", ENTROPY_SPEC, "e_clip=mutate_float"),
        {"learning_rate": 5e-4, "gamma": 0.99, "entropy_coef": 1e-6, "e_clip": 0.2},
        HOPPER_TARGETS,
        "faster",
        task="Hopper-v5",
        full=MUJOCO_FULL,
        smoke_set=MUJOCO_SMOKE_SET,
        screen=(
            ("start", HOPPER_MANY_START),
            ("tuned", ()),
            ("lr_only", HOPPER_MANY_START[:2]),
            ("gamma_only", ("gamma=0.93",)),
            ("entropy_only", ("entropy_coef=0.01",)),
            ("clip_only", ("e_clip=0.06",)),
        ),
    ),
    "hopper_moving": Case(
        "Hopper-v5: a learning rate that must fall and an entropy bonus that must shrink (start 3e-3 constant "
        "with entropy 0.01; searched: both): a fixed value good early is wrong late, so no run of a sweep, each "
        "fixed for its whole length, can follow the best value. " + SCREENED_MOVING,
        HOPPER_MOVING_START,
        ("learning_rate=mutate_float", ENTROPY_SPEC),
        {"learning_rate": 5e-4, "entropy_coef": 1e-6},
        HOPPER_TARGETS,
        "faster",
        task="Hopper-v5",
        full=MUJOCO_FULL,
        smoke_set=MUJOCO_SMOKE_SET,
        screen=(
            ("start", HOPPER_MOVING_START),
            ("lr3e-3", HOPPER_MOVING_START[:2]),  # the start without its entropy bonus
            ("lr1e-3", ("learning_rate=1e-3", "lr_schedule=constant")),
            ("lr3e-4", ("learning_rate=3e-4", "lr_schedule=constant")),
            ("tuned", ()),
        ),
    ),
}
"""Cases a sweep cannot reach, defined and screened before the search code was tuned on them."""


DISTANCE_OBJECTIVE = ("params.config.env_config.pbt_terms=[distance_travelled]", "pbt.objective=distance_travelled")
"""Judge a run by the distance it travels per episode (x position at its end minus at its start), not its return."""

SCREENED_STANDING = (
    "Screened with screen_case.py (one run per configuration and seed, agent seeds 0 and 1, distance travelled per "
    "episode in metres, mean of the last 64 episodes, at 524k frames): healthy_reward 1 travels 15.4 / 9.5; 10 "
    "travels 0.9 / 8.4 (one seed learns to hop after 327k: not a value that keeps runs standing); 30 travels 0.16 / "
    "0.04 (both stand still from 131k on)."
)
"""``hopper_standing`` measured (docs/sweep-study.md, "Reward weights: a start no PPO search can fix")."""

STANDING_TARGETS = (5.0, 2.0, 8.0)
"""Metres travelled per held-out episode, fixed from the screen before any population ran: both default-weight runs
passed 5 m by 196k-262k frames and 8 m by 327k (training distance); a standing policy travels under 0.2 m."""

REWARD_WEIGHT_CASES = {
    "hopper_standing": Case(
        "Hopper-v5 with healthy_reward 30 (default 1): standing still pays best, so no PPO value makes a run "
        "travel; the population searches the weight itself, log-uniform in [0.1, 30], and every arm is judged by "
        "the distance travelled per episode (pbt.objective and the held-out evaluation), which the weight cannot "
        "inflate. " + SCREENED_STANDING,
        ("params.config.env_config.healthy_reward=30.0", *DISTANCE_OBJECTIVE),
        ("env.healthy_reward={kind: log_float, low: 0.1, high: 30.0}",),
        {"env.healthy_reward": 1.0},
        STANDING_TARGETS,
        "faster",
        task="Hopper-v5",
        full=MUJOCO_FULL,
        smoke_set=MUJOCO_SMOKE_SET,
        vec_envs=("gymnasium",),  # the distance travelled is computed by the gymnasium backend only
    ),
}
"""Reward-weight cases: a start no PPO search can fix, defined after its screen (``study_screens.SCREENS``)."""

RSL_RL_HOPPER_TUNED = ("runner.actor.obs_normalization=true", "runner.critic.obs_normalization=true")
"""rsl_rl's Hopper start: the packaged config (Isaac Lab's Ant values, 64 envs x 32 steps) with rsl_rl's observation
normalisers on, for the actor and the critic. Measured before any population ran (one run each, agent seed 42,
training return of the member's last 64 episodes): without them 477 / 771 at 524k / 1M frames, a third of the 2,383
+/- 272 CleanRL's PPO publishes for Hopper at 1M steps; with them 931 / 1,533 / 1,300 at 524k / 786k / 1M.
CleanRL's own values written in rsl_rl's form (10 epochs of 32 minibatches, 3e-4 fixed, 64x64 tanh, normalisers on;
no reward normalisation, which rsl_rl lacks) reached 380 at 458k frames and was stopped."""
RSL_RL_HOPPER_SCREEN = (
    ("tuned", RSL_RL_HOPPER_TUNED),
    ("kl1e-3", (*RSL_RL_HOPPER_TUNED, "desired_kl=0.001")),
    ("kl1e-4", (*RSL_RL_HOPPER_TUNED, "desired_kl=0.0001")),
)
"""The rsl_rl Hopper starts screened before the cases were fixed (``screen_case.py --case rsl_rl_hopper_kl --seed 1
--frames 786432``): training return 813 / 328 / 338 at 524k frames (tuned / desired_kl 1e-3 / 1e-4): a KL target
10x or 100x below rsl_rl's usual 0.01 keeps the learning rate so low that the runs stand and fall."""
RSL_RL_HOPPER_TARGETS = (1000.0, 700.0, 1500.0)
"""Held-out returns, fixed from the tuned reference (``tuned_reference.py --case rsl_rl_hopper_tuned``: agent seed
42, 16 episodes per checkpoint) before any population ran: 684 / 851 / 1,414 / 1,189 / 2,616 at 393k / 458k / 524k /
590k / 655k frames (1,383 at 1M): 700 reached at 458k, 1000 at 524k, 1500 at 655k. 1000 is what standing still for a
whole episode scores; 1500 needs hopping."""
RSL_RL_FULL = {**MUJOCO_FULL, "frames_per_member": 786_432}
"""rsl_rl's Hopper members train 786,432 frames (384 iterations of 2,048): the tuned reference passes every target by
655k."""
RSL_RL_COMMON = {
    "task": "Hopper-v5",
    "full": RSL_RL_FULL,
    "smoke_set": ("env.num_envs=4", "runner.num_steps_per_env=64"),
    "trainer": "rsl_rl",
    "vec_envs": ("gymnasium",),  # the rsl_rl member has no envpool backend
}
RSL_RL_CASES = {
    "rsl_rl_hopper_kl": Case(
        "Hopper-v5 with rsl_rl members: desired_kl 10x too low (1e-3, rsl_rl's usual 0.01), which the adaptive "
        "schedule follows by holding the learning rate down; the population searches desired_kl with the default "
        "spec (log-uniform [1e-3, 0.05], the start at its bound)",
        (*RSL_RL_HOPPER_TUNED, "desired_kl=0.001"),
        ("desired_kl=mutate_float",),
        {"desired_kl": 0.01},
        RSL_RL_HOPPER_TARGETS,
        "faster",
        screen=RSL_RL_HOPPER_SCREEN,
        **RSL_RL_COMMON,
    ),
    "rsl_rl_hopper_tuned": Case(
        "Hopper-v5 with rsl_rl members from the tuned start (desired_kl 0.01, normalisers on): what searching costs",
        RSL_RL_HOPPER_TUNED,
        ("desired_kl=mutate_float",),
        {"desired_kl": 0.01},
        RSL_RL_HOPPER_TARGETS,
        "no_worse",
        **RSL_RL_COMMON,
    ),
}
"""The study with rsl_rl members (rsl_rl's own PPO through ``rsl_rl_member``)."""


def solo_run_command(task: str, workspace: Path, interval: int, *extra: str, trainer: str = "rl_games") -> list[str]:
    """The CPU member of ``task`` (of ``trainer``) trained alone, as a user would: a 2-member workspace where it
    publishes a record and a checkpoint every ``interval`` frames and never exploits or explores
    (``--pbt-max-restarts 0``); ``extra`` flags and overrides follow."""
    return [
        sys.executable,
        "-m",
        TRAINERS[trainer].module,
        "--task",
        task,
        "--pbt-workspace",
        str(workspace),
        "--pbt-members",
        "2",
        "--pbt-index",
        "0",
        "--pbt-max-restarts",
        "0",
        "--pbt-interval-steps",
        str(interval),
        *extra,
    ]


@dataclass(frozen=True)
class StudyTrainer:
    """How the study drives one trainer's CPU member: its module and the names its command line uses."""

    module: str
    """The member (``python -m MODULE``)."""
    config_flag: str
    """The flag that names the config it trains."""
    seed_key: str
    """Member 0's agent seed (member ``i`` adds ``i``)."""
    threads_key: str
    """torch's intra-op threads."""
    task_key: str
    """The gymnasium task."""
    smoke_prefix: str
    """What a case's :attr:`Case.smoke_set` items are written under, as typed on the member's command line."""


TRAINERS = {
    "rl_games": StudyTrainer(
        "async_pbt_isaaclab.examples.cpu_member",
        "--agent",
        "agent.params.seed",
        "agent.params.torch_threads",
        "agent.params.config.env_name",
        "agent.params.config.",
    ),
    "rsl_rl": StudyTrainer(
        "async_pbt_isaaclab.examples.rsl_rl_member",
        "--config",
        "agent.runner.seed",
        "agent.torch_threads",
        "agent.env.id",
        "agent.",
    ),
}
"""The trainers a study case can name (:attr:`Case.trainer`)."""


def case_config(case: Any) -> Path:
    """The config a :class:`Case`'s (or a ``study_screens.Screen``'s) runs start from: its own (:attr:`Case.config`)
    or the task's packaged one for its trainer."""
    from async_pbt_isaaclab.examples.agents import PACKAGED_RSL_RL_CONFIGS, packaged_agent_yaml

    if getattr(case, "config", None):
        return Path(__file__).resolve().parent / str(case.config)
    if getattr(case, "trainer", "rl_games") == "rsl_rl":
        return PACKAGED_RSL_RL_CONFIGS[case.task]
    return packaged_agent_yaml(case.task)


def value_overrides(values: tuple[str, ...] | list[str], trainer: str = "rl_games") -> list[str]:
    """``KEY=VALUE`` as the member's ``agent.*`` overrides; a short KEY (no dot) is a hyperparameter by its own name:
    ``params.config.KEY`` for rl_games, where rsl_rl's runner config keeps it for rsl_rl (``runner.algorithm.KEY``,
    ``runner.num_steps_per_env``)."""
    from async_pbt_isaaclab.rsl_rl.member_config import rsl_rl_key

    out = []
    for item in values:
        key, value = item.split("=", 1)
        key = key[len("agent.") :] if key.startswith("agent.") else key
        if "." in key:
            out.append(f"agent.{key}={value}")
        else:
            out.append(f"{rsl_rl_key(key) if trainer == 'rsl_rl' else 'agent.params.config.' + key}={value}")
    return out


def config_epoch_frames(cfg: dict, trainer: str = "rl_games") -> int:
    """Frames one epoch (rl_games) or iteration (rsl_rl) of the config ``cfg`` trains."""
    if trainer == "rsl_rl":
        return int(cfg["env"]["num_envs"]) * int(cfg["runner"]["num_steps_per_env"])
    config = cfg["params"]["config"]
    return int(config["num_actors"]) * int(config["horizon_length"])


CASES = {
    "gamma": Case(
        "discount mis-set to 0.8 (tuned 0.95): an independent run improves slowly and stays below a tuned one",
        ("gamma=0.8",),
        (GAMMA_SPEC, "learning_rate=mutate_float"),
        {"gamma": 0.95, "learning_rate": 1e-3},
        (-400.0, -600.0, -300.0),
        "faster",
    ),
    "no_learn": Case(
        "learning rate 100x too low (1e-5, tuned 1e-3) under the constant schedule, which cannot correct it: "
        "an independent run does not learn within the budget",
        ("learning_rate=1e-5", "lr_schedule=constant"),
        ("learning_rate=mutate_float",),
        {"learning_rate": 1e-3},
        (-800.0, -600.0, -400.0),
        "faster",
    ),
    "tuned": Case(
        "the packaged tuned yaml (gamma 0.95, learning rate 1e-3 adaptive): what searching costs",
        (),
        (GAMMA_SPEC, "learning_rate=mutate_float"),
        {"gamma": 0.95, "learning_rate": 1e-3},
        (-400.0, -300.0, -250.0),
        "no_worse",
    ),
    **_mujoco_cases("halfcheetah", "HalfCheetah-v5", HALFCHEETAH_TARGETS, HALFCHEETAH_MEASURED, HALFCHEETAH_LR_SCREEN),
    **_mujoco_cases("hopper", "Hopper-v5", HOPPER_TARGETS, HOPPER_MEASURED, "not screened"),
    **SWEEP_UNREACHABLE,
    **REWARD_WEIGHT_CASES,
    **RSL_RL_CASES,
}
"""The study's cases; targets were fixed from the tuned reference before the cases were run (docs/validation.md)."""
