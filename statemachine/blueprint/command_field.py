"""The launch command of a blueprint: exactly the command field, or a refusal that quotes the line.

A command part holds the command (a fenced or indented block, the lines under `- command:`,
a backticked span) and, around it, markup and commentary: a label ("Training execution
command:"), a `Note:` after it, remarks in later paragraphs. The command is the block as
written (relative indentation and `\\` continuations kept, the common indentation and trailing
spaces removed, a copied `$ ` prompt dropped), so `logs/attempt-N.command.sh` holds what the
author wrote. Nothing is guessed into the shell: a line inside the command that is not shell —
a markdown bullet (`- retry: …`), a `Note:` in the middle, an English or Chinese sentence — is
refused with the line quoted, and text after the command that starts like another command
(`python …` after a blank line) is refused too, since nobody can tell whether it should run.
Heredoc bodies and quoted strings spanning lines are not judged: they are data.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from ajet_runner.statemachine.blueprint.doc import Block, dedent
from ajet_runner.statemachine.blueprint.tags import FIELD_KEYWORDS
from ajet_runner.statemachine.blueprint.values import is_placeholder, unquote

__all__ = ["CommandRead", "Piece", "read_command", "non_shell_reason", "looks_like_a_command"]

Piece = tuple[str, "str | Block"]  # ("text", line) or ("code", the fenced/indented block)

_NOTE_LABEL = re.compile(r"(?:note|notes|hint|tip|tips|warning|remark|ps|nb|注意|提示|备注|说明|警告|注)\s*[:：]",
                         re.IGNORECASE)
_CAPITAL_LABEL = re.compile(r"[A-Z][a-z]+(?: [A-Za-z]+){0,3}\s?:(?:\s|$)")
_BULLET = re.compile(r"(?:[-*+•]|\d{1,3}[.)])(?:\s|$)")
_KEY_BULLET = re.compile(r"[-*+•]\s+[\w\u4e00-\u9fff][\w \u4e00-\u9fff-]{0,30}[:：](?:\s|$)")
_HEREDOC = re.compile(r"<<-?[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_FENCE_MARK = re.compile(r"(?:`{3,}|~{3,})[\w+-]{0,20}")
_LABEL_SEP = re.compile(r"[:：](?!//)(?!\d)")
_LABEL_FORBIDDEN = re.compile(r"`|&&|\s--?\w|=|\||\$")


def _words(text: str) -> list[str]:
    return text.split()


# Capitalised English words that start an instruction or a sentence, never a program.
_SENTENCE_STARTERS = frozenset(_words("""
Then Wait Run After Before Make Use Start Please Do Don't Note Check Ensure See When Once Also
Finally First Next Leave Keep If This The It You We Remember Watch Monitor Stop Kill Adjust Change
Replace Set Copy Open Go Continue Afterwards Meanwhile Optionally Otherwise Here There Now Later Let
Try
"""))
# Programs a remark never starts with: text after the command that begins with one is another command.
_COMMAND_WORDS = frozenset(_words("""
python python3 bash sh zsh cd export source . ajet-swarm torchrun accelerate deepspeed nohup env
timeout tmux sleep pip pip3 uv conda srun proxychains proxychains4 ray vllm exec set unset mkdir rm
cp mv ln cat echo tee
"""))
_LAUNCHER_HINTS = ("ajet.launcher", "ajet-launcher", "ajet/launcher.py", "ajet-swarm", "ajet.swarm_cli")


@dataclass
class CommandRead:
    """What a command part holds: the command, commentary for the notes, and why it is refused."""

    command: str = ""
    notes: list[str] = field(default_factory=list)
    refusal: str = ""
    warnings: list[str] = field(default_factory=list)


def _is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def non_shell_reason(line: str, *, continued: bool = False) -> str:
    """Why `line` (one line of a command block) is not shell, or "" when it may be.

    Conservative: only what no shell line looks like — a markdown list item, a labelled note, a
    sentence that starts with a capitalised English word or with a Chinese character. `continued`:
    the line continues the previous one (`\\`), so it holds arguments: only a `- key:` bullet and a
    note label are judged.
    """
    s = line.strip()
    if not s or s.startswith("#"):
        return ""
    if _KEY_BULLET.match(s):
        return "a markdown list item"
    if _NOTE_LABEL.match(s):
        return "a note"
    return "" if continued else _prose_reason(s)


def _prose_reason(s: str) -> str:
    """Why a stripped, non-empty line that starts a command reads as markdown or prose, or ""."""
    if _BULLET.match(s):
        return "a markdown list item"
    if _is_cjk(s[0]):
        return "prose"
    words = s.split()
    if words[0] in _SENTENCE_STARTERS and len(words) > 1:
        return "prose"
    if _CAPITAL_LABEL.match(s):
        return "a label"
    return "prose" if _is_english_sentence(s, words) else ""


def _is_english_sentence(s: str, words: list[str]) -> bool:
    """Three or more words, a capitalised first word, a final stop and no shell punctuation: a sentence."""
    first = words[0]
    return (len(words) >= 3 and first[:1].isupper() and first[1:].islower() and first.isalpha()
            and s[-1] in ".!?" and not any(c in s for c in "$|&;<>=`{}\\"))


def looks_like_a_command(line: str) -> bool:
    """Whether a line after the command (past a blank line) starts like a command of its own."""
    s = line.strip()
    if not s:
        return False
    first = s.split()[0]
    if first in _COMMAND_WORDS or first.startswith(("python", "./", "/", "~/")):
        return True
    name, eq, _ = first.partition("=")
    return bool(eq) and name.isidentifier() and name.upper() == name


def _quote_state(line: str, state: str) -> str:
    """The quote open at the end of `line` ("", "'" or '"'), given the one open at its start."""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\" and state != "'":  # escapes the next character, except inside single quotes
            i += 2
            continue
        if state:
            state = "" if ch == state else state
        elif ch in "'\"":
            state = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break  # a comment: quotes in it open nothing
        i += 1
    return state


def _first_non_shell(lines: list[str]) -> tuple[int, str]:
    """(index, reason) of the first line that is not shell, or (-1, "")."""
    heredoc = ""
    quote = ""
    continued = False
    for k, line in enumerate(lines):
        if heredoc:
            if line.strip() == heredoc:
                heredoc = ""
            continue
        if not quote:
            reason = non_shell_reason(line, continued=continued)
            if reason:
                return k, reason
        starts_in_quote = bool(quote)
        quote = _quote_state(line, quote)
        if not quote and not starts_in_quote:
            heredoc = _heredoc_word(line)
        continued = line.rstrip().endswith("\\") and not quote
    return -1, ""


def _heredoc_word(line: str) -> str:
    """The word that ends the here-document `line` opens (`<<EOF`, not a `<<<` here-string), or ""."""
    m = _HEREDOC.search(line)
    return m.group(2) if m is not None and "<<<" not in line else ""


def _strip_prompts(lines: list[str]) -> list[str]:
    """A copied shell prompt (`$ cmd`) is markup, outside heredocs."""
    if any("<<" in ln for ln in lines):
        return lines
    return [ln.lstrip()[2:] if ln.lstrip().startswith("$ ") else ln for ln in lines]


def _finish(lines: list[str]) -> list[str]:
    """The block as a command: trailing spaces and blank first/last lines removed, dedented."""
    block = dedent("\n".join(ln.rstrip() for ln in lines)).split("\n")
    while block and not block[0].strip():
        block.pop(0)
    while block and not block[-1].strip():
        block.pop()
    return _strip_prompts(block)


def _strip_command_label(text: str, fld: str) -> str:
    """Drop a leading label ("Training execution command:", "执行训练的命令（字符串）：") — only a label:
    the words before the colon start with a capital or hold a Chinese character, or end the line."""
    keywords = FIELD_KEYWORDS[fld]
    lines = text.split("\n")
    idx = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if idx is None:
        return ""
    first = lines[idx].strip()
    for sep in _LABEL_SEP.finditer(first, 0, 121):
        prefix = first[: sep.start()].strip(" *_")
        after = first[sep.end():].strip()
        if _is_command_label(prefix, after, keywords):
            lines[idx] = after
            break
    return "\n".join(lines).strip("\n")


def _is_command_label(prefix: str, after: str, keywords: re.Pattern[str]) -> bool:
    """Whether `prefix` (the words before a colon) labels the part: one of its `keywords`, nothing a
    command holds, and label-like (a capital or Chinese start, or nothing after the colon)."""
    labelish = prefix[:1].isupper() or any(_is_cjk(c) for c in prefix) or not after
    return bool(keywords.search(prefix)) and not _LABEL_FORBIDDEN.search(prefix) and labelish


def _refuse(fld: str, line: str, reason: str) -> str:
    what = "the swarm server command" if fld == "exp_swarm_server" else "the launch command"
    return (f"{what} holds a line that is not shell ({reason}): {line.strip()!r}. Only the command itself "
            "may be in the command field: move remarks out of the block (a `- hint:` bullet or a `Note:` "
            "paragraph after it), or put the whole command in a ``` fence")


def _check(read: CommandRead, lines: list[str], fld: str) -> None:
    k, reason = _first_non_shell(lines)
    if k >= 0:
        read.refusal = _refuse(fld, lines[k], reason)


def _after(read: CommandRead, texts: list[str], fld: str) -> None:
    """Text after the command: commentary for the notes, unless one of its lines starts like a command."""
    body = dedent("\n".join(texts)).strip("\n")
    if not body.strip():
        return
    in_code = False
    for line in body.split("\n"):
        if line.strip().startswith(("```", "~~~")):
            in_code = not in_code  # an unchosen code block: kept as a note, with a warning of its own
            continue
        if not in_code and looks_like_a_command(line) and not read.refusal:
            read.refusal = (f"after the command comes more text that reads as a command: {line.strip()!r}. "
                            "It is not run, and nobody can tell whether it should be: write the whole command as "
                            "one block (a ``` fence), or start a remark with `Note:`")
    read.notes.append(body)


def read_command(first: str, body: list[Piece], fld: str = "exp_launch_command") -> CommandRead:
    """The command of a part whose inline text (after the tag or key) is `first` and whose following
    lines and code blocks are `body`."""
    read = CommandRead()
    codes = [k for k, (kind, _) in enumerate(body) if kind == "code"]
    if codes:
        _from_code(read, first, body, codes, fld)
    else:
        texts = [str(p) for kind, p in body if kind == "text"]
        _from_text(read, first, texts, fld)
    if is_placeholder(read.command):
        read.command = ""
    return read


def _content(block: Block) -> list[str]:
    return block.content.rstrip("\n").split("\n")


def _text_of(piece: str | Block, *, fenced: bool = False) -> list[str]:
    """A piece's lines: a text line as it is, a code block's content (between fence lines when `fenced`)."""
    if isinstance(piece, Block):
        return ["```", *_content(piece), "```"] if fenced else _content(piece)
    return [piece]


def _from_code(read: CommandRead, first: str, body: list[Piece], codes: list[int], fld: str) -> None:
    pick, chosen = _launcher_block(body, codes)
    lines = _finish(_content(chosen))
    read.command = "\n".join(lines)
    _check(read, lines, fld)
    before = [line for _, p in body[:pick] for line in _text_of(p)]
    lead = "\n".join([first, *before]).strip()
    if lead and not _is_label_only(lead, fld):
        read.notes.append(dedent(lead))
    if len(codes) > 1:
        read.warnings.append(f"{fld} holds {len(codes)} code blocks: the one at line {chosen.start + 1} runs "
                             "(it starts the launcher); the others are kept in the notes and not run")
    _after(read, [line for _, p in body[pick + 1:] for line in _text_of(p, fenced=True)], fld)


def _launcher_block(body: list[Piece], codes: list[int]) -> tuple[int, Block]:
    """(index in `body`, block) of the code block that runs: the first naming the launcher, else the first."""
    blocks = [b for k in codes if isinstance(b := body[k][1], Block)]
    texts = ["\n".join(_content(b)) for b in blocks]
    pick = next((k for k, t in zip(codes, texts, strict=True) if any(h in t for h in _LAUNCHER_HINTS)), codes[0])
    return pick, blocks[codes.index(pick)]


def _is_label_only(text: str, fld: str) -> bool:
    """A label line before the command block ("Training execution command:", "- command:")."""
    if "\n" in text or len(text) > 120:
        return False
    s = text.strip(" *_`")
    return s.endswith((":", "：")) and (FIELD_KEYWORDS[fld].search(s) is not None or len(s) <= 40)


def _from_text(read: CommandRead, first: str, texts: list[str], fld: str) -> None:
    body = dedent("\n".join(texts))
    text = f"{first}\n{body}" if first.strip() else body
    text = unquote(_strip_command_label(text, fld))
    # A fence marker left unclosed is markup the author forgot to close, never shell.
    lines = [ln for ln in text.split("\n") if not _FENCE_MARK.fullmatch(ln.strip())]
    start = next((k for k, ln in enumerate(lines) if ln.strip()), len(lines))
    end = start
    while end < len(lines) and lines[end].strip():
        end += 1
    para = lines[start:end]
    rest = lines[end:]
    cut = _note_cut(para)
    if cut >= 0:
        rest = para[cut:] + rest
        para = para[:cut]
    para = _unbacktick(read, para, fld)
    lines_out = _finish(para)
    read.command = "\n".join(lines_out)
    if not read.refusal:
        _check(read, lines_out, fld)
    _after(read, rest, fld)


def _note_cut(para: list[str]) -> int:
    """Index of a `Note:` line that ends the command (not inside a `\\` continuation), or -1."""
    continued = False
    for k, line in enumerate(para):
        if k > 0 and not continued and _NOTE_LABEL.match(line.strip()):
            return k
        continued = line.rstrip().endswith("\\")
    return -1


def _unbacktick(read: CommandRead, para: list[str], fld: str) -> list[str]:
    """Lines written in backticks lose them; a sentence holding one backticked command gives that span
    (the sentence goes to the notes); a sentence with several is refused."""
    out: list[str] = []
    for line in para:
        s = line.strip()
        if len(s) >= 2 and s[0] == "`" and s[-1] == "`" and "`" not in s[1:-1]:
            out.append(line[: len(line) - len(line.lstrip())] + s[1:-1])
            continue
        if len(para) == 1 and "`" in s:
            picked = _backticked_command(read, s)
            if picked is not None:
                return picked
        out.append(line)
    return out


def _backticked_command(read: CommandRead, s: str) -> list[str] | None:
    """The one backticked command (with a space) in sentence `s`, the sentence noted; `s` itself, refused,
    when it holds several; None when it holds none."""
    commands = [sp for sp in re.findall(r"`([^`\n]+)`", s) if " " in sp.strip()]
    if len(commands) == 1:
        read.notes.append(s)
        return [commands[0].strip()]
    if len(commands) > 1:
        read.refusal = (f"the command is a sentence with {len(commands)} backticked commands: {s!r}. "
                        "Write the one command that runs alone on its line (or in a ``` fence)")
        return [s]
    return None
