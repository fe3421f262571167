"""The LLM repair adviser end to end: `ajet-runner run` on the simulated AgentJet's unknown failure,
a real (private) redis-server, real tmux, and a fake OpenAI-compatible server on a local port."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ajet_runner.statemachine.fixes.advice import parse_answer
from ajet_runner.store.store import Store
from ajet_runner.workers.repair.adviser import AdviserConfig, AdviserUnavailable, chat
from tests.integration.fake_llm import Reply, advice, fake_llm
from tests.integration.scenario import CLI, Scenario, env_for, make, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "fake-model-7b"
YAML_REL = "tests/bench/unknown_failure/unknown_failure.yaml"
TP_KEY = "ajet.rollout.tensor_model_parallel_size"
FIX = {"kind": "yaml_set", "key": TP_KEY, "value": 4}
SECRETS = {
    "OPENAI_API_KEY": "sk-test0penaiSecretValue123",
    "HF_TOKEN": "hf_secrettokenvalue987654",
    "MY_SERVICE_SECRET": "s3cr3t-value-xyz-42",
}
LLM_KEY = "llm-key-do-not-leak-42"


def adviser_env(tmux_socket: str, redis_url: str, tmp_path: Path, url: str, **extra: str) -> dict[str, str]:
    key_file = tmp_path / "llm.key"
    key_file.write_text(LLM_KEY + "\n")
    return env_for(tmux_socket, REDIS_URL=redis_url, AJET_RUNNER_LLM_URL=url, AJET_RUNNER_LLM_MODEL=MODEL,
                   AJET_RUNNER_LLM_API_KEY_FILE=str(key_file),
                   AJET_RUNNER_CATALOGUE_SUGGESTIONS=str(tmp_path / "suggestions.yaml"), **extra)


def exp_id(sc: Scenario) -> str:
    return sc.flag()["id"]


def adviser_events(redis_url: str, eid: str) -> list[dict]:
    return [e for e in Store.from_url(redis_url).events.read(eid) if e["type"] == "adviser"]


def test_unknown_failure_is_fixed_by_advice_completes_on_attempt_2_and_is_suggested(
        tmp_path: Path, tmux_socket: str, redis_url: str) -> None:
    sc = make("unknown_failure", tmp_path)
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(advice([FIX], diagnosis="vLLM needs a TP size that divides 28 heads",
                                               rationale="28 attention heads: 4 divides 28, 3 does not"))
        proc = run_cli(sc, adviser_env(tmux_socket, redis_url, tmp_path, llm.url))
        assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    (rep,) = data["repairs"]
    assert rep["source"] == "adviser" and rep["result"] == "relaunched" and rep["advised_by"] == MODEL
    assert rep["signature"] == "python_traceback"
    assert yaml.safe_load((sc.results / "config.patched.yaml").read_text())["ajet"]["rollout"][
        "tensor_model_parallel_size"] == 4
    log = (sc.results / "repair_log.md").read_text()
    assert f"Advised by `{MODEL}`" in log and "28 attention heads: 4 divides 28, 3 does not" in log
    assert f"set YAML {TP_KEY} = 4" in log
    assert "-    tensor_model_parallel_size: 3" in log and "+    tensor_model_parallel_size: 4" in log
    assert "attempt 2: the command exited 0" in log

    # One request, JSON mode, the key in the header only, the log cleaned around the first error.
    (req,) = llm.requests
    assert req["body"]["response_format"] == {"type": "json_object"} and req["body"]["model"] == MODEL
    assert req["headers"]["Authorization"] == f"Bearer {LLM_KEY}"
    context = req["body"]["messages"][1]["content"]
    assert "attention heads (28) must be divisible by tensor parallel size (3)" in context
    assert "\\u001b" not in context and "\x1b" not in context and "(TaskRunner pid=" not in context
    assert "tensor_model_parallel_size: 3" in context  # the YAML as run

    eid = exp_id(sc)
    events = adviser_events(redis_url, eid)
    assert [e["status"] for e in events] == ["asking", "answered"]
    assert events[1]["result"] == "advised" and 0 <= events[1]["seconds"] < 30 and events[1]["asked_at"] > 0
    stats = Store.from_url(redis_url).counters.read()["advised"]
    assert stats == {f"{MODEL}|relaunched": 1, f"{MODEL}|then completed": 1}

    # Learning: a suggested entry, listed by the CLI, and once adopted it names the failure.
    suggestions = tmp_path / "suggestions.yaml"
    (entry,) = yaml.safe_load(suggestions.read_text())
    assert entry["repair"] == [{"kind": "set_yaml", "key": TP_KEY, "value": 4,
                                "description": "vLLM needs a TP size that divides 28 heads"}]
    assert entry["suggested"]["by"] == MODEL and entry["suggested"]["experiment"] == eid
    listed = subprocess.run([*CLI, "catalogue", "suggestions", "--file", str(suggestions)], capture_output=True,
                            text=True, check=False, timeout=60)
    assert listed.returncode == 0 and entry["id"] in listed.stdout and TP_KEY in listed.stdout, listed.stderr
    diagnosed = subprocess.run([*CLI, "diagnose", "--json", str(sc.results / "logs/attempt-1.log")],
                               capture_output=True, text=True, check=False, timeout=60,
                               env={**env_for(tmux_socket), "AJET_RUNNER_CATALOGUE_EXTRA": str(suggestions)})
    assert diagnosed.returncode == 0, diagnosed.stderr
    assert json.loads(diagnosed.stdout)["cause"] == entry["id"]


def test_secrets_never_reach_the_adviser(tmp_path: Path, tmux_socket: str, redis_url: str) -> None:
    sc = make("unknown_failure", tmp_path)
    yaml_path = sc.codebase / YAML_REL
    yaml_path.write_text(yaml_path.read_text().replace(
        "  task_judge:\n",
        f"  task_judge:\n    api_key: \"sk-yamlEmbeddedKey000111\"\n    judge_token: {SECRETS['HF_TOKEN']}\n"))
    sc.blueprint.write_text(sc.blueprint.read_text() + (
        f"\nThe judge service answers with Authorization: Bearer notes-bearer-token-777 and our key "
        f"{SECRETS['OPENAI_API_KEY']}; its password is {SECRETS['MY_SERVICE_SECRET']} (plain text).\n"))
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(advice([], repairable=False, diagnosis="cannot tell"))
        env = adviser_env(tmux_socket, redis_url, tmp_path, llm.url, **SECRETS)
        del env["AJET_RUNNER_LLM_API_KEY_FILE"]
        env["AJET_RUNNER_LLM_API_KEY"] = LLM_KEY  # the variable this time (the other test uses the file)
        proc = run_cli(sc, env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
    (req,) = llm.requests
    assert req["headers"]["Authorization"] == f"Bearer {LLM_KEY}"
    raw = req["raw"]
    assert "sk-yamlEmbeddedKey000111" in (sc.results / "config.original.yaml").read_text()  # it was in the input
    leaked = [s for s in [*SECRETS.values(), LLM_KEY, "sk-yamlEmbeddedKey000111", "notes-bearer-token-777"]
              if s in raw]
    assert leaked == []
    assert "[REDACTED]" in raw and "attention heads" in raw  # redacted, not emptied
    assert sc.results_json()["repairs"][0]["advice_result"] == "declined"


REFUSALS = {
    "malformed": (Reply("I think you should lower the tensor parallel size."), "the answer is not JSON"),
    "slow": (Reply(advice([FIX]), delay=6), "timed out"),
    "shell": (Reply(advice([{"kind": "shell", "key": "", "value": "pip install vllm==0.5.0"}])),
              "kind 'shell' is not allowed"),
    "PATH": (Reply(advice([FIX, {"kind": "env_set", "key": "PATH", "value": "/tmp/evil/bin"}])),
             "environment variable PATH may not be overridden"),
    "outside_ajet": (Reply(advice([{"kind": "yaml_set", "key": "trainer.tensor_model_parallel_size", "value": 4}])),
                     "is not under `ajet.`"),
    "file_path": (Reply(advice([{"kind": "yaml_set", "key": "ajet.trainer_common.val_print_to_markdown_file_path",
                                 "value": "/etc/cron.d/evil"}])), "is a file path"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_answers_are_refused_and_the_run_fails_with_the_reason(tmp_path: Path, tmux_socket: str, redis_url: str,
                                                                    case: str) -> None:
    reply, reason = REFUSALS[case]
    sc = make("unknown_failure", tmp_path)
    with fake_llm() as llm:
        llm.answer = lambda body: reply
        # The `slow` case is the timeout; the others answer at once, and their limit only has to outlast a
        # loaded machine (1.5 s for them timed out under load).
        limit = "1.5" if case == "slow" else "20"
        env = adviser_env(tmux_socket, redis_url, tmp_path, llm.url, AJET_RUNNER_LLM_TIMEOUT_SECONDS=limit)
        started = time.monotonic()
        proc = run_cli(sc, env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1
    assert reason in data["reason"], data["reason"]
    (rep,) = data["repairs"]
    assert rep["source"] == "adviser" and rep["advice_result"] in ("refused", "no answer")
    assert any(reason in r for r in rep["refused"])
    assert (sc.results / "config.patched.yaml").exists() is False or "tensor_model_parallel_size: 3" in (
        sc.results / "config.patched.yaml").read_text()  # nothing of a refused answer was applied
    assert reason in (sc.results / "repair_log.md").read_text()
    assert not (tmp_path / "suggestions.yaml").exists()
    assert len(llm.requests) == 1
    if case == "slow":
        assert time.monotonic() - started < 60
        (answered,) = [e for e in adviser_events(redis_url, exp_id(sc)) if e["status"] == "answered"]
        assert 1.4 <= answered["seconds"] < 5 and answered["result"] == "no answer"
    stats = Store.from_url(redis_url).counters.read()["advised"]
    assert stats == {f"{MODEL}|{rep['advice_result']}": 1}


def test_adviser_is_asked_at_most_max_asks_times(tmp_path: Path, tmux_socket: str, redis_url: str) -> None:
    sc = make("unknown_failure", tmp_path)
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(advice([{**FIX, "value": 5}]))  # valid, but 5 does not divide 28 either
        proc = run_cli(sc, adviser_env(tmux_socket, redis_url, tmp_path, llm.url, AJET_RUNNER_LLM_MAX_ASKS="1"))
        assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(llm.requests) == 1
    data = sc.results_json()
    assert len(data["attempts"]) == 2 and data["outcome"] == "failed"
    assert [r["source"] for r in data["repairs"]] == ["adviser", "none"]
    events = adviser_events(redis_url, exp_id(sc))
    assert [e["status"] for e in events] == ["asking", "answered", "not asked"]
    assert "AJET_RUNNER_LLM_MAX_ASKS=1" in events[-1]["message"]
    assert Store.from_url(redis_url).counters.read()["advised"] == {f"{MODEL}|relaunched": 1, f"{MODEL}|then failed": 1}
    assert not (tmp_path / "suggestions.yaml").exists()


def test_adviser_off_changes_nothing(tmp_path: Path, tmux_socket: str, redis_url: str) -> None:
    sc = make("unknown_failure", tmp_path)
    with fake_llm() as llm:
        env = adviser_env(tmux_socket, redis_url, tmp_path, llm.url)
        del env["AJET_RUNNER_LLM_URL"]  # model and key set, no URL: off
        proc = run_cli(sc, env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
    assert llm.requests == []
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1
    (rep,) = data["repairs"]
    assert rep["source"] == "none" and rep["result"] == "not repairable" and rep["advised_by"] == ""
    assert adviser_events(redis_url, exp_id(sc)) == []
    assert Store.from_url(redis_url).counters.read()["advised"] == {}
    assert "Advised by" not in (sc.results / "repair_log.md").read_text()


# -- the HTTP client alone, against the same fake server -------------------------------------------------


def test_client_falls_back_without_json_mode_and_accepts_a_fenced_answer() -> None:
    with fake_llm() as llm:
        llm.refuse_json_mode = True
        llm.answer = lambda body: Reply("Here is my plan:\n```json\n" + advice([FIX]) + "\n```\n")
        cfg = AdviserConfig(url=llm.url + "/v1", model=MODEL, timeout=10)
        text, model = chat(cfg, [{"role": "user", "content": "hi"}], deadline=time.monotonic() + 10)
    assert [("response_format" in r["body"]) for r in llm.requests] == [True, False]
    assert "Authorization" not in llm.requests[0]["headers"]  # no key configured, none sent
    assert model == MODEL and parse_answer(text).changes[0].value == 4


def test_client_reports_http_errors_and_non_openai_bodies() -> None:
    with fake_llm() as llm:
        llm.answer = lambda body: Reply(status=500, raw='{"error": "overloaded"}')
        cfg = AdviserConfig(url=llm.url, model=MODEL, timeout=10, json_mode=False)
        with pytest.raises(AdviserUnavailable, match="HTTP 500"):
            chat(cfg, [], deadline=time.monotonic() + 10)
        llm.answer = lambda body: Reply(raw='{"hello": "world"}')
        with pytest.raises(AdviserUnavailable, match="not an OpenAI-compatible chat completion"):
            chat(cfg, [], deadline=time.monotonic() + 10)
    with pytest.raises(AdviserUnavailable, match="could not reach the endpoint"):
        chat(AdviserConfig(url=llm.url, timeout=2), [], deadline=time.monotonic() + 2)
