"""The rule schedule runs a rule again whenever one of its inputs changed or its deadline came, and
only then; on any sequence of observations it decides exactly what running every rule would."""

from __future__ import annotations

import dataclasses
import random

import pytest

from ajet_runner.statemachine.models import Evaluation, Finding
from ajet_runner.statemachine.rules import Observation, RuleSchedule, decide, default_rules

T0 = 1_000_000.0
OOM = Finding(signature="a_site_signature", fatal=True, line=3, text="boom", explanation="x")
FLAT = [Evaluation(step=i, metrics={"mean_reward": 0.5, "task_pass_rate@1": 0.25}) for i in range(5)]


def quiet(**changes: object) -> Observation:
    """A healthy running attempt, one second after its start: no rule proposes anything."""
    base = Observation(now=T0 + 1, started_at=T0, attempt_started_at=T0, max_seconds=3600.0, process_alive=True,
                       last_output_at=T0 + 1, first_step_seen=True)
    return dataclasses.replace(base, **changes)


def everything(_trigger: str) -> bool:
    return True


# (rule, the quiet observation, the one input that changes, its new value, the trigger it then proposes)
CASES = [
    ("cancel", {}, "cancel_requested", True, "cancel"),
    ("exit_record", {"process_alive": False, "exit_code": 0}, "exit_record_error",
     "no space left on device", "anomaly"),
    ("swarm_server", {}, "server_alive", False, "anomaly"),
    ("process_exit", {}, "process_alive", False, "anomaly"),
    ("time_limit", {"now": T0 + 100, "max_seconds": None}, "max_seconds", 50.0, "time_up"),
    ("time_limit", {"now": T0 + 100, "max_seconds": 200.0}, "started_at", T0 - 500, "time_up"),
    ("gang", {}, "gang_problem", "rank 1 is gone", "anomaly"),
    ("diagnosis", {"now": T0 + 100, "cause": OOM, "cause_seen_at": T0, "progress_after_cause": True},
     "progress_after_cause", False, "anomaly"),
    ("diagnosis", {"now": T0 + 100, "cause_seen_at": T0}, "cause", OOM, "anomaly"),
    ("diagnosis", {"now": T0 + 100, "cause": OOM, "cause_seen_at": T0 + 99}, "cause_seen_at", T0, "anomaly"),
    ("stall", {"now": T0 + 5000, "last_output_at": T0 + 4000, "max_seconds": None}, "last_output_at", T0 + 10,
     "anomaly"),
    ("first_step", {"now": T0 + 2000, "last_output_at": T0 + 2000, "max_seconds": None}, "first_step_seen",
     False, "anomaly"),
    ("first_step", {"now": T0 + 100, "first_step_seen": False, "last_output_at": T0 + 100}, "first_step_timeout",
     60.0, "anomaly"),
    ("plateau", {"now": T0 + 3000, "last_output_at": T0 + 3000, "evaluations": FLAT[:2]}, "evaluations", FLAT,
     "plateau"),
]


@pytest.mark.parametrize(("rule", "base", "field", "value", "trigger"), CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_a_rule_runs_again_when_one_of_its_inputs_changed(rule, base, field, value, trigger) -> None:
    accepts = (lambda t: t == "anomaly") if rule == "exit_record" else everything  # its exit 0 is "completed"
    schedule = RuleSchedule(default_rules())
    before = quiet(**base)
    assert schedule.decide(before, accepts) is None
    assert schedule.decide(dataclasses.replace(before, now=before.now + 0.5), accepts) is None  # cached
    after = dataclasses.replace(before, now=before.now + 1, **{field: value})
    proposal = schedule.decide(after, accepts)
    assert proposal is not None and proposal.trigger == trigger and proposal.rule.startswith(rule.split("_")[0])
    assert decide(default_rules(), after, accepts) == proposal


# (the quiet observation, how long until the clock alone makes a rule propose, the trigger)
CLOCKS = [
    ({"max_seconds": 100.0}, 99.0, "time_up"),
    ({"cause": OOM, "cause_seen_at": T0 + 1}, 8.0, "anomaly"),  # the default settle of a signature of our own
    ({"max_seconds": None}, 1800.0, "anomaly"),  # the stall
    ({"first_step_seen": False, "max_seconds": None, "last_output_at": T0 + 1}, 1199.0, "anomaly"),
]


@pytest.mark.parametrize(("base", "after", "trigger"), CLOCKS, ids=["time_limit", "settle", "stall", "first_step"])
def test_a_rule_whose_inputs_stay_the_same_runs_once_its_deadline_came(base, after, trigger) -> None:
    schedule = RuleSchedule(default_rules())
    obs = quiet(**base)
    assert schedule.decide(obs, everything) is None
    assert schedule.decide(dataclasses.replace(obs, now=obs.now + after - 0.01), everything) is None
    skipped = schedule.skipped
    due = dataclasses.replace(obs, now=obs.now + after + 0.01)
    proposal = schedule.decide(due, everything)
    assert proposal is not None and proposal.trigger == trigger
    assert skipped > 0  # the ticks between did skip the rules


def test_an_unchanged_observation_runs_no_rule_and_a_rule_without_inputs_runs_every_time() -> None:
    calls = []

    class Plain:
        name = "plain"

        def check(self, obs: Observation) -> None:
            calls.append(obs.now)

    schedule = RuleSchedule([*default_rules(), Plain()])
    obs = quiet()
    schedule.decide(obs, everything)
    checks = schedule.checks
    for i in range(5):
        assert schedule.decide(dataclasses.replace(obs, now=obs.now + i * 0.5), everything) is None
    assert schedule.checks == checks + 5  # only the plain rule, once a tick
    assert len(calls) == 6


def test_a_proposal_the_machine_refused_is_asked_again() -> None:
    schedule = RuleSchedule(default_rules())
    obs = quiet(cancel_requested=True)
    assert schedule.decide(obs, lambda t: False) is None
    proposal = schedule.decide(dataclasses.replace(obs, now=obs.now + 1), everything)
    assert proposal is not None and proposal.trigger == "cancel"


def test_on_random_observations_it_decides_what_every_rule_would() -> None:
    rng = random.Random(27)
    choices = {
        "process_alive": [True, True, True, False], "exit_code": [None, 0, 1], "cancel_requested": [False] * 9 + [True],
        "cause": [None, None, OOM], "progress_after_cause": [False, True], "completed_run": [False, False, True],
        "first_step_seen": [True, False], "gang_problem": [None, None, "gone"], "evaluations": [(), FLAT[:2], FLAT],
        "max_seconds": [None, 300.0, 3600.0], "server_alive": [True, True, False], "exit_record_error": ["", "", "x"],
    }
    for _ in range(200):
        schedule = RuleSchedule(default_rules())
        obs = quiet(max_seconds=rng.choice([None, 300.0, 3600.0]))
        for _ in range(40):
            changes: dict[str, object] = {"now": obs.now + rng.choice([0.5, 1.0, 1.0, 30.0, 400.0])}
            if rng.random() < 0.3:
                name = rng.choice(list(choices))
                changes[name] = rng.choice(choices[name])
            if rng.random() < 0.5:
                changes["last_output_at"] = changes["now"]
            if changes.get("cause") is not None and rng.random() < 0.5:
                changes["cause_seen_at"] = changes["now"]
            obs = dataclasses.replace(obs, **changes)
            accepts = rng.choice([everything, lambda t: t != "anomaly"])
            assert schedule.decide(obs, accepts) == decide(default_rules(), obs, accepts), obs
