"""Ray backend: every member is a Ray task that runs the training command as a child process.

``async-pbt launch --backend ray [--address auto] [--gpus-per-member 0.5] -- COMMAND`` connects to a running
cluster (``ray start --head`` on one node, ``ray start --address HEAD:6379`` on the others; ``--address auto``
or ``HEAD:6379``) or, without ``--address``, starts a local one for the duration of the launch.

* **One task per member**, requesting ``--gpus-per-member`` GPUs (fractions let members share a GPU: 0.5 puts
  two members on each) and ``--cpus-per-member`` CPUs. Ray places it on a node with room and sets
  ``CUDA_VISIBLE_DEVICES`` for it; the member command inherits that.
* **A child process, not the task itself.** A member replaces its own process image with ``os.execv`` when it
  exploits a donor, which a Ray worker must not do; so the task starts the command as a child (own session,
  stdout/stderr appended to ``W/logs/member_NNN.log``), and waits for it. The child gets SIGTERM if the worker
  dies (``PR_SET_PDEATHSIG``), so a lost worker never leaves a member holding its lock.
* **Retries are Ray's.** A member that exits non-zero or is killed raises :class:`MemberCrashed` in the task; a
  worker or node that dies is a system failure. Ray retries both up to ``--max-retries`` times; the retried task
  starts the same command, and the member resumes from its own last checkpoint (``state.json``). Exit code 2 (a
  usage error) is not retried.
* **Status.** Each attempt writes ``W/cluster/ray/member_NNN.json`` (attempt, node, pid, state), which
  ``async-pbt status`` shows next to the member; the driver writes ``W/cluster/ray_driver.json`` so that
  ``async-pbt stop W`` knows which launch to stop.

The driver (this process) prints the progress table like the local launcher. Ctrl-C (or ``async-pbt stop W`` from
any host) writes ``W/cluster/ray_stop.json``: each task sees it within a second and forwards SIGINT to its member,
which saves and stops (SIGTERM after ``--stop-grace``); the next launch resumes every member. A second Ctrl-C
cancels the tasks at once.

``ray`` is imported only when this backend runs (the ``cluster`` extra: ``pip install -e ".[cluster]"``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from async_pbt_isaaclab.core.install_hint import extra_install_command
from async_pbt_isaaclab.core.workspace.fsio import atomic_write_json
from async_pbt_isaaclab.core.workspace.layout import member_dirname
from async_pbt_isaaclab.launch.arguments import LaunchError, check_launch_paths, member_command
from async_pbt_isaaclab.launch.member_process import member_preexec, spawn_member
from async_pbt_isaaclab.launch.progress import describe_exit, progress_lines
from async_pbt_isaaclab.launch.torchrun import ranks_per_member, torchrun_command

STATUS_DIR = "cluster/ray"
"""Per-member attempt files, relative to the workspace."""
DRIVER_FILE = "cluster/ray_driver.json"
"""The running driver (host, pid, address, launch id), relative to the workspace."""
STOP_FILE = "cluster/ray_stop.json"
"""Written to stop a launch: every member task of that launch id stops its member. A file on the shared
workspace reaches the tasks on every node, from any host (``async-pbt stop``), without Ray's task
cancellation, which cannot interrupt a task blocked waiting for its child."""
EXIT_STOPPED = 128 + signal.SIGINT
"""What a member task returns when it stopped its member on request."""
STOP_POLL_S = 1.0
"""How often a member task looks for the stop file."""


class MemberCrashed(RuntimeError):
    """A member process ended with a non-zero status other than a usage error; Ray retries the task."""


def _status_path(workspace: str, index: int) -> Path:
    return Path(workspace) / STATUS_DIR / f"member_{member_dirname(index)}.json"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def run_member(
    index: int,
    argv: Sequence[str],
    env: dict[str, str],
    cwd: str,
    workspace: str,
    log_path: str,
    backoff_s: float,
    stop_grace_s: float,
) -> int:
    """Body of one member's Ray task (runs on a Ray worker): start ``argv``, wait, report how it ended."""
    status_path = _status_path(workspace, index)
    launch_id = env.get("ASYNC_PBT_LAUNCH_ID")
    previous = _read_json(status_path)
    # Attempts count within one launch; a new launch of the same workspace starts again at 1.
    attempt = int(previous.get("attempt", 0)) + 1 if previous.get("launch") == launch_id else 1
    if attempt > 1 and backoff_s > 0:
        time.sleep(min(backoff_s * 2 ** (attempt - 2), 120.0))  # a crash loop must not spin
    if _stop_requested(workspace, launch_id):
        return EXIT_STOPPED  # a retry that came after the stop request
    full_env = dict(os.environ)
    full_env.update(env)
    status: dict[str, Any] = {
        "member": index,
        "attempt": attempt,
        "host": socket.gethostname(),
        "launch": launch_id,
        "started": time.time(),
        "cuda_visible_devices": full_env.get("CUDA_VISIBLE_DEVICES"),
    }
    status_path.parent.mkdir(parents=True, exist_ok=True)
    header = f"\n[async-pbt ray] member {index} attempt {attempt} on {status['host']}\n"
    proc, _ = spawn_member(argv, full_env, Path(log_path), header, member_preexec(True), cwd=cwd, root=Path(workspace))
    atomic_write_json(status_path, {**status, "state": "running", "pid": proc.pid})
    code = _wait_or_stop(proc, status_path, status, workspace, stop_grace_s)
    if code is None:
        return EXIT_STOPPED
    state = "finished" if code == 0 else "usage error" if code == 2 else "crashed"
    atomic_write_json(
        status_path,
        {**status, "state": state, "pid": proc.pid, "code": code, "reason": describe_exit(code), "ended": time.time()},
    )
    if code in (0, 2):
        return code
    raise MemberCrashed(f"member {index} attempt {attempt}: {describe_exit(code)}")


