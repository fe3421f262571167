"""Which part of a blueprint a line opens: its tag (`[exp_codebase_dir]`, `**exp_venv_exe**`) or,
for parts written without tags, its label ("实验目的", "Launch command").

Every function looks at the head of one line with string methods (and regexes anchored at the
start that cannot backtrack), so a line costs a few microseconds whatever it holds.
"""

from __future__ import annotations

import re

__all__ = ["NOTES", "FIELD_KEYWORDS", "line_head", "match_tag", "tag_at", "label_at", "late_tag"]

NOTES = "notes"

# Tag spellings (lowercase, `-`/space folded to `_`). Long names count with or without
# brackets; the short ones only inside brackets, where they cannot be ordinary words.
_TAGS: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("exp_purpose", "exp_goal", "exp_objective"),
    "exp_codebase_dir": ("exp_codebase_dir", "exp_codebase", "exp_code_dir", "exp_codebase_path"),
    "exp_venv_exe": ("exp_venv_exe", "exp_venv", "exp_python", "exp_python_exe", "exp_venv_python"),
    "exp_yaml_path": ("exp_yaml_path", "exp_yaml", "exp_config_path", "exp_conf", "exp_config"),
    "exp_launch_command": ("exp_launch_command", "exp_launch_cmd", "exp_command", "exp_launch",
                           "exp_run_command", "exp_cmd"),
    "exp_result_dir": ("exp_result_dir", "exp_results_dir", "exp_result_path", "exp_output_dir",
                       "exp_result"),
    "exp_max_time": ("exp_max_time", "exp_maxtime", "exp_time_limit", "exp_max_runtime"),
    "exp_swarm_server": ("exp_swarm_server", "exp_swarm_server_command", "exp_swarm_server_cmd",
                         "exp_swarm_command", "exp_swarm"),
    "exp_val_result_path": ("exp_val_result_path", "exp_val_result", "exp_val_results_path",
                            "exp_result_file", "exp_results_file"),
    "exp_sweep": ("exp_sweep", "exp_sweeps", "exp_grid"),  # statemachine/blueprint/sweep.py reads its text
    "exp_host": ("exp_host", "exp_ssh_host", "exp_login", "exp_remote_host", "exp_ssh"),  # shell/ssh_login.py
    NOTES: ("exp_notes", "exp_note", "exp_other", "exp_others", "exp_other_notes", "exp_extra",
            "exp_additional_notes", "exp_additional_info", "exp_misc"),
}
_BRACKET_ONLY: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("purpose",),
    "exp_codebase_dir": ("codebase_dir", "codebase"),
    "exp_venv_exe": ("venv_exe", "venv", "python"),
    "exp_yaml_path": ("yaml_path", "yaml"),
    "exp_launch_command": ("launch_command", "command"),
    "exp_result_dir": ("result_dir", "results_dir"),
    "exp_max_time": ("max_time", "maxtime"),
    "exp_swarm_server": ("swarm_server", "swarm"),
    "exp_val_result_path": ("val_result_path", "result_file"),
    "exp_sweep": ("sweep", "grid"),
    "exp_host": ("host", "login", "ssh", "ssh_host", "remote_host", "主机", "登录", "远程主机"),
    NOTES: ("notes", "note", "other", "others", "other_notes", "additional_notes", "misc", "其他", "备注"),
}
_TAG_OF = {alias: f for f, aliases in _TAGS.items() for alias in aliases}
_BRACKET_TAG_OF = {**_TAG_OF, **{a: f for f, aliases in _BRACKET_ONLY.items() for a in aliases}}

