"""Starting a training process as a population member: claim, resume, warm start or apply an exploit.

:func:`start_member` runs before rl_games builds the agent. It decides *which checkpoint this process
starts from* and *which hyperparameters it trains with*, in this order:

1. ``state.pending_exploit`` (we were just restarted by an exploit): the recipient checkpoint written
   before the restart, after checking its sha256;
2. ``state.last_checkpoint`` (we crashed or were stopped and started again): resume;
3. ``--checkpoint`` given by the user on a member that never ran: warm start (a raw rl_games checkpoint
   is accepted, with a warning listing what it cannot carry);
4. otherwise a fresh start.

The hyperparameters are the member's own (``state.hyperparameters``) once it has run: they override
the yaml and command line, because after an exploit they *are* this member's configuration.
"""

from __future__ import annotations

import copy
import os
import socket
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from async_pbt_isaaclab.core.agent_config import current_hyperparameters, set_path
from async_pbt_isaaclab.core.config import PopulationConfig, objective_term
from async_pbt_isaaclab.core.decision.exploit_plan import LEARNING_RATE
from async_pbt_isaaclab.core.decision.mutation import agent_path, isaaclab_key
from async_pbt_isaaclab.core.decision.start import command_line_keys
from async_pbt_isaaclab.core.state.evidence import ConditionLabel
from async_pbt_isaaclab.core.state.member_rng import MemberRng
from async_pbt_isaaclab.core.state.member_state import AuditHead, FinishedMark, MemberState
from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import AuditLog, genesis_hash
from async_pbt_isaaclab.core.workspace.layout import Workspace, WorkspaceError, checkpoint_name, save_agent_config
from async_pbt_isaaclab.core.workspace.member_lock import MemberLock
from async_pbt_isaaclab.core.workspace.state_files import load_state, save_state
from async_pbt_isaaclab.member.recovery import clear_leftovers, recover_after_crash
from async_pbt_isaaclab.member.restart import capture_argv
from async_pbt_isaaclab.member.wandb_run import assign_wandb_run_id

RAW_CHECKPOINT_GAPS = (
    "hyperparameters the donor trained with (entropy_coef, grad_norm, kl_threshold, ... are taken from this "
    "member's yaml instead)",
    "the mutation RNG state (a fresh stream from the population seed and policy_idx is used)",
    "lineage (the checkpoint's history is unknown; lineage starts here)",
    "the adaptive learning rate reached (agent.last_lr restarts from learning_rate)",
)
"""What a plain rl_games checkpoint cannot tell a member that warm-starts from it."""