def _stop_requested(workspace: str | Path, launch_id: str | None) -> bool:
    """Whether the stop file asks the member tasks of ``launch_id`` to stop (see :data:`STOP_FILE`)."""
    return _read_json(Path(workspace) / STOP_FILE).get("launch") == launch_id


def _wait_or_stop(
    proc: subprocess.Popen, status_path: Path, status: dict[str, Any], workspace: str, stop_grace_s: float
) -> int | None:
    """Wait for the member's exit code, looking for the stop file every :data:`STOP_POLL_S`; ``None`` when it was
    stopped on request (its status file says so). A task cancelled or shut down stops its member before it goes."""
    try:
        while True:
            try:
                return proc.wait(timeout=STOP_POLL_S)
            except subprocess.TimeoutExpired:
                if _stop_requested(workspace, status["launch"]):
                    code = _stop(proc, stop_grace_s)
                    atomic_write_json(
                        status_path,
                        {
                            **status,
                            "state": "stopped",
                            "pid": proc.pid,
                            "code": code,
                            "reason": "stopped on request",
                            "ended": time.time(),
                        },
                    )
                    return None
    except BaseException:  # ray.cancel(force=True) or the worker shutting down: do not leave the member behind
        code = _stop(proc, stop_grace_s)
        atomic_write_json(status_path, {**status, "state": "stopped", "pid": proc.pid, "code": code})
        raise
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a wrapper script would hold the member lock
        except (ProcessLookupError, PermissionError):
            pass


def _stop(proc: subprocess.Popen, grace_s: float) -> int:
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def member_states(workspace: Path) -> dict[int, str] | None:
    """Member index -> Ray attempt text; ``None`` when this workspace was never launched on Ray."""
    folder = Path(workspace) / STATUS_DIR
    if not folder.is_dir():
        return None
    out: dict[int, str] = {}
    for path in sorted(folder.glob("member_*.json")):
        data = _read_json(path)
        try:
            index = int(data["member"])
        except (KeyError, TypeError, ValueError):
            continue
        text = f"ray {data.get('state', '?')}, attempt {data.get('attempt', '?')} on {data.get('host', '?')}"
        if data.get("state") == "running":
            text += f" (pid {data.get('pid')})"
        elif data.get("reason") and data.get("state") != "finished":
            text += f" ({data['reason']})"
        out[index] = text
    return out


RAY_START_TRIES = 3
"""How often :func:`start_ray` starts a local Ray that timed out while starting."""


def start_ray(ray: Any, init: dict[str, Any]) -> None:
    """``ray.init(**init)``. Ray gives a local node a fixed 30 s to register its raylet, which a loaded machine can
    exceed: a start that timed out is shut down and made again, up to :data:`RAY_START_TRIES` times in all."""
    for attempt in range(1, RAY_START_TRIES + 1):
        try:
            ray.init(**init)
            return
        except Exception as exc:  # Ray raises a plain Exception when its node times out starting; others re-raised
            if "timed out during startup" not in str(exc) or attempt == RAY_START_TRIES:
                raise
            print(f"[launch ray] Ray timed out while starting ({exc}); starting it again", flush=True)
            ray.shutdown()


