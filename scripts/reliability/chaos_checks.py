"""The checks of a chaos run (``chaos.py``): what must hold after members were SIGKILLed in every window.

Reads only the workspace, the launcher's journal and the reader's counts, so it can be re-run on a kept
workspace. Every failed check is one line in ``failures``; :func:`report` prints the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from chaos_death import check_deaths
from chaos_exploit_checks import verify_exploits

from async_pbt_isaaclab.core.workspace import fsio
from async_pbt_isaaclab.core.workspace.audit import read_entries
from async_pbt_isaaclab.core.workspace.audit_verify import verify_log
from async_pbt_isaaclab.core.workspace.layout import Workspace
from async_pbt_isaaclab.core.workspace.pause_points import MARKER_PREFIX
from async_pbt_isaaclab.core.workspace.state_files import load_state

FRAMES_PER_EPOCH = 8 * 64
"""num_envs x horizon_length of the member command in chaos.py."""

STOPPED_BY_CTRL_C = 130
"""The launcher's exit code after the Ctrl-C that ends the chaos phase (128 + SIGINT)."""


def _entries(path: Path) -> list[dict[str, Any]]:
    return [e for _, e, _ in read_entries(path) if e is not None] if path.exists() else []


def _sha_ok(ws: Workspace, rel: str, sha: str) -> str:
    try:
        path = ws.checkpoint_path(rel)
        return "ok" if fsio.sha256_file(path) == sha else "mismatch"
    except FileNotFoundError:
        return "missing"
    except Exception as exc:  # noqa: BLE001
        return f"error {exc}"


def _decision_frame(entry: dict[str, Any]) -> int | None:
    """The deciding member's frame in an audit ``decision`` entry."""
    return ((entry.get("inputs") or {}).get("me") or {}).get("frame")


def _mentions(inputs: Any, checkpoint: str, sha256: str) -> bool:
    """Whether a decision's inputs hold ``checkpoint`` with ``sha256`` in one object (a peer's record or one
    of its history entries): the decision saw exactly the donor checkpoint the lineage names."""
    if isinstance(inputs, dict):
        values = set(v for v in inputs.values() if isinstance(v, str))
        if checkpoint in values and sha256 in values:
            return True
        return any(_mentions(v, checkpoint, sha256) for v in inputs.values())
    if isinstance(inputs, list):
        return any(_mentions(v, checkpoint, sha256) for v in inputs)
    return False


