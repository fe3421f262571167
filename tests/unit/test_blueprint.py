"""Blueprint parsing (every layout, both languages) and validation against real files."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.blueprint.parse import load_blueprint, parse_blueprint, validate_blueprint
from ajet_runner.statemachine.models import Blueprint, Level, Problem
from tests.load import examples

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "blueprints"
EXPECTED = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))


def _doc(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def joined(command: str) -> str:
    """`command` with every `\\` continuation (and the next line's indentation) as one space."""
    return re.sub(r"[ \t]*\\\n[ \t]*", " ", command)


def _fields(problems: list[Problem]) -> set[tuple[str, str]]:
    return {(p.level.value, p.field) for p in problems}


# ------------------------------------------------------------------------------- corpus


def test_corpus_is_complete() -> None:
    files = sorted(p.name for p in CORPUS.glob("*.md"))
    assert len(files) >= 10
    assert files == sorted(EXPECTED), "every corpus blueprint needs an entry in expected.json"
    assert any(name.startswith("zh_") for name in files) and any(name.startswith("en_") for name in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_blueprint_parses_to_expected_values(name: str) -> None:
    expected = dict(EXPECTED[name])
    expected_problems = expected.pop("problems_without_disk")
    expected_max_time_text = expected.pop("exp_max_time_text")
    bp = parse_blueprint((CORPUS / name).read_text(encoding="utf-8"))
    # This corpus writes a command with its `\` continuations joined (docs/blueprint-layouts.md §1, the
    # `launch_command_joined` convention); the parser keeps the command as written.
    assert {**bp.public(), "exp_launch_command": joined(bp.exp_launch_command)} == expected
    assert bp.exp_max_time_text == expected_max_time_text
    found = sorted(f"{p.level.value}:{p.field}" for p in validate_blueprint(bp, check_disk=False))
    assert found == expected_problems


# ------------------------------------------------------------------------------ layouts

_FULL_EN = """
## [exp_purpose]
Compare lr 1e-6 with blueprint_2.

## [exp_codebase_dir]
/work/code

## [exp_venv_exe]
/work/code/.venv/bin/python

## [exp_yaml_path]
conf/a.yaml

## [exp_launch_command]
python -m ajet.launcher --conf conf/a.yaml

## [exp_result_dir]
/work/results/a

## [exp_max_time]
12 hours
"""


def test_headings_with_values_on_the_next_line() -> None:
    bp = parse_blueprint(_doc(_FULL_EN))
    assert bp.exp_purpose == "Compare lr 1e-6 with blueprint_2."
    assert bp.exp_codebase_dir == "/work/code"
    assert bp.exp_venv_exe == "/work/code/.venv/bin/python"
    assert bp.exp_yaml_path == "conf/a.yaml"
    assert bp.exp_launch_command == "python -m ajet.launcher --conf conf/a.yaml"
    assert bp.exp_result_dir == "/work/results/a"
    assert bp.exp_max_time_seconds == 12 * 3600
    assert bp.exp_max_time_text == "12 hours"
    assert bp.notes == ""


@pytest.mark.parametrize("level", ["#", "###", "######"])
def test_any_heading_level(level: str) -> None:
    bp = parse_blueprint(_doc(_FULL_EN).replace("## ", f"{level} "))
    assert bp.exp_codebase_dir == "/work/code"
    assert bp.exp_max_time_seconds == 12 * 3600


def test_heading_with_tag_and_label_and_value_on_same_line() -> None:
    bp = parse_blueprint(_doc("""
        ### 2. [exp_codebase_dir] Main experiment code path (absolute path): /a/b
        ### [exp_venv_exe] Python executable
        /a/b/.venv/bin/python
        ### exp_result_dir: `/r/1`
    """))
    assert (bp.exp_codebase_dir, bp.exp_venv_exe, bp.exp_result_dir) == ("/a/b", "/a/b/.venv/bin/python", "/r/1")


def test_numbered_list_chinese_full_width_colons() -> None:
    bp = parse_blueprint(_doc("""
        1. [exp_purpose] 实验目的（一段文本）： 对比 blueprint_1，只改了学习率。
        2. [exp_codebase_dir] 主实验代码路径（绝对路径）： /mnt/a/code
        3. [exp_venv_exe] python虚拟环境路径（python的绝对路径）: /mnt/a/venv/bin/python
        4. [exp_yaml_path] 实验配置文件路径（相对路径，相对于主实验代码路径）： tests/x.yaml
        5. [exp_launch_command] 执行训练的命令（字符串）： python -m ajet.launcher --conf tests/x.yaml
        6. [exp_result_dir] 结果数据存储路径（绝对路径）： /mnt/a/results
        7. [exp_max_time] 运行时间不超过 ${MaxTime}，每个实验强制在 ${MaxTime} 后终止。${MaxTime} = 30分钟
        8. 其他实验相关信息（可选）： 上次 mean_reward 0.5。
    """))
    assert bp.exp_purpose == "对比 blueprint_1，只改了学习率。"
    assert bp.exp_codebase_dir == "/mnt/a/code"
    assert bp.exp_venv_exe == "/mnt/a/venv/bin/python"
    assert bp.exp_yaml_path == "tests/x.yaml"
    assert bp.exp_launch_command == "python -m ajet.launcher --conf tests/x.yaml"
    assert bp.exp_result_dir == "/mnt/a/results"
    assert bp.exp_max_time_seconds == 1800
    assert bp.notes == "上次 mean_reward 0.5。"


def test_full_width_brackets_and_numbers() -> None:
    bp = parse_blueprint("１．［exp_codebase_dir］：/a/code\n２．【exp_max_time】：３小时\n")
    assert bp.exp_codebase_dir == "/a/code"
    assert bp.exp_max_time_seconds == 3 * 3600


def test_bold_bullets_backticks_and_bare_tags() -> None:
    bp = parse_blueprint(_doc("""
        **[exp_purpose]**: Baseline.
        **exp_codebase_dir**: `/c`
        - [exp_venv_exe]: `/c/.venv/bin/python`
        * `exp_yaml_path`: `a.yaml`
        [exp_result_dir] /r
        exp_max_time = 45 min
        - **[exp_launch_command]:** `python -m ajet.launcher --conf a.yaml`
    """))
    assert bp.exp_purpose == "Baseline."
    assert bp.exp_codebase_dir == "/c"
    assert bp.exp_venv_exe == "/c/.venv/bin/python"
    assert bp.exp_yaml_path == "a.yaml"
    assert bp.exp_result_dir == "/r"
    assert bp.exp_max_time_seconds == 45 * 60
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml"


def test_value_on_following_indented_lines_of_a_list_item() -> None:
    bp = parse_blueprint(_doc("""
        2. [exp_codebase_dir] Main experiment code path (absolute path):
            /home/u/agentjet
        3. [exp_result_dir]
            - /home/u/results
    """))
    assert bp.exp_codebase_dir == "/home/u/agentjet"
    assert bp.exp_result_dir == "/home/u/results"


def test_example_lines_lose_to_the_real_value() -> None:
    bp = parse_blueprint(_doc("""
        3. [exp_venv_exe] Python virtual environment path (absolute path to python executable):
            Path to the Python executable. E.g.: /mnt/data_cpfs/agentjet/project/.venv/bin/python
            /srv/real/.venv/bin/python
    """))
    assert bp.exp_venv_exe == "/srv/real/.venv/bin/python"


def test_an_example_is_used_when_it_is_all_there_is() -> None:
    bp = parse_blueprint("[exp_venv_exe] e.g. /opt/venv/bin/python\n")
    assert bp.exp_venv_exe == "/opt/venv/bin/python"


def test_whole_document_wrapped_in_an_indented_markdown_fence() -> None:
    inner = textwrap.indent(_doc(_FULL_EN), "    ")
    text = f"Here is the blueprint you asked for:\n\n```markdown\n{inner}```\n\nGood luck!\n"
    bp = parse_blueprint(text)
    assert bp.exp_codebase_dir == "/work/code"
    assert bp.exp_launch_command == "python -m ajet.launcher --conf conf/a.yaml"
    assert bp.exp_max_time_seconds == 12 * 3600
    assert bp.notes == ""  # the chat around the wrapper is not part of the blueprint


def test_nested_fenced_command_with_continuations_and_prose_after() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_launch_command]
        Training execution command:
        ```bash
        cd /x && \\
          export A=1 && \\
          python -m ajet.launcher \\
            --conf tests/a.yaml \\
            --with-ray
        ```
        Note: adjust the command to the machine.
        ## [exp_result_dir]
        /r
    """))
    assert bp.exp_launch_command == (  # as written: continuations and relative indentation kept
        "cd /x && \\\n  export A=1 && \\\n  python -m ajet.launcher \\\n    --conf tests/a.yaml \\\n    --with-ray")
    assert bp.exp_result_dir == "/r"
    assert "(under [exp_launch_command]) Note: adjust the command to the machine." in bp.notes


def test_fenced_lines_without_continuations_stay_a_script() -> None:
    """Several commands are never `&&`-joined: the block runs as the body of a script."""
    bp = parse_blueprint(_doc("""
        [exp_launch_command]
        ```sh
        # go to the code
        $ cd /x
        export A="1 2"
        source .venv/bin/activate;
        python -m ajet.launcher --conf a.yaml |
          tee log.txt
        ```
    """))
    assert bp.exp_launch_command == (
        '# go to the code\ncd /x\nexport A="1 2"\nsource .venv/bin/activate;\n'
        "python -m ajet.launcher --conf a.yaml |\n  tee log.txt"
    )


def test_heredoc_and_if_blocks_are_kept_verbatim() -> None:
    block = "cat > f <<'EOF'\n$ not a prompt\n  touch x\nEOF\nif true; then\n  echo \\\n    ok\nfi"
    bp = parse_blueprint(f"## [exp_launch_command]\n```bash\n{block}\n```\n")
    assert bp.exp_launch_command == block


def test_unfenced_command_paragraph_stops_at_prose() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_launch_command]
        cd /x && \\
            python -m ajet.launcher --conf a.yaml
        Note: run it in tmux.

        More prose.
    """))
    assert bp.exp_launch_command == "cd /x && \\\n    python -m ajet.launcher --conf a.yaml"
    assert "(under [exp_launch_command]) Note: run it in tmux.\n\nMore prose." in bp.notes


