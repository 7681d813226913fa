"""Replacing the member process after an exploit, keeping everything the user typed.

The argv is captured once, when the process starts (``sys.orig_argv``: the interpreter's own
arguments included, untouched by argparse or Hydra rewriting ``sys.argv``). A restart changes only:

* the checkpoint flag (``--checkpoint=<recipient checkpoint>``; any earlier ``--checkpoint`` removed),
* the Hydra overrides of the mutated hyperparameters (``agent.params.config.learning_rate=...``, an Isaac Lab env
  config value as ``env.rewards.<term>.weight=...``;
  an earlier override of the same key removed, its Hydra prefix kept: a key the user added with
  ``+agent...`` or ``++agent...`` because the agent yaml lacks it is written back with that prefix, or Hydra
  would refuse it as "not in struct").

Device, env count, iteration limit, seeds and every other flag survive as typed. The environment is the one
the process started with, captured with the argv: what libraries set in it while the member ran (rl-games
1.6.1's imports add variables, a simulator adds its paths) is not carried into the new image, so the
environment cannot grow across restarts. The new image
is ``sys.executable`` itself (no hard-coded ``python.sh``), or a configured launcher prefix such as
``torchrun --nproc_per_node=1`` followed by the original script arguments.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Mapping, NoReturn, Sequence

ENV_OVERRIDE_PREFIX = "env."
"""Hydra's prefix of an Isaac Lab env config override (the entry scripts' ``env.*`` arguments)."""

_CAPTURED: list[str] | None = None
_CAPTURED_ENV: dict[str, str] | None = None


def capture_argv() -> list[str]:
    """The command line this process was started with (first call wins; later calls return the same).
    The environment is captured at the same moment, for :func:`replace_process`."""
    global _CAPTURED, _CAPTURED_ENV
    if _CAPTURED is None:
        _CAPTURED = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
        _CAPTURED_ENV = dict(os.environ)
    return list(_CAPTURED)


def format_override_value(value: Any) -> str:
    """A value as YAML that parses back to exactly the same Python value (floats use repr)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _override_key(arg: str) -> str | None:
    if "=" not in arg or arg.startswith("-"):
        return None
    key = arg.split("=", 1)[0].lstrip("+")
    return key[len("agent.") :] if key.startswith("agent.") else key


def restart_argv(argv: Sequence[str], checkpoint: str | None, overrides: Mapping[str, Any]) -> list[str]:
    """``argv`` with the checkpoint replaced (``None``: the checkpoint argument kept as it is) and ``overrides``
    (``agent.params...`` or ``env.*`` keys) set.

    ``argv[0]`` is the interpreter as started; it is kept so the caller can see the whole command.
    """
    wanted = {k[len("agent.") :] if k.startswith("agent.") else k: v for k, v in overrides.items()}
    prefix: dict[str, str] = {}  # Hydra's add (+) / force-add (++) marker the user typed, per key
    out: list[str] = []
    skip_next = False
    for i, arg in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if checkpoint is not None and i > 0 and arg == "--checkpoint":
            skip_next = True
            continue
        if checkpoint is not None and i > 0 and arg.startswith("--checkpoint="):
            continue
        key = _override_key(arg) if i > 0 else None
        if key is not None and key in wanted:
            prefix[key] = arg[: len(arg) - len(arg.lstrip("+"))]
            continue
        out.append(arg)
    if checkpoint is not None:
        out.append(f"--checkpoint={checkpoint}")
    for key in sorted(wanted):
        # An Isaac Lab env config value (``env.rewards.<term>.weight``) is Hydra's ``env.`` override, kept as named.
        name = key if key.startswith(ENV_OVERRIDE_PREFIX) else f"agent.{key}"
        out.append(f"{prefix.get(key, '')}{name}={format_override_value(wanted[key])}")
    return out


def exec_command(argv: Sequence[str], launcher_prefix: Sequence[str] = ()) -> tuple[str, list[str]]:
    """(program, argv) that ``os.execv`` should run for a restart with this argv."""
    if launcher_prefix:
        program = shutil.which(launcher_prefix[0]) or launcher_prefix[0]
        return program, [*launcher_prefix, *argv[1:]]
    return sys.executable, [sys.executable, *argv[1:]]


def restart_member(session: Any, argv: Sequence[str], exit_on_restart: bool) -> NoReturn:
    """End this member's process so that ``argv`` starts it again: the session closed (its lock, writer and logs),
    then the process image replaced. With ``exit_on_restart`` (in-process tests of the restart path) it raises
    ``SystemExit`` naming ``argv`` instead, before anything is closed."""
    if exit_on_restart:
        raise SystemExit(f"restart requested: {list(argv)}")
    session.close()
    replace_process(argv, session.cfg.launcher_prefix)
    sys.exit(0)  # not reached: replace_process does not return


def replace_process(argv: Sequence[str], launcher_prefix: Sequence[str] = ()) -> None:
    """Flush stdio and replace this process image. Does not return."""
    program, args = exec_command(argv, launcher_prefix)
    print(f"[async-pbt] restarting: {' '.join(args)}", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, args, _CAPTURED_ENV if _CAPTURED_ENV is not None else dict(os.environ))
