"""``--gpus-per-member K``: each member a torchrun of K ranks, on every backend, shown without GPUs.

The local backend's member table (command, environment, GPUs) is what its supervisor starts at every restart; one
population runs for real under torchrun (CPU ranks: no GPU is needed to start them). The SLURM script is printed
by ``--dry-run``; the Ray tasks' argv is what ``_submit_members`` hands to ``task.remote``.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from async_pbt_isaaclab.cli import main
from async_pbt_isaaclab.launch.arguments import LaunchError
from async_pbt_isaaclab.launch.local_backend import _member_table, launch_population
from async_pbt_isaaclab.launch.torchrun import member_gpus, ranks_per_member, torchrun_command

TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def test_each_member_is_a_torchrun_on_its_own_block_of_gpus(tmp_path):
    command = ["python", "scripts/train_pbt.py", "--task", "Ant", "--distributed"]
    table = _member_table(command, 3, [0, 1, 2], tmp_path, tmp_path, ["0", "1", "2", "3"], "mask", {}, ranks=2)
    ws = str(tmp_path)
    for i, gpus in zip(range(3), ["0,1", "2,3", "0,1"], strict=True):
        member = table[i]
        assert member.command == [
            "python", *TORCHRUN, "scripts/train_pbt.py", "--task", "Ant", "--distributed",
            "--pbt-workspace", ws, "--pbt-members", "3", "--pbt-index", str(i),
        ]  # fmt: skip
        assert member.env["CUDA_VISIBLE_DEVICES"] == gpus and member.outcome.gpu == gpus
    # Without GPUs to place (--gpus none, or a SLURM task whose GPUs SLURM set): the mask is left as it is.
    (member,) = _member_table(
        command, 1, [0], tmp_path, tmp_path, [], "mask", {"CUDA_VISIBLE_DEVICES": "5,6"}, 2
    ).values()
    assert member.env["CUDA_VISIBLE_DEVICES"] == "5,6" and member.outcome.gpu is None
    assert member.command[:6] == ["python", *TORCHRUN]
    # Isaac Lab's launcher: torchrun after `isaaclab.sh -p`; `python -m MODULE` keeps torchrun's own -m.
    assert torchrun_command(["./isaaclab.sh", "-p", "train.py"], 4)[:3] == ["./isaaclab.sh", "-p", "-m"]
    assert torchrun_command([sys.executable, "-m", "pkg.member"], 2)[-2:] == ["-m", "pkg.member"]
    assert torchrun_command(["python", "train.py"], 1) == ["python", "train.py"]
    # Isaac Lab's rsl_rl member says it is a group as train_pbt.py's does.
    assert torchrun_command(["python", "scripts/train_pbt_rsl_rl.py", "--distributed"], 2)[1:6] == TORCHRUN


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: ranks_per_member(0.5, "local"), "a fraction of a GPU applies only to --backend ray"),
        (lambda: ranks_per_member(1.5, "ray"), "above one GPU, give a whole number"),
        (lambda: member_gpus(0, 4, ["0", "1"]), "--gpus-per-member 4: only 2 GPUs"),
        (lambda: torchrun_command(["train-member", "--task", "x"], 2), "must start with a Python interpreter"),
        (lambda: torchrun_command(["python", "scripts/train_pbt.py"], 2), "train_pbt.py runs a member of several"),
        (
            lambda: torchrun_command(["isaaclab.sh", "-p", "scripts/train_pbt_rsl_rl.py", "--task", "T"], 2),
            "scripts/train_pbt_rsl_rl.py runs a member of several ranks with --distributed",
        ),
    ],
)
def test_what_torchrun_cannot_run_is_refused(call, needle):
    with pytest.raises(LaunchError, match=needle):
        call()


def test_slices_and_fractions_are_refused_before_anything_starts(tmp_path, capsys):
    with pytest.raises(LaunchError, match="a process of several slice members is one rank"):
        launch_population(
            ["python", "x.py", "--pbt-slices", "2"], 2, tmp_path / "ws", gpus=[], output=io.StringIO(),
            ranks_per_member=2,
        )  # fmt: skip
    ws = tmp_path / "ws2"
    code = main(["launch", "--members", "2", "--workspace", str(ws), "--gpus-per-member", "0.5", "--", "python", "x"])
    assert code == 2 and "a fraction of a GPU applies only to --backend ray" in capsys.readouterr().err
    assert not ws.exists()


MEMBER = """
import json, os, sys
out = os.environ["OUT"]
info = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES")}
index = sys.argv[sys.argv.index("--pbt-index") + 1]
with open(os.path.join(out, f"member{index}_rank{info['RANK']}.json"), "w") as f:
    json.dump(dict(info, argv=sys.argv[1:]), f)
