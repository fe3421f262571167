"""The console's stage pages and the submit page's stage field over HTTP against a real `serve` (no worker:
the experiments stay queued): a sweep is checked (its expansion shown), needs a stage name, is submitted
as one stage, and the stage page, the stages list and the experiments list's stage filter show it."""

from __future__ import annotations

import re

import pytest

from tests.integration.scenario import make
from tests.integration.test_api import running_server
from tests.integration.test_ui import csrf_of, login

pytestmark = [pytest.mark.integration]
SWEEP = "\n## [exp_sweep]\n- ajet_sim.seed: 1, 2\n- ajet.rollout.temperature: 0.7, 1.0\n"


def test_a_sweep_from_the_submit_page_becomes_a_stage_page(redis_url, tmp_path) -> None:
    sc = make("demo", tmp_path / "sw")
    text = sc.blueprint.read_text() + SWEEP
    with running_server(redis_url, tmp_path / "serve.log") as server:
        c = login(server.url)
        token = csrf_of(c.get("/ui/submit").text)
        checked = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "check"})
        assert checked.status_code == 200 and 'id="sweep-table"' in checked.text
        assert len(re.findall(r"<code>ajet_sim\.seed=\d, ajet\.rollout\.temperature=[\d.]+</code>", checked.text)) == 4
        unnamed = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "submit"})
        assert unnamed.status_code == 422 and "give the stage a name" in unnamed.text
        bad = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "submit", "stage": "a/b"})
        assert bad.status_code == 422 and "stage name" in bad.text
        done = c.post("/ui/submit", data={"csrf": token, "blueprint": text, "action": "submit", "stage": "temps"})
        assert done.status_code == 303 and done.headers["location"] == "/ui/stages/temps"

        page = c.get("/ui/stages/temps")
        assert page.status_code == 200
        rows = re.findall(r'<tr id="stage-row-([0-9a-f]{12})" data-outcome="queued">', page.text)
        assert len(rows) == 4
        assert '<th data-key="ajet.rollout.temperature" title="ajet.rollout.temperature">temperature</th>' in page.text
        assert '<th data-key="ajet_sim.seed" title="ajet_sim.seed">seed</th>' in page.text
        assert page.text.count('<span class="run-label">temperature=') == 8  # the run column, and not-succeeded
        assert page.text.count("not finished yet") == 4  # listed under "Did not succeed", never dropped
        assert 'id="stage-temps"' in c.get("/ui/stages").text
        listed = c.get("/ui/", params={"stage": "temps"}).text
        assert set(re.findall(r'<tr id="row-([0-9a-f]{12})"', listed)) == set(rows)
        assert '<option value="temps" selected>temps</option>' in listed
        assert c.get("/ui/stages/nothing").status_code == 404