@dataclass
class MemberSession:
    """A claimed member: its workspace, lock, state and audit log, for the life of the process."""

    cfg: PopulationConfig
    """The population config."""
    ws: Workspace
    """The shared workspace."""
    lock: MemberLock
    """Held until the process exits or restarts."""
    state: MemberState
    """Persistent private state (saved with :meth:`save`)."""
    audit: AuditLog
    """This member's audit log."""
    condition: ConditionLabel
    """Base condition label (task, objective, reward config); the env may add the curriculum stage."""
    argv: list[str]
    """Command line captured at the first start of this process image."""
    start_checkpoint: Path | None = None
    """Checkpoint this process starts from (``None``: fresh weights)."""
    start_sha256: str | None = None
    """Checksum the start checkpoint must still have when it is loaded (``None`` for a warm start)."""
    start_mode: str = "fresh"
    """``fresh``, ``resume``, ``exploit_applied`` or ``warm_start``."""
    typed_rate: bool = False
    """The learning rate was set on the command line: a warm start trains with it, not the checkpoint's saved rate."""
    notes: list[str] = field(default_factory=list)
    """Messages for the user about the start (printed once)."""
    already_finished: str = ""
    """Non-empty when the member had reached its training limit and the limit did not grow: the reason.
    The entry point then exits at once (rl_games would train at least one more epoch)."""

    @property
    def member(self) -> int:
        return self.cfg.policy_idx

    @property
    def dir(self) -> Path:
        return self.ws.member_dir(self.member)

    def new_checkpoint_path(self, generation: int, frame: int) -> Path:
        """Where this member's checkpoint of ``generation`` at ``frame`` goes. Checked at every save: a checkpoints/
        replaced by a link while training would put our files elsewhere."""
        return self.ws.checked_member_dir(self.member, "checkpoints") / checkpoint_name(generation, frame)

    def save(self, snapshot: MemberState | None = None) -> None:
        """Write ``state.json``, with the audit log's head: saved after every append that matters, so cutting
        entries from the end of the log is detected (``async-pbt audit``).

        ``snapshot``: a copy of the state taken earlier on the training thread (:meth:`snapshot`), written by the
        background writer; it gets the audit head of now, when every entry up to it is on disk."""
        state = self.state if snapshot is None else snapshot
        seq, digest = self.audit.head()
        if seq >= 0:
            state.anchor(AuditHead(seq, digest))
        save_state(self.dir / "state.json", state)

    def snapshot(self) -> MemberState:
        """A deep copy of the state now: what a publish handed to the background writer saves, whatever the
        training thread changes in the meantime."""
        return copy.deepcopy(self.state)

    def log(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Append an audit entry and save ``state.json`` with it as the head, so the newest entry is anchored
        too (for entries no other save follows: warnings, aborted exploits, the final ``stop``)."""
        entry = self.audit.append(kind, body)
        self.save()
        return entry

    def close(self) -> None:
        self.lock.release()


def _verified(path: Path, sha256: str) -> bool:
    try:
        return fsio.sha256_file(path) == sha256
    except FileNotFoundError:
        return False


def start_member(
    agent_cfg: dict[str, Any],
    cfg: PopulationConfig,
    *,
    train_dir: str,
    task: str,
    checkpoint: str | None = None,
    reward_config: str = "",
    lock_wait_s: float = 15.0,
    start_info: dict[str, Any] | None = None,
    override_name: Callable[[str], str] = isaaclab_key,
    flag_name: Callable[[str], str | None] | None = None,
) -> tuple[MemberSession, dict[str, Any]]:
    """Claim member ``cfg.policy_idx`` in the workspace and prepare its start.

    ``start_info`` is added to the ``start`` audit entry (a process hosting several members names them there).
    ``override_name(key)``: the trainer's command-line override of a searched key (rl_games':
    ``agent.params.config.<key>``), how a value typed on the command line is found and kept out of the diverse start;
    ``flag_name(key)``: its flag, where the trainer's own parser takes one (mjlab's; see ``command_line_keys``).

    Returns the session and the agent config to build rl_games with (hyperparameters, experiment name
    and train dir set). ``agent_cfg`` is not modified.
    """
    argv = capture_argv()
    typed = command_line_keys(argv[1:], {*cfg.mutation, LEARNING_RATE}, override_name, flag_name)  # set on purpose
    ws = Workspace(cfg.workspace_path(train_dir))
    term = objective_term(cfg.objective)
    meta = ws.ensure(cfg.num_policies, term, task, cfg.seed)
    # Before the lock file is opened: a planted link must not make this member write or delete outside.
    ws.check_member(cfg.policy_idx)
    lock = MemberLock(ws.member_dir(cfg.policy_idx) / "lock")
    lock.acquire(cfg.policy_idx, wait_s=lock_wait_s)
    try:
        session, built = _prepare(
            agent_cfg, cfg, ws, lock, argv=argv, train_dir=train_dir, checkpoint=checkpoint, start_info=start_info,
            condition=ConditionLabel(task=task, objective=term, reward_config=reward_config),
            seed=ws.population_seed(meta), pinned=tuple(key for key in typed if key in cfg.mutation),
        )  # fmt: skip
        session.typed_rate = LEARNING_RATE in typed
        save_agent_config(session.dir, built)  # what `async-pbt evaluate` rebuilds the member's policy from
        return session, built
    except BaseException:
        lock.release()
        raise


def _prepare(
    agent_cfg: dict[str, Any], cfg: PopulationConfig, ws: Workspace, lock: MemberLock, *, argv: list[str],
    train_dir: str, checkpoint: str | None, condition: ConditionLabel, seed: int | None, pinned: tuple[str, ...],
    start_info: dict[str, Any] | None,
) -> tuple[MemberSession, dict[str, Any]]:  # fmt: skip
    mdir = ws.member_dir(cfg.policy_idx)
    clear_leftovers(ws, cfg)
    agent_cfg = copy.deepcopy(agent_cfg)
    state = load_state(mdir / "state.json")
    fresh_member = state is None
    # Before anything here is written: rl_games' own files must not be written through a planted link either.
    check_train_dir(
        ws, Path(train_dir).absolute() / (_experiment_name(agent_cfg, cfg) if state is None else state.experiment_name)
    )
    population = ws.population_id(ws.population_meta())
    audit = AuditLog.open(mdir / "audit.jsonl", genesis=genesis_hash(population, cfg.policy_idx))
    state = _member_state(state, agent_cfg, cfg, audit, seed, pinned)
    state.joined(population)
    session = MemberSession(cfg=cfg, ws=ws, lock=lock, state=state, audit=audit, condition=condition, argv=argv)
    _choose_start_checkpoint(session, checkpoint, fresh_member)
    if state.finished and not state.pending_exploit:
        session.already_finished = _finished_reason(state.finished, agent_cfg["params"]["config"])
    # The agent is built with the member's own values; the live setters apply them again once it is restored
    # (member/executor.py), so every path ends with the recorded values on the running agent.
    for key, value in state.hyperparameters.items():
        if key in cfg.mutation:
            set_path(agent_cfg, agent_path(key), value)
    rl_cfg = agent_cfg["params"]["config"]
    rl_cfg["full_experiment_name"] = state.experiment_name
    rl_cfg["train_dir"] = train_dir
    # One W&B run per member for good, as one log dir: the id is given once and kept in state.json.
    assign_wandb_run_id(state, ws.root, fresh_member)
    audit.append(
        "start",
        {
            "mode": session.start_mode,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_starts": state.process_starts,
            "generation": state.generation,
            "checkpoint": None if session.start_checkpoint is None else str(session.start_checkpoint),
            "argv": argv,
            "hyperparameters": state.hyperparameters,
            "rng_state": state.rng_state,
            # Restarts must not grow the environment (Isaac Lab's python.sh re-sources paths on every start).
            "environ_size": sum(len(k) + len(v) for k, v in os.environ.items()),
            **(start_info or {}),
        },
    )
    session.save()
    return session, agent_cfg


def check_train_dir(ws: Workspace, experiment_dir: Path) -> None:
    """When rl_games' log folder (``train_dir/experiment``) lies in the workspace, refuse a link planted there:
    rl_games writes its checkpoints (``nn/``) and TensorBoard files (``summaries/``) following links."""
    if not experiment_dir.is_relative_to(ws.root):
        return
    try:
        for sub in ("nn", "summaries"):
            folder = experiment_dir / sub
            fsio.check_no_links(ws.root, folder)
            for entry in os.scandir(folder) if folder.is_dir() else ():
                st = entry.stat(follow_symlinks=False)
                if entry.is_symlink() or (entry.is_file(follow_symlinks=False) and st.st_nlink > 1):
                    raise fsio.UnsafePathError(entry.path, "it is a symbolic or hard link")
    except fsio.UnsafePathError as exc:
        raise WorkspaceError(str(exc)) from None


def _member_state(
    state: MemberState | None, agent_cfg: dict[str, Any], cfg: PopulationConfig, audit: AuditLog,
    population_seed: int | None = None, pinned: tuple[str, ...] = (),
) -> MemberState:  # fmt: skip
    """The saved state (repaired after a crash), or a new member's, whose RNG and yaml values start here: its
    stream from (population seed, index), then its diverse start (or ``initial_mutation``); ``pinned``: the searched
    keys the command line sets."""
    mdir = audit.path.parent
    if state is None:
        state = MemberState(
            member=cfg.policy_idx,
            rng_state=_first_rng(cfg, population_seed).get_state(),
            hyperparameters=current_hyperparameters(agent_cfg, cfg),
            experiment_name=_experiment_name(agent_cfg, cfg),
        )
        state.process_started({})
        logged = _logged_first_draw(audit) if audit.last_seq >= 0 else None
        if logged is not None:
            # A first start killed before it saved state.json: keep what it drew (drawing again from the same
            # stream would log the same values twice and break the RNG stream the verifier follows).
            state.drew(logged["new_hyperparameters"], logged["rng_after"])
        elif cfg.initial_mutation and cfg.mutation:
            _initial_mutation(state, cfg, audit)
        elif cfg.start_spread > 0 and cfg.mutation:
            _initial_draw(state, cfg, audit, population_seed, pinned)
        return state
    # Keys added to pbt.mutation since the member last ran start from the yaml's value.
    state.process_started(current_hyperparameters(agent_cfg, cfg))
    recover_after_crash(state, mdir)
    return state


def _experiment_name(agent_cfg: dict[str, Any], cfg: PopulationConfig) -> str:
    """A new member's rl_games experiment (its log folder under train_dir), kept in its state from then on."""
    rl_cfg = agent_cfg["params"]["config"]
    return rl_cfg.get("full_experiment_name") or f"{rl_cfg.get('name', 'member')}_pbt_{cfg.policy_idx:03d}"


