"""Population command-line flags shared by ``scripts/train_pbt.py`` and the CPU member.

Every :class:`~async_pbt_isaaclab.core.config.PopulationConfig` field ``x_y`` gets a flag
``--pbt-x-y``, with the field's docstring as help text; the short aliases users type most are
``--pbt-workspace``, ``--pbt-members`` (``num_policies``) and ``--pbt-index`` (``policy_idx``).
Flags become Hydra-style overrides (``pbt.num_policies=8``) applied on top of the yaml, so a flag,
an ``agent.pbt.*`` override and the yaml all mean the same thing. Giving ``--pbt-workspace`` or
``--pbt-members`` turns ``enabled`` on.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import os
from typing import Any

from async_pbt_isaaclab.core import config as config_module
from async_pbt_isaaclab.core.config import PopulationConfig
from async_pbt_isaaclab.core.slices import SLICES_FLAG

ALIASES = {"num_policies": "--pbt-members", "policy_idx": "--pbt-index"}
"""Short flag names for the most used fields."""

_SKIP = {"mutation", "enabled"}


@functools.lru_cache(maxsize=1)
def field_docs() -> dict[str, str]:
    """The docstring under each PopulationConfig field (read from the source, so help never drifts)."""
    tree = ast.parse(inspect.getsource(config_module))
    docs: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "PopulationConfig":
            body = node.body
            for stmt, nxt in itertools.pairwise(body):
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant)
                ):
                    docs[stmt.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def flag_name(field_name: str) -> str:
    return ALIASES.get(field_name, "--pbt-" + field_name.replace("_", "-"))


def add_slices_arg(group: argparse._ArgumentGroup) -> None:
    """Add ``--pbt-slices M`` (``args.pbt_slices``, default 1) for the training scripts that can host several members
    (``scripts/train_pbt.py`` and the CPU member; the CPU population has its own ``--slices``)."""
    group.add_argument(
        SLICES_FLAG,
        dest="pbt_slices",
        metavar="SLICES",
        type=int,
        default=1,
        help="members this process hosts, each a full agent on its own slice of one vectorized env (one simulator) "
        "of SLICES x num_envs envs: members --pbt-index .. --pbt-index+SLICES-1 (docs/slices.md)",
    )


def add_population_args(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add the ``--pbt-*`` flags to ``parser`` (all default to None = "not given")."""
    group = parser.add_argument_group(
        "population (PBT)",
        "Each flag overrides the agent yaml's pbt: section (same as agent.pbt.<key>=<value>); "
        "see docs/configuration.md. --pbt-workspace or --pbt-members enables the population.",
    )
    docs = field_docs()
    defaults = PopulationConfig()
    for f in dataclasses.fields(PopulationConfig):
        if f.name in _SKIP:
            continue
        default = getattr(defaults, f.name)
        # argparse %-formats help strings: a docstring's "5 %" must reach it as "5 %%".
        help_text = f"{docs.get(f.name, '')} (yaml key pbt.{f.name}; default {default!r})".replace("%", "%%")
        dest = "pbt_" + f.name
        if isinstance(default, bool):
            group.add_argument(
                flag_name(f.name),
                dest=dest,
                default=None,
                type=_parse_bool,
                nargs="?",
                const=True,
                help=help_text,
                metavar="BOOL",
            )
        elif isinstance(default, (list, tuple)):
            group.add_argument(flag_name(f.name), dest=dest, default=None, nargs="+", help=help_text)
        else:
            group.add_argument(flag_name(f.name), dest=dest, default=None, type=type(default), help=help_text)
    group.add_argument(
        "--pbt-disable",
        action="store_true",
        default=False,
        help="Train without the population even if the yaml enables it.",
    )
    return group


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def population_overrides(args: argparse.Namespace) -> list[str]:
    """``pbt.<key>=<value>`` overrides for the flags that were given."""
    return list(population_flag_origins(args))


def population_flag_origins(args: argparse.Namespace) -> dict[str, str]:
    """The overrides of :func:`population_overrides` (in order), each with the flag it came from, so that
    an invalid value is reported against ``--pbt-rule foo`` rather than against the yaml."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(PopulationConfig):
        value = getattr(args, "pbt_" + f.name, None)
        if value is None:
            continue
        shown = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        if f.name == "workspace":
            value = os.path.abspath(os.path.expanduser(value))
        out[f"pbt.{f.name}={_yaml_value(value)}"] = f"flag {flag_name(f.name)} {shown}"
    if getattr(args, "pbt_workspace", None) is not None or getattr(args, "pbt_num_policies", None) is not None:
        out["pbt.enabled=true"] = "flag --pbt-workspace/--pbt-members"
    if getattr(args, "pbt_disable", False):
        out["pbt.enabled=false"] = "flag --pbt-disable"
    return out


def _yaml_value(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    if isinstance(value, str):
        return json.dumps(value)  # quoted: a path like "1e3" or "on" stays a string
    return repr(value)
