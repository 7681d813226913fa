"""The command-line parser every entry point of the package shares: ``async-pbt``, the launcher, the examples.

Apart from :mod:`async_pbt_isaaclab.commands` so that the launcher (which ``async-pbt launch`` registers) and the
examples import it downward, without importing the subcommands. Imports only the standard library.
"""

from __future__ import annotations

import argparse

from async_pbt_isaaclab.exit_codes import EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line naming the value, exit code 2.

    argparse's default prints the whole usage block before the error; in a terminal full of training
    output the one line that matters gets lost. ``--help`` still shows the usage.
    """

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_with_overrides(self, argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
        """The flags, and the ``key=value`` overrides after them (a member's command line); any other unknown
        argument is a usage error."""
        args, overrides = self.parse_known_args(argv)
        bad = [o for o in overrides if "=" not in o]
        if bad:
            self.error(f"unrecognized arguments: {' '.join(bad)}")
        return args, overrides


__all__ = ["OneLineParser"]