"""


def test_a_local_launch_runs_each_member_as_a_torchrun_group(tmp_path):
    script = tmp_path / "member.py"
    script.write_text(MEMBER)
    out = tmp_path / "out"
    out.mkdir()
    result = launch_population(
        [sys.executable, str(script)], 2, tmp_path / "ws", gpus=["0", "1", "2", "3"], extra_env={"OUT": str(out)},
        output=io.StringIO(), ranks_per_member=2, progress_interval_s=3600,
    )  # fmt: skip
    assert result.exit_code == 0 and result.finished == [0, 1]
    for index, gpus in ((0, "0,1"), (1, "2,3")):
        ranks = [json.loads((out / f"member{index}_rank{r}.json").read_text()) for r in (0, 1)]
        assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"]) for r in ranks] == [("0", "0", "2"), ("1", "1", "2")]
        assert {r["CUDA_VISIBLE_DEVICES"] for r in ranks} == {gpus}
        assert all(r["argv"][-2:] == ["--pbt-index", str(index)] for r in ranks)


def test_slurm_tasks_ask_for_k_gpus_and_run_the_member_under_torchrun(tmp_path, capsys):
    ws = tmp_path / "ws"
    code = main(["launch", "--backend", "slurm", "--dry-run", "--members", "2", "--workspace", str(ws),
                 "--gpus-per-member", "4", "--", "python", "train.py", "--distributed"])  # fmt: skip
    script = capsys.readouterr().out
    assert code == 0 and "#SBATCH --gres=gpu:4" in script.splitlines()
    exec_line = script.splitlines()[-1]
    assert '--indices "$index" --gpus none' in exec_line and "--gpus-per-member 4" in exec_line
    assert exec_line.endswith("-- python train.py --distributed")
    # An explicit --gres wins (a GPU type, say).
    main(["launch", "--backend", "slurm", "--dry-run", "--members", "2", "--workspace", str(ws), "--gres", "gpu:a100:4",
          "--gpus-per-member", "4", "--", "python", "train.py"])  # fmt: skip
    assert "#SBATCH --gres=gpu:a100:4" in capsys.readouterr().out.splitlines()


def test_ray_tasks_ask_for_k_gpus_and_run_the_member_under_torchrun(tmp_path):
    from async_pbt_isaaclab.launch import ray_backend

    calls: list[tuple] = []
    options: dict = {}

    class Task:
        def options(self, **kwargs):
            options.update(kwargs)
            return self

        def remote(self, *args):
            calls.append(args)
            return len(calls)

    ray = SimpleNamespace(remote=lambda fn: Task())
    args = SimpleNamespace(cpus_per_member=1.0, gpus_per_member=2.0, max_retries=0, env=[], members=2, backoff=1.0,
                           stop_grace=1.0)  # fmt: skip
    ray_backend._submit_members(ray, args, ["python", "train.py"], tmp_path, tmp_path, [0, 1], "id")
    assert options["num_gpus"] == 2.0
    for index, call in enumerate(calls):
        assert call[1] == ["python", *TORCHRUN, "train.py", "--pbt-workspace", str(tmp_path), "--pbt-members", "2",
                           "--pbt-index", str(index)]  # fmt: skip
    args.gpus_per_member = 0.5  # a shared GPU: the member is one process
    calls.clear()
    ray_backend._submit_members(ray, args, ["python", "train.py"], Path(tmp_path), tmp_path, [0], "id")
    assert calls[0][1][:2] == ["python", "train.py"]
