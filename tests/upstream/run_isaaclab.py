"""Run one of our scripts on a real Isaac Lab release with only the simulator stubbed (test entry point).

    python tests/upstream/run_isaaclab.py 3.0.0 scripts/train_pbt.py --task AsyncPbtTest-Reach-Direct-v0 ...
    python tests/upstream/run_isaaclab.py 2.3.2 -m probe_name [args]      (a function of upstream_probes.py)
    python tests/upstream/run_isaaclab.py 2.3.2 -m module:probe_name [args]    (a function of another module here)
    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/upstream/run_isaaclab.py 3.0.0 \
        --gloo-ranks scripts/train_pbt.py --distributed --device cpu ...     (ranks on the CPU: see cpu_ranks)

The script runs as ``__main__`` with everything real (Isaac Lab's launcher, Hydra config loading, gymnasium
registry, ``RlGamesVecEnvWrapper``/``RlGamesGpuEnv``, rl_games) except the simulator modules; the test tasks
``AsyncPbtTest-Reach-Direct-v0`` (:mod:`reach_task`) and ``AsyncPbtTest-Reach-TwoAgent-Direct-v0`` (multi-agent,
:mod:`reach_marl_task`) are registered first, as an extension would register its tasks.
An exploit restart re-executes the captured command line, which starts with this file, so it runs here again.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import isaaclab_real


def cpu_ranks(release: str, script: str) -> None:
    """``--gloo-ranks``: the ranks of a ``--distributed`` run of ``script`` on the CPU, for tests only. rl_games' (or,
    for ``train_pbt_rsl_rl.py``, rsl_rl's) nccl and ``cuda:LOCAL_RANK`` become gloo and the CPU
    (:mod:`async_pbt_isaaclab.testing.gloo_ranks`); on 3.0, Isaac Lab's launcher places each rank on ``--device``
    (``cpu``) where it picks ``cuda:LOCAL_RANK``, and its refusal of a CPU device for ``--distributed`` is lifted.
    2.x's AppLauncher only names a device, which the scripts do not take on the CPU ranks
    (``envs/isaaclab/api.py:distributed_placement``)."""
    from async_pbt_isaaclab.testing import gloo_ranks

    if Path(script).name == "train_pbt_rsl_rl.py":
        gloo_ranks.rsl_rl_on_cpu()
    else:
        gloo_ranks.use_gloo_on_cpu()
    if release.startswith("2."):
        return
    from isaaclab.app import sim_launcher
    from isaaclab_rl.entrypoints import common

    def on_the_cpu(cfg, args: dict) -> None:
        if args.get("distributed") and getattr(cfg, "sim", None) is not None:
            cfg.sim.device = args.get("device") or "cpu"

    sim_launcher._resolve_distributed_device = on_the_cpu
    common.validate_distributed_device = lambda args: None


def main() -> None:
    release, target, *rest = sys.argv[1:]
    isaaclab_real.activate(release)
    if target == "--gloo-ranks":
        target, *rest = rest
        cpu_ranks(release, target)
    import reach_marl_task
    import reach_task

    reach_task.register()
    reach_marl_task.register()
    if target == "-m":
        import importlib

        name, *args = rest
        module, _, name = name.rpartition(":")  # a probe of another module than upstream_probes: module:function
        getattr(importlib.import_module(module or "upstream_probes"), name)(*args)
        return
    sys.argv = [target, *rest]
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
