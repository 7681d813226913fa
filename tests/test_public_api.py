"""The public name ``async_pbt``: the pure core's API without torch, and every module under both names as one object.

What a user depends on:
1. ``import async_pbt`` in an interpreter where torch, rl_games, isaaclab, isaacsim, omni and pxr cannot be
   imported gives the documented API (config, decide, explore, workspace, audit), which runs a real decision and
   mutation, a workspace and an audit log, and nothing of the heavy stacks was even attempted;
2. ``async_pbt.<path>`` is the very module object ``async_pbt_isaaclab.<path>`` (an exception raised by the
   implementation is caught under the public name), and no file is loaded twice;
3. ``python -m async_pbt.examples.cpu_population`` (the README's command) runs the example.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from blocked_imports import run_blocked

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import tempfile, time
    import async_pbt

    missing = [n for n in async_pbt.__all__ if not hasattr(async_pbt, n)]
    # config: an Isaac Lab style pbt section through the public loader
    agent = {{"params": {{"config": {{"learning_rate": 3e-4, "lr_schedule": "adaptive"}}}},
              "pbt": {{"enabled": True, "num_policies": 4, "policy_idx": 0, "interval_steps": 1000,
                      "min_episodes": 8, "window": 16, "mutation_rate": 1.0,
                      "mutation": {{"agent.params.config.learning_rate": "mutate_float"}}}}}}
    merged, cfg = async_pbt.load_population_config(agent, ["pbt.policy_idx=0"])
    # the whole PBT step on real records
    now = time.time()
    recs = []
    for i in range(4):
        ev = async_pbt.EvidenceSummary("episode_return", 0, tuple(float(i * 10 + (k % 3)) for k in range(16)), 16, 0)
        entry = async_pbt.HistoryEntry(10_000, 0, ev.mean, ev.std, 16, async_pbt.ConditionLabel(task="t"),
                                       f"members/{{i:03d}}/checkpoints/x.pth", "%064x" % (i + 1),
                                       {{"learning_rate": 3e-4}})
        recs.append(async_pbt.MemberRecord(member=i, generation=0, frame=10_000, generation_start_frame=0, restarts=0,
                                           heartbeat=now, evidence=ev, condition=async_pbt.ConditionLabel(task="t"),
                                           hyperparameters={{"learning_rate": 3e-4}}, history=(entry,),
                                           checkpoint=f"members/{{i:03d}}/checkpoints/x.pth",
                                           checkpoint_sha256="a" * 64))
    step = async_pbt.pbt_step(async_pbt.PopulationView(recs[0], tuple(recs[1:]), now), cfg,
                              async_pbt.MemberRng(0).get_state())
    decision, new, changes = step.decision, step.new_hyperparameters, step.changes
    # workspace + audit
    root = tempfile.mkdtemp()
    ws = async_pbt.Workspace(root)
    meta = ws.ensure(num_policies=4, objective="episode_return", task="t")
    log = async_pbt.AuditLog.open(ws.member_dir(0) / "audit.jsonl")
    log.append("warning", {{"message": "public API test"}})
    count, problems = async_pbt.verify_log(ws.member_dir(0) / "audit.jsonl")
    # the public error class is the implementation's
    try:
        async_pbt.population_config_from_dict({{"num_polices": 3}})
    except async_pbt.ConfigError as exc:
        error = str(exc)
    import async_pbt.core.config, async_pbt_isaaclab.core.config
    same = async_pbt.core.config is async_pbt_isaaclab.core.config
    aliases = sorted(m for m in sys.modules if m.startswith("async_pbt."))
    twins = [m for m in aliases if sys.modules[m] is not sys.modules.get("async_pbt_isaaclab" + m[len("async_pbt"):])]
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN)
    print(json.dumps({{"missing": missing, "outcome": decision.outcome.value, "new": new,
                       "changed": [c.key for c in changes], "meta": meta["num_policies"], "count": count,
                       "problems": [str(p) for p in problems], "error": error, "same": same,
                       "spec": async_pbt.core.config.__spec__.name, "aliases": aliases, "twins": twins,
                       "loaded": loaded, "attempts": attempts}}))
    """
)


def test_public_api_works_without_torch_and_is_the_implementation():
    out = run_blocked(SCRIPT.format())
    assert out["missing"] == []
    assert out["outcome"] == "exploit" and out["changed"] == ["learning_rate"]
    assert out["new"]["learning_rate"] != 3e-4
    assert out["meta"] == 4 and out["count"] == 1 and out["problems"] == []
    assert "did you mean 'num_policies'" in out["error"]
    assert out["same"] and out["spec"] == "async_pbt_isaaclab.core.config", "reload/pickle see the real module"
    assert "async_pbt.core.config" in out["aliases"] and out["twins"] == [], "no file is loaded twice"
    assert out["loaded"] == [] and out["attempts"] == []


def test_unknown_module_under_the_public_name_is_a_plain_import_error():
    proc = subprocess.run(
        [sys.executable, "-c", "import async_pbt.no_such_module"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'async_pbt.no_such_module'" in proc.stderr


def test_readme_command_runs_the_example_module(tmp_path):
    readme = (ROOT / "README.md").read_text()
    assert "python -m async_pbt.examples.cpu_population --members 2 --smoke --workspace ./runs/cpu-smoke" in readme
    # The module path resolves and runs the example's own argument checks (the run itself: test_cpu_population).
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "async_pbt.examples.cpu_population",
            "--members",
            "1",
            "--workspace",
            str(tmp_path / "ws"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2 and "--members 1" in proc.stderr, proc.stderr
    assert not (tmp_path / "ws").exists()
