"""The screens that decide whether a study case exists at all (``screen_case.py --case NAME``): configurations measured
with plain runs before a case is defined on them, each with the rule, written before its runs, that the measurement
must meet (reward weights: a start no PPO search can fix; a value that must move, judged held out). The measurements
are in each screen's summary and in docs/sweep-study.md; the cases themselves are in :mod:`study_cases`."""

from __future__ import annotations

from dataclasses import dataclass

from study_cases import DISTANCE_OBJECTIVE, SCREENED_STANDING  # next to this script


@dataclass(frozen=True)
class Branches:
    """Runs that go on from one screened run's checkpoint with other values, each a warm start (``--checkpoint``)
    from the same weights: whether the best value has moved by then, measured on one run's state as a population's
    explore would change it. The screen's own runs train to :attr:`frame` only; the branches on to ``--frames``."""

    source: str
    """The label of the screen's run (of the same agent seed) they start from."""
    frame: int
    """The frame of the source's checkpoint they start from, where the screen's own runs stop."""
    runs: tuple[tuple[str, tuple[str, ...]], ...]
    """A label and its values on top of the packaged yaml, per branch."""


@dataclass(frozen=True)
class Screen:
    """Configurations measured with one plain run each before a case is defined on them (``screen_case.py``), where
    the measurement decides whether the case exists at all: the figure read is the members' objective."""

    summary: str
    """One line: what the screen must show."""
    task: str
    """The gymnasium task, trained with its packaged agent yaml."""
    screen: tuple[tuple[str, tuple[str, ...]], ...]
    """A label and its values on top of the packaged yaml, per run."""
    branches: Branches | None = None
    """Runs that go on from one of :attr:`screen`'s at a frame, with other values."""


