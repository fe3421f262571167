"""No identical relaunch (statemachine/fixes/failure.py) and the plan's alternatives
(statemachine/fixes/repairs.py): pure."""

from __future__ import annotations

from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.fixes.failure import (
    AttemptInputs,
    EarlierAttempt,
    RepairResult,
    identical_attempt,
    judge_failure,
    repeats_of,
    yaml_digest,
)
from ajet_runner.statemachine.fixes.gpu_check import GpuFacts, GpuMemory
from ajet_runner.statemachine.fixes.repairs import resolve_avoiding_repeats, resolve_repair
from ajet_runner.statemachine.models import RepairAction

CMD = "python -m ajet.launcher --conf conf.yaml --with-ray"
DATA = {"ajet": {"trainer_common": {"n_gpus_per_node": 2}}}


def inputs(command: str = CMD, env: dict[str, str] | None = None, cleanups: list[str] | None = None,
           data: dict | None = None) -> AttemptInputs:
    return AttemptInputs(command=command, yaml_digest=yaml_digest(data or DATA), env=env or {},
                         cleanups=cleanups or [])


def test_inputs_are_equal_only_when_command_yaml_env_and_cleanups_are() -> None:
    base = inputs()
    assert base.same_as(inputs())
    assert not base.same_as(inputs(command=CMD.replace(" --with-ray", "")))
    assert not base.same_as(inputs(env={"X": "1"}))
    assert not base.same_as(inputs(cleanups=["ray"]))
    assert not base.same_as(inputs(data={"ajet": {"trainer_common": {"n_gpus_per_node": 1}}}))
    assert inputs(cleanups=["ray", "ray"]).same_as(inputs(cleanups=["ray"]))


def test_the_pinned_experiment_name_is_not_a_difference() -> None:
    pinned = {"ajet": {"trainer_common": {"n_gpus_per_node": 2}, "experiment_name": "conf_20260101_1200"}}
    assert yaml_digest(pinned) == yaml_digest(DATA)
    assert yaml_digest({"ajet": {"x": 1}}) != yaml_digest({"ajet": {"x": 2}})


def test_identical_means_the_same_cause_with_the_same_inputs() -> None:
    earlier = [EarlierAttempt(1, "ray_already_running", inputs()),
               EarlierAttempt(2, "cuda_oom", inputs(cleanups=["ray"])),
               EarlierAttempt(3, "ray_already_running", inputs(cleanups=["ray"]))]
    assert identical_attempt(inputs(), earlier, "ray_already_running") == 1
    assert identical_attempt(inputs(cleanups=["ray"]), earlier, "ray_already_running") == 3
    assert identical_attempt(inputs(cleanups=["ray"]), earlier, "cuda_oom") == 2
    assert identical_attempt(inputs(command="other"), earlier, "ray_already_running") is None
    assert repeats_of(inputs(), [*earlier, EarlierAttempt(4, "ray_already_running", inputs())],
                      "ray_already_running") == [1, 4]


def test_an_identical_next_attempt_is_refused_naming_the_attempt() -> None:
    verdict = judge_failure(launched=True, signature="ray_already_running", planned=True, applicable=True,
                            budget_left=True, quote="ConnectionError: Ray is trying", identical_to=2)
    assert verdict.trigger == "give_up" and verdict.result is RepairResult.no_applicable_change
    assert verdict.reason.startswith("ray_already_running: attempt 2 already ran exactly this")
    assert verdict.reason.endswith("— ConnectionError: Ray is trying") and verdict.identical_to == 2


def test_a_transient_cause_relaunches_unchanged_after_its_backoff_while_budget_lasts() -> None:
    verdict = judge_failure(launched=True, signature="network_unreachable", planned=True, applicable=False,
                            budget_left=True, identical_to=1, backoff=60.0)
    assert (verdict.trigger, verdict.backoff, verdict.identical_to) == ("repair", 60.0, 1)
    assert "transient" in verdict.reason and "attempt 1" in verdict.reason
    spent = judge_failure(launched=True, signature="network_unreachable", planned=True, applicable=False,
                          budget_left=False, identical_to=1, backoff=60.0)
    assert spent.result is RepairResult.budget_spent
    done = judge_failure(launched=True, signature="network_unreachable", planned=True, applicable=False,
                         budget_left=True, identical_to=1, backoff=None)
    assert done.result is RepairResult.no_applicable_change


def resolve_ray(earlier: list[EarlierAttempt], own_processes: bool | None, command: str = CMD) -> tuple:
    def identical(resolved) -> int | None:
        nxt = AttemptInputs(command=resolved.command, yaml_digest=resolved.yaml_digest, env=dict(resolved.env),
                            cleanups=list(resolved.cleanups))
        return identical_attempt(nxt, earlier, "ray_already_running")

    return resolve_avoiding_repeats(list(signature("ray_already_running").repair), identical=identical,
                                    yaml_data=DATA, command=command, env={}, installed=lambda p: False,
                                    own_processes=own_processes)


