"""Write a patched copy of a person's AgentJet YAML, leaving the original untouched.

The copy sits in a runner-owned folder beside the original, under the same file name
(`<yaml dir>/.ajet-runner/<id>/<name>.yaml`): AgentJet names the experiment, its
checkpoints and `saved_experiments/` dir after the YAML's file name when
`ajet.experiment_name` is unset, so the copy's run keeps the original's names, and
`hydra.searchpath` is resolved from the working directory, which does not change. The copy
differs from the original only in the changed values: comments, key order, quoting, blank
lines and the `hydra`/`defaults` blocks stay byte-identical. ruamel.yaml's round-trip loader
locates each value; the edit is spliced into the original text, because a full round-trip dump re-indents lists that mix
indentation styles (AgentJet's own YAMLs do) and rewrites `null`s. When a value cannot be
spliced (a flow map, a block scalar, a non-map in the way) the whole file goes through a
ruamel round-trip dump instead. Either way the result is re-read and must equal the
original data with exactly the requested changes, or nothing is written.

"""

from __future__ import annotations

import copy
import difflib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ajet_runner.resultdir.flag import atomic_write_bytes
from ajet_runner.statemachine.fixes.preflight import read_yaml_data
from ajet_runner.statemachine.fixes.repairs import del_dotted, set_dotted
from ajet_runner.statemachine.models import ConfigChange
from ajet_runner.statemachine.shell.command import point_command_at
from ajet_runner.store.records import Context

__all__ = ["PATCH_MARKER", "RUNNER_DIR", "PatchError", "patch_yaml_text", "patched_config_path", "read_yaml_data",
           "remove_patched_copy",
           "write_patched_yaml"]

PATCH_MARKER = ".ajet-runner-"  # the older naming (<stem>.ajet-runner-<tag>.yaml), still recognised
RUNNER_DIR = ".ajet-runner"


class PatchError(ValueError):
    """The changes could not be applied faithfully; no file was written."""


def patched_config_path(original: Path | str, tag: str) -> Path:
    """`<dir>/.ajet-runner/<tag>/<name>.yaml`: the original's file name in a runner-owned folder
    (a copy's copy lands in the same folder). The launcher insists on `.yaml`, so `.yml` gets one."""
    original = Path(original)
    if original.parent.parent.name == RUNNER_DIR:  # already a copy: <dir>/.ajet-runner/<old tag>/<name>
        original = original.parent.parent.parent / original.name
    name = original.name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = name.split(PATCH_MARKER)[0] or "config"
    safe_tag = re.sub(r"[^A-Za-z0-9_-]+", "-", tag).strip("-") or "patched"
    return original.parent / RUNNER_DIR / safe_tag / f"{name}.yaml"


def remove_patched_copy(copy: Path | str) -> None:
    """Delete a patched copy and the runner folders it leaves empty (never anything else)."""
    copy = Path(copy)
    if copy.parent.parent.name != RUNNER_DIR:
        return
    copy.unlink(missing_ok=True)
    for folder in (copy.parent, copy.parent.parent):
        try:
            folder.rmdir()
        except OSError:
            break  # not empty: another run's copy is there


def _round_trip_yaml() -> YAML:
    rt = YAML()
    rt.preserve_quotes = True
    rt.allow_duplicate_keys = True
    rt.width = 4096
    return rt


def _render(value: Any, quote: str = "") -> str:
    """`value` as one line of YAML, in the original quoting style when it was quoted."""
    if isinstance(value, str) and quote == '"':
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and quote == "'" and "\n" not in value:
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bool):
        return "True" if value else "False"  # AgentJet's house style; YAML 1.1 and 1.2 both read it
    if value is None:
        return "null"
    flow = yaml.safe_dump([value], default_flow_style=True, allow_unicode=True, width=2**31 - 1)
    return flow.strip()[1:-1]