def constant_rates(*rates: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """One run per learning rate, each held constant, labelled ``lr<rate>``."""
    return tuple((f"lr{rate}", (f"learning_rate={rate}", "lr_schedule=constant")) for rate in rates)


def falling_rate(summary: str, task: str, high: str, frame: int = 524_288) -> Screen:
    """A branching screen for a rate that must fall: ``high`` and 1e-3 constant train to ``frame``; from ``high``'s
    checkpoint there, branches go on at ``high``, 1e-3 and 3e-4 constant (``lr<high>-then<rate>``)."""
    source = f"lr{high}"
    branches = tuple((f"{source}-then{label[2:]}", values) for label, values in constant_rates(high, "1e-3", "3e-4"))
    return Screen(summary, task, constant_rates(high, "1e-3"), Branches(source, frame, branches))


HIGH_RATE = constant_rates("3e-3")[0][1]
"""The constant learning rate that led both tasks' rate screens held out at 262k and kept improving to 524k."""
DISCOUNTS_AT_HIGH_RATE = (
    ("gamma0.9", (*HIGH_RATE, "gamma=0.9")),
    ("gamma0.95", (*HIGH_RATE, "gamma=0.95")),
    ("gamma0.99", HIGH_RATE),
)
"""The discount screens' runs, on both tasks: two lower discounts and the yaml's 0.99."""

SCREENS = {
    "hopper_standing": Screen(
        "Hopper-v5 with a healthy reward so high that standing still pays best: before a case searches the reward "
        "weights, independent runs at that value must be seen not to travel (the default weight 1 travels). "
        + SCREENED_STANDING,
        "Hopper-v5",
        (
            ("healthy1", DISTANCE_OBJECTIVE),
            ("healthy10", ("params.config.env_config.healthy_reward=10.0", *DISTANCE_OBJECTIVE)),
            ("healthy30", ("params.config.env_config.healthy_reward=30.0", *DISTANCE_OBJECTIVE)),
        ),
    ),
    "hopper_decay": Screen(
        "Hopper-v5 with a constant learning rate above the tuned one, judged held out (hopper_moving's start, "
        "screened on training returns, was a good configuration held out): the case exists if one of 5e-3 or "
        "3e-3 constant leads the constant rates held out at 262k frames (mean over the seeds) and falls in every "
        "seed to at most two thirds of its own best by 524k (a rate good early, wrong late); its start is the "
        "higher such rate, and the learning rate alone is searched. Measured (seeds 1-3): 3e-3 leads (mean 1,432 "
        "at 262k) and ends at its best in every seed: no case.",
        "Hopper-v5",
        (*constant_rates("5e-3", "3e-3", "1e-3", "3e-4"), ("tuned", ())),
    ),
    "halfcheetah_decay": Screen(
        "HalfCheetah-v5 with a constant learning rate above the tuned one, judged held out (defined after the "
        "Hopper screen found no such case there): the case exists if one of 1e-2 or 3e-3 constant leads the "
        "constant rates held out at 262k frames (mean over the seeds) and ends in every seed at 524k at least 500 "
        "below its own best (a rate good early, wrong late); its start is the higher such rate, and the learning "
        "rate alone is searched. Measured (seeds 1-3): 3e-3 leads (mean 635 at 262k) and ends at its best in every "
        "seed: no case.",
        "HalfCheetah-v5",
        constant_rates("1e-2", "3e-3", "1e-3"),
    ),
    "hopper_decay_long": Screen(
        "Hopper-v5 over 1,048,576 frames (``--frames 1048576``; twice the study's budget, the point published PPO "
        "figures are read at), with the two highest constant rates: defined after the 524k screens of "
        "``hopper_decay`` and ``halfcheetah_decay`` found no rate that falls within 524k frames. The case exists if "
        "1e-2 or 5e-3 constant, in every seed, reaches 2000 held out by 524k frames and ends at 1M at most two "
        "thirds of its own best; its start is the higher such rate, the learning rate alone is searched, over "
        "1,048,576 frames per member. Measured (seeds 1-3): 5e-3 ends within 200 of its best in every seed; 1e-2 "
        "misses 2000 by 524k in seed 3 and falls at the end in seed 2 only: no case.",
        "Hopper-v5",
        constant_rates("1e-2", "5e-3"),
    ),
    "halfcheetah_entropy": Screen(
        "HalfCheetah-v5, the tuned yaml (learning rate 5e-4 adaptive) with an entropy bonus, judged held out: "
        "defined after the learning-rate screens found no rate that falls. The case exists if the entropy that "
        "leads held out at 262k frames (mean over the seeds) is above 0 and trails a lower screened entropy at "
        "524k in every seed (an entropy that must shrink); its start is that entropy, and the entropy bonus alone "
        "is searched (log-uniform in [1e-6, 0.1]). Measured (seeds 1-3): the yaml's own 0 leads at 262k (mean "
        "-149): no case.",
        "HalfCheetah-v5",
        (
            ("entropy3e-2", ("entropy_coef=0.03",)),
            ("entropy1e-2", ("entropy_coef=0.01",)),
            ("entropy3e-3", ("entropy_coef=0.003",)),
            ("tuned", ()),
        ),
    ),
    "halfcheetah_discount": Screen(
        "HalfCheetah-v5 at the learning rate that led ``halfcheetah_decay`` held out (3e-3 constant), with a lower "
        "discount: defined after the learning-rate and entropy screens found no value that moves. The case exists if "
        "0.9 or 0.95 leads held out at 262k frames (mean over the seeds) and trails 0.99 at 524k in every seed (a "
        "discount that must rise); its start is that discount at 3e-3 constant, and the discount alone is searched. "
        "Measured (seeds 1-3): 0.99 leads (mean 635 at 262k, against 182 and -32) and ends highest in every seed: no "
        "case.",
        "HalfCheetah-v5",
        DISCOUNTS_AT_HIGH_RATE,
    ),
    "halfcheetah_clip": Screen(
        "HalfCheetah-v5 at 3e-3 constant with a wider PPO clip (the yaml's 0.2): defined with "
        "``halfcheetah_discount``. The case exists if 0.5 or 0.3 leads held out at 262k frames (mean over the seeds) "
        "and trails 0.2 at 524k in every seed (a step bound that must tighten); its start is that clip at 3e-3 "
        "constant, the clip alone searched. Measured (seeds 1-3): 0.5 leads (mean 1,108 at 262k) and trails 0.2 at "
        "524k in seed 1 only (2,192 against 2,367): no case.",
        "HalfCheetah-v5",
        (
            ("clip0.5", (*HIGH_RATE, "e_clip=0.5")),
            ("clip0.3", (*HIGH_RATE, "e_clip=0.3")),
            ("clip0.2", HIGH_RATE),
        ),
    ),
    "hopper_discount": Screen(
        "Hopper-v5 at the learning rate that led ``hopper_decay`` held out (3e-3 constant), with a lower discount: "
        "defined with ``halfcheetah_discount``, the same rule. The case exists if 0.9 or 0.95 leads held out at 262k "
        "frames (mean over the seeds) and trails 0.99 at 524k in every seed; its start is that discount at 3e-3 "
        "constant, and the discount alone is searched. Measured (seeds 1-3): 0.99 leads (mean 1,432 at 262k, "
        "against 461 and 406; the lower discounts end at 370-476): no case.",
        "Hopper-v5",
        DISCOUNTS_AT_HIGH_RATE,
    ),
    "hopper_rate_falls": falling_rate(
        "Hopper-v5, a rate that must fall, measured by branching (defined after seven screens of constant values "
        "found none, with their figures known): 1e-2 constant (``hopper_decay_long``: too high to hold after 524k, "
        "single checkpoints drop to 4-556) and 1e-3 constant train to 524,288 frames; from 1e-2's checkpoint there, "
        "three warm starts go on to 1,048,576 (``--frames 1048576``) at 1e-2, 1e-3 or 3e-4 constant. A run's late "
        "figure is its mean held-out return over its last four checkpoints (851k-1M; one checkpoint swings by "
        "thousands on Hopper). The case exists if in every seed 1e-2 leads 1e-3 held out at 524,288 (the higher "
        "rate is the better one early) and one lower rate's branch, the same in every seed, has a higher late figure "
        "than the 1e-2 branch (the better rate late is lower); its start is 1e-2 constant, the learning rate alone "
        "searched, 1,048,576 frames per member. Measured (seeds 1-3): 1e-2 leads at 524k in every seed; late, 1e-3 "
        "and 3e-4 beat the 1e-2 branch in seeds 2 and 3, and neither does in seed 1 (3,143 and 2,276 against "
        "3,279): no case.",
        "Hopper-v5",
        "1e-2",
    ),
    "hopper_rate_falls_fresh": falling_rate(
        "Hopper-v5, ``hopper_rate_falls`` again on fresh agent seeds 4-9 (``--seeds 4 5 6 7 8 9``), under a rule "
        "written after its seeds 1-3 (the nearest any screen came: a lower rate better late in two seeds of three) "
        "and before any run of these: the same runs and late figure. The case exists if 1e-2 leads 1e-3 held out "
        "at 524,288 in at least five of the six seeds, and the 3e-4 branch (named now: of the two lower rates, the "
        "one that came within 136 of the 1e-2 branch in the seed where neither won) has a higher late figure than "
        "the 1e-2 branch in at least five of the six seeds and on their mean. Five of six, not every seed: a study "
        "judges a case per seed on three, and a rate that is wrong late in most seeds is what a population must "
        "follow and a fixed rate cannot; seeds 1-3 are not counted again. Its start is 1e-2 constant, the learning "
        "rate alone searched, 1,048,576 frames per member. Measured (seeds 4-9): 1e-2 leads 1e-3 at 524k in one seed "
        "of six (1e-2 never learns to hop by 524k in seed 4); the 3e-4 branch beats the 1e-2 branch late in four of "
        "six (mean 2,076 against 1,475): no case.",
        "Hopper-v5",
        "1e-2",
    ),
    "hopper_rate_falls_from_3e-3": falling_rate(
        "Hopper-v5, a rate that must fall from 3e-3 (it led ``hopper_decay`` held out at 262k and ended there at its "
        "best by 524k; ``hopper_rate_falls_fresh`` found 1e-2 too high early and lower rates better late in most "
        "seeds), measured by branching as ``hopper_rate_falls`` on fresh agent seeds 10-15 (``--seeds 10 11 12 13 14 "
        "15``), the rule written before any run: the same runs from 3e-3 and late figure (mean held-out return over "
        "the last four checkpoints, 851k-1M). The case exists if 3e-3 leads 1e-3 held out at 524,288 in at least five "
        "of the six seeds, and the 3e-4 branch (named now: the end of a falling rate) has a higher late figure than "
        "the 3e-3 branch in at least five of the six seeds and on their mean. Its start is 3e-3 constant, the "
        "learning rate alone searched, 1,048,576 frames per member. Measured (seeds 10-15): 3e-3 leads 1e-3 at 524k "
        "in four seeds of six (in one by 10); the 3e-4 branch beats the 3e-3 branch late in three (mean 3,033 "
        "against 2,910): no case.",
        "Hopper-v5",
        "3e-3",
    ),
    "halfcheetah_rate_falls": falling_rate(
        "HalfCheetah-v5, a rate that must fall, measured by branching as ``hopper_rate_falls`` (defined while that "
        "screen ran, after its first seed): 3e-3 constant (it led ``halfcheetah_decay`` held out at 262k and was still "
        "climbing at 524k) and 1e-3 constant train to 524,288 frames; from 3e-3's checkpoint there, three warm starts "
        "go on to 1,048,576 (``--frames 1048576``) at 3e-3, 1e-3 or 3e-4 constant. The late figure is a run's mean "
        "held-out return over its last four checkpoints (851k-1M). The case exists if in every seed 3e-3 leads 1e-3 "
        "held out at 524,288 and one lower rate's branch, the same in every seed, has a higher late figure than the "
        "3e-3 branch; its start is 3e-3 constant, the learning rate alone searched, 1,048,576 frames per member. "
        "Measured (seeds 1-3): 3e-3 leads at 524k, and its own branch has the highest late figure in every seed: no "
        "case.",
        "HalfCheetah-v5",
        "3e-3",
    ),
    "halfcheetah_rate_falls_2m": falling_rate(
        "HalfCheetah-v5, ``halfcheetah_rate_falls`` over twice the frames (defined after the Hopper branching screens "
        "found every rate ending on Hopper's plateau; HalfCheetah has none within 1M, and its 3e-3 branch was still "
        "the best and climbing there), on fresh agent seeds 4-6 (``--seeds 4 5 6 --frames 2097152``), the rule "
        "written before any run: 3e-3 and 1e-3 constant train to 1,048,576 frames; from 3e-3's checkpoint there, "
        "three warm starts go on to 2,097,152 at 3e-3, 1e-3 or 3e-4 constant. The late figure is a run's mean held-out "
        "return over its last four checkpoints (1.90M-2.1M). The case exists if in every seed 3e-3 leads 1e-3 held out "
        "at 1,048,576 and one lower rate's branch, the same in every seed, has a higher late figure than the 3e-3 "
        "branch; its start is 3e-3 constant, the learning rate alone searched, 2,097,152 frames per member. Measured "
        "(seeds 4-6): 3e-3 leads at 1M in every seed; its own branch has the highest late figure in seeds 4 and 6, "
        "both lower branches in seed 5 (by 162 and 20, all near 6,000): no case.",
        "HalfCheetah-v5",
        "3e-3",
        frame=1_048_576,
    ),
    "walker2d_rate_falls": falling_rate(
        "Walker2d-v5 (rl_games' tuned yaml, packaged as walker2d_ppo.yaml), a rate that must fall, measured by "
        "branching as ``hopper_rate_falls`` (defined after the twelve screens above, on a task none of them ran: "
        "Hopper's branches all ended on its plateau of about 3,400 and HalfCheetah kept its higher rate to 2M), on "
        "agent seeds 1-3 (``--seeds 1 2 3 --frames 1048576``), the rule written before any run: 3e-3 constant (the "
        "rate that led both other tasks' rate screens) and 1e-3 constant train to 524,288 frames; from 3e-3's "
        "checkpoint there, warm starts go on to 1,048,576 at 3e-3, 1e-3 or 3e-4 constant. The late figure is a run's "
        "mean held-out return over its last four checkpoints (851k-1M). The case exists if in every seed 3e-3 leads "
        "1e-3 held out at 524,288 and one lower rate's branch, the same in every seed, has a higher late figure than "
        "the 3e-3 branch (three seeds and every seed, as ``halfcheetah_rate_falls`` on a task new to the screens; "
        "more seeds under a rule of their own if it is met). Its start is 3e-3 constant, the learning rate alone "
        "searched, 1,048,576 frames per member. Measured (seeds 1-3): 3e-3 leads 1e-3 at 524k in every seed; both "
        "lower branches beat the 3e-3 branch late in seeds 1 and 3, and neither does in seed 2 (4,357 and 4,339 "
        "against 4,458): no case.",
        "Walker2d-v5",
        "3e-3",
    ),
}
"""Screens that decide whether a case is defined (reward weights: a case no PPO search can fix; a value that must
move, judged held out)."""
