"""No class in store/ grows back into one class that every feature extends (issue 40).

`Store` is a client and its parts (records, indexes, events, runs, nodes, slots, ...), each owning its keys;
a feature adds its methods to the part it concerns, or a part of its own. This counts the public methods
(and properties) each class of store/ defines itself, and fails above MAX_PUBLIC.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import ajet_runner.store

MAX_PUBLIC = 25


def _public_methods(cls: type) -> list[str]:
    kinds = (staticmethod, classmethod, property)
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, kinds))]


def _store_classes() -> list[type]:
    classes: list[type] = []
    for info in pkgutil.walk_packages(ajet_runner.store.__path__, "ajet_runner.store."):
        module = importlib.import_module(info.name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return classes


def test_no_class_in_the_store_has_more_than_25_public_methods() -> None:
    classes = _store_classes()
    names = {c.__name__ for c in classes}
    assert {"Store", "Records", "Indexes", "EventLog", "RunControl", "Nodes", "Slots", "Jobs"} <= names
    wide = {f"{c.__module__}.{c.__qualname__}": len(_public_methods(c)) for c in classes
            if len(_public_methods(c)) > MAX_PUBLIC}
    assert not wide, f"split these by concern (at most {MAX_PUBLIC} public methods a class): {wide}"


def test_the_count_sees_methods_properties_and_classmethods() -> None:
    class Probe:
        def a(self) -> None: ...
        def _hidden(self) -> None: ...
        @property
        def b(self) -> int: return 1
        @classmethod
        def c(cls) -> None: ...
        d = 3

    assert sorted(_public_methods(Probe)) == ["a", "b", "c"]