def _double_quoted_end(rest: str) -> int | None:
    """Index after the closing quote of the double-quoted scalar `rest` opens (escapes skipped)."""
    i = 1
    while i < len(rest):
        if rest[i] == "\\":
            i += 2
            continue
        if rest[i] == '"':
            return i + 1
        i += 1
    return None


def _single_quoted_end(rest: str) -> int | None:
    """Index after the closing quote of the single-quoted scalar `rest` opens ('' is a quote)."""
    i = 1
    while i < len(rest):
        if rest[i] != "'":
            i += 1
        elif rest[i + 1 : i + 2] == "'":
            i += 2
        else:
            return i + 1
    return None


def _scalar_end(line: str, col: int) -> tuple[int, str] | None:
    """End column of the one-line scalar starting at `col`, and its quote; None if not one-line."""
    rest = line[col:]
    if not rest or rest[0] in "|>&!*[{":
        return None
    if rest[0] in "\"'":
        end = _double_quoted_end(rest) if rest[0] == '"' else _single_quoted_end(rest)
        return None if end is None else (col + end, rest[0])
    match = re.search(r"\s#", rest)
    body = rest[: match.start()] if match else rest
    body = body.rstrip(" \t\r\n")
    return (col + len(body), "") if body else None


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _load_round_trip(text: str) -> Any:
    """ruamel's round-trip data of `text`, or None when ruamel rejects it (the caller falls back)."""
    try:
        return _round_trip_yaml().load(text)
    except Exception:  # noqa: BLE001 - ruamel rejects some YAML PyYAML reads; the caller falls back
        return None


def _is_block_map(node: Any) -> bool:
    """A mapping written in block style: the only kind whose lines can be edited one by one."""
    return isinstance(node, CommentedMap) and not node.fa.flow_style()


def _splice_one(text: str, key: str, value: Any) -> str | None:
    """`text` with one dotted key set by editing only the lines concerned; None when not possible."""
    root = _load_round_trip(text)
    if not _is_block_map(root):
        return None
    lines = text.splitlines(keepends=True)
    parts = key.split(".")
    node: CommentedMap = root
    header: tuple[int, int] | None = None  # (line, col) of the key that opens `node`
    for depth, part in enumerate(parts):
        if part not in node:
            return _insert(text, lines, _newline(text), node, header, parts[depth:], value)
        if depth == len(parts) - 1:
            return _replace_scalar(lines, node, part, value)
        if not _is_block_map(node[part]):
            return None
        header = tuple(node.lc.key(part))
        node = node[part]
    return None


def _replace_scalar(lines: list[str], node: CommentedMap, part: str, value: Any) -> str | None:
    """The lines with the one-line scalar `node[part]` rewritten in place (an empty one filled)."""
    child = node[part]
    if isinstance(child, (CommentedMap, CommentedSeq)):
        return None
    key_line, key_col = node.lc.key(part)
    line_no, col = node.lc.value(part)
    span = _scalar_end(lines[line_no], col) if line_no == key_line else None
    if span is None:
        return _fill_empty(lines, key_line, key_col, child, value)
    end, quote = span
    line = lines[line_no]
    lines[line_no] = line[:col] + _render(value, quote) + line[end:]
    return "".join(lines)


def _holder(root: Any, parts: list[str]) -> CommentedMap | None:
    """The block map that holds the last of the dotted `parts`, or None when the path is not that."""
    node = root
    for part in parts[:-1]:
        if not _is_block_map(node) or part not in node:
            return None
        node = node[part]
    return node if _is_block_map(node) and parts[-1] in node else None


def _remove_one(text: str, key: str) -> str | None:
    """`text` without the line of a one-line scalar `key`; None when it is not that simple."""
    parts = key.split(".")
    node = _holder(_load_round_trip(text), parts)
    if node is None or isinstance(node[parts[-1]], (CommentedMap, CommentedSeq)):
        return None
    key_line, _ = node.lc.key(parts[-1])
    value_line, col = node.lc.value(parts[-1])
    lines = text.splitlines(keepends=True)
    if value_line != key_line or _scalar_end(lines[key_line], col) is None:
        return None
    del lines[key_line]
    return "".join(lines)


