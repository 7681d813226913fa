"""Which rl-games line and numpy these tests run on: .ci/run also runs the rlgames_compat subset with rl-games
1.6.1 + gym + numpy 1 (what Isaac Lab 2.x pins), where a few facts of the 1.6.5 line do not hold."""

from __future__ import annotations

import contextlib
import re
from typing import Iterator


def _versions() -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    from importlib import metadata

    def v(name: str) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in re.findall(r"\d+", metadata.version(name))[:3])
        except metadata.PackageNotFoundError:
            return ()

    return v("rl-games"), v("torch"), v("numpy")


RL_GAMES_VERSION, TORCH_VERSION, NUMPY_VERSION = _versions()
"""Installed versions, for tests that only hold on one rl-games line (.ci/run also runs rl-games 1.6.1)."""

PLAIN_RESTORE_REFUSES_NUMPY = (
    RL_GAMES_VERSION[:2] == (1, 6) and RL_GAMES_VERSION < (1, 6, 5) and TORCH_VERSION >= (2, 6)
)
"""rl-games 1.6.1's own restore calls ``torch.load`` with torch's default ``weights_only``, True from torch 2.6,
which refuses the numpy scalar every rl_games checkpoint holds; Isaac Lab 2.x pairs 1.6.1 with an older torch."""


def restore_with_plain_rl_games(agent, path) -> None:
    """rl_games' own ``agent.restore(path)``. On the pair that cannot (:data:`PLAIN_RESTORE_REFUSES_NUMPY`), first
    check that rl_games' loader refuses the file for the numpy scalar, as said there, then restore as ``restore``
    does (``set_full_state_weights``) from the file read by our loader, which is what a member does on that pair."""
    if not PLAIN_RESTORE_REFUSES_NUMPY:
        agent.restore(str(path))
        return
    import io
    from types import SimpleNamespace
    from unittest import mock

    import pytest
    from rl_games.algos_torch import torch_ext

    from async_pbt_isaaclab.rl_games.checkpoint import load_checkpoint

    # rl_games retries a failed load five times, sleeping 1+2+4+8+16 s between tries: the same tries, without the waits.
    printed = io.StringIO()
    with (
        mock.patch.object(torch_ext, "time", SimpleNamespace(sleep=lambda _s: None)),
        contextlib.redirect_stdout(printed),
        _torch_allowlist_of_a_plain_process(),
    ):
        with pytest.raises(RuntimeError, match="give up after"):
            agent.restore(str(path))
    assert "Unsupported global: GLOBAL numpy" in printed.getvalue(), printed.getvalue()[-2000:]
    agent.set_full_state_weights(load_checkpoint(path), set_epoch=True)


@contextlib.contextmanager
def _torch_allowlist_of_a_plain_process() -> Iterator[None]:
    """torch's allowlist as a process that never loaded a member checkpoint has it (Isaac Lab's play script): a
    member's safe load adds numpy's scalar globals to torch's allowlist for the whole process
    (``checkpoint_io.allow_numpy_scalars``), and an earlier test in this worker may have run one. Put back after."""
    import torch

    kept = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        yield
    finally:
        torch.serialization.add_safe_globals(kept)
