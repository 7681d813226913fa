"""The ``e2e`` mode of ``summary_emitter.py``: the emitter inside a training loop on Isaac Lab's own wrappers.

rl_games PPO on the reach task as an Isaac Lab ``DirectRLEnv`` (``tests/upstream/reach_task.py``: the dynamics of
:class:`~async_pbt_isaaclab.testing.torch_reach_task.TorchReachEnv`), with and without the
:class:`~async_pbt_isaaclab.envs.isaaclab.wrapper.PbtIsaacLabEnv` wrapper that feeds the emitter, same seed, side by
side in one process; frames/s of both and their ratio (target >= 0.97 on CPU at 4,096 envs)::

    python scripts/benchmarks/summary_emitter.py e2e --num-envs 4096 [--isaaclab 3.0.0|2.3.2]

The Isaac Lab code is the real release (its ``isaaclab`` wheel, fetched, cached and made importable with only the
simulator modules stubbed by the test harness ``tests/upstream/isaaclab_real.py``: run this from a source checkout).
The chain is ``scripts/train_pbt.py``'s: ``gym.make(reach task)`` -> ``PbtIsaacLabEnv`` (*with*) or a pass-through
wrapper of the same depth (*without*) -> Isaac Lab's ``RlGamesVecEnvWrapper`` -> ``RlGamesGpuEnv`` -> rl_games
``Runner`` with ``IsaacAlgoObserver`` and without our PBT observer (this measures the emitter, not the observer).
The agent is ``tasks/agents/torch_reach_pbt.yaml`` on the CPU without ``torch_compile``, ``num_actors`` = the env
count, ``horizon_length`` = ``--horizon`` and the yaml's number of minibatches per epoch (64 x 32 / 512 = 4), so the
update grows with the rollout as in an Isaac Lab config. *With* drains the emitter once per epoch after the rollout,
where the observer would, so the drain is counted too.

Two measures, because the machines are shared and noisy (10-20 % run to run):

1. **A/B frames/s** over the steady-state epochs of each run (end of the first rollout to end of the last; agent
   construction and epoch 1 excluded), pairs interleaved ABBA: median and spread (min-max) of both variants and of
   the per-pair ratio; the same per CPU second of the process (``time.process_time``: leaves out waiting for a
   core, not neighbours sharing caches and memory bandwidth).
2. **Direct added time** (the robust one): in *with*, ``perf_counter`` around the wrapper's ``step`` minus around
   the inner env's, plus the reset snapshot (inside the inner step, in ``_reset_idx``) and the drain, as a fraction
   of the same epochs' wall time; ``1 - fraction`` is the frames/s ratio the emitter allows whatever the machine's
   drift. It is split into ``emitter.step``, snapshot, drain and the rest of the wrapper.

Both variants are seeded alike and the emitter draws no random numbers, so they must train identically: the final
network parameters of each pair are compared and the result printed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

E2E_TARGET = 0.97
"""frames/s with the emitter / frames/s without, at least (CPU, 4,096 envs)."""
REPO = Path(__file__).resolve().parents[2]
"""Repository root."""
E2E_AGENT = REPO / "tasks" / "agents" / "torch_reach_pbt.yaml"
"""Default rl_games agent of the end-to-end benchmark."""
UPSTREAM_HARNESS = REPO / "tests" / "upstream"
"""The test harness that makes a real Isaac Lab release importable (``isaaclab_real.py``) and its reach task."""
RELEASES = ("3.0.0", "2.3.2")
"""Isaac Lab releases the benchmark can run on (those the harness fetches)."""
METERS = ("outer", "inner", "emitter", "snapshot", "drain")
"""Timers of a run: the wrapper's step, the inner env's step, ``emitter.step``, the reset snapshot, the drain."""
WITHOUT, WITH = "without", "with"


class _Clock:
    """Accumulated ``perf_counter`` time and calls of a wrapped callable."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        return timed


def _real_isaaclab(release: str) -> Any:
    """Make Isaac Lab ``release`` importable here (simulator stubbed) and return the harness's reach-task module."""
    if not (UPSTREAM_HARNESS / "isaaclab_real.py").exists():
        raise SystemExit(f"{UPSTREAM_HARNESS} not found: the e2e benchmark runs from a source checkout")
    if str(UPSTREAM_HARNESS) not in sys.path:
        sys.path.insert(0, str(UPSTREAM_HARNESS))
    import isaaclab_real

    try:
        isaaclab_real.activate(release)
    except isaaclab_real.Unavailable as exc:
        raise SystemExit(f"Isaac Lab {release} is not cached and could not be fetched: {exc}") from None
    import reach_task

    reach_task.register()
    return reach_task


