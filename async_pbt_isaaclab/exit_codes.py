"""Exit codes of every command this package installs (``async-pbt ...``, the launcher, the example scripts).

One definition, imported by the command line (:mod:`async_pbt_isaaclab.commands`) and the launcher
(:mod:`async_pbt_isaaclab.launch`), so that a script checking ``$?`` reads the same number for the same
meaning everywhere. Imports nothing.
"""

from __future__ import annotations

EXIT_OK = 0
"""Success: the command did what it was asked; the launcher: every member finished (exited 0)."""
EXIT_AUDIT_FAILED = 1
"""``async-pbt audit``: at least one entry failed verification."""
EXIT_CHECK_FAILED = 1
"""``async-pbt doctor``, and ``async-pbt launch`` before starting members: a filesystem check failed."""
EXIT_GAVE_UP = 1
"""The launcher: at least one member was given up after too many crashes."""
EXIT_USAGE = 2
"""Bad usage, invalid config, or not a population workspace (argparse also exits 2)."""

NO_RETRY_EXIT_CODES = (EXIT_USAGE,)
"""Member exit codes the launcher gives up at once: a usage error, which a restart would repeat."""


def exit_code_for_signal(signum: int) -> int:
    """What a command stopped by signal ``signum`` exits with: ``128 + signum`` (130 for Ctrl-C), as shells do."""
    return 128 + int(signum)
