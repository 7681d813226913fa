"""rsl_rl members where Isaac Lab users train: the real Isaac Lab release (simulator stubbed) and the rsl-rl-lib line
it pins (the main job: 3.0.0 with 5.5.1; .ci/side-jobs: 2.3.2 with 3.1.2, through the rslrl_compat marker).

The probe (``upstream_probes.rsl_rl_member``) wraps the test reach task in our evidence wrapper and Isaac Lab's own
``RslRlVecEnvWrapper``, builds the runner from Isaac Lab's own cartpole ``RslRlOnPolicyRunnerCfg`` as the release's
train script does (3.0: ``handle_deprecated_rsl_rl_cfg`` and ``create_rsl_rl_runner``), trains through the adapter,
and plays the member's checkpoint with rsl_rl's ``runner.load``, as Isaac Lab's play script does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isaaclab_real

pytestmark = pytest.mark.rslrl_compat

pytest.importorskip("rsl_rl")


def test_an_rsl_rl_member_trains_through_isaac_labs_wrapper_and_plays_with_its_load(release, tmp_path):
    proc = isaaclab_real.run_entry(release, "-m", "rsl_rl_member", str(tmp_path), cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE:")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(lines[-1][len("PROBE:") :])
    assert seen["wrapper"] == "isaaclab_rl.rsl_rl.vecenv_wrapper.RslRlVecEnvWrapper" and seen["source_is_ours"]
    # 16 envs x Isaac Lab cartpole's 16 steps per iteration, 14 iterations; every env finished episodes of at most
    # 100 steps, so the member's evidence holds completed episodes (settled), each one counted per env.
    assert (seen["frames_per_iteration"], seen["epoch"], seen["frame"]) == (256, 14, 14 * 256)
    assert seen["episodes"] >= 16
    assert seen["played_fingerprint_equal"] and seen["same_actions"]