def verify(
    root: Path,
    args: argparse.Namespace,
    driver: Any,
    reader_out: Path,
    first_code: int | None,
    finish_codes: dict[int, int | None],
    target_epochs: dict[int, int],
    notes: list[str],
) -> dict[str, Any]:
    """Check a finished chaos run. ``driver`` is chaos.Driver (its kills, quota and opportunities);
    ``finish_codes`` and ``target_epochs`` are per member, from the finishing launches."""
    ws = Workspace(root)
    targets = {m: e * FRAMES_PER_EPOCH for m, e in target_epochs.items()}
    windows = tuple(driver.wanted)
    failures: list[str] = list(notes)
    f: dict[str, Any] = {
        "windows": windows,
        "exploit_mode": args.exploit_mode,
        "launcher_exit_code": first_code,
        "finish_exit_codes": finish_codes,
        "members": args.members,
        "frame_targets": targets,
    }

    # -- launcher journal: restarts after each kill
    journal = [json.loads(line) for line in (root / "launcher.jsonl").read_text().splitlines() if line.strip()]
    starts = defaultdict(list)
    exits = defaultdict(list)
    for e in journal:
        if e.get("event") == "start":
            starts[e["member"]].append(e)
        elif e.get("event") == "exit":
            exits[e["member"]].append(e)
    for k in driver.kills:
        # The journal names a process by its first member (--slices: a process hosts several).
        first = driver.process_members(k.member)[0]
        k.came_back = any(s["time"] > k.time for s in starts[first])
    f["kills"] = {w: sum(1 for k in driver.kills if k.window == w and k.landed) for w in windows}
    f["kills_missed"] = {w: sum(1 for k in driver.kills if k.window == w and not k.landed) for w in windows}
    f["kills_survived"] = {w: sum(1 for k in driver.kills if k.window == w and k.came_back) for w in windows}
    f["kill_opportunities_seen"] = dict(driver.opportunities)
    f["windows_closed_before_kill"] = dict(driver.closed_before_kill)
    f["kill_phases"] = dict(Counter(k.phase for k in driver.kills if k.landed))
    f["kills_total"] = len(driver.kills)
    f["kills_landed"] = sum(f["kills"].values())
    f["crash_exits_sigkill"] = sum(1 for es in exits.values() for e in es if e.get("code") == -9)
    f["kill_log"] = [
        f"{k.member:03d} {k.window}: {k.detail}: {'landed' if k.landed else 'missed'}: {k.phase}" for k in driver.kills
    ]
    short = {w: n for w, n in driver.quota.items() if n > 0}
    if getattr(args, "chaos_time", None):
        # A run sized to a time: every window must have been hit, not necessarily as often as wanted.
        short = {w: n for w, n in short.items() if f["kills"][w] == 0}
    if short:
        failures.append(
            f"windows without their landed kills: {short} (opportunities seen {dict(driver.opportunities)})"
        )
    if first_code != STOPPED_BY_CTRL_C:
        failures.append(
            f"first launch exited {first_code} (expected {STOPPED_BY_CTRL_C}: stopped by Ctrl-C after the chaos phase)"
        )
    for m, code in finish_codes.items():
        if code != 0:
            failures.append(f"member {m}'s finishing launch exited {code} (expected 0: the member finished)")
    for k in driver.kills:
        if not k.came_back:
            failures.append(f"member {k.member} did not come back after the kill aimed at {k.window}")
    gave_up = [e for e in journal if e.get("event") == "give_up"]
    if gave_up:
        failures.append(f"launcher gave up members: {gave_up}")

    # -- records: parse, finished, frame target
    records, errors = ws.read_records()
    if errors:
        failures.append(f"unreadable records at the end: {errors}")
    f["final_frames"] = {}
    for m in range(args.members):
        rec = records.get(m)
        if rec is None:
            failures.append(f"member {m}: no record")
            continue
        f["final_frames"][m] = rec.frame
        if rec.status != "finished" or rec.frame < targets[m]:
            failures.append(f"member {m}: status {rec.status}, frame {rec.frame} (target {targets[m]})")

    # -- checkpoints referenced by records, states, best.json, lineage
    refs = Counter()
    exploits = Counter()
    abort_reasons: Counter = Counter()
    lost: list[str] = []
    rng_breaks: list[str] = []
    audit_problems: list[str] = []
    lineage_problems: list[str] = []
    starts_by_mode: Counter = Counter()
    for m in range(args.members):
        mdir = ws.member_dir(m)
        rec = records.get(m)
        if rec is not None and rec.checkpoint:
            r = _sha_ok(ws, rec.checkpoint, rec.checkpoint_sha256)
            refs[f"record {r}"] += 1
            if r != "ok":
                failures.append(f"member {m}: record checkpoint {rec.checkpoint} {r}")
        state = load_state(mdir / "state.json")
        if state is None:
            failures.append(f"member {m}: no state.json")
            continue
        r = _sha_ok(ws, state.last_checkpoint, state.last_checkpoint_sha256)
        refs[f"state.last {r}"] += 1
        if r != "ok":
            failures.append(f"member {m}: state.last_checkpoint {state.last_checkpoint} {r}")
        if state.pending_exploit:
            failures.append(f"member {m}: finished with an exploit still pending")
        best_file = json.loads((mdir / "best.json").read_text()) if (mdir / "best.json").exists() else []
        for src, entries in (("state.best", [b.to_dict() for b in state.best]), ("best.json", best_file)):
            for e in entries:
                r = _sha_ok(ws, e["checkpoint"], e["sha256"])
                refs[f"{src} {r}"] += 1
                if r != "ok":
                    failures.append(f"member {m}: {src} entry {e['checkpoint']} {r}")
        for e in (entry.to_dict() for entry in state.lineage):
            if e.get("outcome") != "exploit":
                continue
            r = _sha_ok(ws, e["donor_checkpoint"], e["donor_sha256"])
            refs[f"lineage donor {r}"] += 1
            if r == "mismatch":
                failures.append(f"member {m}: lineage donor checkpoint {e['donor_checkpoint']} changed content")

        # -- audit: chain + replay
        _count, problems = verify_log(mdir / "audit.jsonl")
        audit_problems += [str(p) for p in problems]
        entries = _entries(mdir / "audit.jsonl")
        decisions = [e for e in entries if e.get("kind") == "decision"]
        for prev, nxt in itertools.pairwise(decisions):
            if nxt["rng_before"] != prev["rng_after"]:
                rng_breaks.append(f"member {m}: decision seq {nxt['seq']} rng_before != rng_after of seq {prev['seq']}")
        # -- exploits: decided / applied / aborted, and the lineage they produced
        exploit_decisions = [e for e in decisions if e["decision"]["outcome"] == "exploit"]
        applied = {}
        for e in entries:
            if e.get("kind") == "exploit_applied":
                applied.setdefault(e["checkpoint"], e)  # a kill before pending was cleared re-applies it
            elif e.get("kind") == "exploit_aborted":
                reason = str(e.get("reason", ""))
                key = (
                    "donor file vanished"
                    if "No such file" in reason or "does not exist" in reason
                    else "checksum mismatch"
                    if "does not match" in reason
                    else "recipient checkpoint failed verification"
                    if "recipient checkpoint" in reason
                    else reason[:80]
                )
                abort_reasons[key] += 1
        exploits["decided"] += len(exploit_decisions)
        exploits["applied"] += len(applied)
        exploits["applied_twice_after_kill"] += sum(1 for e in entries if e.get("kind") == "exploit_applied") - len(
            applied
        )
        # Lineage = state.json generations; each must come from an exploit decision and be applied.
        gens = [e.generation for e in state.lineage]
        if gens != list(range(1, len(gens) + 1)) or state.generation != len(gens):
            lineage_problems.append(f"member {m}: lineage generations {gens}, state generation {state.generation}")
        applied_gens = sorted(e["generation"] for e in applied.values())
        if applied_gens != gens:
            lineage_problems.append(f"member {m}: applied generations {applied_gens} != lineage {gens}")
        for e in (entry.to_dict() for entry in state.lineage):
            if e.get("outcome") != "exploit":
                continue
            # The exploit is carried out after the update of the epoch it was decided in: the lineage frame is
            # the decision's frame plus that epoch's frames.
            match = [
                d
                for d in exploit_decisions
                if d["decision"].get("donor") == e["donor"]
                and 0 <= e["frame"] - _decision_frame(d) <= FRAMES_PER_EPOCH
                and _mentions(d.get("inputs"), e["donor_checkpoint"], e["donor_sha256"])
            ]
            if not match:
                lineage_problems.append(f"member {m}: lineage generation {e['generation']} has no matching decision")
        # A restart after a kill resumes from the member's own last checkpoint: never from scratch, and
        # never losing more than the interval in flight (a best-checkpoint fallback would).
        last_decision_frame = 0
        for i, e in enumerate(entries):
            if e.get("kind") == "decision":
                last_decision_frame = max(last_decision_frame, _decision_frame(e) or 0)
            elif e.get("kind") == "start" and i > 0:
                # A kill before the first state.json with a checkpoint leaves nothing to resume from: a fresh
                # start then, at frame 0, loses at most the interval in flight like any other kill.
                restored = next((r for r in entries[i + 1 :] if r.get("kind") in ("restored", "start")), None)
                if restored is not None and restored["kind"] == "start" and e.get("mode") != "fresh":
                    # This process ended before it restored anything (killed, or stopped by the Ctrl-C that ends the
                    # chaos phase while rl_games loaded): it resumed nothing; the next start is checked instead.
                    starts_by_mode[e.get("mode")] += 1
                    continue
                frame = restored["frame"] if restored is not None and restored["kind"] == "restored" else 0
                if e.get("mode") == "fresh":
                    frame = 0
                if frame < last_decision_frame - args.interval:
                    lost.append(
                        f"member {m}: start seq {e['seq']} ({e.get('mode')}) resumed at frame {frame}, but it "
                        f"had decided at frame {last_decision_frame}: more than one interval lost"
                    )
                starts_by_mode[e.get("mode")] += 1
        # Exploit decisions that were neither applied nor aborted: killed before the pending state was saved.
        exploits["not_acted_killed"] += max(
            0, len(exploit_decisions) - len(applied) - sum(1 for e in entries if e.get("kind") == "exploit_aborted")
        )
    f["checkpoint_refs"] = dict(refs)
    f["exploits"] = dict(exploits)
    f["exploit_aborts"] = dict(abort_reasons)
    f["rng_continuity_breaks"] = rng_breaks
    f["audit_problems"] = audit_problems[:20]
    f["lineage_problems"] = lineage_problems
    if audit_problems:
        failures.append(f"{len(audit_problems)} audit problems, e.g. {audit_problems[:3]}")
    if lineage_problems:
        failures.append(f"lineage problems: {lineage_problems[:5]}")
    if rng_breaks:
        failures.append(f"RNG continuity broken: {rng_breaks[:5]}")
    if exploits["applied"] == 0:
        failures.append("no exploit was completed: the run did not exercise the exploit path")

    # -- temp files
    now = time.time()
    temps = []
    for dirpath, _dirs, files in os.walk(ws.root):
        for name in files:
            p = Path(dirpath) / name
            if fsio.is_temp_file(p):
                try:
                    age = now - p.stat().st_mtime
                except FileNotFoundError:
                    continue
                temps.append((str(p.relative_to(ws.root)), round(age, 1)))
    stale = [t for t in temps if t[1] > args.temp_grace]
    f["temp_files_left"] = temps
    if stale:
        failures.append(f"temp files older than the {args.temp_grace} s grace left behind: {stale}")
    leftovers = [str(p.relative_to(ws.root)) for p in ws.members_dir.glob("*/incoming/*")]
    f["incoming_leftovers"] = leftovers
    if leftovers:
        failures.append(f"donor copies left in incoming/: {leftovers}")
    markers = [str(p.relative_to(ws.root)) for p in ws.members_dir.glob(f"*/{MARKER_PREFIX}*")]
    f["pause_markers_left"] = markers
    if markers:
        failures.append(f"pause point markers left behind (a paused member not let go): {markers}")

    # -- reader
    try:
        reader = json.loads(reader_out.read_text())
    except (OSError, ValueError):
        reader = {"counts": {}, "samples": ["reader produced no result"]}
        failures.append("the reader process produced no result")
    rc = reader["counts"]
    f["reader"] = rc
    f["reader_samples"] = reader["samples"]
    for key in ("record_errors", "state_errors", "best_errors", "read_records_raised", "checkpoint_mismatch"):
        if rc.get(key, 0):
            failures.append(f"reader: {key} = {rc[key]}: {reader['samples'][:3]}")
    if not rc.get("record_reads"):
        failures.append("reader read no record")
    f["restarts_by_mode"] = dict(starts_by_mode)
    f["lost"] = lost
    if lost:
        failures.append(f"lost: {lost}")
    death_figures, death_failures = check_deaths(ws.root, driver.kills)
    f.update(death_figures)
    failures += death_failures
    exploit_figures, exploit_failures = verify_exploits(
        # A kill takes down every member of the killed process.
        ws,
        args.members,
        args.exploit_mode,
        Counter(m for k in driver.kills for m in driver.process_members(k.member)),
    )
    f.update(exploit_figures)
    failures += exploit_failures
    f["failures"] = failures
    return f


