"""Which command of the launch command printed the failure (statemachine/failures/failing_line.py), and the seed's
proxychains rule applied to exactly that command (`python xxx.py` → `proxychains4 -q python xxx.py`)."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.failures.failing_line import failing_command
from ajet_runner.statemachine.shell.command import prefix_command_at

CHAIN = ("cd /code && HF_HOME=/x python scripts/download.py --model q && \\\n  pip install -r req.txt && "
         "huggingface-cli download Qwen/Q && python -m ajet.launcher --conf a.yaml")
ERR = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443)"


def tb(first_file: str) -> list[str]:
    return ["noise", "Traceback (most recent call last):", f'  File "{first_file}", line 3, in <module>',
            '  File "/venv/lib/python3.11/site-packages/requests/api.py", line 73, in get', ERR, "after"]


@pytest.mark.parametrize(("frame", "expected"), [
    ("/code/scripts/download.py", "cd /code && HF_HOME=/x proxychains4 -q python scripts/download.py --model q"),
    ("/venv/bin/huggingface-cli", "&& proxychains4 -q huggingface-cli download Qwen/Q"),
    ("/venv/lib/python3.11/site-packages/ajet/launcher.py", "&& proxychains4 -q python -m ajet.launcher"),
])
def test_the_traceback_names_the_failing_command_and_only_it_gets_the_prefix(frame: str, expected: str) -> None:
    found = failing_command(CHAIN, tb(frame), ERR)
    assert found is not None and found.how == f"the traceback starts in {frame}"
    out = prefix_command_at(CHAIN, found.start, "proxychains4 -q")
    assert expected in out and out.count("proxychains4 -q") == 1
    assert out.replace("proxychains4 -q ", "") == CHAIN  # every other byte as written
    assert prefix_command_at(out, found.start, "proxychains4 -q") == out  # idempotent (its start did not move)


def test_pips_own_error_lines_name_the_pip_install() -> None:
    lines = ["Collecting x", "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='pypi.org',"
             " port=443): Max retries exceeded with url: /simple/x/ (Caused by NewConnectionError('no route'))"]
    found = failing_command(CHAIN, lines, lines[-1])
    assert found is not None and found.shown == "pip install -r req.txt" and not found.launcher
    assert "\n  proxychains4 -q pip install -r req.txt &&" in prefix_command_at(CHAIN, found.start, "proxychains4 -q")


def test_a_failure_the_log_does_not_tie_to_a_command_is_none() -> None:
    assert failing_command(CHAIN, [ERR], ERR) is None  # no traceback, no pip lines
    assert failing_command(CHAIN, tb("/elsewhere/worker.py"), ERR) is None  # a frame no command runs
    assert failing_command(CHAIN, ["unrelated"], ERR) is None  # the line is not in the tail


def test_a_launcher_inside_a_script_is_reached_through_the_command_that_runs_the_script() -> None:
    command = "export HF_HOME=/x && bash scripts/train.sh --fast"
    found = failing_command(command, tb("/venv/lib/python3.11/site-packages/ajet/launcher.py"), ERR)
    assert found is not None and found.shown == "bash scripts/train.sh --fast"
    assert prefix_command_at(command, found.start, "proxychains4 -q") == (
        "export HF_HOME=/x && proxychains4 -q bash scripts/train.sh --fast")  # the script itself is not touched