def _fill_empty(lines: list[str], line_no: int, col: int, current: Any, value: Any) -> str | None:
    """Put a value after `key:` on a line that has none (`key:` or `key:  # note`)."""
    if current is not None:
        return None
    line = lines[line_no]
    match = re.match(r"(.*?:)([ \t]*(#.*)?)(\r?\n)?$", line[col:], re.S)
    if not match:
        return None
    head = line[: col] + match.group(1)
    tail = line[len(head) :]
    lines[line_no] = f"{head} {_render(value)}{tail if tail.strip() else tail.lstrip(' ')}"
    return "".join(lines)


def _insert(text: str, lines: list[str], nl: str, node: CommentedMap, header: tuple[int, int] | None,
            rest: list[str], value: Any) -> str | None:
    """Add `rest` (missing keys, the last one holding `value`) as new lines inside `node`."""
    columns = None if node.fa.flow_style() else _child_indent(node, header)
    if columns is None:
        return None
    col, step = columns
    new: list[str] = []
    for depth, part in enumerate(rest):
        indent = " " * (col + depth * step)
        tail = f" {_render(value)}" if depth == len(rest) - 1 else ""
        new.append(f"{indent}{_render(part)}:{tail}{nl}")
    if header is None:  # the root: append at the end of the file
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += nl
        lines.extend(new)
    else:
        at = _block_end(lines, node.lc.key(list(node.keys())[-1])[0], col)
        lines[at:at] = new
    return "".join(lines)


def _child_indent(node: CommentedMap, header: tuple[int, int] | None) -> tuple[int, int] | None:
    """Column of `node`'s keys and the indentation step of new levels; None for an empty nested map."""
    keys = list(node.keys())
    if not keys:
        return (0, 2) if header is None else None
    col = node.lc.key(keys[0])[1]
    parent_col = header[1] if header else 0
    step = col - parent_col if header is not None and col > parent_col else 2
    return col, step


def _block_end(lines: list[str], last_key_line: int, col: int) -> int:
    """Index of the line after a map's last entry (its deeper-indented value included).

    Blank lines and comments after it are left where they are: they usually introduce the
    next section (`# ---- do not edit ----`).
    """
    end = last_key_line + 1
    for i in range(last_key_line + 1, len(lines)):
        body = lines[i].strip()
        if not body or body.startswith("#"):
            continue
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        if indent < col or (indent == col and not re.match(r"-(\s|$)", body)):
            break  # a sequence may sit at its key's indentation; anything else there is a sibling
        end = i + 1
    return end


def _round_trip_all(text: str, changes: list[ConfigChange]) -> str:
    """Fallback: set every change on ruamel's round-trip data and dump the whole file."""
    rt = _round_trip_yaml()
    seq_offset = 2 if re.search(r"^( *)\S[^\n]*:[ \t]*(#[^\n]*)?\r?\n\1  - ", text, re.M) else 0
    rt.indent(mapping=2, sequence=seq_offset + 2, offset=seq_offset)
    try:
        root = rt.load(text)
    except Exception as exc:  # any ruamel failure means this YAML cannot be round-tripped
        raise PatchError(f"the YAML cannot be round-tripped: {exc}") from exc
    if not isinstance(root, CommentedMap):
        raise PatchError("the YAML's root is not a mapping")
    for change in changes:
        node = root
        parts = change.key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), CommentedMap):
                if change.unset:
                    break
                node[part] = CommentedMap()
            node = node[part]
        else:
            if change.unset:
                node.pop(parts[-1], None)
            else:
                node[parts[-1]] = change.new
    from io import StringIO

    out = StringIO()
    rt.dump(root, out)
    return out.getvalue()


