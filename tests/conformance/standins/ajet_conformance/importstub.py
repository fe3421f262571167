"""Import-only stand-ins for GPU libraries (torch, tensordict, vllm) in the conformance tier.

AgentJet 0.0.1 and verl 0.5 import torch at module level (``ajet/__init__`` reaches
``ajet.context_tracker.basic_tracker``; ``import verl`` reaches ``verl.protocol``), so the
real launcher cannot even start without *something* called ``torch``. A real torch wheel
from PyPI is a CUDA build (several GB with its nvidia-* dependencies), so these stand-ins
give just enough surface for those modules to import. Nothing here computes: any attribute
that is not defined explicitly is a :class:`Stub` class, calling one returns a stub
instance, and a stub used as a decorator returns the decorated function unchanged.

Every stand-in module carries ``__ajet_conformance_standin__ = True`` so a test can tell.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import typing

_DUNDER_OK = frozenset({"__wrapped__"})


class StubMeta(type):
    """Metaclass of stub classes: unknown attributes are further stub classes."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__") and name not in _DUNDER_OK:
            raise AttributeError(name)
        return stub_class(f"{cls.__qualname__}.{name}", cls.__module__)

    def __or__(cls, other):  # `torch.Tensor | None` in annotations evaluated at def time
        return typing.Union[cls, other]  # noqa: UP007 - runtime union of stand-in classes

    def __ror__(cls, other):
        return typing.Union[other, cls]  # noqa: UP007

    def __getitem__(cls, item):  # `SomeStub[int]` in annotations
        return cls

    def __repr__(cls) -> str:
        return f"<stand-in {cls.__module__}.{cls.__qualname__}>"


class Stub(metaclass=StubMeta):
    """A value that tolerates import-time use: attribute access, calls, decorating, `with`."""

    _standin_generated = False

    def __new__(cls, *args, **kwargs):
        # `@torch.compile` / `@torch.jit.script`: decorating returns the function itself.
        if cls.__dict__.get("_standin_generated") and len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # `@torch.no_grad()`: the instance decorates
        return Stub()

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<stand-in value>"


_CLASS_CACHE: dict[tuple[str, str], type] = {}


def stub_class(qualname: str, module: str) -> type:
    key = (module, qualname)
    cls = _CLASS_CACHE.get(key)
    if cls is None:
        cls = StubMeta(qualname.rsplit(".", 1)[-1], (Stub,), {"_standin_generated": True, "__module__": module})
        cls.__qualname__ = qualname
        _CLASS_CACHE[key] = cls
    return cls


class StubModule(types.ModuleType):
    """A module whose unknown attributes are stub classes (names in `_deny` raise AttributeError)."""

    _deny: frozenset[str] = frozenset()

    def __getattr__(self, name: str):
        if (name.startswith("__") and name.endswith("__")) or name in self._deny:
            raise AttributeError(f"module {self.__name__!r} (conformance stand-in) has no attribute {name!r}")
        value = stub_class(name, self.__name__)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every ``<root>.x.y`` submodule that has no file a :class:`StubModule`."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(self.root + "."):
            return None
        # Appended last to sys.meta_path: reached only when no real file of the stand-in exists.
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []  # a package, so deeper submodules resolve too
        module.__ajet_conformance_standin__ = True
        return module

    def exec_module(self, module):
        parent_name, _, child = module.__name__.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is None:
            return
        existing = parent.__dict__.get(child)
        if existing is None or getattr(existing, "_standin_generated", False):
            setattr(parent, child, module)


def install(root: str, package: types.ModuleType) -> None:
    """Turn the already-imported stand-in `package` into a stub root (attributes + submodules)."""
    package.__class__ = StubModule
    package.__ajet_conformance_standin__ = True
    if not any(isinstance(f, _StubFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.append(_StubFinder(root))
