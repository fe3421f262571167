"""The adviser's pure parts: answer schema, allow-lists, redaction, prompt context, suggestions, site catalogue."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ajet_runner.statemachine.failures import signatures
from ajet_runner.statemachine.failures.diagnose import diagnose_text
from ajet_runner.statemachine.failures.redact import REDACTED, Redactor
from ajet_runner.statemachine.fixes.advice import (
    AdviceChange,
    AdviceError,
    AdviceRules,
    parse_answer,
    to_actions,
    validate_changes,
)
from ajet_runner.statemachine.fixes.advice_context import (
    build_messages,
    error_window,
    launcher_flags,
    quoted_context,
    signature_pattern,
    suggested_entry,
)
from ajet_runner.statemachine.fixes.repairs import resolve_repair
from ajet_runner.workers.repair.config_patch import patch_yaml_text

YAML = {"ajet": {"rollout": {"tensor_model_parallel_size": 3, "temperature": 1.0, "max_model_len": 16000,
                             "user_workflow": "a.b->C", "stop": ["</s>"]},
                 "trainer_common": {"val_before_train": True, "logger": "tensorboard",
                                    "val_print_to_markdown_file_path": "saved_val_result/x.md"},
                 "execute_test": False, "model": {"path": "Qwen/Qwen2.5-7B-Instruct"}},
        "hydra": {"searchpath": ["file://ajet/default_config"]}}
CMD = "python -m ajet.launcher --conf tests/bench/x/x.yaml --with-ray"
RULES = AdviceRules(yaml_data=YAML, protected_keys={"ajet.execute_test": "a test probe ends training"})


def answer(changes: list[dict], **kw: object) -> str:
    return json.dumps({"diagnosis": "d", "repairable": True, "changes": changes, "rationale": "r", **kw})


def refusals(*changes: dict) -> list[str]:
    return validate_changes([AdviceChange.model_validate(c) for c in changes], RULES)


def test_answer_is_json_or_a_json_fence_and_exactly_the_schema() -> None:
    assert parse_answer(answer([])).diagnosis == "d"
    fenced = "Sure.\n```json\n" + answer([{"kind": "yaml_set", "key": "ajet.a", "value": 1}]) + "\n```\nBye"
    assert parse_answer(fenced).changes[0].key == "ajet.a"
    with pytest.raises(AdviceError, match="not JSON"):
        parse_answer("lower the batch size")
    with pytest.raises(AdviceError, match="not valid JSON"):
        parse_answer('{"diagnosis": ')
    with pytest.raises(AdviceError, match="repairable"):
        parse_answer(json.dumps({"diagnosis": "d", "changes": [], "rationale": "r"}))
    with pytest.raises(AdviceError, match="shell: Extra inputs are not permitted"):
        parse_answer(answer([], shell="rm -rf /"))
    with pytest.raises(AdviceError, match=r"changes\.0\.command"):
        parse_answer(answer([{"kind": "yaml_set", "key": "ajet.a", "value": 1, "command": "x"}]))


@pytest.mark.parametrize(("change", "why"), [
    ({"kind": "shell", "key": "", "value": "pip install x"}, "kind 'shell' is not allowed"),
    ({"kind": "file_write", "key": "/etc/passwd", "value": "x"}, "kind 'file_write' is not allowed"),
    ({"kind": "env_set", "key": "PATH", "value": "/tmp/bin"}, "PATH may not be overridden"),
    ({"kind": "env_set", "key": "LD_PRELOAD", "value": "evil.so"}, "LD_PRELOAD may not be overridden"),
    ({"kind": "env_set", "key": "PYTHONPATH", "value": "x"}, "PYTHONPATH may not be overridden"),
    ({"kind": "env_set", "key": "CUDA_VISIBLE_DEVICES", "value": "0"}, "may not be overridden"),
    ({"kind": "env_set", "key": "HF_TOKEN", "value": "abc"}, "looks like a secret"),
    ({"kind": "env_set", "key": "X; rm", "value": "1"}, "not a valid name"),
    ({"kind": "env_set", "key": "HF_HOME", "value": "/tmp/hf"}, "not on the adviser's allow-list"),
    ({"kind": "env_set", "key": "NCCL_DEBUG", "value": "a\nb"}, "line break"),
    ({"kind": "yaml_set", "key": "trainer.tp", "value": 1}, "not under `ajet.`"),
    ({"kind": "yaml_set", "key": "hydra.searchpath", "value": ["x"]}, "not under `ajet.`"),
    ({"kind": "yaml_set", "key": "/home/u/x.yaml", "value": 1}, "not under `ajet.`"),
    ({"kind": "yaml_set", "key": "ajet.trainer_common.val_print_to_markdown_file_path", "value": "/etc/cron.d/x"},
     "is a file path"),
    ({"kind": "yaml_set", "key": "ajet.model.path", "value": "../../other"}, "is a file path"),
    ({"kind": "yaml_set", "key": "ajet.rollout.tensor_model_parallel_size", "value": "4"}, "is a int"),
    ({"kind": "yaml_set", "key": "ajet.rollout.tensor_model_parallel_size", "value": 4.5}, "is a int"),
    ({"kind": "yaml_set", "key": "ajet.trainer_common.val_before_train", "value": 1}, "is a bool"),
    ({"kind": "yaml_set", "key": "ajet.rollout", "value": {"a": 1}}, "a whole map"),
    ({"kind": "yaml_set", "key": "ajet.rollout.user_workflow.x", "value": 1}, "is not a map"),
    ({"kind": "yaml_set", "key": "ajet.rollout.temperature", "value": None}, "use yaml_unset"),
    ({"kind": "yaml_set", "key": "ajet.execute_test", "value": True}, "set by the runner before launch"),
    ({"kind": "yaml_unset", "key": "ajet.rollout.max_num_seqs", "value": None}, "not in the YAML"),
    ({"kind": "yaml_unset", "key": "ajet.rollout.absent", "value": None}, "not one the adviser may unset"),
    ({"kind": "yaml_unset", "key": "ajet.model", "value": None}, "is a whole map (path)"),
    ({"kind": "yaml_unset", "key": "ajet.rollout", "value": None}, "is a whole map"),
    ({"kind": "yaml_unset", "key": "ajet.rollout.temperature", "value": None}, "not one the adviser may unset"),
    ({"kind": "yaml_unset", "key": "ajet.trainer_common.val_before_train", "value": None},
     "one the preflight checks before every launch"),
    ({"kind": "yaml_unset", "key": "ajet.trainer_common.logger", "value": None}, "one the preflight checks"),
    ({"kind": "yaml_unset", "key": "ajet.rollout.max_model_len", "value": 1}, "takes no value"),
    ({"kind": "yaml_set", "key": "ajet.trainer_common.val_before_train", "value": False},
     "one the preflight checks before every launch"),
    ({"kind": "flag_add", "key": "--autokill", "value": None}, "not one the adviser may add"),
    ({"kind": "flag_add", "key": "--kill", "value": "python"}, "not one the adviser may add"),
    ({"kind": "flag_remove", "key": "--conf", "value": None}, "not one the adviser may remove"),
    ({"kind": "flag_add", "key": "--with-ray", "value": "yes"}, "takes no value"),
    ({"kind": "prefix", "key": "", "value": "sudo"}, "not on the allow-list"),
    ({"kind": "prefix", "key": "", "value": "proxychains4 -q; rm -rf ~"}, "not on the allow-list"),
])
def test_changes_outside_the_rules_are_refused_with_the_reason(change: dict, why: str) -> None:
    (problem,) = refusals(change)
    assert why in problem and problem.startswith("change 1 (")


def test_changes_within_the_rules_pass_and_resolve_like_a_catalogue_plan() -> None:
    changes = [
        {"kind": "yaml_set", "key": "ajet.rollout.tensor_model_parallel_size", "value": 4},
        {"kind": "yaml_set", "key": "ajet.rollout.temperature", "value": 1},  # int for a float is fine
        {"kind": "yaml_set", "key": "ajet.rollout.stop", "value": ["</s>", "<|im_end|>"]},
        {"kind": "yaml_set", "key": "ajet.rollout.enforce_eager", "value": True},  # absent: any plain value
        {"kind": "yaml_unset", "key": "ajet.rollout.max_model_len", "value": None},
        {"kind": "env_set", "key": "NCCL_P2P_DISABLE", "value": 1},
        {"kind": "env_set", "key": "HF_HUB_OFFLINE", "value": "1"},
        {"kind": "flag_add", "key": "--skip-check-avail-gpu", "value": None},
        {"kind": "flag_remove", "key": "--with-ray", "value": None},
        {"kind": "prefix", "key": "", "value": "proxychains4   -q"},
    ]
    parsed = [AdviceChange.model_validate(c) for c in changes]
    assert validate_changes(parsed, RULES) == []
    r = resolve_repair(to_actions(parsed, "advised by m"), yaml_data=YAML, command=CMD, env={},
                       installed=lambda prog: prog == "proxychains4")
    assert r.applicable
    by_key = {c.key: c for c in r.yaml_changes}
    assert by_key["ajet.rollout.tensor_model_parallel_size"].new == 4
    assert by_key["ajet.rollout.max_model_len"].unset and by_key["ajet.rollout.max_model_len"].old == 16000
    assert r.env == {"NCCL_P2P_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    assert r.command == "proxychains4 -q python -m ajet.launcher --conf tests/bench/x/x.yaml --skip-check-avail-gpu"
    text = yaml.safe_dump(YAML, sort_keys=False)
    patched = yaml.safe_load(patch_yaml_text(text, r.yaml_changes))
    assert "max_model_len" not in patched["ajet"]["rollout"] and patched["ajet"]["rollout"]["stop"][1] == "<|im_end|>"


def test_one_bad_change_refuses_the_whole_answer_and_duplicates_are_refused() -> None:
    good = {"kind": "yaml_set", "key": "ajet.rollout.tensor_model_parallel_size", "value": 4}
    problems = refusals(good, {"kind": "env_set", "key": "PATH", "value": "x"}, {**good, "value": 2})
    assert [p.split(":")[0] for p in problems] == ["change 2 (env_set PATH)",
                                                   "change 3 (yaml_set ajet.rollout.tensor_model_parallel_size)"]
    assert "changed twice" in problems[1]
    no_launcher = AdviceRules(yaml_data=YAML, has_launcher=False)
    assert validate_changes([AdviceChange(kind="flag_add", key="--with-ray")], no_launcher)


def test_redaction_of_env_secrets_headers_and_key_shapes() -> None:
    env = {"OPENAI_API_KEY": "sk-abcdefghijklmnop", "MY_SECRET": "plain-words-secret", "HF_TOKEN": "hf_zzzzzzzzzz",
           "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin"}
    r = Redactor([env], extra=["llm-key-123456"])
    text = ("key sk-abcdefghijklmnop and plain-words-secret; Authorization: Bearer abc.def.ghi\n"
            "curl -H 'authorization: token xyz' https://u:pa55word@host/x llm-key-123456 ghp_abcdefghijklmnopq\n"
            "api_key: 'quoted value'\nmax_tokens: 1024\ntokenizer_path: Qwen/Qwen2.5\ntemperature: false\n"
            "SWANLAB_API_KEY=abc123xyz")
    out = r.text(text)
    for secret in ("sk-abcdefghijklmnop", "plain-words-secret", "abc.def.ghi", "xyz", "pa55word", "llm-key-123456",
                   "ghp_abcdefghijklmnopq", "quoted value", "abc123xyz"):
        assert secret not in out, secret
    assert "max_tokens: 1024" in out and "tokenizer_path: Qwen/Qwen2.5" in out and "temperature: false" in out
    assert Redactor([{"TOKENIZERS_PARALLELISM": "false", "A_KEY": "1234"}]).text("a false 1234 b") == "a false 1234 b"
    data = r.data({"ajet": {"task_judge": {"api_key": "whatever-it-is"}, "n": 3, "tokens": "ok"}})
    assert data == {"ajet": {"task_judge": {"api_key": REDACTED}, "n": 3, "tokens": "ok"}}


def test_error_window_cleans_and_centres_on_the_first_error() -> None:
    raw = [f"\x1b[36m(TaskRunner pid=1)\x1b[0m line {i}" for i in range(1000)]
    raw[250] = "\x1b[36m(TaskRunner pid=1)\x1b[0m ValueError: heads (28) not divisible by (3)."
    raw[280] = "RuntimeError: a later one"
    lines, first = error_window(raw)
    assert len(lines) == 200 and first is not None and lines[first] == "ValueError: heads (28) not divisible by (3)."
    assert first == 40 and lines[0] == "line 210" and not any("\x1b" in x or "pid=" in x for x in lines)
    raw[20] = "ERROR a harmless logged error long before the failure"
    lines, first = error_window(raw, anchor="ValueError: heads (28) not divisible by (3).")
    assert lines[first] == "ValueError: heads (28) not divisible by (3)."  # the cause's own, not line 20's
    assert error_window(raw)[0][error_window(raw)[1]].startswith("ERROR a harmless")  # no anchor: the first
    lines, first = error_window(raw[:300], anchor="not in the log")  # an anchor not found: the first error
    assert first == 20 and lines[0] == "line 0"
    lines, first = error_window(raw[21:300])  # near the end: still 200 lines, the error further down
    assert len(lines) == 200 and first == 150 and lines[first].startswith("ValueError") and lines[-1] == "line 299"
    lines, first = error_window(["ok"] * 500)
    assert first is None and len(lines) == 200
    assert launcher_flags(CMD + " --backbone=verl") == ["--conf", "--with-ray", "--backbone"]


def test_messages_carry_the_context_redacted() -> None:
    msgs = build_messages(
        blueprint={"exp_codebase_dir": "/data/code", "notes": "token=abcdefgh1234"}, diagnosis={"signature": "x"},
        reason="exit 1", log_lines=["boom"], first_error=0, yaml_text="ajet:\n  api_key: sk-1234567890abcdef\n",
        command=CMD, attempts=[{"number": 1, "exit_code": 1, "end_reason": "exit", "command": CMD, "log_path": "/x"}],
        repairs=[], prefixes=["proxychains4 -q"], redactor=Redactor())
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "yaml_set, yaml_unset, env_set, flag_add, flag_remove, prefix" in system
    context = quoted_context(user)
    assert context["blueprint"]["exp_codebase_dir"] == "/data/code"  # paths kept
    assert context["launcher_flags"] == ["--conf", "--with-ray"] and context["earlier_attempts"][0]["exit_code"] == 1
    assert "sk-1234567890abcdef" not in user and "abcdefgh1234" not in user


def test_a_suggestion_is_a_valid_site_entry_that_recognises_the_failure(tmp_path: Path) -> None:
    line = "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (3)."
    pattern = signature_pattern(line)
    assert re.search(pattern, line.replace("(3)", "(6)")) and pattern.startswith("ValueError")
    entry = suggested_entry(signature_text=line, cause="TP must divide the heads",
                            changes=[AdviceChange(kind="yaml_set", key="ajet.rollout.tensor_model_parallel_size",
                                                  value=4)],
                            rationale="r", model="m", experiment="abc123", at="2026-01-01T00:00:00+00:00",
                            entry_id="advised_abc123_1")
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump([entry]))
    before = list(signatures.CATALOGUE)
    try:
        assert signatures.use_extension(extra) == ["advised_abc123_1"]
        assert signatures.use_extension(extra) == ["advised_abc123_1"]  # idempotent
        assert [s.id for s in signatures.CATALOGUE].count("advised_abc123_1") == 1
        cause = diagnose_text(f"Traceback (most recent call last):\n  File \"x\", line 1\n{line}\n").cause
        assert cause is not None and cause.signature == "advised_abc123_1" and cause.repair[0].value == 4
    finally:
        signatures.CATALOGUE[:] = before
        signatures._BY_ID.clear()
        signatures._BY_ID.update({s.id: s for s in before})


@pytest.mark.parametrize(("content", "why"), [
    ("- id: cuda_oom\n  patterns: [x]\n  fatal: true\n  explanation: e\n  repairable: false\n", "already has this id"),
    ("- id: mine\n  patterns: ['(']\n  fatal: true\n  explanation: e\n  repairable: false\n", "bad pattern"),
    ("- id: mine\n  patterns: []\n  fatal: true\n  explanation: e\n  repairable: false\n", "patterns"),
    ("- id: mine\n  patterns: [x]\n  fatal: true\n  explanation: e\n  repairable: false\n  colour: red\n", "colour"),
    ("- id: mine\n  patterns: [x]\n  fatal: true\n  generic: true\n  explanation: e\n  repairable: false\n",
     "must be specific"),
    ("- id: mine\n  patterns: [x]\n  fatal: true\n  explanation: e\n  repairable: true\n", "repairable must be true"),
    ("id: mine\n", "expected a list"),
    ("- [unclosed\n", "not valid YAML"),
])
def test_a_bad_site_catalogue_is_a_clear_error(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(why)) as info:
        signatures.load_extension(path)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match="cannot read"):
        signatures.load_extension(tmp_path / "missing.yaml")


def test_suggestions_are_appended_once_per_id_under_a_lock(tmp_path: Path) -> None:
    from ajet_runner.workers.repair.advice_learning import append_suggestion

    path = tmp_path / "site" / "suggestions.yaml"
    entry = {"id": "advised_x_1", "patterns": ["boom"], "fatal": True, "explanation": "e", "repairable": False}
    assert append_suggestion(path, entry) and append_suggestion(path, {**entry, "id": "advised_y_1"})
    assert not append_suggestion(path, entry)  # collecting again after a re-adoption adds nothing
    assert [e["id"] for e in yaml.safe_load(path.read_text())] == ["advised_x_1", "advised_y_1"]
    assert path.read_text().startswith("# Catalogue entries suggested")
