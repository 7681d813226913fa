"""The launcher (async_pbt_isaaclab.launch.cli) and its local backend (.local_backend), with real member processes.

The "training command" is a tiny Python script written into ``tmp_path``; ``plan.json`` beside it
says what each member index does (finish, crash twice, always crash, wait for a signal ...) and the
script leaves evidence files (argv and environment, signals received) in ``tmp_path/out``.

What is shown here:
1. N members start with the population flags, their own session, GPU round-robin and the exported
   member index; a subset (``indices``) starts only those members;
2. a member that crashes twice is restarted with the same command and then finishes; the reason and
   its last log lines are in ``launcher.jsonl``;
3. a member that always crashes is given up after ``max_retries`` while the others finish, and the
   launcher exits non-zero; usage errors and missing commands are given up at once; the retry
   budget is a sliding window (or the whole run with ``retry_window_s=None``);
4. SIGINT / SIGTERM to the launcher reach every member as SIGINT (also when the launcher was started
   with SIGINT ignored), a member that keeps running gets SIGTERM after the grace period (or at once
   on a second Ctrl-C), nothing is restarted, and the launcher exits 128 + signal; a killed launcher
   takes its members down (Linux);
5. progress lines come from the workspace records and survive missing and corrupt records;
6. GPU detection (CUDA_VISIBLE_DEVICES, nvidia-smi -L with MIG) and the command line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from async_pbt_isaaclab.core.state.member_state import MemberState
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.state_files import save_state
from async_pbt_isaaclab.launch.arguments import LaunchError
from async_pbt_isaaclab.launch.cli import add_launch_parser, cmd_launch, main, parse_indices
from async_pbt_isaaclab.launch.gpus import detect_gpus, parse_nvidia_smi_list
from async_pbt_isaaclab.launch.local_backend import launch_population
from async_pbt_isaaclab.launch.progress import describe_exit, progress_lines

MEMBER_SCRIPT = r"""
import json, os, signal, sys, time

argv = sys.argv[1:]
i = int(argv[argv.index("--pbt-index") + 1])
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "plan.json")) as fh:
    plan = json.load(fh)
mode = plan.get(str(i), plan.get("default", "ok"))
out = os.path.join(here, "out")
os.makedirs(out, exist_ok=True)


def put(name, text):
    tmp = os.path.join(out, "." + name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, os.path.join(out, name))