def test_command_in_backticks_inside_a_sentence() -> None:
    bp = parse_blueprint("5. [exp_launch_command] Run `python -m ajet.launcher --conf a.yaml` from the codebase\n")
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml"


def test_heading_comment_lines_inside_a_fence_are_not_headings() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_launch_command]
        ```bash
        # [exp_result_dir] is not a part here
        python -m ajet.launcher --conf a.yaml
        ```
        ## [exp_result_dir]
        /r
    """))
    assert bp.exp_launch_command == "# [exp_result_dir] is not a part here\npython -m ajet.launcher --conf a.yaml"
    assert bp.exp_result_dir == "/r"


def test_unclosed_fence_does_not_swallow_the_rest() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_launch_command]
        ```bash
        python -m ajet.launcher --conf a.yaml
        ## [exp_result_dir]
        /r
    """))
    assert bp.exp_result_dir == "/r"
    assert bp.exp_launch_command.startswith("python -m ajet.launcher --conf a.yaml")


def test_yaml_path_is_kept_as_written_and_resolved_by_the_model() -> None:
    rel = parse_blueprint("[exp_codebase_dir] /c\n[exp_yaml_path] conf/./a.yaml\n")
    assert rel.exp_yaml_path == "conf/./a.yaml"
    assert rel.yaml_abspath() == "/c/conf/a.yaml"
    absolute = parse_blueprint("[exp_codebase_dir] /c\n[exp_yaml_path] /c/conf/a.yaml\n")
    assert absolute.exp_yaml_path == "/c/conf/a.yaml"
    assert absolute.yaml_abspath() == "/c/conf/a.yaml"


