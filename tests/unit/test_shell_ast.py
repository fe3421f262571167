"""The launch command's syntax tree (tree-sitter-bash): bash's structure, byte spans, problems, lazy import."""

from __future__ import annotations

import subprocess
import sys

from ajet_runner.statemachine.shell.syntax import EXPOSED_CONTEXT, INERT_CONTEXT, parse, unquote


def _words(text: str) -> list[list[str]]:
    return [[w.value for w in c.words] for c in parse(text).commands]


def test_words_after_a_redirection_target_are_the_commands() -> None:
    """The grammar files `--with-ray` under the redirection; bash passes it to the command."""
    script = parse("python -m ajet.launcher > out.log --with-ray 2>&1 --x")
    (cmd,) = script.commands
    assert [w.value for w in cmd.words] == ["python", "-m", "ajet.launcher", "--with-ray", "--x"]
    assert cmd.writes_file
    ray = cmd.words[3]
    assert script.text(ray.gap, ray.end) == " --with-ray"  # the blank after `out.log`, not the redirection
    assert not parse("python x 2>&1 >/dev/null").commands[0].writes_file


def test_what_follows_a_heredoc_delimiter_belongs_to_the_command_and_the_chain() -> None:
    script = parse("bash <<'EOF' && echo done\npython -m ajet.launcher\nEOF\ncat <<'X' | bash\nls\nX\n"
                   "cat > f <<E --x\n$y\nE")
    bash, echo, cat, piped, more = script.commands
    assert [w.value for w in bash.words] == ["bash"]
    assert bash.heredocs[0].body == "python -m ajet.launcher\n" and bash.heredocs[0].literal
    assert [w.value for w in echo.words] == ["echo", "done"] and not echo.piped_in
    assert cat.piped_out and piped.piped_in and [w.value for w in piped.words] == ["bash"]
    assert [w.value for w in more.words] == ["cat", "--x"] and more.writes_file and not more.heredocs[0].literal
    assert [script.text(s.start, s.end) for s in script.segments] == [
        "bash <<'EOF'", "echo done", "cat <<'X' | bash\nls\nX", "cat > f <<E --x\n$y\nE"]
    assert script.segments[0].owns[1] == (script.data.index(b"python"), script.data.index(b"EOF\ncat") + 3)
    assert not script.problems


def test_a_compound_redirection_applies_inside_it() -> None:
    echo, = parse("{ echo --autokill; } > args").commands
    assert echo.writes_file
    assert not parse("{ echo x; } 2>&1 | cat").commands[0].writes_file


def test_what_a_substitution_feeds() -> None:
    """Output captured into an assignment is exposed; into a command's argument, that command's."""
    cmds = parse("A=$(echo a) python $(cat b) && [[ $(c) ]]; case $(d) in x) e;; esac").commands
    by_name = {c.words[0].value: c for c in cmds if c.words}
    assert by_name["echo"].captured_in == EXPOSED_CONTEXT
    assert by_name["cat"].captured_in == cmds.index(by_name["python"])
    assert by_name["c"].captured_in == INERT_CONTEXT and by_name["d"].captured_in == INERT_CONTEXT
    assert by_name["e"].captured_in is None


def test_constructs_bashlex_could_not_read() -> None:
    assert _words("case $1 in a|b) python x;; *) echo no;; esac") == [["python", "x"], ["echo", "no"]]
    assert _words("[[ -f a.yaml && $x == y* ]] && run") == [["run"]]
    assert _words("timeout $((3600 * 10)) python x") == [["timeout", "$((3600 * 10))", "python", "x"]]
    script = parse("(( n = 2 )) && x")
    assert not script.problems and [r.kind for r in script.regions] == ["inert"]
    assert parse("timeout $((3600 * 10)) python x").commands[0].words[1].expanded


def test_values_quotes_and_expansions() -> None:
    (cmd,) = parse("""p -""-autokill 'a b' "c \\"d\\" \\$e" $'x' "$HOME" ~/y *.yaml {a,b} \\-\\-k""").commands
    assert [w.value for w in cmd.words] == ["p", "--autokill", "a b", 'c "d" $e', "$'x'", "$HOME", "~/y", "*.yaml",
                                           "{a,b}", "--k"]
    assert [w.expanded for w in cmd.words] == [False, False, False, False, True, True, False, True, True, False]
    assert cmd.words[5].quoted_whole and not cmd.words[2].quoted_whole
    assert unquote('-""-autokill') == "--autokill" and unquote("'--a'") == "--a"


def test_spans_are_utf8_byte_offsets() -> None:
    text = "cd 目录 && python -m ajet.launcher --conf 配置.yaml"
    script = parse(text)
    conf = script.commands[1].words[-1]
    assert conf.value == "配置.yaml" and script.data[conf.start : conf.end] == "配置.yaml".encode()
    assert conf.start != text.index("配置")  # a character index would be wrong here


def test_problems_name_line_and_column() -> None:
    missing = parse("if true; then\n  python x\n").problems
    assert [p.message for p in missing] == ["missing `fi` at line 3, column 1"]
    unexpected = parse("echo a\necho 'b").problems
    assert unexpected and unexpected[0].message == "unexpected `'b` at line 2, column 6"
    assert not parse("a && b; c | d\n").problems


def test_deep_nesting_does_not_recurse() -> None:
    """A 10,000-character command can nest 5,000 `$(` deep: the walk uses its own stack."""
    text = "$(" * 5_000 + "x" + ")" * 5_000
    assert [w.value for w in parse(text).commands[-1].words] == ["x"]


def test_the_grammar_is_loaded_on_first_parse_not_on_import() -> None:
    """`ajet-runner --help` imports the command analysis (through the preflight) but never tree-sitter."""
    code = ("import sys\nfrom ajet_runner.cli.app import app\nfrom typer.testing import CliRunner\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "import ajet_runner.statemachine.shell.command\n"
            "print(sorted(m for m in sys.modules if m.startswith('tree_sitter')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout
    parsed = subprocess.run([sys.executable, "-c", "import sys; from ajet_runner.statemachine.shell.syntax import "
                             "parse; parse('a'); print('tree_sitter' in sys.modules)"],
                            capture_output=True, text=True, check=True, timeout=120)
    assert parsed.stdout.strip() == "True"


def test_code_points_that_crash_tree_sitter_bash_are_parsed_in_a_process_that_survives() -> None:
    """tree-sitter-bash 0.25.1 segfaults on `{` before a code point far above the BMP in about two
    processes of three; five fresh processes all surviving means the parser never sees those bytes."""
    probe = (
        "from ajet_runner.statemachine.shell.syntax import parse\n"
        "for c in (0x7A000, 0xC1E8F, 0xE0100, 0xF0000, 0x10FFFF):\n"
        "    for text in ('{' + chr(c), '{' + chr(c) + ' ', 'x{' + chr(c), 'echo {' + chr(c) + ';'):\n"
        "        script = parse(text)\n"
        "        assert script.data == text.encode(), text\n"
        "print('survived')\n"
    )
    for _ in range(5):
        run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        assert (run.returncode, run.stdout.strip()) == (0, "survived"), run.stderr[-500:]
