"""A swarm server that fails on its config is diagnosed from its log and not restarted unchanged (issue 36
item 3), end to end: `ajet-runner run`, real embedded Redis, real tmux, the simulated AgentJet's swarm sample
with a server that prints hydra's missing-config error (as `ajet-swarm start` does for a config name that is
not on the search path, tests/corpus/logs/swarm_config_missing.log) and exits 1."""

from __future__ import annotations

import pytest

from tests.integration.scenario import env_for, make, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER = '''import sys
from pathlib import Path

with open(Path(__file__).with_name("server-starts.txt"), "a") as f:
    f.write("start\\n")
print("INFO | ajet.swarm_cli - Starting swarm server on port 10086 with config ajet_swarm_missing", flush=True)
print("Cannot find primary config 'ajet_swarm_missing'. Check that it's in your config search path.", flush=True)
print("\\nConfig search path:\\n\\tprovider=hydra, path=pkg://hydra.conf\\n\\tprovider=main, "
      "path=file:///code/ajet/default_config\\n\\tprovider=schema, path=structured://\\n", flush=True)
print("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", flush=True)
sys.exit(1)
'''


def test_a_swarm_server_failing_on_its_config_ends_the_run_quoting_it_with_one_start(tmp_path, tmux_socket) -> None:
    sc = make("swarm", tmp_path)
    (sc.codebase / "bad_server.py").write_text(SERVER, encoding="utf-8")
    text = sc.blueprint.read_text(encoding="utf-8")
    [server] = [line for line in text.splitlines() if "-m ajet.swarm_cli start" in line]
    python = server.split()[0]
    sc.blueprint.write_text(text.replace(server, f"{python} bad_server.py"), encoding="utf-8")
    proc = run_cli(sc, env_for(tmux_socket))
    assert sc.flag()["outcome"] == "failed", proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = sc.results_json()
    assert (sc.codebase / "server-starts.txt").read_text().count("start") == 1  # never restarted unchanged
    assert "Cannot find primary config 'ajet_swarm_missing'" in doc["reason"], doc["reason"]
    assert doc["reason"].startswith("config_unreadable: "), doc["reason"]
    [repair] = doc["repairs"]  # one diagnosis, no restart plan
    assert repair["signature"] == "config_unreadable", repair
    assert len(doc["attempts"]) == 1, "no second attempt after a config failure"
    report = (sc.results / "experiment_report.md").read_text()
    assert "Cannot find primary config 'ajet_swarm_missing'" in report
