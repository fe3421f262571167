"""Reading a YAML config once per submission, with libyaml when it is there.

A submission used to parse the same YAML twice with PyYAML's pure-Python loader (~9 ms each for
an AgentJet config): once to validate it, once to count its GPUs. `load_yaml_file` parses with
`yaml.CSafeLoader` (the same safe subset, ~10x faster) and remembers the last few files by
(device, inode, size, mtime), handing out deep copies so no caller can change another's data (a plain
walk over dicts and lists: `copy.deepcopy`'s memo made the copy cost as much as a cached load's rest).
A YAML error is re-raised from the pure-Python loader, whose messages name line and column the
way users have always seen them.
"""

from __future__ import annotations

import copy
import datetime
import os
import threading
from collections import OrderedDict
from typing import Any

import yaml

SafeLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CACHE_SIZE = 16
_cache: OrderedDict[tuple[int, int, int, int], Any] = OrderedDict()
_lock = threading.Lock()


def load_yaml_text(text: str) -> Any:
    """`yaml.safe_load(text)`, with libyaml when available."""
    try:
        return yaml.load(text, Loader=SafeLoader)  # a safe loader (C or Python)
    except yaml.YAMLError:
        if SafeLoader is yaml.SafeLoader:
            raise
        return yaml.safe_load(text)  # the same error, worded by the pure-Python loader


def load_yaml_file(path: str | os.PathLike[str]) -> Any:
    """The parsed file (a private copy); OSError, UnicodeDecodeError and yaml.YAMLError propagate."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # the file itself, whatever path names it
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _private_copy(_cache[key])
    with open(path, encoding="utf-8") as fh:
        data = load_yaml_text(fh.read())
    with _lock:
        _cache[key] = data
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return _private_copy(data)


def private_copy(data: Any) -> Any:
    """A deep copy of loaded YAML that no other caller shares (for callers that cache parsed YAML)."""
    return _private_copy(data)


def _private_copy(data: Any) -> Any:
    """A deep copy of loaded YAML: new dicts, lists and sets; the scalars (str, numbers, dates, bytes) are
    immutable and shared. A self-referencing document (anchors) goes through `copy.deepcopy`."""
    try:
        return _walk(data)
    except RecursionError:
        return copy.deepcopy(data)


def _walk(x: Any) -> Any:
    kind = type(x)
    if kind is dict:
        return {k: _walk(v) for k, v in x.items()}
    if kind is list:
        return [_walk(v) for v in x]
    if kind is set:
        return set(x)
    if kind in (str, int, float, bool, type(None), bytes) or isinstance(x, (datetime.date, datetime.datetime)):
        return x
    return copy.deepcopy(x)