counter = os.path.join(out, "attempts_%d" % i)
n = (int(open(counter).read()) if os.path.exists(counter) else 0) + 1
put("attempts_%d" % i, str(n))
put("info_%d_%d.json" % (i, n), json.dumps({
    "argv": argv, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "index_env": os.environ.get("ASYNC_PBT_MEMBER_INDEX"), "extra": os.environ.get("EXTRA_VAR"),
    "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0)}))
print("member %d attempt %d" % (i, n), flush=True)

if mode == "ok":
    time.sleep(float(plan.get("sleep", 0)))
    sys.exit(0)
if mode == "until_released":  # runs until the test creates out/release (an event, not a duration)
    deadline = time.time() + 300  # a safety net only
    while not os.path.exists(os.path.join(out, "release")) and time.time() < deadline:
        time.sleep(0.02)
    sys.exit(0)
if mode == "crash_twice":
    if n <= 2:
        print("boom %d" % n, file=sys.stderr, flush=True)
        sys.exit(3)
    sys.exit(0)
if mode == "always_crash":
    print("fatal: out of luck", flush=True)
    sys.exit(1)
if mode == "usage":
    sys.exit(2)
if mode in ("wait", "stubborn"):
    def on_int(signum, frame):
        put("sigint_%d" % i, "1")
        if mode == "wait":
            sys.exit(130)

    def on_term(signum, frame):
        put("sigterm_%d" % i, "1")
        sys.exit(143)

    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_term)
    put("ready_%d" % i, str(os.getpid()))  # only after the handlers are in place
    while True:
        time.sleep(0.02)
if mode == "keyboard_interrupt":  # relies on Python's own SIGINT handling, as training scripts do
    put("ready_%d" % i, str(os.getpid()))
    try:
        while True:
            time.sleep(0.02)
    except KeyboardInterrupt:
        put("sigint_%d" % i, "1")
        sys.exit(130)
raise SystemExit("unknown mode " + mode)
"""


def _setup(tmp_path: Path, plan: dict) -> list[str]:
    script = tmp_path / "member.py"
    script.write_text(MEMBER_SCRIPT)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return [sys.executable, str(script)]


def _launch(tmp_path: Path, plan: dict, members: int = 3, **kw):
    command = _setup(tmp_path, plan)
    out = io.StringIO()
    kw.setdefault("gpus", [])
    kw.setdefault("restart_backoff_s", 0.01)
    kw.setdefault("progress_interval_s", 60.0)
    result = launch_population(command, members, tmp_path / "ws", output=out, **kw)
    return result, out.getvalue()


def _journal(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "ws" / "launcher.jsonl").read_text().splitlines()]


def _info(tmp_path: Path, member: int, attempt: int = 1) -> dict:
    return json.loads((tmp_path / "out" / f"info_{member}_{attempt}.json").read_text())


def _attempts(tmp_path: Path, member: int) -> int:
    return int((tmp_path / "out" / f"attempts_{member}").read_text())


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, e.g. under a PID 1 that does not reap, counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


def _wait_for(predicate, timeout: float = 600.0) -> bool:
    """Poll ``predicate`` until it holds: every wait here is for an event the test expects; ``timeout`` only ends a
    hung run, so it is far above anything a loaded machine needs (it costs nothing while the event comes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# ---------------------------------------------------------------------------- 1. start


def test_members_start_with_population_flags_gpu_round_robin_and_own_session(tmp_path):
    result, text = _launch(tmp_path, {"default": "ok"}, members=3, gpus=["0", "1"], extra_env={"EXTRA_VAR": "x"})

    assert result.exit_code == 0 and result.finished == [0, 1, 2] and result.given_up == []
    ws = str((tmp_path / "ws").absolute())
    for i, gpu in zip(range(3), ["0", "1", "0"], strict=True):
        info = _info(tmp_path, i)
        assert info["argv"][-6:] == ["--pbt-workspace", ws, "--pbt-members", "3", "--pbt-index", str(i)]
        assert info["cuda"] == gpu and result.members[i].gpu == gpu
        assert info["index_env"] == str(i) and info["extra"] == "x"
        # Own session and process group: a terminal Ctrl-C reaches only the launcher.
        assert info["sid"] == info["pid"] == info["pgid"]
        log = Path(result.members[i].log_path)
        assert log == tmp_path / "ws" / "logs" / f"member_{i:03d}.log"
        assert f"member {i} attempt 1" in log.read_text()
        assert result.members[i].exit_codes == [0] and result.members[i].restarts == 0
    events = [(e["event"], e["member"]) for e in _journal(tmp_path)]
    for i in range(3):
        assert ("start", i) in events and ("exit", i) in events
    assert events[0] == ("launch", None) and events[-1] == ("done", None)
    assert "000->0, 001->1, 002->0" in text and "members share GPUs" in text


def test_device_placement_passes_cuda_index_and_leaves_the_mask_alone(tmp_path, monkeypatch):
    """Isaac Lab 2.x: --device cuda:<i>, no CUDA_VISIBLE_DEVICES (its renderer indexes the unmasked list)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result, text = _launch(tmp_path, {"default": "ok"}, members=3, gpus=["0", "1"], gpu_placement="device")
    assert result.exit_code == 0 and "by --device cuda:<i>" in text
    for i, index in zip(range(3), [0, 1, 0], strict=True):
        info = _info(tmp_path, i)
        assert info["argv"][-2:] == ["--device", f"cuda:{index}"] and info["cuda"] is None
    # Under a launcher-wide mask, cuda:<i> counts within the visible GPUs.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    result, _ = _launch(tmp_path, {"default": "ok"}, members=2, gpus=["2", "3"], gpu_placement="device")
    assert [_info(tmp_path, i)["argv"][-1] for i in (0, 1)] == ["cuda:0", "cuda:1"]
    with pytest.raises(LaunchError, match="contains --device"):
        launch_population(
            [sys.executable, "x.py", "--device", "cuda:0"],
            2,
            tmp_path / "ws3",
            gpus=["0"],
            gpu_placement="device",
            output=io.StringIO(),
        )
    with pytest.raises(LaunchError, match="gpu placement"):
        launch_population(
            [sys.executable, "x.py"], 2, tmp_path / "ws3", gpus=["0"], gpu_placement="nope", output=io.StringIO()
        )


def test_without_gpus_the_environment_passes_through_and_indices_pick_a_subset(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    result, _ = _launch(tmp_path, {"default": "ok"}, members=4, gpus=[], indices=[1, 3])

    assert sorted(result.members) == [1, 3] and result.exit_code == 0
    assert not (tmp_path / "out" / "attempts_0").exists() and not (tmp_path / "out" / "attempts_2").exists()
    info = _info(tmp_path, 3)
    assert info["cuda"] == "7" and result.members[3].gpu is None
    assert info["argv"][-4:] == ["--pbt-members", "4", "--pbt-index", "3"]


# ---------------------------------------------------------------------------- 2-3. crashes


def test_member_crashing_twice_is_restarted_with_the_same_command_and_reasons_are_logged(tmp_path):
    result, text = _launch(tmp_path, {"1": "crash_twice"}, members=2, max_retries=3)

    assert result.exit_code == 0 and result.finished == [0, 1]
    m = result.members[1]
    assert m.exit_codes == [3, 3, 0] and m.restarts == 2 and m.starts == 3
    assert m.reasons == ["exit code 3", "exit code 3"]
    assert _info(tmp_path, 1, 1)["argv"] == _info(tmp_path, 1, 3)["argv"]  # same command: it resumes itself
    journal = _journal(tmp_path)
    restarts = [e for e in journal if e["event"] == "restart"]
    assert [(e["member"], e["code"], e["attempt"]) for e in restarts] == [(1, 3, 1), (1, 3, 2)]
    assert all("exit code 3" in e["reason"] and "no checkpoint yet" in e["resume"] for e in restarts)
    crashes = [e for e in journal if e["event"] == "exit" and e["member"] == 1 and e["code"] != 0]
    # The log tail holds this attempt's output only.
    assert [e["log_tail"] for e in crashes] == [["member 1 attempt 1", "boom 1"], ["member 1 attempt 2", "boom 2"]]
    assert "member 001 crashed: exit code 3" in text and "    | boom 2" in text
    assert not any(e["event"] == "give_up" for e in journal)


def test_member_that_always_crashes_is_given_up_and_the_others_finish(tmp_path):
    ckpt = "members/000/checkpoints/g0001_f000000065536.pth"
    (tmp_path / "ws" / "members" / "000").mkdir(parents=True)
    save_state(tmp_path / "ws" / "members" / "000" / "state.json", MemberState(member=0, last_checkpoint=ckpt))

    result, text = _launch(tmp_path, {"0": "always_crash", "default": "ok", "sleep": 0.3}, members=3, max_retries=2)

    assert result.exit_code == 1
    assert result.given_up == [0] and result.finished == [1, 2]
    assert _attempts(tmp_path, 0) == 3  # first start + 2 retries
    m = result.members[0]
    assert m.exit_codes == [1, 1, 1] and m.restarts == 2 and "exceed --max-retries 2" in m.reasons[-1]
    journal = _journal(tmp_path)
    assert all(e["resume"] == f"it resumes from its last checkpoint {ckpt}" for e in journal if e["event"] == "restart")
    give_up = [e for e in journal if e["event"] == "give_up"]
    assert len(give_up) == 1 and give_up[0]["member"] == 0 and "exit code 1" in give_up[0]["reason"]
    assert "member 000 GIVEN UP" in text and "fatal: out of luck" in text


def test_usage_error_and_missing_command_are_given_up_at_once(tmp_path):
    result, _ = _launch(tmp_path, {"0": "usage"}, members=2, max_retries=3)
    assert result.exit_code == 1 and result.given_up == [0] and result.finished == [1]
    assert _attempts(tmp_path, 0) == 1 and "usage error" in result.members[0].reasons[-1]

    out = io.StringIO()
    res = launch_population([str(tmp_path / "no-such-program")], 2, tmp_path / "ws2", gpus=[], output=out)
    assert res.exit_code == 1 and res.given_up == [0, 1]
    assert all("cannot start" in res.members[i].reasons[-1] for i in (0, 1))


def test_retry_budget_is_a_sliding_window_or_the_whole_run(tmp_path):
    # Crashes 0.2 s apart (the backoff) fall out of a 0.05 s window: one retry each time is enough.
    windowed, _ = _launch(
        tmp_path, {"0": "crash_twice"}, members=1, max_retries=1, retry_window_s=0.05, restart_backoff_s=0.2
    )
    assert windowed.exit_code == 0 and windowed.members[0].exit_codes == [3, 3, 0]

    (tmp_path / "b").mkdir()
    whole_run, _ = _launch(tmp_path / "b", {"0": "crash_twice"}, members=1, max_retries=1, retry_window_s=None)
    assert whole_run.exit_code == 1 and whole_run.members[0].exit_codes == [3, 3]


def test_member_stopped_from_outside_exits_0_and_is_not_restarted(tmp_path, make_record):
    (tmp_path / "ws" / "members" / "000").mkdir(parents=True)
    fsio.atomic_write_json(
        tmp_path / "ws" / "members" / "000" / "record.json", make_record(0, [1.0], status="stopped").to_dict()
    )
    result, text = _launch(tmp_path, {"default": "ok"}, members=1)
    assert result.exit_code == 0 and result.members[0].starts == 1
    assert "its record says 'stopped'" in text


def test_describe_exit_names_signals():
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-9).startswith("killed by signal SIGKILL (-9)")
    assert "SIGSEGV" in describe_exit(139)


# ---------------------------------------------------------------------------- 4. stopping


def _start_launcher(tmp_path: Path, plan: dict, members: int, *extra: str, preexec=None) -> subprocess.Popen:
    command = _setup(tmp_path, plan)
    args = [
        sys.executable,
        "-m",
        "async_pbt_isaaclab.launch",
        "--members",
        str(members),
        "--workspace",
        str(tmp_path / "ws"),
        "--gpus",
        "none",
        "--progress-interval",
        "60",
        *extra,
        "--",
        *command,
    ]
    return subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec
    )


@pytest.fixture
def leftovers():
    """Pids to SIGKILL at teardown if a failing test left them running (a test must not leak members)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ready_pids(tmp_path: Path, members: int, launcher: subprocess.Popen) -> list[int]:
    ready = [tmp_path / "out" / f"ready_{i}" for i in range(members)]
    ok = _wait_for(lambda: all(p.exists() for p in ready) or launcher.poll() is not None)
    if not ok or launcher.poll() is not None:
        launcher.kill()
        pytest.fail("members did not start:\n" + launcher.communicate()[0])
    return [int(p.read_text()) for p in ready]


@pytest.mark.parametrize(
    "sig, grace, double",
    [(signal.SIGINT, "100000", True), (signal.SIGTERM, "0.5", False)],
    ids=["ctrl-c-twice", "sigterm-grace-expires"],
)
def test_stop_signal_reaches_every_member_and_escalates(tmp_path, sig, grace, double, leftovers):
    # Members 0 and 1 exit on SIGINT; member 2 notes it and keeps running, so it needs SIGTERM.
    launcher = _start_launcher(tmp_path, {"2": "stubborn", "default": "wait"}, 3, "--stop-grace", grace)
    pids = _ready_pids(tmp_path, 3, launcher)
    leftovers.extend(pids)

    os.kill(launcher.pid, sig)  # the launcher only, as a terminal's Ctrl-C would be
    if double:
        assert _wait_for(lambda: (tmp_path / "out" / "sigint_2").exists())
        # Impatient user: SIGTERM now. The grace period is longer than any test: the launcher ending at all shows
        # the second Ctrl-C did not wait for it (no clock is read to show it).
        os.kill(launcher.pid, signal.SIGINT)
    output, _ = launcher.communicate(timeout=600)

    assert launcher.returncode == 128 + sig, output
    out = tmp_path / "out"
    assert all((out / f"sigint_{i}").exists() for i in range(3)), output  # forwarded as SIGINT to all
    assert (out / "sigterm_2").exists() and not (out / "sigterm_0").exists()  # escalation only where needed
    assert all(_attempts(tmp_path, i) == 1 for i in range(3))  # nothing restarted while stopping
    assert not any(_alive(p) for p in pids)
    journal = _journal(tmp_path)
    assert not any(e["event"] in ("restart", "give_up") for e in journal)
    stop = [e for e in journal if e["event"] == "stop"]
    assert stop and stop[0]["signal"] == sig.name and sorted(stop[0]["running"]) == [0, 1, 2]
    sent = [e["signal"] for e in journal if e["event"] == "signal"]
    assert sent[:2] == ["SIGINT", "SIGTERM"]
    assert "sent SIGINT to 3 member(s)" in output


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _block_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT,))


# How a launcher can start with SIGINT kept from it, and the signal that then stops it (it sends SIGINT on to its
# members either way). `launch ... &` from a script starts it with SIGINT ignored; a Ray worker, which runs each
# member's task, blocks SIGINT in its threads (and a signal mask survives exec). Members inheriting either would
# never raise KeyboardInterrupt and would only stop at the SIGTERM after the grace period.
INHERITED_SIGINT = {
    "ignored": (_ignore_sigint, signal.SIGINT),
    "blocked": (_block_sigint, signal.SIGTERM),  # the launcher itself holds SIGINT here
}


@pytest.mark.parametrize("inherited", sorted(INHERITED_SIGINT))
def test_members_see_ctrl_c_whatever_the_launcher_inherited_for_sigint(tmp_path, leftovers, inherited):
    preexec, stop_signal = INHERITED_SIGINT[inherited]
    launcher = _start_launcher(tmp_path, {"default": "keyboard_interrupt"}, 2, "--stop-grace", "20", preexec=preexec)
    leftovers.extend(_ready_pids(tmp_path, 2, launcher))
    os.kill(launcher.pid, stop_signal)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + stop_signal, output
    assert all((tmp_path / "out" / f"sigint_{i}").exists() for i in range(2)), output
    assert "sent SIGTERM" not in output


def test_stop_event_stops_a_launcher_running_off_the_main_thread(tmp_path, leftovers):
    command = _setup(tmp_path, {"default": "keyboard_interrupt"})
    stop = threading.Event()
    box: dict = {}

    def run() -> None:
        box["result"] = launch_population(
            command,
            2,
            tmp_path / "ws",
            gpus=[],
            output=io.StringIO(),
            stop_event=stop,
            stop_grace_s=20,
            progress_interval_s=60,
        )

    thread = threading.Thread(target=run)
    thread.start()
    ready = [tmp_path / "out" / f"ready_{i}" for i in range(2)]
    try:
        assert _wait_for(lambda: all(p.exists() for p in ready))
        leftovers.extend(int(p.read_text()) for p in ready)
    finally:
        stop.set()
        thread.join(timeout=120)
    result = box["result"]
    assert result.exit_code == 130 and result.stopped_by == "SIGINT"
    assert [m.status for m in result.members.values()] == ["stopped", "stopped"]
    assert all((tmp_path / "out" / f"sigint_{i}").exists() for i in range(2))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_members_die_with_a_killed_launcher(tmp_path, leftovers):
    launcher = _start_launcher(tmp_path, {"default": "wait"}, 2)
    pids = _ready_pids(tmp_path, 2, launcher)
    leftovers.extend(pids)
    launcher.kill()  # SIGKILL: no chance to forward anything
    launcher.communicate(timeout=600)
    assert _wait_for(lambda: all((tmp_path / "out" / f"sigterm_{i}").exists() for i in range(2)))
    assert _wait_for(lambda: not any(_alive(p) for p in pids))


# ---------------------------------------------------------------------------- 5. progress


def _write_records(ws: Path, make_record, now: float) -> None:
    rec = make_record(
        0,
        [1.0, 2.0, 3.0],
        now=now,
        generation=2,
        frame=1_500_000,
        heartbeat_age=5.0,
        last_decision="exploit <- 3 (bottom 25%)",
    )
    (ws / "members" / "000").mkdir(parents=True)
    fsio.atomic_write_json(ws / "members" / "000" / "record.json", rec.to_dict())
    from async_pbt_isaaclab.core.workspace.audit import AuditLog

    # Generation 2 came from an exploit of member 3 in the running process and an explore applied by a restart.
    audit = AuditLog.open(ws / "members" / "000" / "audit.jsonl")
    audit.append("exploit_applied", {"donor": 3, "path": "inprocess", "generation": 1, "frame": 1000})
    audit.append("exploit_applied", {"donor": 0, "path": "restart", "generation": 2, "frame": 2000})
    (ws / "members" / "001").mkdir(parents=True)
    (ws / "members" / "001" / "record.json").write_text('{"schema_version": 1, "member": ')  # truncated
    (ws / "members" / "002").mkdir(parents=True)  # started, nothing published yet


def test_progress_lines_read_records_and_survive_missing_and_corrupt_ones(tmp_path, make_record):
    now = time.time()
    ws = tmp_path / "ws"
    _write_records(ws, make_record, now)

    lines = progress_lines(ws, [0, 1, 2, 3], {0: "running pid 12 gpu 1"}, now=now)

    assert len(lines) == 4
    assert lines[0].startswith(
        "member 000 [running pid 12 gpu 1] frames 1.5M | gen 2 (1 exploit, 1 explore; 1 in-process, 1 by restart) "
        "| episode_return 2 (n=3)"
    )
    assert (
        "restarts" not in lines[0].replace("by restart", "")
        and "heartbeat 5s ago" in lines[0]
        and "last: exploit <- 3" in lines[0]
    )
    assert lines[1].startswith("member 001 record unreadable:") and "not valid JSON" in lines[1]
    assert lines[2] == "member 002 no record yet" and lines[3] == "member 003 no record yet"
    assert progress_lines(tmp_path / "missing", [0]) == ["member 000 no record yet"]


def test_launcher_reports_progress_periodically(tmp_path, make_record):
    _write_records(tmp_path / "ws", make_record, time.time())
    reports: list[list[str]] = []

    def on_progress(lines: list[str]) -> None:
        reports.append(lines)
        # The members run until the launcher has reported them running (with member 0's evidence) three times.
        running = [r for r in reports if "[running pid" in r[0] and "episode_return 2 (n=3)" in r[0]]
        if len(running) >= 3:
            (tmp_path / "out" / "release").touch()

    result, _ = _launch(
        tmp_path, {"default": "until_released"}, members=3, progress_interval_s=0.1, on_progress=on_progress
    )

    assert result.exit_code == 0 and len(reports) >= 3
    assert any("[running pid" in r[0] and "episode_return 2 (n=3)" in r[0] for r in reports)
    assert all(len(r) == 3 and "record unreadable" in r[1] for r in reports)
    assert reports[-1][0].startswith("member 000 [finished]")


# ---------------------------------------------------------------------------- 6. GPUs and CLI

NVIDIA_SMI_L = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)
  MIG 3g.20gb     Device  0: (UUID: MIG-1111)
  MIG 3g.20gb     Device  1: (UUID: MIG-2222)