def test_yaml_prefers_the_yaml_file_over_other_paths() -> None:
    bp = parse_blueprint("[exp_yaml_path] relative to /c (the codebase): conf/a.yml\n")
    assert bp.exp_yaml_path == "conf/a.yml"


def test_home_and_set_variables_are_expanded_in_paths_not_in_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AJET_TEST_ROOT", "/data/ajet")
    monkeypatch.setenv("HOME", "/home/tester")
    monkeypatch.delenv("AJET_TEST_UNSET", raising=False)
    bp = parse_blueprint(_doc("""
        [exp_codebase_dir] $AJET_TEST_ROOT/code
        [exp_venv_exe] ~/venv/bin/python
        [exp_result_dir] ${AJET_TEST_UNSET}/results
        [exp_launch_command] cd $AJET_TEST_ROOT/code && python -m ajet.launcher --conf a.yaml
    """))
    assert bp.exp_codebase_dir == "/data/ajet/code"
    assert bp.exp_venv_exe == "/home/tester/venv/bin/python"
    assert bp.exp_result_dir == "${AJET_TEST_UNSET}/results"
    assert bp.exp_launch_command == "cd $AJET_TEST_ROOT/code && python -m ajet.launcher --conf a.yaml"
    problems = validate_blueprint(bp, check_disk=False)
    message = next(p.message for p in problems if p.field == "exp_result_dir")
    assert "absolute" in message and "AJET_TEST_UNSET" in message


def test_table_layout() -> None:
    bp = parse_blueprint(_doc("""
        | part | value |
        |---|---|
        | [exp_codebase_dir] | `/c` |
        | `exp_max_time` | 2h |
    """))
    assert bp.exp_codebase_dir == "/c"
    assert bp.exp_max_time_seconds == 7200
    assert bp.notes == ""


def test_parts_without_tags_found_by_their_labels() -> None:
    bp = parse_blueprint(_doc("""
        ## 实验目的
        验证更大的 batch。
        ## 主实验代码路径
        /c
        ## 执行训练的命令
        python -m ajet.launcher --conf a.yaml
        ## 最大运行时间
        2 小时
    """))
    assert bp.exp_purpose == "验证更大的 batch。"
    assert bp.exp_codebase_dir == "/c"
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml"
    assert bp.exp_max_time_seconds == 7200


