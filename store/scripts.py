"""The Lua scripts, read from the `.lua` files next to this module (shipped as package data).

Each file documents its KEYS and ARGV; callers pass every key (from `ajet_runner.store.keys`) and every limit.
"""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def lua(name: str) -> str:
    """The text of `store/<name>.lua`."""
    return resources.files("ajet_runner.store").joinpath(f"{name}.lua").read_text(encoding="utf-8")
