"""The member's own random stream: every selection and mutation draw of one member comes from it.

A numpy PCG64 generator whose compact state is stored with the member (``state.json``, each audit entry's
``rng_before``/``rng_after``), so the sequence of draws continues across restarts instead of replaying the
same draws, and the audit verifier can replay a decision from the state recorded before it.
"""

from __future__ import annotations

from typing import Any, Mapping, TypedDict

import numpy as np


class RngState(TypedDict):
    """A PCG64 state as plain JSON data (``state.json``'s ``rng_state``, an audit entry's ``rng_before``/``rng_after``):
    the exact state of numpy's bit generator, its two 128-bit integers as Python ints."""

    bit_generator: str
    """Always ``"PCG64"``."""
    state: int
    inc: int
    has_uint32: int
    uinteger: int


class MemberRng:
    """A member's own mutation/selection RNG with a JSON-serialisable state.

    PCG64 state is two 128-bit integers; JSON keeps them exactly (Python ints are arbitrary size).
    """

    def __init__(self, seed: int | np.random.SeedSequence | None = None, state: Mapping[str, Any] | None = None):
        self.generator = np.random.Generator(np.random.PCG64(seed))
        """The underlying numpy generator; draw only through the methods below to keep replays exact."""
        if state is not None:
            self.set_state(state)

    def get_state(self) -> RngState:
        """The generator's state as plain JSON data (what ``state.json`` keeps)."""
        s = self.generator.bit_generator.state
        return RngState(
            bit_generator=str(s["bit_generator"]),
            state=int(s["state"]["state"]),
            inc=int(s["state"]["inc"]),
            has_uint32=int(s["has_uint32"]),
            uinteger=int(s["uinteger"]),
        )

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Continue from a state written by :meth:`get_state`; :class:`ValueError` for anything else."""
        try:
            if state["bit_generator"] != "PCG64":
                raise ValueError(f"unsupported bit generator {state['bit_generator']!r} (expected 'PCG64')")
            self.generator.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": int(state["state"]), "inc": int(state["inc"])},
                "has_uint32": int(state["has_uint32"]),
                "uinteger": int(state["uinteger"]),
            }
        except (KeyError, TypeError, OverflowError) as exc:  # OverflowError: numbers outside PCG64's range
            raise ValueError(f"invalid RNG state {state!r:.300}: {exc}") from None

    @classmethod
    def for_member(cls, population_seed: int, member: int) -> "MemberRng":
        """Member ``member``'s stream of the population seeded ``population_seed``: PCG64 from
        ``SeedSequence([population_seed, member])``, distinct per member and per population."""
        return cls(seed=np.random.SeedSequence([population_seed, member]))

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "MemberRng":
        """A generator that continues from a state written by :meth:`get_state`."""
        return cls(seed=0, state=state)

    def uniform(self, low: float, high: float) -> float:
        """A float drawn uniformly from ``[low, high)``."""
        return float(self.generator.uniform(low, high))

    def random(self) -> float:
        """A float drawn uniformly from ``[0, 1)``."""
        return float(self.generator.random())

    def integers(self, low: int, high_inclusive: int) -> int:
        """An integer drawn uniformly from ``[low, high_inclusive]``."""
        return int(self.generator.integers(low, high_inclusive, endpoint=True))

    def choice_index(self, n: int) -> int:
        """An index drawn uniformly from ``range(n)``."""
        return int(self.generator.integers(0, n))
