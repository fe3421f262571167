"""The `swarm_server` rule: a swarm server that dies while the client runs ends the attempt,
diagnosed from the server's log; a client that already finished decides by its own exit."""

from __future__ import annotations

from ajet_runner.statemachine.blueprint.swarm_blueprint import SERVER_DIED, server_failure_finding
from ajet_runner.statemachine.failures.diagnose import diagnose_text
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules import Observation, SwarmServerRule, decide, default_rules


def obs(**kw: object) -> Observation:
    base: dict[str, object] = dict(now=100.0, started_at=0.0, attempt_started_at=0.0, max_seconds=1000.0,
                                   process_alive=True, last_output_at=99.0)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def running() -> Lifecycle:
    lc = Lifecycle(id="e")
    lc.fire("start")
    lc.fire("launched")
    return lc


def test_a_live_or_absent_server_proposes_nothing() -> None:
    assert SwarmServerRule().check(obs()) is None  # classic runs: server_alive defaults to True
    assert SwarmServerRule().check(obs(server_alive=True)) is None


def test_a_dead_server_ends_the_attempt_with_a_restart_plan_quoting_its_log() -> None:
    line = "2026-12-01 | ERROR | ajet.swarm_server - Engine crashed: CUDA error: an illegal memory access"
    p = decide(default_rules(), obs(server_alive=False, server_last_line=line), running().can)
    assert p is not None and p.trigger == "anomaly" and p.rule == "swarm_server"
    assert p.finding is not None and p.finding.signature == SERVER_DIED and p.finding.repairable
    assert [(a.kind, a.value) for a in p.finding.repair] == [("cleanup", "swarm_server")]
    assert "Engine crashed" in p.finding.explanation and p.finding.text == line


def test_a_swarm_signature_in_the_server_log_is_the_diagnosis_itself() -> None:
    log = ("INFO Loading the training engine ...\n"
           "ERROR Cannot sync train config or start engine when engine is in status: ENGINE.CANNOT_CONNECT\n")
    cause = diagnose_text(log).cause
    assert cause is not None and cause.signature == "swarm_engine_state"
    p = SwarmServerRule().check(obs(server_alive=False, server_cause=cause))
    assert p is not None and p.finding == cause
    disabled = diagnose_text("ERROR Please enable_swarm_mode in config to start swarm server.\n").cause
    assert disabled is not None and server_failure_finding(disabled).signature == "swarm_mode_disabled"
    assert not server_failure_finding(disabled).repairable


def test_another_signature_in_the_server_log_is_named_in_a_server_death() -> None:
    oom = Finding(signature="cuda_oom", fatal=True, line=7, text="torch.OutOfMemoryError: CUDA out of memory",
                  explanation="x", repairable=True)
    f = server_failure_finding(oom)
    assert f.signature == SERVER_DIED and "cuda_oom" in f.explanation and "CUDA out of memory" in f.explanation


def test_the_server_death_beats_the_clients_exit_but_not_its_success() -> None:
    client_lost = Finding(signature="swarm_unreachable", fatal=True, line=9, text="Unable to connect", explanation="x")
    p = decide(default_rules(), obs(process_alive=False, exit_code=1, cause=client_lost, server_alive=False),
               running().can)
    assert p is not None and p.rule == "swarm_server" and p.finding is not None
    assert p.finding.signature == SERVER_DIED
    p = decide(default_rules(), obs(process_alive=False, exit_code=0, server_alive=False), running().can)
    assert p is not None and p.trigger == "completed"
    assert SwarmServerRule().check(obs(server_alive=False, completed_run=True)) is None
    p = decide(default_rules(), obs(cancel_requested=True, server_alive=False), running().can)
    assert p is not None and p.trigger == "cancel"


def test_a_failed_client_is_explained_by_a_swarm_signature_in_the_live_servers_log() -> None:
    engine = diagnose_text("ERROR Cannot sync train config or start engine when engine is in status: "
                           "ENGINE.ROLLING\n").cause
    assert engine is not None
    bare = Finding(signature="python_traceback", fatal=True, line=3, text="RuntimeError: 500", explanation="x",
                   repairable=False)
    p = decide(default_rules(), obs(process_alive=False, exit_code=1, cause=bare, server_cause=engine),
               running().can)
    assert p is not None and p.rule == "swarm_server" and p.finding == engine and "code 1" in p.reason
    # the client's own specific diagnosis stands; a live server with nothing to say changes nothing
    oom = Finding(signature="cuda_oom", fatal=True, line=3, text="CUDA out of memory", explanation="x")
    p = decide(default_rules(), obs(process_alive=False, exit_code=1, cause=oom, server_cause=engine), running().can)
    assert p is not None and p.rule == "process_exit" and p.finding == oom
    p = decide(default_rules(), obs(process_alive=False, exit_code=1, cause=bare), running().can)
    assert p is not None and p.rule == "process_exit"
    assert SwarmServerRule().check(obs(server_cause=engine)) is None  # the client still runs: it decides


def test_a_server_that_failed_on_its_config_is_diagnosed_from_its_log_not_restarted() -> None:
    from pathlib import Path

    from ajet_runner.statemachine.fixes.failure import judge_failure

    log = (Path(__file__).resolve().parent.parent / "corpus" / "logs" / "swarm_config_missing.log").read_text()
    cause = diagnose_text(log).cause
    assert cause is not None and cause.signature == "config_unreadable"
    finding = server_failure_finding(cause, "", what="failed: the swarm server exited (code 1) before listening")
    assert finding.signature == "config_unreadable" and not finding.repair  # no restart-the-server plan
    assert "Cannot find primary config 'ajet_swarm_missing'" in finding.text
    verdict = judge_failure(launched=True, signature=finding.signature, planned=bool(finding.repair),
                            applicable=False, budget_left=True, why="not repairable")
    assert verdict.trigger == "give_up"  # the run ends, quoting the server's log: never an unchanged restart
    generic = diagnose_text("Traceback (most recent call last):\nValueError: boom\n").cause
    assert generic is not None and server_failure_finding(generic).signature == SERVER_DIED  # unknown: restart