def _pass_through_cls() -> type:
    import gymnasium

    class PassThroughEnv(gymnasium.Wrapper):
        """The baseline's stand-in for PbtIsaacLabEnv: the same place in the chain, forwards step and reset."""

        def step(self, action):
            return self.env.step(action)

        def reset(self, **kwargs):
            return self.env.reset(**kwargs)

    return PassThroughEnv


def _epoch_observer(clocks: dict[str, _Clock], emitter: Any, drain_every: int) -> Any:
    """An rl_games observer that drains the emitter every ``drain_every`` epochs and marks the end of each rollout."""
    from rl_games.common.algo_observer import AlgoObserver

    class EpochMarks(AlgoObserver):
        def __init__(self) -> None:
            super().__init__()
            self.algo = None
            self.marks: list[tuple[float, float, dict[str, float]]] = []
            self.episodes = 0

        def after_init(self, algo):
            self.algo = algo

        def after_steps(self):
            # After the rollout, before the update: where the PBT observer would drain (on its heartbeat).
            if emitter is not None and drain_every and (len(self.marks) + 1) % drain_every == 0:
                self.episodes += len(clocks["drain"].wrap(emitter.drain)())
            self.marks.append((time.perf_counter(), time.process_time(), {k: c.seconds for k, c in clocks.items()}))

        def after_clear_stats(self):
            pass

    return EpochMarks()


