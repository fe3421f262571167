"""What the CLI prints, on a real terminal (a pty) and into a pipe, against a real `serve` (no worker: the
sweep's experiments stay queued).

On a terminal, user text is never read as rich markup: a sweep's purpose starts with `[key=value, …]`, which
rich would take for a style tag and drop, so every run of a stage looked the same. Into a pipe every
command prints tab-separated or plain lines: no box drawing and no line padded with spaces.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.scenario import CLI, make
from tests.integration.test_api import TOKEN, running_server

pytestmark = [pytest.mark.integration]

SWEEP = "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n"
PURPOSE = "比较 [bold]学习率[/bold] 的影响"  # Chinese, with text that is markup to rich
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
BOX = re.compile(r"[│┃┌┏┐┓└┗┘┛├┣┤┫┬┳┴┻┼╋─━═║╭╮╯╰]")


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    return {**env, "AJET_RUNNER_URL": url, "AJET_RUNNER_TOKEN": TOKEN, "COLUMNS": "160", "LINES": "50",
            "TERM": "xterm-256color"}


def on_terminal(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pty (what a person sees); its exit code and the screen's text."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, *args], env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                            close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")


def piped(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def assert_plain(out: str, what: str) -> None:
    """Tab-separated or plain lines: nothing drawn, nothing padded."""
    assert out.strip(), f"{what} printed nothing"
    for line in out.splitlines():
        assert not BOX.search(line), f"{what}: a drawn table into a pipe: {line!r}"
        assert line == line.rstrip(" "), f"{what}: a line padded with spaces ({len(line)} chars): {line[:80]!r}"


def test_sweep_values_show_on_a_terminal_and_pipes_get_plain_lines(redis_url, tmp_path) -> None:
    sc = make("demo", tmp_path / "sw")
    text = re.sub(r"(## \[exp_purpose\]\n)[^\n]*", lambda m: m.group(1) + PURPOSE, sc.blueprint.read_text(), count=1)
    sc.blueprint.write_text(text + SWEEP)
    with running_server(redis_url, tmp_path / "serve.log") as server, server.client() as api:
        env = _env(server.url)
        sub = api.submit_stage("seeds", [(sc.blueprint.read_text(), str(sc.blueprint))])
        ids = [r.id for r in sub.experiments]
        assert len(ids) == 2

        # On a terminal: the values and the whole purpose, markup and all, in every command that shows a purpose.
        commands = {"scan": ("scan",), "status": ("status", ids[0]), "stage show": ("stage", "show", "seeds"),
                    "wait --stage": ("wait", "--stage", "seeds", "--timeout", "1", "--interval", "0.2"),
                    "check": ("check", str(sc.blueprint))}
        for what, args in commands.items():
            code, screen = on_terminal(env, *args)
            assert code in (0, 1), f"{what} exited {code}:\n{screen}"
            flat = " ".join(screen.split())
            seeds = ["ajet_sim.seed=1", "ajet_sim.seed=2"] if what != "status" and what != "check" else [
                "ajet_sim.seed=1"] if what == "status" else []
            for seed in seeds:
                assert f"[{seed}]" in flat, f"{what} dropped the sweep's values on a terminal:\n{screen}"
            assert "[bold]学习率[/bold]" in flat, f"{what} read the purpose as markup:\n{screen}"

        # Into a pipe: every command's lines are plain.
        results = sc.workdir / "val.md"
        results.write_text(Path("tests/corpus/results/classic_math.md").read_text())
        for args in (("scan",), ("status", ids[0]), ("stage", "show", "seeds"), ("stage", "list"), ("nodes",),
                     ("events", ids[0]), ("check", str(sc.blueprint)), ("check", str(sc.blueprint), "--sweep",
                                                                         "ajet_sim.seed=1,2,3"),
                     ("results", str(results)), ("diagnose", "tests/corpus/logs/cuda_oom_ray.log"),
                     ("wait", "--stage", "seeds", "--timeout", "1", "--interval", "0.2")):
            out = piped(env, *args)
            assert out.returncode in (0, 1), (args, out.stderr)
            assert_plain(out.stdout + out.stderr, " ".join(args))
            if args in (("scan",), ("stage", "show", "seeds")):
                assert "[ajet_sim.seed=1]" in out.stdout


def test_bad_input_to_the_client_is_exit_2_and_an_unknown_id_draws_no_bar(redis_url, tmp_path) -> None:
    with running_server(redis_url, tmp_path / "serve.log") as server:
        env = _env(server.url)
        for url in ("notaurl", "ftp://host", "http://"):
            out = piped({**env, "AJET_RUNNER_URL": url}, "scan")
            assert out.returncode == 2 and "bad API URL" in out.stderr and out.stderr.count("\n") == 1, out.stderr
        assert piped(env, "scan", "--limit", "-1").returncode == 2
        code, screen = on_terminal(env, "watch", "0123456789ab")
        assert code == 1 and "error:" in screen, screen
        assert "queued" not in screen and "attempt" not in screen and "━" not in screen, screen


def test_results_on_a_terminal_prints_metric_names_and_file_names_as_text(tmp_path) -> None:
    """A metric's name is the trainer's text: `acc[/]` once crashed `results` (rich's MarkupError) and
    `score[gsm8k]` lost its `[gsm8k]`; a result dir named like a style tag kept its name neither."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_")}
    env.update(COLUMNS="120", LINES="50", TERM="xterm-256color")
    odd = tmp_path / "odd.md"  # metrics the runner has no column rule for: the first few are shown
    odd.write_text("{'global_steps': 0, 'score[gsm8k]': 0.5, 'acc[/]': 0.1}\n"
                   "{'global_steps': 2, 'score[gsm8k]': 0.6, 'acc[/]': 0.2}\n")
    code, screen = on_terminal(env, "results", str(odd))
    assert code == 0 and "Traceback" not in screen, screen
    for name in ("score[gsm8k]", "acc[/]"):
        assert f" {name} ┃" in screen, screen  # the column's header
        assert f"  {name}: 0." in screen, screen  # the final values
    out = piped(env, "results", str(odd))
    assert out.returncode == 0, out.stderr
    assert_plain(out.stdout, "results into a pipe")
    assert out.stdout.splitlines()[0] == "step\tscore[gsm8k]\tacc[/]", out.stdout

    run = tmp_path / "[bold]lr-1e-6"  # a result dir: `files:` names what was read
    (run / "saved_val_result").mkdir(parents=True)
    (run / "saved_val_result" / "val.md").write_text("{'global_steps': 0, 'mean_reward': 0.3}\n")
    code, screen = on_terminal(env, "results", str(run))
    assert code == 0, screen
    assert f"files: {run / 'saved_val_result' / 'val.md'}" in "".join(screen.split("\n")), screen
