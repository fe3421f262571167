"""The client commands' output pinned byte for byte (tests/golden/*), as a script sees it: piped,
against a real `serve`; and their exit codes when the API is gone or cannot serve.

Golden files hold `$name` placeholders for what changes between runs (ids, times, the port).
"""

from __future__ import annotations

import ast
import json
import subprocess
import time
from pathlib import Path
from string import Template

import pytest
import typer
from click.testing import CliRunner

from ajet_runner.cli.app import app
from ajet_runner.cli.commands.help_text import tidy
from tests.integration.scenario import CLI, make
from tests.integration.test_api import free_port, running_server
from tests.integration.test_cli_client import cli_env, run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GOLDEN = Path(__file__).parent.parent / "golden"


def golden(name: str, **values: str) -> str:
    return Template((GOLDEN / name).read_text()).substitute(values)


def utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def test_drop_ins_and_piped_tables_match_the_golden_files(redis_url, tmp_path) -> None:
    demo = make("demo", tmp_path)
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as api:
        env = {**cli_env(server.url), "TZ": "UTC"}

        out = run(env, "submit", f"--blueprint={demo.blueprint}", "--runner", "pai",
                  "--acknowledge-max-parallel-capacity=4", "--node", "nowhere", "--wait-for-node")
        assert out.returncode == 0, out.stderr
        a = out.stdout.split(": ")[-1].strip()
        assert out.stdout == golden("submit_blueprint.stdout", a=a)
        assert out.stderr == golden("submit_blueprint.stderr")
        assert len(a) == 12 and api.get(a).state == "queued"

        # a second live run needs its own result dir
        second = demo.blueprint.read_text().replace(str(demo.results), f"{demo.results}-b")
        piped = subprocess.run([*CLI, "submit", "-", "--node", "nowhere", "--wait-for-node"], env=env,
                               input=second,
                               capture_output=True, text=True, timeout=60, check=False)
        assert piped.returncode == 0, piped.stderr
        b = piped.stdout.removeprefix("Job submitted: ").strip()
        assert api.get(b).blueprint_path == ""  # from stdin: no file to name

        out = run(env, "stop-jobs", f"--stop-job-id={a}", "--stop-job-id=nope")
        assert (out.returncode, out.stdout) == (0, golden("stop_jobs.txt", a=a))

        purpose = api.get(a).purpose.strip().splitlines()[0]
        out = run(env, "scan")
        assert (out.returncode, out.stdout) == (0, golden("scan.tsv", a=a, b=b, purpose=purpose))

        out = run(env, "scan-jobs")
        created = {"a_created": utc(api.get(a).created_at or 0), "b_created": utc(api.get(b).created_at or 0)}
        assert (out.returncode, out.stdout) == (0, golden("scan_jobs.txt", a=a, b=b, purpose=purpose, **created))
        rows = [ast.literal_eval(line) for line in out.stdout.splitlines()]  # real Python dicts
        assert [list(r) for r in rows] == [["job_id", "display_name", "status", "create_time"]] * 2
        assert json.loads(run(env, "scan-jobs", "--json").stdout) == rows

        out = run(env, "stop-jobs", f"--stop-job-id={b}", "--delete")
        assert (out.returncode, out.stdout) == (0, golden("stop_jobs_delete.txt", b=b))

        dead = f"http://127.0.0.1:{free_port()}"
        out = run(cli_env(dead), "stop-jobs", f"--stop-job-id={a}")
        assert (out.returncode, out.stdout) == (0, golden("stop_jobs_unreachable.txt", a=a, url=dead))


def test_piped_scan_keeps_every_value_whole(redis_url, tmp_path) -> None:
    """A narrow terminal width must not matter when stdout is a pipe: full ids, states and paths."""
    demo = make("demo", tmp_path)
    with running_server(redis_url, tmp_path / "serve.log") as server:
        env = {**cli_env(server.url), "COLUMNS": "40"}
        exp = run(env, "submit", str(demo.blueprint), "--node", "a-rather-long-node-name-for-the-table",
                  "--wait-for-node").stdout
        exp = exp.split(": ")[-1].strip()
        out = run(env, "scan")
        row = out.stdout.splitlines()[1].split("\t")
        assert row[0] == exp and row[2] == "queued" and row[3] == "a-rather-long-node-name-for-the-table"
        status = run(env, "status", exp)
        assert any(line.endswith(str(demo.results)) for line in status.stdout.splitlines())


