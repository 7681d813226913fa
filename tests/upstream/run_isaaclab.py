"""Run one of our scripts on a real Isaac Lab release with only the simulator stubbed (test entry point).

    python tests/upstream/run_isaaclab.py 3.0.0 scripts/train_pbt.py --task AsyncPbtTest-Reach-Direct-v0 ...
    python tests/upstream/run_isaaclab.py 2.3.2 -m probe_name [args]      (a function of upstream_probes.py)
    python tests/upstream/run_isaaclab.py 2.3.2 -m module:probe_name [args]    (a function of another module here)

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


def main() -> None:
    release, target, *rest = sys.argv[1:]
    isaaclab_real.activate(release)
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
