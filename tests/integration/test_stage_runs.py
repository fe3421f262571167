"""Stages end to end (issue 30's acceptance): a real `serve`, a real worker, the simulated AgentJet, the CLI.

A sweep of 2 reward targets x 2 seeds submitted as one stage: `wait` exits 0 once all four finish; the stage
report written into the sweep's dir names the swept key as the only difference (the seed makes repeats),
ranks the four and overlays their curves; a webhook receiver on loopback got four signed experiment events
and one signed stage event; the console's stage page shows the report's table. A stage with one failed
experiment lists it with its decisive line, and `wait` exits 1.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.scenario import make, wait_for
from tests.integration.test_api import TOKEN, running_server
from tests.integration.test_cli_client import cli_env, run
from tests.integration.webhook_receiver import WebhookReceiver
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SECRET = "s3cret-for-the-hmac"
SWEEP = """
## [exp_sweep]
- description: two reward targets, each with two seeds
- ajet_sim.reward_end: 0.6, 0.9
- ajet_sim.seed: 1, 2
"""


def quick(yaml_path: Path, steps: int = 6) -> None:
    """A short run of the simulated trainer: `steps` steps of 0.2 s, a validation every 2, reward_end stated."""
    text = yaml_path.read_text()
    text = text.replace("total_training_steps: 10", f"total_training_steps: {steps}")
    text = re.sub(r"step_seconds: [0-9.]+", "step_seconds: 0.2", text)
    text = re.sub(r"val_seconds: [0-9.]+", "val_seconds: 0.1", text)
    text = re.sub(r"startup_seconds: [0-9.]+", "startup_seconds: 0.2\n  reward_end: 0.8", text)
    yaml_path.write_text(text)


def table_rows(markdown: str, heading: str) -> list[list[str]]:
    """The cells of the first table under `## heading`."""
    section = markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines: list[str] = []
    for ln in section.splitlines():
        if ln.startswith("|"):
            lines.append(ln)
        elif lines:
            break
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[2:]]


def test_a_sweep_stage_waits_compares_notifies_and_shows(redis_url, tmux_socket, tmp_path) -> None:
    sc = make("demo", tmp_path / "sweep")
    quick(sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml")
    sc.blueprint.write_text(sc.blueprint.read_text() + SWEEP)
    env_worker = worker_env(redis_url, tmux_socket, AJET_RUNNER_WEBHOOK_URL="", AJET_RUNNER_WEBHOOK_SECRET=SECRET)
    with WebhookReceiver() as hook, running_server(redis_url, tmp_path / "serve.log") as server:
        env_worker["AJET_RUNNER_WEBHOOK_URL"] = hook.url
        with running_worker(env_worker, "nodeS", "--gpus", "0", "--slots", "4"):
            with server.client() as api:
                wait_for(api.nodes, 30, "the worker to register")
            env = cli_env(server.url)

            checked = run(env, "check", str(sc.blueprint), "--json")
            sweep = json.loads(checked.stdout)["sweep"]
            assert [m["label"] for m in sweep["experiments"]] == [
                "ajet_sim.reward_end=0.6, ajet_sim.seed=1", "ajet_sim.reward_end=0.6, ajet_sim.seed=2",
                "ajet_sim.reward_end=0.9, ajet_sim.seed=1", "ajet_sim.reward_end=0.9, ajet_sim.seed=2"]

            out = run(env, "submit", "--stage", "reward-sweep", str(sc.blueprint))
            assert out.returncode == 0, out.stderr
            ids = re.findall(r"^Job submitted: ([0-9a-f]{12})$", out.stdout, flags=re.M)
            assert len(ids) == 4, out.stdout
            assert "Stage: reward-sweep (4 experiment(s); its report goes to " in out.stderr

            waited = run(env, "wait", "--stage", "reward-sweep", "--interval", "0.5", timeout=300)
            assert waited.returncode == 0, waited.stdout + waited.stderr
            summary = waited.stdout.splitlines()
            assert len(summary) == 4 and all(" completed " in line for line in summary), summary
            assert {line.split()[0] for line in summary} == set(ids)

            scan = run(env, "scan", "--stage", "reward-sweep", "--json")
            assert {r["id"] for r in json.loads(scan.stdout)} == set(ids)
            assert all(r["stage"] == "reward-sweep" for r in json.loads(scan.stdout))

            # The stage report, written by the worker's deliverer into the sweep's result dir.
            report = sc.results / "stage_report.md"
            wait_for(report.exists, 60, "the stage report")
            text = report.read_text()
            differs = text.split("## What differs\n", 1)[1].split("\n## ", 1)[0]
            assert "- `ajet_sim.reward_end`: `0.6`, `0.9`" in differs
            assert "- `ajet_sim.seed` (a seed: experiments that differ only in it are repeats): `1`, `2`" in differs
            assert differs.count("\n- `") == 2, differs  # nothing else differs: the swept key (and the seed)
            results = json.loads((sc.results / "stage_results.json").read_text())
            assert results["compared_keys"] == ["ajet_sim.reward_end"]
            assert results["seed_keys"] == ["ajet_sim.seed"]
            ranked = [r["id"] for r in results["ranking_final"]]
            assert sorted(ranked) == sorted(ids) and all(r["value"] is not None for r in results["ranking_final"])
            by_id = {r["id"]: r for r in results["rows"]}
            top_two = {by_id[i]["differs"]["ajet_sim.reward_end"] for i in ranked[:2]}
            assert top_two == {"0.9"}  # the higher target rises higher
            assert len(results["repeat_groups"]) == 2
            assert len(table_rows(text, "Ranking by mean_reward")) == 4
            assert set(results["curves"]["mean_reward"]) == set(ids)
            png = (sc.results / "stage_plot.png").read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
            for row in results["rows"]:  # links to each experiment's own report and repair log
                assert (sc.results / row["report_link"]).is_file() and (sc.results / row["repair_log_link"]).is_file()

            # `compare` writes the same comparison elsewhere.
            out_dir = tmp_path / "compare"
            compared = run(env, "compare", "--stage", "reward-sweep", "-o", str(out_dir))
            assert compared.returncode == 0, compared.stderr
            assert "differs in ajet_sim.reward_end; repeats over ajet_sim.seed" in compared.stdout
            again = json.loads((out_dir / "stage_results.json").read_text())
            assert again["ranking_final"] == results["ranking_final"]

            # The webhooks: four experiment events and one stage event, each signed.
            wait_for(lambda: len(hook.of_type("stage_finished")) == 1 and len(hook.of_type("experiment_finished"))
                     == 4, 60, "the webhooks")
            for got in hook.received:
                assert got.signed_by(SECRET), got.headers
                assert got.headers["x-ajet-runner-event"] == got.json["type"]
                assert got.headers["x-ajet-runner-delivery"] == got.json["delivery"]
            assert {h.json["id"] for h in hook.of_type("experiment_finished")} == set(ids)
            assert all(h.json["stage"] == "reward-sweep" and h.json["outcome"] == "completed"
                       and h.json["best"]["mean_reward"]["value"] > 0 for h in hook.of_type("experiment_finished"))
            stage_event = hook.of_type("stage_finished")[0].json
            assert stage_event["stage"] == "reward-sweep" and stage_event["experiments"] == 4
            assert stage_event["outcomes"] == {"completed": 4} and stage_event["report"] == str(report)
            assert not got.signed_by("another secret")
            with server.client() as api:  # the deliveries are in each experiment's events
                events = [e.type for e in api.events(ids[0]).events]
                assert "webhook_delivered" in events and "stage_report" in events
                listed = api.stage("reward-sweep")
                assert listed.finished and listed.succeeded and listed.outcomes == {"completed": 4}
                assert listed.report == str(report)

            _check_console_stage_page(server.url, text)


def _check_console_stage_page(url: str, report_text: str) -> None:
    """The console's stage page shows the rows of the report's table (ids, outcomes, the differing values)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    from tests.integration.browser import headless_chromium, page_wait

    expected = [(r[2].strip("`"), r[4], r[9].strip("`"), r[10].strip("`"))
                for r in table_rows(report_text, "Experiments")]
    with headless_chromium() as driver:
        wait = page_wait(driver, 60)
        driver.get(f"{url}/ui/login")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        driver.get(f"{url}/ui/stages")
        wait.until(ec.presence_of_element_located((By.ID, "stage-reward-sweep")))
        driver.find_element(By.CSS_SELECTOR, "#stage-reward-sweep a").click()
        wait.until(ec.presence_of_element_located((By.ID, "stage-table")))
        header = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#stage-table thead th")]
        assert header[8:10] == ["reward_end", "seed"], header  # short names; the whole key on hover
        shown = []
        for tr in driver.find_elements(By.CSS_SELECTOR, "#stage-table tbody tr"):
            cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            shown.append((cells[1].split()[-1], cells[3], cells[8], cells[9]))
            assert cells[1].startswith(f"reward_end={cells[8]}, seed={cells[9]}")  # the run column: what differs
        assert shown == expected
        first = driver.find_elements(By.CSS_SELECTOR, "#stage-charts svg.stage-chart")[0]
        assert first.get_attribute("data-metric") == "mean_reward"
        strokes = [p.get_attribute("stroke") for p in first.find_elements(By.TAG_NAME, "polyline")]
        assert len(strokes) == 2 and len(set(strokes)) == 2, strokes  # one mean curve per reward_end (2 seeds each)
        assert len(first.find_elements(By.CSS_SELECTOR, "polygon.seed-band")) == 2  # with its band across seeds
        assert [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#differs li")][0] == "ajet_sim.reward_end"
        driver.get(f"{url}/ui/?stage=reward-sweep")
        wait.until(ec.presence_of_element_located((By.ID, "exp-table")))
        rows = driver.find_elements(By.CSS_SELECTOR, "#exp-table tbody tr[id^=row-]")
        assert {r.get_attribute("id")[4:] for r in rows} == {e[0] for e in expected}


def test_a_stage_with_a_failed_experiment_lists_it_and_wait_exits_1(redis_url, tmux_socket, tmp_path) -> None:
    good = make("demo", tmp_path / "good")
    quick(good.codebase / "tests/bench/benchmark_math/benchmark_math.yaml", steps=4)
    bad = make("model_missing", tmp_path / "bad")
    stage_dir = tmp_path / "stage"
    with running_server(redis_url, tmp_path / "serve.log") as server, \
            running_worker(worker_env(redis_url, tmux_socket), "nodeF", "--gpus", "0", "--slots", "2"):
        with server.client() as api:
            wait_for(api.nodes, 30, "the worker to register")
        env = cli_env(server.url)
        out = run(env, "submit", "--stage", "mixed", "--stage-dir", str(stage_dir), str(good.blueprint),
                  str(bad.blueprint))
        assert out.returncode == 0, out.stderr
        ids = re.findall(r"^Job submitted: ([0-9a-f]{12})$", out.stdout, flags=re.M)
        assert len(ids) == 2

        waited = run(env, "wait", ids[0], ids[1], "--interval", "0.5", timeout=300)
        assert waited.returncode == 1, waited.stdout + waited.stderr
        lines = {line.split()[0]: line for line in waited.stdout.splitlines()}
        assert " completed " in lines[ids[0]] and " failed " in lines[ids[1]]
        assert "Model path" in lines[ids[1]]  # the summary line carries why

        wait_for((stage_dir / "stage_report.md").exists, 60, "the stage report")
        text = (stage_dir / "stage_report.md").read_text()
        failed = text.split("## Did not succeed\n", 1)[1]
        assert f"- `{ids[1]}` (failed): " in failed and "Model path" in failed, failed
        assert "log line" in failed.split(ids[1], 1)[1].splitlines()[0]  # the decisive line, as the runner quoted it
        results = json.loads((stage_dir / "stage_results.json").read_text())
        assert results["not_succeeded"] == [ids[1]]
        assert [r["id"] for r in results["rows"]] == ids  # the failed one is a row too, never dropped
        assert run(env, "wait", "--stage", "mixed", timeout=60).returncode == 1