# Labels that open a part written without tags. Checked only on headings, numbered items and
# bold lines (plain lines need a colon), and only for parts that have no tag anywhere.
_LABELS: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("实验目的", "experiment purpose", "purpose of the experiment", "purpose"),
    "exp_codebase_dir": ("主实验代码路径", "实验代码路径", "代码路径", "main experiment code path",
                         "experiment code path", "codebase directory", "codebase dir", "codebase",
                         "code path"),
    "exp_venv_exe": ("python虚拟环境路径", "python 虚拟环境路径", "虚拟环境路径", "python虚拟环境",
                     "python virtual environment path", "python virtual environment",
                     "python executable", "python interpreter", "venv python", "virtualenv"),
    "exp_yaml_path": ("实验配置文件路径", "实验配置文件", "配置文件路径", "experiment config file path",
                      "experiment configuration file path", "config file path", "yaml path",
                      "config yaml", "yaml config", "configuration file"),
    "exp_launch_command": ("执行训练的命令", "训练命令", "启动命令", "执行命令", "运行命令",
                           "training execution command", "training command", "launch command",
                           "run command", "command to run"),
    "exp_result_dir": ("结果数据存储路径", "结果存储路径", "结果目录", "结果路径", "输出目录",
                       "result data storage path", "result directory", "results directory",
                       "result dir", "output directory"),
    "exp_max_time": ("最大运行时间", "最长运行时间", "运行时间", "时间限制", "运行时长",
                     "maximum runtime", "max runtime", "maximum run time", "max time",
                     "time limit", "time budget"),
    "exp_swarm_server": ("swarm服务器启动命令", "swarm 服务器启动命令", "swarm服务器", "swarm 服务器",
                         "swarm server command", "swarm server start command", "swarm server"),
    "exp_val_result_path": ("验证结果文件路径", "验证结果文件", "结果文件路径", "validation result path",
                            "validation results file", "val result path", "results file"),
    "exp_host": ("远程主机", "登录主机", "登录", "登陆", "主机", "ssh login", "ssh host", "remote host", "login"),
    NOTES: ("其他实验相关信息", "其他信息", "其它信息", "其他说明", "其他注意事项", "附加说明", "补充说明",
            "备注", "其他", "其它", "other notes", "additional notes", "additional information",
            "other information", "notes", "remarks"),
}
_LABELS_LONGEST_FIRST = sorted(((label, fld) for fld, labels in _LABELS.items() for label in labels),
                               key=lambda item: -len(item[0]))
_LONGEST_LABEL = len(_LABELS_LONGEST_FIRST[0][0])
_LABELS_BY_FIRST_CHAR: dict[str, list[tuple[str, str]]] = {}
for _label, _fld in _LABELS_LONGEST_FIRST:
    _LABELS_BY_FIRST_CHAR.setdefault(_label[:1], []).append((_label, _fld))

# Words that make a leading "label:" (or a label-only first line) a description of the field.
_PATH_WORDS = r"path|路径|dir|folder|目录|"
FIELD_KEYWORDS: dict[str, re.Pattern[str]] = {
    fld: re.compile(words, re.IGNORECASE)
    for fld, words in {
        "exp_purpose": r"purpose|目的|goal|objective|aim",
        "exp_codebase_dir": _PATH_WORDS + r"code|代码|root|repo",
        "exp_venv_exe": _PATH_WORDS + r"python|venv|virtual|环境|interpreter|解释器|exe",
        "exp_yaml_path": _PATH_WORDS + r"yaml|config|配置|file|文件",
        "exp_launch_command": r"command|cmd|命令|指令|launch|启动|run|运行",
        "exp_result_dir": _PATH_WORDS + r"result|结果|output|输出|存储",
        "exp_max_time": r"time|时间|时长|duration|limit|限制",
        "exp_swarm_server": r"command|cmd|命令|指令|launch|启动|run|运行|server|服务器|swarm",
        "exp_val_result_path": _PATH_WORDS + r"result|结果|file|文件|val|验证",
        "exp_host": r"host|主机|login|登录|登陆|ssh|server|服务器|machine|机器",
        NOTES: r"notes|说明|备注|信息|info|other|其他|其它|additional|附加|补充",
    }.items()
}

_LEAD_MARKUP = " \t*_`>#"
_OPEN_BRACKETS = "[［【"
_CLOSE_BRACKETS = "]］】"
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")
_PAREN_NOTE = re.compile(r"\s*[(（][^)）\n]{0,60}[)）]")  # "(absolute path)" after a label
_NUMBER_PREFIX = re.compile(r"\(?\d{1,3}[.)、．:：]?\)?\s+")
_SEPARATOR_CHARS = " \t*_`"
_SEPARATOR_MARKS = ":：="
_DASHES = "-—–"


def _skip_separator(s: str) -> str:
    """`s` without a leading separator: markup, then one run of `:`/`=` or of dashes followed by a space,
    then markup again ("**: value", " - value", "： value"). An opening backtick of the value stays."""
    bare = s.lstrip(_SEPARATOR_CHARS)
    if bare[:1] and bare[0] in _SEPARATOR_MARKS:
        return bare.lstrip(_SEPARATOR_MARKS).lstrip(" \t*_")
    if bare[:1] and bare[0] in _DASHES:
        rest = bare.lstrip(_DASHES)
        if rest[:1].isspace():
            return rest.lstrip(" \t*_")
    return s.lstrip(" \t*_")


