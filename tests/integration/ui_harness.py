"""A real `serve` + a real worker for the web console tests, and blueprints with hostile text in them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.integration.scenario import Scenario, make, wait_for
from tests.integration.test_api import Server, running_server
from tests.integration.workers import running_worker, worker_env

SCRIPT_PURPOSE = "<script>window.__xss = 1</script> purpose with a script tag"
IMG_PURPOSE = '"><img src=x onerror="window.__xss = 2"> purpose breaking out of an attribute'
SCRIPT_LINE = "<script>window.__xss = 3</script> log line with a script tag"
IMG_LINE = '"><img src=x onerror="window.__xss = 4"> log line breaking out of an attribute'


def with_purpose(sc: Scenario, purpose: str, max_time: str | None = None) -> Scenario:
    """Rewrite the blueprint's purpose (and its time limit) in place."""
    text = sc.blueprint.read_text()
    text = re.sub(r"(## \[exp_purpose\]\n)(.*?)(\n\n## )", lambda m: m.group(1) + purpose + m.group(3), text,
                  count=1, flags=re.S)
    text = re.sub(r"(\[exp_purpose\][^\n:]*:)[^\n]*((?:\n {3,}[^\n]*)*)", lambda m: m.group(1) + " " + purpose,
                  text, count=1) if "## [exp_purpose]" not in text else text
    if max_time:
        text = re.sub(r"0\.5 minutes", max_time, text)
        text = re.sub(r"## \[exp_max_time\]\n[^\n]*", f"## [exp_max_time]\n{max_time}", text)
    sc.blueprint.write_text(text)
    return sc


@dataclass
class Console:
    server: Server
    tmp: Path

    @property
    def url(self) -> str:
        return self.server.url


@contextmanager
def running_console(redis_url: str, tmux_socket: str, tmp_path: Path, slots: int = 3) -> Iterator[Console]:
    with running_server(redis_url, tmp_path / "serve.log", AJET_RUNNER_TMUX_SOCKET=tmux_socket) as server, \
            running_worker(worker_env(redis_url, tmux_socket), "nodeW", "--gpus", "0", "--slots", str(slots)):
        with server.client() as api:
            wait_for(api.nodes, 30, "the worker to register")
        yield Console(server, tmp_path)


def demo(tmp_path: Path, name: str, purpose: str, template: str = "demo", max_time: str | None = None) -> Scenario:
    return with_purpose(make(template, tmp_path / name), purpose, max_time)