def _e2e_agent_cfg(args: argparse.Namespace, epochs: int, root: str, name: str) -> dict[str, Any]:
    from async_pbt_isaaclab.core.agent_config import load_yaml
    from async_pbt_isaaclab.testing.torch_reach_task import TorchReachEnvCfg

    agent = load_yaml(args.agent)
    params = agent["params"]
    params["seed"] = args.seed
    if args.threads is not None:
        params["torch_threads"] = args.threads
    rl = params["config"]
    # Keep the yaml's number of minibatches per epoch at the new batch size. num_actors -1 means "the env's count"
    # (train_pbt.py sets it from the env): the env config's default, 64 (64 envs x 32 steps / 512 = 4).
    yaml_envs = int(rl.get("num_actors", -1))
    yaml_envs = yaml_envs if yaml_envs > 0 else TorchReachEnvCfg().scene.num_envs
    yaml_minibatches = max(1, yaml_envs * int(rl["horizon_length"]) // int(rl["minibatch_size"]))
    minibatches = args.minibatches or yaml_minibatches
    batch = args.num_envs * args.horizon
    if batch % minibatches:
        raise SystemExit(f"num_envs x horizon = {batch} is not divisible into {minibatches} minibatches")
    rl.update(
        device="cpu",
        device_name="cpu",
        torch_compile=False,
        multi_gpu=False,
        num_actors=args.num_envs,
        horizon_length=args.horizon,
        minibatch_size=batch // minibatches,
        max_epochs=epochs,
        train_dir=root,
        full_experiment_name=name,
        print_stats=False,
        save_best_after=10**9,
        save_frequency=0,
    )
    return agent


def e2e_run(variant: str, args: argparse.Namespace, epochs: int, profile: cProfile.Profile | None = None) -> dict:
    """Train ``epochs`` PPO epochs on the pure-torch env, ``with`` or ``without`` the emitter wrapper.

    Returns frames, steady-state wall time and frames/s (from the first to the last end of rollout), the timers'
    totals over the same window, episodes drained and a checksum of the final network parameters.
    """
    import gymnasium
    import torch
    from rl_games.common.algo_observer import IsaacAlgoObserver
    from rl_games.torch_runner import Runner

    from async_pbt_isaaclab.core.config import objective_term
    from async_pbt_isaaclab.envs.isaaclab import IsaacLabHooks, register_rl_games_env, rl_games_wrapper_options
    from async_pbt_isaaclab.envs.isaaclab.condition import reward_fingerprint
    from async_pbt_isaaclab.envs.isaaclab.terms import SummaryCfg
    from async_pbt_isaaclab.envs.isaaclab.wrapper import attach_summary_source
    from async_pbt_isaaclab.rl_games.multi_observer import MultiObserver

    reach_task = _real_isaaclab(args.isaaclab)
    task_id = reach_task.TASK_ID
    threads = torch.get_num_threads()
    root = tempfile.mkdtemp(prefix=f"emitter_e2e_{variant}_")
    clocks = {k: _Clock() for k in METERS}
    try:
        agent = _e2e_agent_cfg(args, epochs, root, variant)
        env_cfg = reach_task.ReachDirectEnvCfg()
        env_cfg.scene.num_envs = args.num_envs
        env_cfg.sim.device = "cpu"
        env_cfg.seed = args.seed
        env = gymnasium.make(task_id, cfg=env_cfg)
        env.step = clocks["inner"].wrap(env.step)
        emitter = None
        if variant == WITH:
            pbt = agent.get("pbt") or {}
            wrapped = attach_summary_source(
                env,
                SummaryCfg.from_agent_cfg(agent),
                objective=objective_term(pbt.get("objective", "episode_return")),
                task=task_id,
                reward_config=reward_fingerprint(env_cfg),
            )
            emitter = wrapped.pbt_summary_source
            emitter.step = clocks["emitter"].wrap(emitter.step)
            wrapped._take_snapshot = clocks["snapshot"].wrap(wrapped._take_snapshot)
            step = wrapped.step
            if profile is not None:

                def step(action, _inner=wrapped.step):
                    return profile.runcall(_inner, action)

            wrapped.step = clocks["outer"].wrap(step)
        else:
            wrapped = _pass_through_cls()(env)
            wrapped.step = clocks["outer"].wrap(wrapped.step)
        rl_device, clip_obs, clip_actions, extra = rl_games_wrapper_options(agent)
        hooks = IsaacLabHooks()  # the release's own RlGamesVecEnvWrapper and RlGamesGpuEnv
        vec_env = hooks.vec_env_wrapper(wrapped, rl_device, clip_obs, clip_actions, **extra)
        register_rl_games_env(vec_env, hooks)
        marks = _epoch_observer(clocks, emitter, args.drain_every)
        runner = Runner(MultiObserver([IsaacAlgoObserver(), marks]))
        with contextlib.redirect_stdout(io.StringIO()):  # rl_games' prints (seed, config, per-epoch stats)
            runner.load(agent)
            runner.reset()
            t0 = time.perf_counter()
            runner.run({"train": True, "play": False, "checkpoint": None, "sigma": None})
            wall = time.perf_counter() - t0
        algo = marks.algo
        frames_per_epoch = args.num_envs * args.horizon
        (t_first, cpu_first, c_first), (t_last, cpu_last, c_last) = marks.marks[0], marks.marks[-1]
        window = t_last - t_first
        cpu_window = cpu_last - cpu_first
        timed_epochs = len(marks.marks) - 1
        spent = {k: c_last[k] - c_first[k] for k in METERS}
        params = torch.cat([p.detach().reshape(-1).double() for p in algo.model.parameters()])
        out = {
            "variant": variant,
            "epochs": int(algo.epoch_num),
            "frames": int(algo.frame),
            "run_wall_s": wall,
            "timed_epochs": timed_epochs,
            "window_s": window,
            "fps": timed_epochs * frames_per_epoch / window if timed_epochs else float("nan"),
            "epoch_s": window / timed_epochs if timed_epochs else float("nan"),
            "cpu_s": cpu_window,
            "cpu_fps": timed_epochs * frames_per_epoch / cpu_window if timed_epochs else float("nan"),
            "steps": timed_epochs * args.horizon,
            "spent": spent,
            "emitter_calls": clocks["emitter"].calls,
            "drains": clocks["drain"].calls,
            "episodes": marks.episodes,
            "params_sum": float(params.sum()),
            "params_abs": float(params.abs().sum()),
        }
        if getattr(algo, "writer", None) is not None:
            algo.writer.close()
        vec_env.close()
        return out
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(root, ignore_errors=True)


def _added(run: dict) -> float:
    """Seconds of work the emitter wrapper added inside a run's timed window."""
    s = run["spent"]
    return s["outer"] - s["inner"] + s["snapshot"] + s["drain"]


def measure_e2e(args: argparse.Namespace, log: Callable[[str], None] = print) -> dict:
    """Warm-up runs, then ``args.pairs`` interleaved (ABBA) pairs; returns the runs, ratios and a summary."""
    if args.epochs < 2:
        raise SystemExit("--epochs must be >= 2 (the first epoch is not timed)")
    if args.warmup_epochs > 0:
        for variant in (WITHOUT, WITH):
            e2e_run(variant, args, max(2, args.warmup_epochs))
    runs: list[dict] = []
    pairs: list[dict[str, dict]] = []
    for i in range(args.pairs):
        order = (WITHOUT, WITH) if i % 2 == 0 else (WITH, WITHOUT)
        pair = {}
        for variant in order:
            pair[variant] = e2e_run(variant, args, args.epochs)
            runs.append(pair[variant])
        pairs.append(pair)
        w, b = pair[WITH], pair[WITHOUT]
        log(
            f"  pair {i + 1}/{args.pairs} ({'AB' if order[0] == WITHOUT else 'BA'}): without {b['fps']:8.0f} fps, "
            f"with {w['fps']:8.0f} fps, ratio {w['fps'] / b['fps']:.4f} (CPU time {w['cpu_fps'] / b['cpu_fps']:.4f}); "
            f"added {1e3 * _added(w):.0f} ms of "
            f"{w['window_s']:.1f} s ({100 * _added(w) / w['window_s']:.2f} %); epoch {b['epoch_s']:.2f} / "
            f"{w['epoch_s']:.2f} s"
        )
    profile_text = None
    if args.profile:
        profile = cProfile.Profile()
        e2e_run(WITH, args, args.epochs, profile)
        buf = io.StringIO()
        pstats.Stats(profile, stream=buf).sort_stats("tottime").print_stats(20)
        profile_text = buf.getvalue()
    return {
        "runs": runs,
        "pairs": pairs,
        "ratios": [p[WITH]["fps"] / p[WITHOUT]["fps"] for p in pairs],
        "cpu_ratios": [p[WITH]["cpu_fps"] / p[WITHOUT]["cpu_fps"] for p in pairs],
        "profile": profile_text,
    }


def _row(label: str, values: list[float], fmt: str) -> str:
    med = format(statistics.median(values), fmt)
    spread = f"{format(min(values), fmt)}..{format(max(values), fmt)}"
    return f"{label:<52}{med:>12}{spread:>22}"


def run_e2e(args: argparse.Namespace) -> int:
    import torch

    if not Path(args.agent).exists():
        print(f"agent yaml {args.agent} not found")
        return 1
    from async_pbt_isaaclab.core.agent_config import load_yaml

    rl = load_yaml(args.agent)["params"]
    threads = args.threads if args.threads is not None else rl.get("torch_threads", "rl_games auto")
    probe = _e2e_agent_cfg(args, args.epochs, "", "probe")["params"]["config"]
    batch = args.num_envs * args.horizon
    _real_isaaclab(args.isaaclab)
    import inspect

    from isaaclab_rl.rl_games import RlGamesVecEnvWrapper as wrapper

    wrapper_file = inspect.getsourcefile(wrapper)
    t_start = time.perf_counter()
    print(
        f"end to end: rl_games PPO ({Path(args.agent).name}, device cpu, torch_compile False) on the reach task "
        f"(a DirectRLEnv), {args.num_envs} envs x {args.horizon} steps = {batch} frames/epoch, "
        f"minibatch {probe['minibatch_size']} "
        f"x {probe['mini_epochs']} mini-epochs; {args.epochs} epochs per run ({args.epochs - 1} timed: agent "
        f"construction and epoch 1 excluded), {args.pairs} pairs ABBA after a {args.warmup_epochs}-epoch warm-up "
        f"per variant; seed {args.seed}; drain every {args.drain_every} epoch(s); torch {torch.__version__}, "
        f"torch threads {threads}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; vec-env wrapper "
        f"{wrapper.__module__}.{wrapper.__qualname__} of Isaac Lab {args.isaaclab} ({Path(wrapper_file).parent}; "
        f"real wheel, simulator modules stubbed)",
        flush=True,
    )
    result = measure_e2e(args, log=lambda line: print(line, flush=True))
    runs, pairs, ratios = result["runs"], result["pairs"], result["ratios"]
    base = [r for r in runs if r["variant"] == WITHOUT]
    emit = [r for r in runs if r["variant"] == WITH]
    frac = [_added(r) / r["window_s"] for r in emit]
    per_step = lambda key: [1e6 * r["spent"][key] / r["steps"] for r in emit]  # noqa: E731
    added_us = [1e6 * _added(r) / r["steps"] for r in emit]
    glue_us = [1e6 * (r["spent"]["outer"] - r["spent"]["inner"] - r["spent"]["emitter"]) / r["steps"] for r in emit]
    forward_us = [1e6 * (r["spent"]["outer"] - r["spent"]["inner"]) / r["steps"] for r in base]
    inner_us = [1e6 * r["spent"]["inner"] / r["steps"] for r in runs]
    drain_ms = [1e3 * r["spent"]["drain"] / max(1, r["timed_epochs"]) for r in emit]
    print()
    print(f"{'measure':<52}{'median':>12}{'min..max':>22}")
    print(_row("frames/s without emitter", [r["fps"] for r in base], ".0f"))
    print(_row("frames/s with emitter", [r["fps"] for r in emit], ".0f"))
    print(_row("per-pair ratio with/without", ratios, ".4f"))
    print(_row("frames per CPU second without emitter", [r["cpu_fps"] for r in base], ".0f"))
    print(_row("frames per CPU second with emitter", [r["cpu_fps"] for r in emit], ".0f"))
    print(_row("per-pair CPU-time ratio with/without", result["cpu_ratios"], ".4f"))
    print(_row("epoch wall time without (s)", [r["epoch_s"] for r in base], ".3f"))
    print(_row("epoch wall time with (s)", [r["epoch_s"] for r in emit], ".3f"))
    print(_row("inner env step, both variants (us/step)", inner_us, ".0f"))
    print(_row("added work per env step, total (us)", added_us, ".0f"))
    print(_row("  of which emitter.step (us)", per_step("emitter"), ".0f"))
    print(_row("  of which reset snapshot, in _reset_idx (us)", per_step("snapshot"), ".0f"))
    print(_row("  of which drain, amortised (us)", per_step("drain"), ".0f"))
    print(_row("  of which other wrapper work (us)", glue_us, ".0f"))
    print(_row("drain per epoch (ms)", drain_ms, ".2f"))
    print(_row("pass-through forwarding, baseline (us/step)", forward_us, ".1f"))
    print(_row("added work / epoch wall time (%)", [100 * f for f in frac], ".3f"))
    episodes = sum(r["episodes"] for r in emit)
    print(f"episodes drained in the 'with' runs: {episodes} ({sum(r['drains'] for r in emit)} drains)")
    identical = all(all(p[WITH][k] == p[WITHOUT][k] for k in ("params_sum", "params_abs", "frames")) for p in pairs)
    print(
        f"training identical in both variants (same seed; final parameters and frames compared in every pair): "
        f"{'yes' if identical else 'NO: the variants do not train the same thing'}"
    )
    if result["profile"]:
        print("\ncProfile of PbtIsaacLabEnv.step in one extra 'with' run (tottime; includes the inner env step):")
        print(result["profile"])
    print()
    med_frac = statistics.median(frac)
    direct = 1.0 - med_frac
    print(
        f"{'PASS' if direct >= E2E_TARGET else 'FAIL'}: direct measure 1 - added/epoch = 1 - {100 * med_frac:.3f} % "
        f"= "
        f"{direct:.4f} (target >= {E2E_TARGET}) [median over {len(emit)} runs, "
        f"{1 - max(frac):.4f}..{1 - min(frac):.4f}; robust to machine noise]"
    )
    med_ratio = statistics.median(ratios)
    spread = max(ratios) - min(ratios)
    verdict = "PASS" if med_ratio >= E2E_TARGET else "FAIL"
    if len(ratios) < 2:
        note = "; one pair only: no spread to judge the noise by, rely on the direct measure"
    elif spread > med_frac:
        note = (
            f"; machine noise dominates: the per-pair spread ({spread:.3f}) is larger than the effect the direct "
            f"measure finds ({med_frac:.3f}), so the A/B ratio cannot resolve it; rely on the direct measure"
        )
    else:
        note = f"; the spread is smaller than the effect the direct measure finds ({med_frac:.3f})"
    print(
        f"{verdict}: median A/B frames/s ratio {med_ratio:.4f} (target >= {E2E_TARGET}); per-pair "
        f"{min(ratios):.4f}..{max(ratios):.4f}, spread {spread:.3f}{note}"
    )
    cpu = result["cpu_ratios"]
    print(
        f"info: median A/B ratio in frames per CPU second {statistics.median(cpu):.4f}; per-pair "
        f"{min(cpu):.4f}..{max(cpu):.4f}, spread {max(cpu) - min(cpu):.3f} "
        f"(process CPU time: leaves out waiting for a core, not cache or memory-bandwidth contention)"
    )
    print(f"total benchmark time {time.perf_counter() - t_start:.0f} s")
    return 0
