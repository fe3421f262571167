"""OpenAPI = behaviour: schemathesis, with every check enabled, against a live `ajet-runner serve`.

Fails on any undocumented status or content type, any body that does not match its schema, any
5xx, an ignored token, a wrong `Allow` header, ... Bounded and reproducible: a fixed seed and
AJET_RUNNER_SCHEMATHESIS_EXAMPLES examples per operation (default 6 in `make test`; `make fuzz` raises it).
The only setting is in tests/fuzz/schemathesis.toml (a schema-valid blueprint may still be a 422).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_api import running_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = Path(__file__).parent.parent / "fuzz" / "schemathesis.toml"
SEED = 20261201


def test_every_operation_behaves_as_documented(redis_url, tmp_path) -> None:
    examples = int(os.environ.get("AJET_RUNNER_SCHEMATHESIS_EXAMPLES", "6"))
    st = Path(sys.executable).parent / "schemathesis"
    assert st.exists(), "schemathesis is in the [test] extra: make install-test"
    with running_server(redis_url, tmp_path / "serve.log") as server:
        proc = subprocess.run(
            [str(st), "--config-file", str(CONFIG), "run", f"{server.url}/openapi.json", "--checks", "all",
             "--max-examples", str(examples), "--seed", str(SEED), "--workers", "1", "--no-color",
             "--generation-database", "none", "--header", f"Authorization: Bearer {server.token}",
             "--request-timeout", "30", "--report", "junit", "--report-dir", str(tmp_path / "report")],
            cwd=tmp_path, capture_output=True, text=True, timeout=1800, check=False)
        tail = "\n".join(proc.stdout.splitlines()[-60:])
        assert proc.returncode == 0, tail + proc.stderr[-2000:]
        assert " passed" in tail and not re.search(r"(?<!\d)0 generated", tail), tail  # "7120 generated" is fine
