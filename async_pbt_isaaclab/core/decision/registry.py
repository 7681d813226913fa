"""A registry of named entries (the selection rules, the explore strategies): one helper for both.

Entries are listed in one place (:mod:`async_pbt_isaaclab.core.decision.catalog`); importing a module registers
nothing. An unknown name is a ``ValueError`` that names the choices a user may make.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Iterable, Iterator, Protocol, TypeVar


@dataclass(frozen=True)
class OptionalExtra:
    """An optional dependency an entry needs (scipy for ``welch``, scikit-learn for ``pb2``): the core imports without
    it, and a config that names the entry is refused when it is read, not at the first decision."""

    modules: tuple[str, ...]
    """What must import."""
    extra: str
    """The optional extra that installs them (``pip install -e ".[extra]"``)."""
    needs: str
    """What needs what, the start of the one-line refusal (``welch needs scipy (its Welch t-test)``); the refusal
    goes on with why it cannot be imported and the extra's install command."""
    keep: tuple[str, ...] = ()
    """Distributions the install command pins at the version installed here: pip would otherwise replace them to fit
    the extra's newest dependencies (scikit-learn's newest scipy needs a numpy newer than Isaac Lab 2.x has)."""
    otherwise: str = ""
    """The way out without the extra, ending the refusal (``or set explore: random``); empty for none."""


class Named(Protocol):
    """What a registry holds: anything with a ``name``."""

    @property
    def name(self) -> str:
        """The name the entry is chosen by (``pbt.rule``, ``pbt.explore``)."""
        ...


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Entries by name, in the order given. ``what`` names the kind in errors (``"selection rule"``); ``listed``
    says which entries a user may choose (the others, test fixtures say, are known but not offered)."""

    def __init__(self, what: str, entries: Iterable[T] = (), listed: Callable[[T], bool] = lambda _: True):
        self.what = what
        """What an entry is, for errors."""
        self._listed = listed
        self._entries: dict[str, T] = {}
        for entry in entries:
            self.register(entry)

    def register(self, entry: T) -> T:
        """Add ``entry`` (a name registered twice is a programming error)."""
        if entry.name in self._entries:
            raise ValueError(f"{self.what} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry registered as ``name``; a ``ValueError`` names the choices."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; accepted: {', '.join(self.choices())}") from None

    def names(self) -> tuple[str, ...]:
        """Every registered name, in order."""
        return tuple(self._entries)

    def choices(self) -> tuple[str, ...]:
        """The names a user may choose."""
        return tuple(n for n, e in self._entries.items() if self._listed(e))

    def entries(self) -> tuple[T, ...]:
        """Every entry, in order."""
        return tuple(self._entries.values())

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
