"""Stand-ins for the simulator modules only (``isaacsim``, ``omni``, ``carb``, ``pxr``), so that the real Isaac Lab
packages import and run their Python code on a machine without Isaac Sim.

Everything else Isaac Lab imports (torch, gymnasium, hydra, warp, its own subpackages) is the real thing. A name looked
up on a stub module is a stub class: it can be called, subclassed, used as a decorator or a context manager, and any
attribute of it is again a stub. Nothing here pretends to simulate: code that needs physics results cannot run on it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import tempfile
import types
from typing import Any

SIMULATOR_PACKAGES = ("isaacsim", "omni", "carb", "pxr")
"""Top-level names replaced; Isaac Lab reaches the simulator only through these."""


class _StubMeta(type):
    """Metaclass of the stub classes: class attribute lookups create further stubs."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # Used as a bare decorator (@carb.profiler.profile): keep the decorated function.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]
        return super().__call__()

    def __iter__(cls):
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __or__(cls, other):  # type unions in annotations evaluated at import time
        return cls

    __ror__ = __or__

    def __getitem__(cls, item):
        return cls

    def __int__(cls) -> int:  # enum members (event types, log levels) used as numbers
        return 0

    __index__ = __int__

    def __float__(cls) -> float:
        return 0.0


class _StubBase(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return stub_class(f"{type(self).__qualname__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return stub_class(f"{type(self).__qualname__}()")()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0


def stub_class(qualname: str) -> type:
    """A new stub class named ``qualname``."""
    cls = _StubMeta(qualname.rsplit(".", 1)[-1], (_StubBase,), {"__qualname__": qualname, "__module__": "stub"})
    return cls


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


SIMULATOR_HOME = os.path.join(tempfile.gettempdir(), "async-pbt-isaacsim-stub")
"""Where the stub ``isaacsim`` package says it lives (``apps/`` there is the experience-file folder, ``EXP_PATH``)."""


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []  # a package: submodules resolve through the finder too
        if spec.name == "isaacsim":
            module.__file__ = os.path.join(SIMULATOR_HOME, "__init__.py")
            app = stub_class("isaacsim.SimulationApp")
            app.is_running = lambda self: True  # a started app runs until closed (the play loop's condition)
            module.SimulationApp = app
        return module

    def exec_module(self, module) -> None:
        return None


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] in SIMULATOR_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        return None


def install() -> None:
    """Put the simulator stand-ins first on ``sys.meta_path`` (idempotent)."""
    os.makedirs(os.path.join(SIMULATOR_HOME, "apps"), exist_ok=True)
    # Isaac Sim's launcher script sets EXP_PATH to its experience files; Isaac Lab's launcher reads it.
    os.environ.setdefault("EXP_PATH", os.path.join(SIMULATOR_HOME, "apps"))
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