def _fold(name: str) -> str:
    """A tag name lowercased with runs of spaces and dashes as one `_`."""
    return "_".join(name.lower().replace("-", " ").split())


def line_head(rest: str) -> str:
    """`rest` without leading markup and a number prefix ("**1. ", "## (2) "): where a tag or label starts."""
    s = rest.lstrip(_LEAD_MARKUP)
    if s[:1] == "(" or s[:1].isdigit():
        m = _NUMBER_PREFIX.match(s)
        if m is not None:
            s = s[m.end():].lstrip(_LEAD_MARKUP)
    return s


def match_tag(rest: str, *, strict: bool = False) -> tuple[str, str] | None:
    """(field, text after the tag) when `rest` starts with a tag, bracketed or not.

    `strict` (plain lines): a bare tag must be followed by a separator, so that
    "exp_result_dir will hold the report" stays prose.
    """
    return tag_at(line_head(rest), strict=strict)


def tag_at(s: str, *, strict: bool = False) -> tuple[str, str] | None:
    """`match_tag` on a line's `line_head`; most lines are rejected on their first characters."""
    if not s:
        return None
    tagged = _bracket_tag(s) if s[0] in _OPEN_BRACKETS else _bare_tag(s, strict)
    if tagged is None or tagged[0] is None:
        return None
    return tagged[0], _skip_separator(tagged[1]).strip()


def _bracket_tag(s: str) -> tuple[str | None, str] | None:
    """(the field a `[tag]` opening `s` names, the text after it); None without a closing bracket."""
    window = s[:61]  # the closing bracket must come within 60 characters
    close = min((k for c in _CLOSE_BRACKETS if (k := window.find(c, 1)) > 0), default=-1)
    if close < 0:
        return None
    return _BRACKET_TAG_OF.get(_fold(s[1:close].strip(" \t*_`"))), s[close + 1:]


def _bare_tag(s: str, strict: bool) -> tuple[str | None, str] | None:
    """(the field an unbracketed `exp_…` tag opening `s` names, the text after it); None when `s` does not
    open with a whole identifier (or, `strict`, the tag is not followed as a bare tag must be)."""
    if s[:3].lower() != "exp":  # every unbracketed tag starts with exp_
        return None
    m = _IDENT.match(s, 0, 64)
    if m is None:
        return None
    after = s[m.end():]
    if after[:1].isascii() and after[:1].isalnum():
        return None
    if strict and not _bare_tag_follows(after):
        return None
    return _TAG_OF.get(_fold(m.group(0))), after


def _bare_tag_follows(after: str) -> bool:
    """A bare tag on a plain line must end it or be followed by a separator (`:`, `=`, a dash, `(`)."""
    s = after.lstrip(" \t*_`")
    return not s or s[0] in ":：=-—–(（"


def label_at(s: str, *, colon: bool = False) -> tuple[str, str] | None:
    """(field, text after the label) when a line's head `s` starts with a known part label.

    `colon` (plain lines): only "Label: value" counts, so prose that happens to start
    with a label word is left alone.
    """
    if colon and ":" not in s and "：" not in s:
        return None
    best = _longest_label(s[:_LONGEST_LABEL + 1].lower())
    if best is None:
        return None
    after = s[best[0]:]
    m = _PAREN_NOTE.match(after)
    if m is not None:
        after = after[m.end():]  # "(absolute path)"
    if colon and after.lstrip(" \t*_`")[:1] not in (":", "："):
        return None
    return best[1], _skip_separator(after).strip()


def _longest_label(low: str) -> tuple[int, str] | None:
    """(length, field) of the longest known label opening `low` (lowercased) as a whole word."""
    for label, fld in _LABELS_BY_FIRST_CHAR.get(low[:1], ()):  # the first that fits is the longest
        if low.startswith(label):
            nxt = low[len(label): len(label) + 1]
            if not (nxt.isascii() and nxt.isalnum()):  # "purposes", "codebase2" are not labels
                return len(label), fld
    return None


def late_tag(rest: str) -> tuple[str, str] | None:
    """A bracketed `exp_` tag after a label in a heading or numbered line: "## 1. 实验目的 [exp_purpose]"."""
    for i, ch in enumerate(rest[:200]):
        if ch in _OPEN_BRACKETS and rest[i + 1: i + 70].lstrip(" `")[:4].lower() == "exp_":
            hit = tag_at(rest[i:])
            if hit is not None:
                return hit
    return None