def launch_ray(args, command: list[str], workspace: Path, indices: list[int]) -> int:
    """``async-pbt launch --backend ray``: run the members as Ray tasks until each ends; returns the exit code."""
    try:
        import ray
    except ImportError:
        raise LaunchError(f"the Ray backend needs ray: {extra_install_command('cluster')}") from None
    logs = Path(args.log_dir).absolute() if args.log_dir else workspace / "logs"
    # Before anything is written: no status file, stop file or member log through a link planted in the workspace.
    logs_of = [logs / f"member_{member_dirname(i)}.log" for i in indices]
    check_launch_paths(workspace, [workspace / STATUS_DIR, workspace / STOP_FILE, workspace / DRIVER_FILE, *logs_of])
    launch_id = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
    init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if args.address:
        init["address"] = args.address
    start_ray(ray, init)
    try:
        check_gpus(ray.cluster_resources().get("GPU", 0.0), args.gpus_per_member, args.address)
    except LaunchError:
        ray.shutdown()
        raise
    (workspace / STATUS_DIR).mkdir(parents=True, exist_ok=True)
    try:
        (workspace / STOP_FILE).unlink()  # a stop request of an earlier launch
    except FileNotFoundError:
        pass
    logs.mkdir(parents=True, exist_ok=True)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        _write_driver_file(workspace, args, launch_id)
        refs = _submit_members(ray, args, command, workspace, logs, indices, launch_id)
        print(
            f"[launch ray] {len(refs)} of {args.members} members as Ray tasks "
            f"({args.gpus_per_member:g} GPU, {args.cpus_per_member:g} CPU each, up to {args.max_retries} "
            f"retries); cluster {args.address or 'local'}; logs {logs}/member_NNN.log",
            flush=True,
        )
        return _DriverWait(ray, refs, workspace, launch_id, args.stop_grace).run(args.progress_interval)
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        ray.shutdown()
        try:
            (workspace / DRIVER_FILE).unlink()
        except OSError:
            pass


def _write_driver_file(workspace: Path, args, launch_id: str) -> None:
    """The running driver, for ``async-pbt stop`` (see :data:`DRIVER_FILE`)."""
    atomic_write_json(
        workspace / DRIVER_FILE,
        {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "address": args.address or "local",
            "launch": launch_id,
            "started": time.time(),
            "members": args.members,
        },
    )


def _submit_members(
    ray, args, command: list[str], workspace: Path, logs: Path, indices: list[int], launch_id: str
) -> dict[Any, int]:
    """One :func:`run_member` task per member, with the resources and retries asked for; task ref -> member."""
    task = ray.remote(run_member).options(
        num_cpus=args.cpus_per_member,
        num_gpus=args.gpus_per_member,
        max_retries=args.max_retries,
        retry_exceptions=[MemberCrashed],
        name="async-pbt-member",
    )
    refs: dict[Any, int] = {}
    ranks = ranks_per_member(args.gpus_per_member, "ray")
    for i in indices:
        env = {**dict(args.env), "ASYNC_PBT_MEMBER_INDEX": str(i), "ASYNC_PBT_LAUNCH_ID": launch_id}
        # A member of K >= 2 GPUs: a torchrun of K ranks on the GPUs Ray gives the task.
        argv = torchrun_command(member_command(command, str(workspace), args.members, i), ranks)
        log_path = str(logs / f"member_{member_dirname(i)}.log")
        ref = task.remote(i, argv, env, os.getcwd(), str(workspace), log_path, args.backoff, args.stop_grace)
        refs[ref] = i
    return refs


def check_gpus(cluster_gpus: float, gpus_per_member: float, address: str | None) -> None:
    """A member task asking for more GPUs than the cluster has would wait for ever: refused on the Ray instance
    this launch starts; on a cluster joined with ``--address`` (which may add GPU nodes later) a warning."""
    if gpus_per_member <= cluster_gpus:
        return
    what = f"--gpus-per-member {gpus_per_member:g}: the Ray cluster ({address or 'local'}) has {cluster_gpus:g} GPUs"
    if address is None:
        raise LaunchError(f"{what}, so no member could start (use --gpus-per-member 0 on a machine without GPUs)")
    print(f"[launch ray] warning: {what}; members wait until it has enough", file=sys.stderr, flush=True)