def _choose_start_checkpoint(session: MemberSession, checkpoint: str | None, fresh_member: bool) -> None:
    """Which checkpoint this process starts from: a pending exploit's, our own last one, or ``--checkpoint``."""
    state = session.state
    if state.pending_exploit:
        _apply_pending(session)
    elif state.last_checkpoint:
        _resume_from_last(session)
    elif checkpoint:
        session.start_checkpoint, session.start_mode = Path(checkpoint).absolute(), "warm_start"
    if not fresh_member and checkpoint and session.start_mode in ("resume", "exploit_applied"):
        if Path(checkpoint).absolute() != session.start_checkpoint:
            session.notes.append(
                f"--checkpoint {checkpoint} ignored: member {session.member} already has its own "
                f"state in {session.dir}; it {session.start_mode.replace('_', 's ')} from "
                f"{session.start_checkpoint}"
            )


def _apply_pending(session: MemberSession) -> None:
    """Restarted by an exploit (or killed in the middle of one): start from its verified recipient checkpoint. The
    exploit stays pending until the trainer has loaded it: the member loop then logs ``exploit_applied`` (path
    ``restart``) and clears it (``member/executor.py``), so a kill before that applies it again at the next start."""
    state, audit = session.state, session.audit
    pending = state.pending_exploit
    assert pending is not None
    path = session.ws.checkpoint_path(pending.checkpoint)
    if _verified(path, pending.sha256):
        session.start_checkpoint, session.start_mode = path, "exploit_applied"
        session.start_sha256 = pending.sha256
        return
    # The recipient checkpoint is damaged or gone: carry on from our own last weights rather than die.
    audit.append(
        "exploit_aborted",
        {
            "reason": f"recipient checkpoint {path} missing or sha256 mismatch "
            f"after restart; resuming from {state.last_checkpoint or 'fresh weights'}",
            "pending": pending.to_dict(),
        },
    )
    session.notes.append(f"exploit checkpoint {path} failed verification; resumed from own last checkpoint")
    state.exploit_done()
    _resume_from_last(session)