GPU 2: NVIDIA L40S (UUID: GPU-cccc)
"""


def test_gpu_detection(tmp_path):
    assert parse_nvidia_smi_list(NVIDIA_SMI_L) == ["0", "MIG-1111", "MIG-2222", "2"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "2, 3", "PATH": ""}) == ["2", "3"]
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "", "PATH": ""}) == []
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": "-1", "PATH": ""}) == []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    assert detect_gpus({"PATH": str(bin_dir)}) == []  # CPU machine
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + NVIDIA_SMI_L + "EOF\n")
    fake.chmod(0o755)
    assert detect_gpus({"PATH": str(bin_dir)}) == ["0", "MIG-1111", "MIG-2222", "2"]


def test_cli_parser_takes_the_member_command_after_double_dash(tmp_path):
    parser = argparse.ArgumentParser(prog="async-pbt")
    add_launch_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "launch",
            "--members",
            "4",
            "--workspace",
            "W",
            "--gpus",
            "0,1",
            "--max-retries",
            "5",
            "--indices",
            "0-1,3",
            "--env",
            "A=b=c",
            "--",
            "python",
            "train.py",
            "--task",
            "T",
            "--members",
            "9",
        ]
    )
    assert args.func is cmd_launch
    assert args.members == 4 and args.gpus == ["0", "1"] and args.max_retries == 5
    assert args.indices == [0, 1, 3] and args.env == [("A", "b=c")]
    assert args.member_command[-6:] == ["python", "train.py", "--task", "T", "--members", "9"]
    assert parse_indices("2,5-6") == [2, 5, 6]
    assert parser.parse_args(["launch", "-n", "1", "-w", "W", "--gpus", "none", "--", "x"]).gpus == []


def test_cli_refuses_population_flags_in_the_member_command(tmp_path, capsys):
    assert main(["-n", "2", "-w", str(tmp_path / "ws"), "--", "python", "t.py", "--pbt-index", "1"]) == 2
    assert "--pbt-index" in capsys.readouterr().err
    assert main(["-n", "2", "-w", str(tmp_path / "ws"), "--", "python", "t.py", "agent.pbt.policy_idx=1"]) == 2
    assert main(["-n", "2", "-w", str(tmp_path / "ws")]) == 2  # no command
    assert "no member command" in capsys.readouterr().err


def test_module_entry_point_runs_a_population(tmp_path):
    command = _setup(tmp_path, {"default": "ok"})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "async_pbt_isaaclab.launch",
            "-n",
            "2",
            "-w",
            str(tmp_path / "ws"),
            "--gpus",
            "3",
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done (exit code 0): 000 finished, 001 finished" in proc.stdout
    assert _info(tmp_path, 1)["cuda"] == "3"


def test_the_former_module_name_still_runs_the_launcher():
    # SLURM batch scripts written by earlier releases run it; its usage errors name it as they did.
    proc = subprocess.run(
        [sys.executable, "-m", "async_pbt_isaaclab.launch.local", "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("python -m async_pbt_isaaclab.launch.local: error: ")


@pytest.mark.parametrize(
    "kwargs",
    [dict(members=0), dict(members=2, indices=[2]), dict(members=2, indices=[1, 1]), dict(members=2, max_retries=-1)],
)
def test_invalid_arguments_are_refused(tmp_path, kwargs):
    with pytest.raises(LaunchError):
        launch_population(["python"], workspace=tmp_path, gpus=[], output=io.StringIO(), **kwargs)


# ---------------------------------------------------------------------------- 7. processes of slices


def test_slice_processes_start_at_each_first_member_one_gpu_each_with_a_line_per_member(tmp_path):
    """``--pbt-slices 2`` in the command: processes at 0 and 2 (not one per member), process k on GPU k, a
    launcher lock for every hosted member, and one progress line per member."""
    reports: list[list[str]] = []
    second: list[str] = []

    def on_progress(lines: list[str]) -> None:
        reports.append(lines)
        if len(reports) == 1:
            # Members 1 and 2 run as slices of processes 0 and 2: a second launcher (another process) is refused.
            proc = subprocess.run(
                [sys.executable, "-m", "async_pbt_isaaclab.launch", "--members", "4", "--workspace",
                 str(tmp_path / "ws"), "--indices", "1", "--gpus", "none", "--no-doctor", "--", *command],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            second.append(f"{proc.returncode} {proc.stderr}")
            (tmp_path / "out" / "release").touch()

    command = [*_setup(tmp_path, {"default": "until_released"}), "--pbt-slices", "2"]
    out = io.StringIO()
    result = launch_population(
        command, 4, tmp_path / "ws", gpus=["0", "1"], output=out, progress_interval_s=0.1, on_progress=on_progress
    )

    assert result.exit_code == 0 and sorted(result.members) == [0, 2]
    assert [_info(tmp_path, i)["cuda"] for i in (0, 2)] == ["0", "1"]
    assert [result.members[i].gpu for i in (0, 2)] == ["0", "1"]
    assert not (tmp_path / "out" / "attempts_1").exists() and not (tmp_path / "out" / "attempts_3").exists()
    assert second and second[0].startswith("2 "), second
    assert "already being launched: member(s) 1, 2 by a live launcher" in second[0]
    first = reports[0]
    assert [line.split(" [", 1)[0] for line in first] == [f"member {i:03d}" for i in range(4)]
    assert "slice of 000" in first[1] and "slice of 002" in first[3] and "slice of" not in first[0]
    starts = [e for e in _journal(tmp_path) if e["event"] == "start"]
    assert sorted(tuple(e["members"]) for e in starts) == [(0, 1), (2, 3)]


@pytest.mark.parametrize(
    "members, indices, needle",
    [
        (5, None, "--pbt-slices 2 in the member command: members 5 is not a multiple of it"),
        (4, [0, 1], "indices 0 and 1: under --pbt-slices 2 the process started at 0 hosts members 0..1"),
        (5, [0, 4], "indices 4: under --pbt-slices 2 that process would host members 4..5, past the population"),
    ],
)
def test_slice_processes_that_would_share_or_overrun_members_are_refused(tmp_path, members, indices, needle):
    command = [sys.executable, "x.py", "--pbt-slices", "2"]
    with pytest.raises(LaunchError, match=re.escape(needle)):
        launch_population(command, members, tmp_path / "ws", indices=indices, gpus=[], output=io.StringIO())
    assert not (tmp_path / "ws" / "launcher.jsonl").exists()