def _cancel_unstarted(ray, pending: list[Any], refs: dict[Any, int], workspace: Path, launch_id: str) -> set[int]:
    """Cancel the member tasks of this launch still waiting for resources (a task that never started never reads
    the stop file, and would wait for ever where the GPUs it asks for do not exist); their indices."""
    cancelled = set()
    for ref in pending:
        if _read_json(_status_path(str(workspace), refs[ref])).get("launch") != launch_id:
            cancelled.add(refs[ref])
            ray.cancel(ref)
    return cancelled


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class _DriverWait:
    """The driver's wait for its member tasks: reports each member as it ends and the progress table while none
    does; Ctrl-C (or ``async-pbt stop``) asks the members to save and stop, a second Ctrl-C cancels the tasks."""

    def __init__(self, ray, refs: dict[Any, int], workspace: Path, launch_id: str, stop_grace_s: float):
        self.ray = ray
        self.refs = refs
        self.workspace = workspace
        self.launch_id = launch_id
        self.stop_grace_s = stop_grace_s
        self.given_up: list[int] = []
        self.never_started: set[int] = set()
        self.stopped = False

    def run(self, interval: float) -> int:
        """Wait until every task has ended; the launcher's exit code."""
        pending = list(self.refs)
        while pending:
            try:
                done, pending = self.ray.wait(pending, num_returns=1, timeout=interval)
            except KeyboardInterrupt:
                if self.stopped:  # a second Ctrl-C: do not wait for the members to save
                    print("[launch ray] second interrupt: cancelling the member tasks now", flush=True)
                    for ref in pending:
                        self.ray.cancel(ref, force=True)
                    return 128 + signal.SIGINT
                self._stop(pending)
                continue
            if not self.stopped and _stop_requested(self.workspace, self.launch_id):  # `async-pbt stop`
                self.stopped = True
                self.never_started |= _cancel_unstarted(self.ray, pending, self.refs, self.workspace, self.launch_id)
            for ref in done:
                self._ended(ref)
            if not done and not self.stopped:
                states = member_states(self.workspace) or {}
                lines = progress_lines(self.workspace, sorted(self.refs.values()), states)
                print("[launch ray] progress:\n" + "\n".join("  " + line for line in lines), flush=True)
        if self.given_up:
            return 1
        return 128 + signal.SIGINT if self.stopped else 0

    def _stop(self, pending: list[Any]) -> None:
        """The first Ctrl-C: every member task of this launch stops its member; the unstarted ones are cancelled."""
        self.stopped = True
        request_stop(self.workspace, self.launch_id)
        self.never_started |= _cancel_unstarted(self.ray, pending, self.refs, self.workspace, self.launch_id)
        print(
            f"[launch ray] stopping: each member saves and stops (up to {self.stop_grace_s:g} s); "
            f"Ctrl-C again to cancel the tasks now",
            flush=True,
        )

    def _ended(self, ref: Any) -> None:
        """Report how the task ``ref`` ended: finished, stopped, or given up (Ray's retries used up, a usage error)."""
        i = self.refs[ref]
        try:
            code = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - retries used up: a RayTaskError or a lost worker
            if i in self.never_started:
                print(f"[launch ray] member {i:03d} cancelled before it started (stopped)", flush=True)
                return
            self.given_up.append(i)
            print(f"[launch ray] member {i:03d} GIVEN UP after Ray's retries: {str(exc).splitlines()[-1]}", flush=True)
            return
        if code == 0:
            print(f"[launch ray] member {i:03d} finished", flush=True)
        elif code == EXIT_STOPPED:
            self.stopped = True
            print(f"[launch ray] member {i:03d} stopped (resumes at the next launch)", flush=True)
        else:
            self.given_up.append(i)
            print(
                f"[launch ray] member {i:03d} GIVEN UP: exit code {code} (a usage error, not retried); see its log",
                flush=True,
            )


def request_stop(workspace: Path, launch_id: str) -> None:
    """Ask every member task of ``launch_id`` to stop its member (see :data:`STOP_FILE`)."""
    atomic_write_json(
        Path(workspace) / STOP_FILE, {"launch": launch_id, "time": time.time(), "host": socket.gethostname()}
    )


def stop_driver(workspace: Path) -> str | None:
    """Ask the running Ray launch of ``workspace`` to stop (from any host); a message, or ``None`` when none runs."""
    data = _read_json(Path(workspace) / DRIVER_FILE)
    if not data or not data.get("launch"):
        return None
    request_stop(workspace, str(data["launch"]))
    return (
        f"asked the Ray launch {data['launch']} (driver pid {data.get('pid')} on {data.get('host')}) to stop: "
        f"each member saves and stops, then the driver exits"
    )