def finished_before(agent_cfg: dict[str, Any], cfg: PopulationConfig, train_dir: str) -> str:
    """Why the member must not train again (its state says it finished), read without claiming it: what a rank of
    a member's group other than 0 checks, since rank 0 then ends without joining the group ("" otherwise)."""
    state = load_state(Workspace(cfg.workspace_path(train_dir)).member_dir(cfg.policy_idx) / "state.json")
    if state is None or not state.finished or state.pending_exploit:
        return ""
    return _finished_reason(state.finished, agent_cfg["params"]["config"])


def _finished_reason(finished: FinishedMark, rl_cfg: dict[str, Any]) -> str:
    """Why a member that finished before must not train again ("" when its limit grew since)."""
    return finished.still_reached(int(rl_cfg.get("max_epochs", -1) or -1), int(rl_cfg.get("max_frames", -1) or -1))


def _first_rng(cfg: PopulationConfig, population_seed: int | None) -> MemberRng:
    """A new member's stream: ``mutation_seed`` when set, else from (population seed, index); in a workspace
    written before population seeds (and without ``pbt.seed``), from the index alone, as then."""
    if cfg.mutation_seed >= 0:
        return MemberRng(cfg.mutation_seed)
    seed = population_seed if population_seed is not None else (cfg.seed if cfg.seed >= 0 else None)
    if seed is None:
        return MemberRng(cfg.resolved_mutation_seed())
    return MemberRng.for_member(seed, cfg.policy_idx)