def test_a_tag_wins_over_a_label_for_the_same_part() -> None:
    bp = parse_blueprint("## Code path\n/wrong\n## [exp_codebase_dir]\n/right\n")
    assert bp.exp_codebase_dir == "/right"


def test_tag_words_in_prose_do_not_open_parts() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_purpose]
        Check the reward.
        exp_result_dir will hold the report, see also [exp_codebase_dir] below.
        ## [exp_codebase_dir]
        /c
    """))
    assert bp.exp_purpose == (
        "Check the reward.\nexp_result_dir will hold the report, see also [exp_codebase_dir] below."
    )
    assert bp.exp_codebase_dir == "/c"
    assert bp.exp_result_dir == ""


def test_tag_after_the_label_and_bare_tags_in_headings() -> None:
    late = parse_blueprint("## 1. 实验目的 [exp_purpose]\n测试\n## 2. 代码路径 [exp_codebase_dir]\n/c\n")
    assert (late.exp_purpose, late.exp_codebase_dir) == ("测试", "/c")
    bare = parse_blueprint("## exp_purpose 实验目的\n测试\n**exp_codebase_dir** /c\n> ## [exp_result_dir]\n> /r\n")
    assert (bare.exp_purpose, bare.exp_codebase_dir, bare.exp_result_dir) == ("测试", "/c", "/r")


def test_longer_words_are_not_tags() -> None:
    bp = parse_blueprint("exp_purposes: no\n## exp_codebase_dir2\n/x\n")
    assert (bp.exp_purpose, bp.exp_codebase_dir) == ("", "")


def test_the_launcher_block_wins_over_a_preparation_block() -> None:
    bp = parse_blueprint(_doc("""
        ## [exp_launch_command]
        Prepare:
        ```bash
        pip install -e .
        ```
        Run:
        ```bash
        python -m ajet.launcher --conf a.yaml
        ```
    """))
    assert bp.exp_launch_command == "python -m ajet.launcher --conf a.yaml"


def test_setext_headings_and_plain_label_lines() -> None:
    bp = parse_blueprint(_doc("""
        Blueprint for exp 5
        ===================

        Purpose
        -------
        Test 8 GPUs vs 4.

        1) **[exp_codebase_dir]** - /opt/code
        2) **[exp_max_time]** - 3h
        其他实验相关信息：之前的实验 reward 0.5。
    """))
    assert bp.exp_purpose == "Test 8 GPUs vs 4."
    assert bp.exp_codebase_dir == "/opt/code"
    assert (bp.exp_max_time_seconds, bp.exp_max_time_text) == (10800, "3h")
    assert bp.notes == "之前的实验 reward 0.5。"


def test_a_plain_line_needs_a_colon_to_be_a_label() -> None:
    bp = parse_blueprint("## [exp_max_time]\n3h\nNotes about the GPUs follow\n")
    assert bp.notes == ""
    assert bp.exp_max_time_text == "3h\nNotes about the GPUs follow"


def test_yaml_style_key_value_blueprint() -> None:
    bp = parse_blueprint(_doc("""
        exp_purpose: "Compare lr 1e-6 with blueprint_1"
        exp_codebase_dir: /x/code
        exp_venv_exe: '/x/code/.venv/bin/python'
        exp_launch_command: |
          cd /x/code && \\
          python -m ajet.launcher --conf conf/a.yaml
        exp_max_time: 12h
    """))
    assert bp.exp_purpose == "Compare lr 1e-6 with blueprint_1"
    assert bp.exp_venv_exe == "/x/code/.venv/bin/python"
    assert bp.exp_launch_command == "cd /x/code && \\\npython -m ajet.launcher --conf conf/a.yaml"
    assert bp.exp_max_time_seconds == 12 * 3600


def test_the_first_part_with_a_value_wins() -> None:
    bp = parse_blueprint("[exp_codebase_dir]\n\n[exp_codebase_dir] /second\n[exp_codebase_dir] /third\n")
    assert bp.exp_codebase_dir == "/second"


@pytest.mark.parametrize("value", ["N/A", "TBD", "无", "none", "`-`"])
def test_placeholders_count_as_missing(value: str) -> None:
    bp = parse_blueprint(f"[exp_result_dir] {value}\n[exp_launch_command] {value}\n")
    assert bp.exp_result_dir == ""
    assert bp.exp_launch_command == ""


def test_bare_relative_values_are_kept_for_validation_to_report() -> None:
    bp = parse_blueprint("[exp_codebase_dir] agentjet\n[exp_venv_exe] python3\n")
    assert (bp.exp_codebase_dir, bp.exp_venv_exe) == ("agentjet", "python3")
    assert {("error", "exp_codebase_dir"), ("error", "exp_venv_exe")} <= _fields(
        validate_blueprint(bp, check_disk=False)
    )


# -------------------------------------------------------------------------------- notes


def test_notes_from_a_notes_part_and_from_text_after_the_parts_kept_verbatim() -> None:
    bp = parse_blueprint(_doc("""
        # Blueprint 3

        Stage 2 of the sweep.

        ## [exp_notes]
        Keep `execute_test: False`.

        ## Parts
        1. [exp_codebase_dir] /c
        2. [exp_max_time] 2h

        Previous run:
          - mean_reward 0.41 → 0.63
    """))
    assert bp.notes == (
        "# Blueprint 3\n\nStage 2 of the sweep.\n\n"
        "Keep `execute_test: False`.\n\n"
        "## Parts\n\n"
        "Previous run:\n  - mean_reward 0.41 → 0.63"
    )
    assert (bp.exp_max_time_seconds, bp.exp_max_time_text) == (7200, "2h")


def test_text_between_parts_belongs_to_the_part_before() -> None:
    bp = parse_blueprint("**[exp_purpose]**: Check lr.\n\nSecond paragraph.\n\n**[exp_codebase_dir]**: /c\n")
    assert bp.exp_purpose == "Check lr.\n\nSecond paragraph."
    assert bp.notes == ""


@pytest.mark.parametrize(
    "opening",
    [
        "## [other]", "## Other Notes", "## 其他实验相关信息", "8. 其他实验相关信息（可选）：", "**[exp_notes]**:",
        "[其他]",
    ],
)
def test_notes_part_spellings(opening: str) -> None:
    bp = parse_blueprint(f"## [exp_max_time]\n1h\n\n{opening}\n  上一轮 reward 0.5\n")
    assert bp.notes == "上一轮 reward 0.5"
    assert bp.exp_max_time_seconds == 3600


def test_a_title_alone_is_not_a_note() -> None:
    bp = parse_blueprint("# Blueprint 1\n\n---\n\n## [exp_codebase_dir]\n/c\n")
    assert bp.notes == ""


def test_document_with_no_parts_keeps_everything_as_notes() -> None:
    bp = parse_blueprint("Just some text\nabout nothing.\n")
    assert bp.notes == "Just some text\nabout nothing."
    assert bp.exp_codebase_dir == ""


def test_windows_line_endings_and_bom() -> None:
    bp = parse_blueprint("\ufeff" + _doc(_FULL_EN).replace("\n", "\r\n"))
    assert bp.exp_codebase_dir == "/work/code"
    assert bp.exp_launch_command == "python -m ajet.launcher --conf conf/a.yaml"


# ------------------------------------------------------------------------ never raises

_MD_PIECES = st.sampled_from([
    "## ", "# ", "1. ", "- ", "* ", "**", "`", "```", "```markdown", "~~~", "    ", "\n", "\n\n", "\\\n", "|",
    "[exp_purpose]", "[exp_codebase_dir]", "[exp_venv_exe]", "[exp_yaml_path]", "[exp_launch_command]",
    "[exp_result_dir]", "[exp_max_time]", "[exp_notes]", "exp_max_time:", "[", "]", "【", "】", "：", ":",
    "/a/b", "~/x", "$HOME", "${X}", "a.yaml", "python -m ajet.launcher --conf a.yaml", "&&", "12h", "半小时",
    "实验目的", "主实验代码路径", "Launch command", "e.g.", "N/A", "（绝对路径）", "\t", "\r\n", "\ufeff", "😀",
])


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_parse_never_raises_on_any_text(text: str) -> None:
    bp = parse_blueprint(text)
    assert isinstance(bp, Blueprint)
    validate_blueprint(bp, check_disk=False)


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(_MD_PIECES, max_size=40).map("".join))
def test_parse_never_raises_on_markdown_like_text(text: str) -> None:
    bp = parse_blueprint(text)
    assert isinstance(bp, Blueprint)
    assert bp.exp_launch_command == bp.exp_launch_command.strip("\n")  # no blank first or last line
    validate_blueprint(bp, check_disk=False)


# --------------------------------------------------------------------------- validation


@pytest.fixture()
def runnable(tmp_path: Path) -> Blueprint:
    code = tmp_path / "code"
    (code / "conf").mkdir(parents=True)
    (code / "conf" / "a.yaml").write_text("ajet:\n  execute_test: false\n", encoding="utf-8")
    return Blueprint(
        exp_purpose="test",
        exp_codebase_dir=str(code),
        exp_venv_exe=sys.executable,
        exp_yaml_path="conf/a.yaml",
        exp_launch_command="python -m ajet.launcher --conf conf/a.yaml",
        exp_result_dir=str(tmp_path / "results" / "deep" / "r1"),
        exp_max_time_seconds=3600.0,
        exp_max_time_text="1h",
    )


def test_runnable_blueprint_has_no_problems_and_nothing_is_created(runnable: Blueprint) -> None:
    assert validate_blueprint(runnable) == []
    assert not os.path.exists(os.path.dirname(os.path.dirname(runnable.exp_result_dir)))


def test_missing_parts(tmp_path: Path) -> None:
    problems = validate_blueprint(Blueprint(), check_disk=True)
    assert _fields(problems) == {
        ("warning", "exp_purpose"),
        ("error", "exp_codebase_dir"),
        ("error", "exp_venv_exe"),
        ("error", "exp_yaml_path"),
        ("error", "exp_launch_command"),
        ("error", "exp_result_dir"),
        ("error", "exp_max_time"),
    }
    assert all("missing" in p.message for p in problems)


def test_relative_paths_where_absolute_ones_are_needed(runnable: Blueprint) -> None:
    bp = runnable.model_copy(update={"exp_codebase_dir": "code", "exp_venv_exe": ".venv/bin/python",
                                     "exp_result_dir": "results/r1"})
    problems = validate_blueprint(bp)
    assert {("error", "exp_codebase_dir"), ("error", "exp_venv_exe"), ("error", "exp_result_dir")} <= _fields(problems)
    assert any("'code'" in p.message and "absolute" in p.message for p in problems)


def test_codebase_missing_or_a_file(runnable: Blueprint, tmp_path: Path) -> None:
    gone = runnable.model_copy(update={"exp_codebase_dir": str(tmp_path / "nope")})
    assert ("error", "exp_codebase_dir") in _fields(validate_blueprint(gone))
    assert ("error", "exp_codebase_dir") not in _fields(validate_blueprint(gone, check_disk=False))
    afile = tmp_path / "afile"
    afile.write_text("x")
    bp = runnable.model_copy(update={"exp_codebase_dir": str(afile), "exp_yaml_path": str(afile / "a.yaml")})
    messages = [p.message for p in validate_blueprint(bp) if p.field == "exp_codebase_dir"]
    assert messages == [f"the codebase {afile} is not a directory"]


def test_venv_python_missing_a_directory_or_not_executable(runnable: Blueprint, tmp_path: Path) -> None:
    missing = runnable.model_copy(update={"exp_venv_exe": str(tmp_path / "venv" / "bin" / "python")})
    assert [p.message for p in validate_blueprint(missing) if p.field == "exp_venv_exe"] == [
        f"the python executable {tmp_path / 'venv' / 'bin' / 'python'} does not exist"
    ]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "python"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o644)
    as_dir = runnable.model_copy(update={"exp_venv_exe": str(venv)})
    message = next(p.message for p in validate_blueprint(as_dir) if p.field == "exp_venv_exe")
    assert "is a directory" in message and str(exe) in message
    not_exec = runnable.model_copy(update={"exp_venv_exe": str(exe)})
    assert [p.message for p in validate_blueprint(not_exec) if p.field == "exp_venv_exe"] == [
        f"the python executable {exe} is not executable"
    ]
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert not [p for p in validate_blueprint(not_exec) if p.field == "exp_venv_exe"]


def test_venv_activate_script_gets_a_hint(runnable: Blueprint, tmp_path: Path) -> None:
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "activate").write_text("# source me\n")
    (bindir / "python").symlink_to(sys.executable)
    bp = runnable.model_copy(update={"exp_venv_exe": str(bindir / "activate")})
    assert [p.message for p in validate_blueprint(bp) if p.field == "exp_venv_exe"] == [
        f"the python executable {bindir / 'activate'} is not executable (did you mean {bindir / 'python'}?)"
    ]


def test_template_placeholders_are_named_per_field(runnable: Blueprint) -> None:
    command = "cd {{CODEBASE}} && python -m ajet.launcher --conf {{YAML}}"
    bp = runnable.model_copy(update={"exp_codebase_dir": "{{CODEBASE}}", "exp_result_dir": "{{ RESULT_DIR }}/x",
                                     "exp_launch_command": command})
    found = {p.field: p.message for p in validate_blueprint(bp) if p.level == Level.error}
    assert set(found) == {"exp_codebase_dir", "exp_result_dir", "exp_launch_command"}
    assert "{{CODEBASE}}, {{YAML}}" in found["exp_launch_command"] and "template" in found["exp_launch_command"]
    assert "{{RESULT_DIR}}" in found["exp_result_dir"]


def test_notes_written_under_a_part_are_kept() -> None:
    bp = parse_blueprint(
        "## [exp_yaml_path]\nExperiment YAML: tests/bench/x/x.yaml\n\nNote: this YAML needs 4 GPUs.\n\n"
        "## [exp_result_dir]\n/data/r\nkeep the checkpoints for a week\n\n## Notes\nfree text\n"
    )
    assert bp.exp_yaml_path == "tests/bench/x/x.yaml" and bp.exp_result_dir == "/data/r"
    assert "(under [exp_yaml_path]) Note: this YAML needs 4 GPUs." in bp.notes
    assert "(under [exp_result_dir]) keep the checkpoints for a week" in bp.notes
    assert bp.notes.rstrip().endswith("free text")


def test_yaml_missing_outside_invalid_or_not_a_mapping(runnable: Blueprint, tmp_path: Path) -> None:
    code = Path(runnable.exp_codebase_dir)
    missing = runnable.model_copy(update={"exp_yaml_path": "conf/b.yaml"})
    assert [p.message for p in validate_blueprint(missing) if p.field == "exp_yaml_path"] == [
        f"the YAML {code / 'conf' / 'b.yaml'} does not exist"
    ]

    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("ajet: {}\n")
    for written in (str(outside), "../elsewhere.yaml"):
        bp = runnable.model_copy(update={"exp_yaml_path": written})
        found = [p for p in validate_blueprint(bp, check_disk=False) if p.field == "exp_yaml_path"]
        assert [p.level for p in found] == [Level.warning]  # AgentJet accepts an absolute --conf
        assert found[0].message.startswith(f"the YAML {outside} is outside the codebase {code}: ")
        assert "hydra.searchpath" in found[0].message

    (code / "conf" / "bad.yaml").write_text("ajet:\n  a: [1, 2\n  b: 3\n")
    bad = runnable.model_copy(update={"exp_yaml_path": "conf/bad.yaml"})
    message = next(p.message for p in validate_blueprint(bad) if p.field == "exp_yaml_path")
    assert message.startswith(f"the YAML {code / 'conf' / 'bad.yaml'} is not valid YAML: ")
    assert "line" in message

    (code / "conf" / "list.yaml").write_text("- 1\n- 2\n")
    listy = runnable.model_copy(update={"exp_yaml_path": "conf/list.yaml"})
    message = next(p.message for p in validate_blueprint(listy) if p.field == "exp_yaml_path")
    assert "does not hold a mapping" in message and "list" in message

    (code / "conf" / "tagged.yaml").write_text("ajet: !!python/object/apply:os.system ['true']\n")
    unsafe = runnable.model_copy(update={"exp_yaml_path": "conf/tagged.yaml"})
    assert ("error", "exp_yaml_path") in _fields(validate_blueprint(unsafe))  # safe_load only


def test_max_time_unparsable_zero_or_negative(runnable: Blueprint) -> None:
    cases = {
        ("until it converges", None): "cannot read a duration from 'until it converges'",
        ("0 hours", 0.0): "must be positive, got 0s",
        ("-2h", -7200.0): "must be positive, got -2h",
    }
    for (text, seconds), expected in cases.items():
        bp = runnable.model_copy(update={"exp_max_time_text": text, "exp_max_time_seconds": seconds})
        messages = [p.message for p in validate_blueprint(bp) if p.field == "exp_max_time"]
        assert len(messages) == 1 and expected in messages[0]


def test_result_dir_under_a_file_cannot_be_created(runnable: Blueprint, tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    bp = runnable.model_copy(update={"exp_result_dir": str(blocker / "r1")})
    assert [p.message for p in validate_blueprint(bp) if p.field == "exp_result_dir"] == [
        f"the result dir {blocker / 'r1'} cannot be created: {blocker} is not a directory"
    ]
    as_file = runnable.model_copy(update={"exp_result_dir": str(blocker)})
    assert [p.message for p in validate_blueprint(as_file) if p.field == "exp_result_dir"] == [
        f"the result dir {blocker} exists but is not a directory"
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_result_dir_under_a_read_only_dir_cannot_be_created(runnable: Blueprint, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        bp = runnable.model_copy(update={"exp_result_dir": str(ro / "a" / "b")})
        assert ("error", "exp_result_dir") in _fields(validate_blueprint(bp))
    finally:
        ro.chmod(0o755)


def test_command_that_does_not_mention_the_yaml_is_a_warning(runnable: Blueprint) -> None:
    bp = runnable.model_copy(update={"exp_launch_command": "python -m ajet.launcher --conf other.yaml"})
    problems = validate_blueprint(bp)
    assert _fields(problems) == {("warning", "exp_launch_command")}
    assert "conf/a.yaml" in problems[0].message
    absolute = runnable.model_copy(update={"exp_yaml_path": runnable.yaml_abspath()})
    assert validate_blueprint(absolute) == []  # the command names it relative to the codebase


def test_problem_levels_are_the_shared_enum(runnable: Blueprint) -> None:
    bp = runnable.model_copy(update={"exp_purpose": ""})
    assert [p.level for p in validate_blueprint(bp)] == [Level.warning]


# ------------------------------------------------------------------------------- loading


def test_load_blueprint_reads_parses_and_validates(runnable: Blueprint, tmp_path: Path) -> None:
    path = tmp_path / "blueprint.md"
    path.write_text(
        "\n".join(f"## [{key}]\n{getattr(runnable, key)}\n" for key in (
            "exp_purpose", "exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_launch_command",
            "exp_result_dir")) + "## [exp_max_time]\n1h\n",
        encoding="utf-8",
    )
    bp, problems = load_blueprint(path)
    assert problems == []
    assert bp.public() == runnable.public()


def test_load_blueprint_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.md", tmp_path):
        bp, problems = load_blueprint(path)
        assert bp == Blueprint()
        assert len(problems) == 1 and problems[0].field == "blueprint" and problems[0].level == Level.error
        assert str(path) in problems[0].message


def test_load_blueprint_tolerates_bad_bytes(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    path.write_bytes(b"## [exp_codebase_dir]\n/c\xff\xfe\n## [exp_max_time]\n\xe4\xb8\x89\xe5\xb0\x8f\xe6\x97\xb6\n")
    bp, _ = load_blueprint(path, check_disk=False)
    assert bp.exp_codebase_dir.startswith("/c")
    assert bp.exp_max_time_seconds == 3 * 3600


@pytest.mark.parametrize(("written", "path"), [
    ("/x/code#(touch /tmp/PWN)", "/x/code#(touch /tmp/PWN)"),
    ("`/x/code#(touch /tmp/PWN)`", "/x/code#(touch /tmp/PWN)"),
    ("/mnt/my data/code", "/mnt/my data/code"),
    ("`/a b/c`", "/a b/c"),
    ("/x/code (the repo)", "/x/code"),
    ("/x/code is the path", "/x/code"),
])
def test_bare_paths_are_not_cut_at_a_space_or_tmux_format(written: str, path: str) -> None:
    """Repro (issue 18, 9): paths outside backticks were cut at a space or `#(`."""
    assert parse_blueprint(f"[exp_codebase_dir] {written}\n").exp_codebase_dir == path


def test_field_length_caps() -> None:
    bp = parse_blueprint("[exp_max_time] " + "一" * 8000 + "\n[exp_purpose] " + "x" * 2001 + "\n")
    problems = {(p.field, p.message.split(" characters")[0]) for p in validate_blueprint(bp, check_disk=False)
                if "characters long" in p.message}
    assert problems == {("exp_max_time", "exp_max_time is 8,000"), ("exp_purpose", "exp_purpose is 2,001")}
    assert bp.exp_max_time_seconds is None


def test_a_blueprint_longer_than_the_line_cap_is_refused_naming_its_length() -> None:
    """Only the first BLUEPRINT_MAX_LINES are read (bounded parse time); the rest is not ignored quietly."""
    from ajet_runner.statemachine.blueprint.parse import BLUEPRINT_MAX_LINES

    head = "[exp_purpose] test\n[exp_max_time] 1h\n\n"
    bp = parse_blueprint(head + "x\n" * BLUEPRINT_MAX_LINES)
    assert bp.exp_purpose == "test" and bp.exp_max_time_seconds == 3600
    errors = [p for p in validate_blueprint(bp, check_disk=False) if p.field == "blueprint"]
    assert len(errors) == 1 and errors[0].level == Level.error
    assert f"{BLUEPRINT_MAX_LINES + 4:,} lines" in errors[0].message
    short = parse_blueprint(head + "x\n" * (BLUEPRINT_MAX_LINES - 4))
    assert not [p for p in validate_blueprint(short, check_disk=False) if p.field == "blueprint"]
    assert "source_lines" not in short.public()


def test_a_long_path_part_is_read_for_its_path_at_the_top_and_keeps_the_rest_as_notes() -> None:
    from ajet_runner.statemachine.blueprint.parse import PATH_PART_LINES

    prose = "".join(f"line {i} of prose\n" for i in range(PATH_PART_LINES + 50))
    bp = parse_blueprint(f"[exp_codebase_dir]\n/srv/code\n{prose}\n[exp_purpose] p\n")
    assert bp.exp_codebase_dir == "/srv/code"
    assert f"line {PATH_PART_LINES + 49} of prose" in bp.notes and "line 0 of prose" in bp.notes
    late = parse_blueprint(f"[exp_codebase_dir]\n{prose}/srv/late\n")
    assert late.exp_codebase_dir == ""  # past the first PATH_PART_LINES: prose, not the value
    assert "/srv/late" in late.notes


def test_nested_markdown_fences_are_unwrapped_up_to_three_deep() -> None:
    inner = "[exp_purpose] deep\n[exp_max_time] 2h\n"
    for depth in (1, 2, 3):
        text = "".join("`" * (3 + k) + "markdown\n" for k in range(depth)) + inner + "```\n"
        assert parse_blueprint(text).exp_purpose == "deep", depth
