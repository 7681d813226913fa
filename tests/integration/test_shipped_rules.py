"""Each shipped selection rule (``dexpbt``, ``isaaclab``, ``welch``) decides in a real population at its shipped
defaults: a planted weak member copies the member that learns.

For each rule, two real CPU members (rl_games PPO on Pendulum-v1, one process each) train side by side. Member 0
trains with the packaged yaml. Member 1 is planted weak: a constant learning rate of 1e-6 (the bottom of the
learning rate's bounds), at which PPO does not learn in the frames this run has. Nothing of the rule is set: every
key it reads, and ``min_members``, ``window`` and ``min_episodes``, keep the shipped defaults; only the population's
pace (a decision every two epochs), the mutated key (the learning rate, so that an exploit hands the recipient the
donor's rate) and the diverse start (off, so the plant stays planted) are set. Two members is the smallest
population these defaults decide in: the worst and top groups hold one member each, and Isaac Lab's bands put one
member on each side of the mean.

The run ends on events, not on a clock: it stops once member 1 has exploited and the exploit is applied (its
``restored`` audit entry). What is checked, read back from the audit logs:

* member 1's exploit decision names this rule, was taken with the rule's shipped values (the ``config`` the entry
  recorded), and copies member 0, whose window mean beat its own; the rule's own test passed (dexpbt: the gap
  exceeded the required gap; isaaclab: member 1 was beyond the lower band and member 0 beyond the upper; welch:
  p < alpha);
* every exploit of the run, by either member, copied a member whose window mean was better;
* ``async-pbt audit`` recomputes every decision of both members from its record and verifies the chains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.decision.catalog import RULES, production_rules
from async_pbt_isaaclab.core.workspace.audit import read_entries

pytestmark = pytest.mark.slow

INTERVAL = 4096
"""Frames between decisions: two epochs (16 envs x 128 steps)."""
WEAK = ["agent.params.config.learning_rate=1e-6", "agent.params.config.lr_schedule=constant"]
"""Member 1's plant: it does not learn (a constant rate; the adaptive schedule would raise it within an epoch)."""
SAFETY_S = 1500
"""Only ends a hung run: every wait is for audit entries the members write."""
SHIPPED = PopulationConfig()


def _member(ws: Path, index: int, rule: str, root: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.examples.cpu_member",
        "--pbt-workspace",
        str(ws),
        "--pbt-members",
        "2",
        "--pbt-index",
        str(index),
        "--train-dir",
        str(ws / "runs"),
        "--max_iterations",
        "100000",  # never reached: the test stops the members once the exploit is applied
        "--pbt-rule",
        rule,
        "--pbt-interval-steps",
        str(INTERVAL),
        "agent.pbt.start_spread=0",
        "agent.pbt.mutation.learning_rate=mutate_float",
        "agent.params.torch_threads=1",
        *(WEAK if index == 1 else []),
    ]
    log = open(root / f"{rule}_member{index}.log", "wb")
    return subprocess.Popen(
        cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )


def _entries(ws: Path, m: int) -> list[dict]:
    path = ws / "members" / f"{m:03d}" / "audit.jsonl"
    return [e for _, e, _ in read_entries(path) if e is not None] if path.exists() else []


def _exploit_applied(ws: Path) -> bool:
    """Member 1 decided to exploit and then trained from the donor's weights (a ``restored`` entry after it)."""
    entries = _entries(ws, 1)
    decided = [e["seq"] for e in entries if e["kind"] == "decision" and e["decision"]["outcome"] == "exploit"]
    return bool(decided) and any(e["kind"] == "restored" and e["seq"] > decided[0] for e in entries)


@pytest.fixture(scope="module", params=production_rules())
def population(request, tmp_path_factory):
    """``(rule, workspace)``: the rule's population, run until member 1's exploit is applied, then stopped."""
    rule = request.param
    root = tmp_path_factory.mktemp(f"rule_{rule}")
    ws = root / "ws"
    procs = [_member(ws, index, rule, root) for index in (0, 1)]
    try:
        deadline = time.monotonic() + SAFETY_S
        while not _exploit_applied(ws):
            exited = [i for i, p in enumerate(procs) if p.poll() is not None]
            assert not exited, f"member {exited} exited before the exploit:\n{_logs(root, rule)}"
            assert time.monotonic() < deadline, f"hung: no applied exploit after {SAFETY_S} s\n{_logs(root, rule)}"
            time.sleep(0.5)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # Ctrl-C: the member saves, publishes "stopped" and exits
        for proc in procs:
            proc.wait(timeout=SAFETY_S)
    return rule, ws


def _logs(root: Path, rule: str) -> str:
    return "\n".join(
        f"==== {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(root.glob(f"{rule}_*.log"))
    )


def test_the_weak_member_copies_the_learner_by_the_rules_own_test_at_its_shipped_defaults(population):
    rule, ws = population
    entry = next(e for e in _entries(ws, 1) if e["kind"] == "decision" and e["decision"]["outcome"] == "exploit")
    decision, config = entry["decision"], entry["config"]
    assert decision["rule"] == rule and decision["donor"] == 0, decision
    shipped = {key: getattr(SHIPPED, key) for key in (*RULES[rule].keys, "min_members", "window", "min_episodes")}
    assert {key: config[key] for key in shipped} == shipped
    means = decision["objectives"]
    assert means["0"] > means["1"], means  # the donor's window beat the weak member's
    thresholds = decision["thresholds"]
    if rule == "dexpbt":
        assert thresholds["gap"] > thresholds["required_gap"] > 0, thresholds
    elif rule == "isaaclab":
        assert means["1"] < thresholds["lower"] and means["0"] > thresholds["upper"], (means, thresholds)
    elif rule == "welch":
        assert thresholds["p_value"] < thresholds["alpha"] == SHIPPED.welch_alpha, thresholds
    else:
        pytest.fail(f"a shipped rule without its check here: {rule}")
    # Any other exploit (the learner may copy the plant at the first decisions, when both still play at random
    # and the bands of isaaclab put the worse of two below the mean) took a donor whose window was better.
    for m in (0, 1):
        for e in _entries(ws, m):
            if e["kind"] == "decision" and e["decision"]["outcome"] == "exploit":
                d = e["decision"]
                assert d["objectives"][str(d["donor"])] > d["objectives"][str(m)], d


def test_the_audit_recomputes_every_decision_of_the_population(population):
    _, ws = population
    proc = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.cli", "audit", str(ws)],
        capture_output=True,
        text=True,
        timeout=SAFETY_S,
    )
    assert proc.returncode == 0 and "audit: all entries verified" in proc.stdout, proc.stdout + proc.stderr