def test_followers_give_up_with_exit_3_within_the_limit(tmp_path) -> None:
    dead = cli_env(f"http://127.0.0.1:{free_port()}")
    for args in (("events", "abc", "-f"), ("logs", "abc", "-f"), ("watch", "abc")):
        # What the same command costs when it gives up at once (start-up, imports: 1 s quiet, 20+ s at load
        # 15), so the bound below is about the 2 s limit, not about how loaded the machine is.
        start = time.monotonic()
        assert run(dead, "status", "abc").returncode == 3
        at_once = time.monotonic() - start
        start = time.monotonic()
        out = run(dead, *args, "--reconnect-limit", "2")
        took = time.monotonic() - start
        assert out.returncode == 3, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and "no usable answer for 2s (limit 2s)" in out.stderr, out.stderr
        assert 1.9 <= took < at_once + 8, (args, took, at_once)  # a 30 s limit would take at_once + 30
    default = run({**dead, "AJET_RUNNER_RECONNECT_LIMIT": "1"}, "events", "abc", "-f")
    assert default.returncode == 3 and "limit 1s" in default.stderr


def test_every_api_error_is_one_line_and_a_documented_exit_code(tmp_path) -> None:
    """A server whose Redis is gone answers 503 everywhere: no traceback, exit 3 (stop-jobs: 0)."""
    demo = make("demo", tmp_path)
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    with running_server(dead_redis, tmp_path / "serve.log") as server:
        env = cli_env(server.url)
        for args in (("scan",), ("scan-jobs",), ("status", "x"), ("nodes",), ("stop", "x"), ("events", "x"),
                     ("logs", "x"), ("submit", str(demo.blueprint)), ("events", "x", "-f", "--reconnect-limit", "1"),
                     ("logs", "x", "-f", "--reconnect-limit", "1"), ("watch", "x", "--reconnect-limit", "1")):
            out = run(env, *args)
            assert out.returncode == 3, (args, out.stdout, out.stderr)
            assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr, (args, out.stderr)
            assert "HTTP 503" in out.stderr and "Redis is unreachable" in out.stderr, (args, out.stderr)
        out = run(env, "stop-jobs", "--stop-job-id=x")
        assert out.returncode == 0 and out.stdout.splitlines() == [
            "Stopping job x ...", "Failed to stop x: HTTP 503: Redis is unreachable: ConnectionError"]
        wrong = run(cli_env(server.url, "wrong"), "scan")
        assert wrong.returncode == 2 and len(wrong.stderr.splitlines()) == 1


def test_usage_and_conventions(tmp_path) -> None:
    dead = cli_env(f"http://127.0.0.1:{free_port()}")
    version = run(dead, "--version")
    assert version.returncode == 0 and version.stdout.startswith("ajet-runner ")
    assert "--install-completion" in run(dead, "--help").stdout
    missing = run(dead, "submit", str(tmp_path / "absent.md"))
    assert missing.returncode == 2 and "cannot read blueprint" in missing.stderr
    for cmd in ("results", "diagnose", "check"):
        assert run(dead, cmd, str(tmp_path / "absent")).returncode == 2, cmd
    assert run(dead, "submit", "x.md", "y.md", "--idempotency-key", "k").returncode == 2
    # Each command's help, in this process (the command `main()` builds; the root's --help above ran as a
    # program): fourteen interpreters started only to print help were most of this test's time.
    command = tidy(typer.main.get_command(app))
    for cmd in ("scan", "status", "stop", "logs", "events", "watch", "nodes", "scan-jobs", "stop-jobs", "drain",
                "submit", "check", "results", "diagnose"):
        shown = CliRunner().invoke(command, [cmd, "--help"], prog_name="ajet-runner", env={"COLUMNS": "200"})
        assert shown.exit_code == 0 and "--json" in shown.output, (cmd, shown.output)
