"""The forced-exploit populations that several files read (test_cpu_exploit.py, test_observability.py,
test_pbt_scalars.py).

Each is two real CPU members (``async_pbt_isaaclab.testing.forced_exploit.run_population``) and costs tens of
seconds of CPU, so a session runs each exploit path's population once, whichever test worker asks first: the run
happens under a file lock in the folder the workers share, and later callers read the finished result. The tests
only read these workspaces (a test that writes copies the files into its own ``tmp_path``).
"""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

MUTATIONS = (
    "agent.pbt.mutation.learning_rate=mutate_float",
    "agent.pbt.mutation.entropy_coef=mutate_float",
    "agent.pbt.mutation.gamma=mutate_discount",
)
"""The hyperparameters the populations mutate."""


@pytest.fixture(scope="session")
def forced_exploit_population(tmp_path_factory, worker_id) -> Callable[[str], tuple[Path, Path, dict[int, str]]]:
    """``get(exploit_mode)`` -> ``(root, workspace, member logs)`` of the population of that exploit path, run once
    per test session across xdist workers."""
    from async_pbt_isaaclab.testing.forced_exploit import run_population

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent

    def get(mode: str) -> tuple[Path, Path, dict[int, str]]:
        root = shared / f"forced_exploit_{mode}"
        done = root / "member_logs.json"
        with open(shared / f"forced_exploit_{mode}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when the run raises
            if not done.exists():
                shutil.rmtree(root, ignore_errors=True)  # what a failed run of another worker left
                root.mkdir()
                logs = run_population(root, mode, MUTATIONS)
                done.write_text(json.dumps(logs))
        logs = {int(k): v for k, v in json.loads(done.read_text()).items()}
        return root, root / "ws", logs

    return get


@pytest.fixture(scope="session")
def mixed_population(tmp_path_factory, worker_id) -> tuple[Path, Path]:
    """``(root, workspace)`` of the four-member population with every way a generation changes (in-process exploit,
    restart exploit, explores, and a resume afterwards: ``run_mixed_population``), run once per test session across
    xdist workers. Only read by the tests."""
    from async_pbt_isaaclab.testing.forced_exploit import run_mixed_population

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    root = shared / "mixed_population"
    done = root / "member_logs.json"
    with open(shared / "mixed_population.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            done.write_text(json.dumps(run_mixed_population(root, MUTATIONS)))
    return root, root / "ws"
