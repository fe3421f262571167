"""The signatures real AgentJet runs showed that the catalogue did not know, from real-shaped logs."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.failures.diagnose import decisive_line, diagnose_text
from ajet_runner.statemachine.failures.signatures import signature

RAY = "\x1b[36m(TaskRunner pid=40211)\x1b[0m "
LOGS = {
    "python_module_missing": (
        "\x1b[32m2025-01-02 10:00:01.123\x1b[0m | INFO | ajet.launcher:main:142 - Launching\n"
        "Traceback (most recent call last):\n"
        '  File "/work/AgentJet/ajet/backbone/main_verl.py", line 21, in <module>\n'
        "    import ray\n"
        "ModuleNotFoundError: No module named 'ray'\n"
        "2025-01-02 10:00:02.001 | ERROR | ajet.utils.launch_utils:execute_training_process:248 - Error running "
        "subprocess: Command '['python', '-m', 'ajet.backbone.main_verl']' returned non-zero exit status 1.\n",
        "ModuleNotFoundError: No module named 'ray'",
    ),
    "nvidia_smi_missing": (
        "2025-01-02 10:00:01.123 | INFO | ajet.utils.launch_utils:check_avail_gpu:301 - Checking GPU availability\n"
        "/bin/sh: 1: nvidia-smi: not found\n"
        "Traceback (most recent call last):\n"
        '  File "/work/AgentJet/ajet/utils/launch_utils.py", line 305, in check_avail_gpu\n'
        "FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'\n",
        "/bin/sh: 1: nvidia-smi: not found",
    ),
    "backbone_env_mismatch": (
        "2025-01-02 10:00:01.123 | ERROR | ajet.utils.launch_utils:verify_python_env:88 - Python environment "
        "does not match current backbone 'trinity'. Please install AgentJet with `uv pip install -e .[trinity]`.\n"
        "2025-01-02 10:00:01.130 | ERROR | ajet.launcher:main:160 - Unexpected error: environment check failed\n",
        "Python environment does not match current backbone",
    ),
    "trinity_force_stop": (
        "(Explorer pid=3311) ERROR explorer.py:188 Explorer failed: rollout engine unreachable\n"
        "(Trainer pid=3312) WARNING trainer.py:144 Waiting for experiences from the explorer ... "
        "You can force stop the Trainer process by pressing Ctrl+C.\n",
        "You can force stop the Trainer process",
    ),
}


@pytest.mark.parametrize("sig", sorted(LOGS))
def test_each_new_signature_is_the_diagnosed_cause_and_not_repairable(sig: str) -> None:
    text, decisive = LOGS[sig]
    diagnosis = diagnose_text(text)
    cause = next(f for f in diagnosis.findings if f.fatal)
    assert cause.signature == sig
    assert decisive in cause.text
    assert not signature(sig).repairable and "Not repairable" in signature(sig).explanation
    quote = decisive_line(cause)
    assert quote.startswith(f"log line {cause.line}: ") and decisive in quote


def test_module_missing_names_the_module_and_the_venv() -> None:
    cause = next(f for f in diagnose_text(LOGS["python_module_missing"][0]).findings if f.fatal)
    assert "'ray'" in cause.text and "exp_venv_exe" in cause.explanation


def test_an_unknown_failure_quotes_its_exception_or_the_last_line() -> None:
    text = (f"{RAY}Traceback (most recent call last):\n{RAY}  File \"x.py\", line 3, in f\n"
            f"{RAY}KeyError: 'answer'\n")
    cause = next(f for f in diagnose_text(text).findings if f.fatal)
    assert cause.signature == "python_traceback"
    assert decisive_line(cause) == "log line 3: \"KeyError: 'answer'\""
    assert decisive_line(None, ["first", "the last words", "  "]) == 'last log line: "the last words"'
    assert decisive_line(None, []) == ""