def _expected(before: dict[str, Any], changes: list[ConfigChange]) -> dict[str, Any]:
    """The data the patched YAML must load to: `before` with every change applied."""
    expected = copy.deepcopy(before)
    for change in changes:
        if change.unset:
            del_dotted(expected, change.key)
        else:
            set_dotted(expected, change.key, change.new)
    return expected


def _splice_all(text: str, changes: list[ConfigChange]) -> str | None:
    """`text` with every change made by line edits alone; None as soon as one cannot be."""
    patched: str | None = text
    for change in changes:
        if patched is None:
            break
        patched = _remove_one(patched, change.key) if change.unset else _splice_one(patched, change.key, change.new)
    return patched


def patch_yaml_text(text: str, changes: list[ConfigChange]) -> str:
    """The YAML text with `changes` applied (see the module doc); raises PatchError if it cannot."""
    try:
        before = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PatchError(f"the YAML cannot be parsed: {exc}") from exc
    if not isinstance(before, dict):
        raise PatchError("the YAML's root is not a mapping")
    expected = _expected(before, changes)

    def faithful(candidate: str | None) -> bool:
        if candidate is None:
            return False
        try:
            return yaml.safe_load(candidate) == expected
        except yaml.YAMLError:
            return False

    patched = _splice_all(text, changes)
    if patched is not None and faithful(patched):
        return patched
    try:
        patched = _round_trip_all(text, changes)
    except PatchError:
        raise
    except Exception as exc:  # ruamel's own limits become a refusal, not a crash
        raise PatchError(f"the YAML cannot be round-tripped: {exc}") from exc
    if faithful(patched):
        return patched
    raise PatchError("the changes could not be applied without altering other values")


def _atomic_write(dest: Path, text: str, mode: int | None) -> None:
    """Through the runner's one atomic writer: confined to the allowed roots, no symlink followed."""
    atomic_write_bytes(dest, text.encode("utf-8"), mode=mode)


def write_patched_yaml(source: Path | str, dest: Path | str, changes: list[ConfigChange]) -> str:
    """Write `source` with `changes` to `dest` atomically; return the unified diff source -> dest.

    `source` is never modified (a `dest` naming the same file is refused).
    """
    source, dest = Path(source), Path(dest)
    if dest.resolve() == source.resolve():
        raise PatchError(f"refusing to overwrite the original YAML {source}")
    with open(source, encoding="utf-8", newline="") as handle:
        original = handle.read()
    patched = patch_yaml_text(original, changes)
    _atomic_write(dest, patched, source.stat().st_mode & 0o777)
    diff = difflib.unified_diff(
        original.splitlines(keepends=True), patched.splitlines(keepends=True),
        fromfile=str(source), tofile=str(dest),
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in diff)


def patch_config_copy(ctx: Context, original: Path, exp_id: str, codebase: str,
                      new_changes: list[dict[str, Any]]) -> str:
    """Write every change so far (preflight and repairs, `ctx.yaml_changes`) onto a fresh copy of the
    user's YAML, point `ctx.config_path` and the command's `--conf` at it, and return this step's diff
    (previous copy → new copy). The user's file is never touched."""
    if not new_changes:
        return ""
    merged: dict[str, dict[str, Any]] = {c["key"]: dict(c) for c in ctx.yaml_changes}
    for c in new_changes:
        merged[c["key"]] = {**c, "old": merged.get(c["key"], c)["old"]}
    ctx.yaml_changes = list(merged.values())
    patched = patched_config_path(original, exp_id)
    before = Path(ctx.config_path).read_text(encoding="utf-8") if ctx.config_path else ""
    write_patched_yaml(original, patched, [ConfigChange.model_validate(c) for c in ctx.yaml_changes])
    ctx.config_path = str(patched)
    ctx.command = point_command_at(ctx.command, str(patched), codebase)
    after = patched.read_text(encoding="utf-8")
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        "config (before)", "config (after)"))
