"""Reading a YAML config once per submission, with libyaml when it is there.

A submission used to parse the same YAML twice with PyYAML's pure-Python loader (~9 ms each for
an AgentJet config): once to validate it, once to count its GPUs. `load_yaml_file` parses with
`yaml.CSafeLoader` (the same safe subset, ~10x faster) and remembers the last few files by
(device, inode, size, mtime), handing out deep copies so no caller can change another's data (a plain
walk over dicts and lists: `copy.deepcopy`'s memo made the copy cost as much as a cached load's rest).
A YAML error is re-raised from the pure-Python loader, whose messages name line and column the
way users have always seen them. Nesting is bounded (MAX_YAML_DEPTH): PyYAML composes recursively, so a
document of a few thousand `[` raised RecursionError (a 500 from the API, a traceback in `check`); it is
now a `YamlTooDeep` (a yaml.YAMLError) naming the limit. The bound is checked on the loader's event stream
only when a cheap upper bound of the depth (flow brackets plus the deepest indentation) exceeds it.
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
MAX_YAML_DEPTH = 100  # nested maps and lists; an AgentJet config nests 4 or 5 deep
_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class YamlTooDeep(yaml.YAMLError):
    """The document nests maps and lists deeper than MAX_YAML_DEPTH."""


def _depth_bound(text: str) -> int:
    """An upper bound of the document's nesting depth, read in one pass over the text: every flow bracket,
    plus the deepest block indentation (each level needs one more column, or a `- ` / `? `)."""
    flow = text.count("[") + text.count("{")
    if flow > MAX_YAML_DEPTH:
        return flow
    block = max((len(line) - len(line.lstrip(" \t-?")) for line in text.splitlines()), default=0)
    return flow + block + 1


def check_depth(text: str) -> None:
    """Raise YamlTooDeep when `text` nests deeper than MAX_YAML_DEPTH (YAML syntax errors propagate)."""
    if _depth_bound(text) <= MAX_YAML_DEPTH:
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=SafeLoader):
            if isinstance(event, _START):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark is not None else 0
                    raise YamlTooDeep(f"maps and lists nest deeper than {MAX_YAML_DEPTH} levels (at line {line}); "
                                      "a config nests a few levels: flatten it")
            elif isinstance(event, _END):
                depth -= 1
    except yaml.MarkedYAMLError as exc:  # libyaml's own flow limit (1000) trips while it scans ahead
        if "nesting depth" not in str(exc.problem):
            raise
        raise YamlTooDeep(f"maps and lists nest deeper than {MAX_YAML_DEPTH} levels; a config nests a few levels: "
                          "flatten it") from None


def load_yaml_text(text: str) -> Any:
    """`yaml.safe_load(text)`, with libyaml when available; YamlTooDeep past MAX_YAML_DEPTH levels."""
    check_depth(text)
    try:
        return yaml.load(text, Loader=SafeLoader)  # a safe loader (C or Python)
    except yaml.YAMLError:
        if SafeLoader is yaml.SafeLoader:
            raise
        return yaml.safe_load(text)  # the same error, worded by the pure-Python loader
    except RecursionError:  # the bound above keeps documents far from it; a backstop, not a path
        raise YamlTooDeep(f"maps and lists nest deeper than {MAX_YAML_DEPTH} levels") from None


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
