"""What every plot of the report shares: the non-interactive matplotlib backend, a colour and a name per member, and
workspace text made safe for matplotlib. Needs the ``report`` extra (matplotlib)."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")  # never open a window; reports are built on headless nodes
import matplotlib.pyplot as plt

__all__ = ["member_color", "member_label", "plain", "plt"]


def member_color(index: int, n: int) -> Any:
    """Member ``index``'s colour in a population of ``n`` (the same in every plot)."""
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return cmap(index % cmap.N)


def member_label(member: int) -> str:
    return f"member {member:03d}"


def plain(text: str) -> str:
    """Workspace text shown verbatim: a ``$`` would otherwise start matplotlib mathtext."""
    return str(text).replace("$", r"\$")