def test_stale_ray_of_ours_is_cleaned_first_then_the_head_is_reused() -> None:
    first, same = resolve_ray([EarlierAttempt(1, "ray_already_running", inputs())], own_processes=True)
    assert same is None and first.cleanups == ["ray"] and first.command == CMD
    # attempt 2 ran after the cleanup and failed the same way: the cleanup again would repeat it
    second, same = resolve_ray([EarlierAttempt(1, "ray_already_running", inputs()),
                                EarlierAttempt(2, "ray_already_running", inputs(cleanups=["ray"]))],
                               own_processes=True)
    assert same is None and second.cleanups == [] and "--with-ray" not in second.command
    assert any("attempt 2 already ran with it" in s for s in second.skipped)
    assert second.applied == ["remove --with-ray from the launcher (reuse the Ray head that is already running "
                              "instead of starting one)"]


def test_a_stale_head_that_is_not_ours_goes_straight_to_reusing_it() -> None:
    resolved, same = resolve_ray([EarlierAttempt(1, "ray_already_running", inputs())], own_processes=False)
    assert same is None and resolved.cleanups == [] and "--with-ray" not in resolved.command
    assert any("no process of this experiment is running" in s for s in resolved.skipped)


def test_when_every_alternative_was_tried_the_repeat_is_named() -> None:
    reused = CMD.replace(" --with-ray", "")
    earlier = [EarlierAttempt(1, "ray_already_running", inputs()),
               EarlierAttempt(2, "ray_already_running", inputs(cleanups=["ray"])),
               EarlierAttempt(3, "ray_already_running", inputs(command=reused))]
    resolved, same = resolve_ray(earlier, own_processes=False, command=reused)
    assert same == 3 and not resolved.applicable


def test_applied_and_skipped_are_told_apart() -> None:
    r = resolve_repair([RepairAction(kind="set_env", key="A", value="1"),
                        RepairAction(kind="set_env", key="B", value="2")], yaml_data={}, command=CMD,
                       env={"B": "2"}, installed=lambda p: False)
    assert r.applied == ["set env A=1"] and r.skipped == ["skipped set_env B: B is already '2'"]
    assert r.notes == [*r.applied, *r.skipped]


BUSY = [GpuMemory(0, "H100", 81559, 48000), GpuMemory(1, "H100", 81559, 100), GpuMemory(2, "H100", 81559, 0),
        GpuMemory(3, "H100", 81559, 0)]
CONFINE = [RepairAction(kind="confine_gpus", description="run on free GPUs")]


def confine(facts: GpuFacts, command: str = CMD, env: dict[str, str] | None = None):
    return resolve_repair(CONFINE, yaml_data=DATA, command=command, env=env or {}, installed=lambda p: False,
                          gpus=facts)


def test_confine_picks_the_gpus_nvidia_smi_reports_free_and_says_which() -> None:
    r = confine(GpuFacts(listed=BUSY, needed=2))
    assert r.env == {"CUDA_VISIBLE_DEVICES": "1,2"} and "--skip-check-avail-gpu" in r.command and r.applicable
    assert r.applied[0].startswith("set env CUDA_VISIBLE_DEVICES=1,2: confined the run to GPU(s) 1,2")
    assert "GPU 0: 41.1 % free" in r.applied[0]
    assert "checks GPU(s) 1,2 itself before launch" in r.applied[1]


def test_confine_says_why_the_run_was_not_confined() -> None:
    few = confine(GpuFacts(listed=BUSY, needed=4))
    assert not few.applicable and few.env == {} and "not confined: nvidia-smi reports 3 GPU(s)" in few.skipped[0]
    blind = confine(GpuFacts(listed=None, unavailable="nvidia-smi is not installed on this node", needed=1))
    assert not blind.applicable and "not confined: nvidia-smi is not installed" in blind.skipped[0]
    old = confine(GpuFacts(listed=BUSY, needed=1, skip_flag=False))
    assert not old.applicable and "has no --skip-check-avail-gpu" in old.skipped[0]


def test_confine_on_a_managed_node_keeps_its_gpus_and_adds_the_flag_once() -> None:
    r = confine(GpuFacts(assigned=[2, 3], needed=2))
    assert r.env == {} and r.command.endswith("--skip-check-avail-gpu") and r.applicable
    again = confine(GpuFacts(assigned=[2, 3], needed=2), command=r.command)
    assert not again.applicable and "already uses its GPU(s) 2,3" in again.skipped[0]