def _logged_first_draw(audit: AuditLog) -> dict[str, Any] | None:
    """The ``initial_draw``/``initial_mutation`` entry a killed first start logged (``None`` without one)."""
    from async_pbt_isaaclab.core.workspace.audit import read_entries

    found = None
    try:
        for _, entry, _ in read_entries(audit.path):
            if entry is not None and entry.get("kind") in ("initial_draw", "initial_mutation"):
                found = entry
    except OSError:
        return None
    if found is None or not isinstance(found.get("new_hyperparameters"), dict) or "rng_after" not in found:
        return None
    return found


def _initial_draw(
    state: MemberState, cfg: PopulationConfig, audit: AuditLog, population_seed: int | None, pinned: tuple[str, ...]
) -> None:
    """The diverse start: draw the searched hyperparameters within their bounds at the member's first start
    (member 0 keeps the yaml's), stratified across the population by its seed (none in a workspace written
    before seeds were recorded); logged as an ``initial_draw`` entry and replayed by the verifier. A value set on
    the command line (``pinned``) is kept, and said so (``core.start.kept_from_start``)."""
    from async_pbt_isaaclab.core.decision.start import initial_draw, kept_from_start

    for key in sorted(cfg.mutation):
        why = kept_from_start(key, cfg.mutation[key], pinned)
        if why is not None:
            print(
                f"[async-pbt] member {cfg.policy_idx}: {key}={state.hyperparameters.get(key)!r} kept out of the "
                f"diverse start: {why}",
                file=sys.stderr,
                flush=True,
            )
    step = initial_draw(cfg.policy_idx, state.hyperparameters, cfg, state.rng_state, population_seed, pinned)
    audit.append("initial_draw", step.audit_body(cfg.policy_idx, cfg))
    state.drew(step.new_hyperparameters, step.rng_after)


def _initial_mutation(state: MemberState, cfg: PopulationConfig, audit: AuditLog) -> None:
    """``initial_mutation``: perturb the yaml's hyperparameters once at the member's first start (logged and
    replayable, like every draw from the member's RNG)."""
    from async_pbt_isaaclab.core.decision.step import initial_step

    step = initial_step(cfg.policy_idx, state.hyperparameters, cfg, state.rng_state)
    audit.append("initial_mutation", step.audit_body(cfg.policy_idx, cfg))
    state.drew(step.new_hyperparameters, step.rng_after)


def _resume_from_last(session: MemberSession) -> None:
    """Start from the member's newest checkpoint whose checksum is known good (else fresh, with a note)."""
    state, ws = session.state, session.ws
    if state.last_checkpoint:
        path = ws.checkpoint_path(state.last_checkpoint)
        if _verified(path, state.last_checkpoint_sha256):
            session.start_checkpoint, session.start_mode = path, "resume"
            session.start_sha256 = state.last_checkpoint_sha256
            return
        session.notes.append(
            f"last checkpoint {path} missing or corrupt (sha256 mismatch); trying the best checkpoints"
        )
    for entry in state.best:
        path = ws.checkpoint_path(entry.checkpoint)
        if entry.sha256 and _verified(path, entry.sha256):
            session.start_checkpoint, session.start_mode = path, "resume"
            session.start_sha256 = entry.sha256
            session.notes.append(f"resumed from best checkpoint {path}")
            return
    if state.last_checkpoint:
        warnings.warn(
            f"member {session.member}: no verifiable checkpoint to resume from; starting from fresh "
            f"weights at frame 0, with its generation, RNG and lineage kept",
            stacklevel=2,
        )


def print_notes(session: MemberSession) -> None:
    for note in session.notes:
        print(f"[async-pbt] member {session.member}: {note}", file=sys.stderr, flush=True)


def say_where_it_resumes(session: MemberSession) -> None:
    """After a stop (which writes no checkpoint): where the next start of this member resumes from, and what that
    costs; every trainer's member says it alike."""
    from async_pbt_isaaclab.core.workspace.resume import describe_resume

    print(f"[async-pbt] {describe_resume(session.ws.root, session.member)}", flush=True)