def report(f: dict[str, Any]) -> list[str]:
    lines = [
        f"chaos run: {f['members']} members, {f.get('elapsed_s')} s ({f.get('chaos_s')} s until every window had "
        f"its kills; checks {f.get('checks_s')} s), launcher exits {f['launcher_exit_code']} (chaos, stopped) and "
        f"{f['finish_exit_codes']} (finish)",
        f"kills: {f['kills_total']}, {f['kills_landed']} landed in their window "
        f"(SIGKILL exits seen by the launcher: {f['crash_exits_sigkill']})",
    ]
    for w in f["windows"]:
        lines.append(
            f"  {w:<18} landed {f['kills'][w]:>3}, missed {f['kills_missed'][w]:>3}, came back "
            f"{f['kills_survived'][w]:>3} (opportunities seen {f['kill_opportunities_seen'].get(w, 0)})"
        )
    lines.append(
        f"windows already closed when the driver could kill (not killed): {f['windows_closed_before_kill'] or 'none'}"
    )
    lines.append(f"kill phases: {f['kill_phases']}")
    lines.append(f"final frames {f['final_frames']} (targets {f['frame_targets']})")
    lines.append(f"exploits: {f['exploits']}; aborted: {f['exploit_aborts'] or 'none'}")
    lines.append(f"checkpoint references checked: {f['checkpoint_refs']}")
    r = f["reader"]
    lines.append(
        f"reader: {r.get('record_reads', 0)} records, {r.get('state_reads', 0)} states, "
        f"{r.get('best_reads', 0)} best.json read; errors: records {r.get('record_errors', 0)}, "
        f"states {r.get('state_errors', 0)}, best {r.get('best_errors', 0)}; checkpoints verified "
        f"{r.get('checkpoint_verified', 0)}, gone {r.get('checkpoint_gone', 0)}, "
        f"mismatched {r.get('checkpoint_mismatch', 0)}"
    )
    lines.append(
        f"audit problems: {len(f['audit_problems'])}; lineage problems: {len(f['lineage_problems'])}; "
        f"RNG continuity breaks: {len(f['rng_continuity_breaks'])}"
    )
    lines.append(
        f"temp files at the end: {f['temp_files_left'] or 'none'}; incoming leftovers: "
        f"{f['incoming_leftovers'] or 'none'}; pause markers left: {f['pause_markers_left'] or 'none'}"
    )
    lines.append(f"process starts after the first, by mode: {f['restarts_by_mode']}")
    lines.append(
        f"exploits applied, by path: {f.get('exploits_by_path')}; checkpoints loaded more than once "
        f"(same agent each time): {f.get('checkpoints_loaded_more_than_once')}; async-pbt audit exit "
        f"{f.get('audit_command_exit')}"
    )
    lines.append(
        f"deaths examined (files left at each kill or Ctrl-C, every member of the process): "
        f"{f.get('deaths_examined')}; the next start resumed from the checkpoint named at death: {f.get('resumes')}"
    )
    lines.append(f"lost: {len(f['lost'])}")
    lines.append("RESULT: " + ("PASS" if not f["failures"] else "FAIL"))
    lines += [f"  - {x}" for x in f["failures"]]
    return lines
