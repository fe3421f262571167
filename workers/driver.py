"""Drives one experiment through the lifecycle machine, from wherever Redis says it is.

Each state has one handler that does that state's I/O and fires the next trigger. Every
transition is persisted and published (through the Journal) before the next action, so a
worker that dies anywhere leaves a record the next worker can resume from: a run that is
alive in tmux is re-adopted and watched, never launched twice.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from logsetup import bind
from resultdir.archive import archive_previous_run
from resultdir.roots import OutsideRoots, check_inside, confined, parse_roots
from statemachine.command import add_flag, conf_path, launcher_segment, replace_conf
from statemachine.diagnose import decisive_line
from statemachine.first_step import first_step_timeout_from_text
from statemachine.lifecycle import Lifecycle, RepairBudget, State
from statemachine.models import Blueprint, ConfigChange, Finding, Level, Problem
from statemachine.policies import parse_backoff, report_due_at
from statemachine.preflight import preflight
from statemachine.repairs import resolve_repair
from statemachine.results import latest_metrics
from statemachine.rules import Observation, Proposal, decide, default_rules
from store.settings import Settings
from store.store import Store, TransitionConflict
from workers.advice_learning import learn_from_advice
from workers.adviser import advice_fields, advice_source, advised_stat
from workers.attempt import MARKER, attempt_env, attempt_paths
from workers.collect import link_repair_outcomes, report_data
from workers.config_patch import patched_config_path, read_yaml_data, remove_patched_copy, write_patched_yaml
from workers.context import Context
from workers.exit_wait import ExitWaiter
from workers.finish import (
    atomic_write_bytes,
    remove_temp_files,
    write_error_reason,
    write_finish_flag,
)
from workers.identity import driver_identity
from workers.journal import REDIS_ERRORS, Journal, LostOwnership
from workers.node import NodeInfo
from workers.plot_preload import preload_plotting
from workers.repair_log import write_repair_log
from workers.repair_plan import plan_repair
from workers.report import AttemptInfo, RepairRecord, write_report
from workers.reserve import release_reserve, take_reserve
from workers.scan_checkpoint import remove as remove_checkpoint
from workers.swarm_run import SwarmServerFailed, is_swarm, start_or_reuse, stop_ours, swarm_plan, swarm_results_path
from workers.tmux import RunHandle, TmuxRunner, session_name
from workers.watch import CONSOLE_KEY, AttemptWatch, attempt_evaluations, file_start

log = logging.getLogger(__name__)
SKIP_GPU_CHECK = "--skip-check-avail-gpu"
LOG_TAIL_LINES = 200  # kept in Redis so the API can show a log without the node's filesystem


class ExperimentDriver:
    def __init__(self, store: Store, exp_id: str, settings: Settings, node: NodeInfo, owner: str,
                 runner: TmuxRunner | None = None,
                 on_watch: Callable[[str, float, int, float], None] | None = None) -> None:
        self.store = store
        self.id = exp_id
        self.settings = settings
        self.node = node
        self.owner = owner
        self.runner = runner or TmuxRunner(settings.tmux_socket or None)
        self.on_watch = on_watch
        rec = store.get(exp_id)
        if rec is None:
            raise LookupError(f"experiment {exp_id} does not exist")
        self.rec = rec
        self.bp = Blueprint.model_validate(rec.get("blueprint_json") or {})
        self.lc = Lifecycle.from_dict(rec.get("lifecycle") or {"id": exp_id})
        self.lc.budget = RepairBudget(settings.repair_budget, settings.repair_budget_per_signature)
        self.ctx = Context.from_dict(rec.get("ctx"))
        self.journal = Journal(store, exp_id, owner, int(rec.get("version") or 0), node=node.name)
        self.started_at = float(rec.get("started_at") or 0) or None
        self.handle = RunHandle.from_dict(rec["handle"]) if rec.get("handle") else None
        self.watch: AttemptWatch | None = None
        self.rules = default_rules(
            time_limit_grace=settings.time_limit_grace_seconds,
            stall_seconds=settings.stall_seconds,
            diagnosis_settle=settings.diagnosis_settle_seconds,
            plateau_after_fraction=settings.plateau_after_fraction,
            plateau_window=settings.plateau_evaluations,
            plateau_epsilon=settings.plateau_epsilon,
            first_step_seconds=settings.first_step_seconds,
        )
        self.backoff = parse_backoff(settings.progress_backoff)
        self.roots = parse_roots(settings.allowed_roots)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> str:
        """Drive until finished (returns the outcome) or until the experiment is not ours.

        Every file it writes stays inside the allowed roots (checked at each write, not once)."""
        with confined(self.roots):
            return self._drive()

    def _drive(self) -> str:
        handlers = {
            State.queued.value: self._on_queued,
            State.launching.value: self._on_launching,
            State.running.value: self._on_running,
            State.failing.value: self._on_failing,
            State.repairing.value: self._on_repairing,
            State.collecting.value: self._on_collecting,
        }
        if self.lc.finished:
            self.journal.close(timeout=1.0)
            return self.lc.outcome  # e.g. the API finished a queued one while this job waited
        bind(experiment=self.id, state=self.lc.state)  # on every log line of this drive
        try:
            if self.lc.state != State.queued.value:
                self._adopt()
            while not self.lc.finished:
                if not handlers[self.lc.state]():
                    return ""  # handed back (e.g. waiting for GPUs) without finishing
        finally:
            # Deliver what is buffered (a node cut off from Redis waits here for it to come back).
            self.journal.close(timeout=self.settings.redis_outage_wait_seconds)
            bind(experiment=None, state=None)
        try:
            if self.store.flag_set(self.id, "delete_requested"):
                self.store.delete(self.id)  # DELETE on a running experiment: drop the record once it is finished
        except REDIS_ERRORS:
            log.warning("%s: could not check for a delete request", self.id)
        return self.lc.outcome

    def _adopt(self) -> None:
        """Take over an unfinished experiment whose previous owner's lease ran out."""
        lease = self.store.server_time() + self.settings.lease_seconds
        self.journal.transition({"owner": self.owner, "lease_until": lease, "node": self.node.name,
                                 **driver_identity()},
                                {"type": "adopted", "owner": self.owner, "state": self.lc.state}, ack=True)
        self._renew()

    def fire(self, trigger: str, reason: str = "", fields: dict[str, Any] | None = None, ack: bool = False,
             repair_stat: str = "", advised: str = "", **detail: Any) -> None:
        before = self.lc.state
        entry = self.lc.fire(trigger, reason=reason, **detail)
        stats: dict[str, Any] = {"transition": f"{before}>{self.lc.state}"}
        if repair_stat:
            stats["repair"] = repair_stat  # ajet_runner_repairs_total{signature, result}
            advised = advised or (advised_stat(self.ctx.repairs[-1]) if self.ctx.repairs else "")
        if advised:
            stats["advised"] = advised  # ajet_runner_advised_repairs_total{model, result}
        if detail.get("write_failure"):
            stats["write_failure"] = detail["write_failure"]  # ajet_runner_result_write_failures_total{errno}
        record = {
            "state": self.lc.state, "outcome": self.lc.outcome, "reason": self.lc.reason,
            "attempt": self.lc.attempt, "lifecycle": self.lc.to_dict(), "ctx": self.ctx.__dict__,
            **(fields or {}),
        }
        if self.lc.finished:
            record["finished_at"] = entry["at"]
            start = self.started_at or float(self.rec.get("created_at") or entry["at"])
            stats.update(outcome=self.lc.outcome, duration=max(0.0, entry["at"] - start))
        self.journal.transition(record, {"type": "transition", **entry, **detail}, stats, ack=ack)
        bind(state=self.lc.state)
        log.info("%s: %s -> %s (%s) %s", self.id, before, self.lc.state, trigger, reason)

    # -- queued: capacity, preflight, claim ----------------------------------------------------
    def _on_queued(self) -> bool:
        if self.store.cancel_requested(self.id):
            self._claim_and_fire("cancel", "stop requested before launch")
            return True
        # The same preflight `ajet-runner check` runs, on this node's environment (swarm: no YAML).
        swarm = is_swarm(self.bp)
        plan = preflight(self.bp, env=os.environ, environment=f"node {self.node.name} (the worker's environment)")
        problems = list(plan.problems)
        self._move_earlier_run(problems)
        problems += self._root_problems()
        errors = [p for p in problems if p.level == Level.error]
        self.ctx.preflight_problems = [p.model_dump(mode="json") for p in problems]
        self.ctx.preflight_env = {"environment": plan.environment,
                                  "decisions": [d.model_dump(mode="json") for d in plan.env_decisions]}
        if errors:
            self._claim_and_fire("reject", "; ".join(str(p) for p in errors))
            return True
        if self.node.manages_gpus:
            gpus = self.store.reserve_gpus(self.node.name, self.id, self._gpus_needed(), self.node.gpus)
            if gpus is None:
                return self._wait_for_gpus()
            self.ctx.gpus = gpus
        if swarm and not self._reserve_swarm_port():
            self._release_gpus_now()
            return False  # another experiment's swarm server holds the port: back to the queue, like GPUs
        try:
            self._apply_swarm() if swarm else self._apply_preflight(plan)
        except (OSError, ValueError) as exc:  # e.g. a YAML the patcher cannot edit safely, a read-only dir
            self._release_gpus_now()
            why = write_error_reason(exc) if isinstance(exc, OSError) else str(exc)
            self._claim_and_fire("reject", f"preflight could not be applied: {why}")
            return True
        self._share_node_gpus()
        self.started_at = time.time()
        self._claim_and_fire("start", "preflight passed", fields={
            "node": self.node.name, "started_at": self.started_at,
            "tmux_session": session_name(self.bp.exp_purpose, self.id), "gpus": self.ctx.gpus,
        })
        return True

    def _move_earlier_run(self, problems: list[Problem]) -> None:
        """An earlier run's files go to previous/ before this run writes anything (submission
        did it already when it could see the disk; this covers an API that could not)."""
        self.ctx.previous_run = self.ctx.previous_run or str(self.rec.get("previous_run") or "")
        if not Path(self.bp.exp_result_dir or "").is_dir():
            return
        try:
            moved = archive_previous_run(self.bp.exp_result_dir, self.bp.exp_codebase_dir)
        except OSError as exc:
            problems.append(Problem(level=Level.error, field="exp_result_dir",
                                    message=f"an earlier run's files could not be moved to previous/: {exc}"))
            return
        self.ctx.previous_run = moved or self.ctx.previous_run

    def _claim_and_fire(self, trigger: str, reason: str, fields: dict[str, Any] | None = None) -> None:
        lease = self.store.server_time() + self.settings.lease_seconds
        self.fire(trigger, reason, fields={"owner": self.owner, "lease_until": lease, "node": self.node.name,
                                           **driver_identity(),
                                           **(fields or {})}, ack=True)  # a conflict: another worker won
        self._renew()

    def _gpus_needed(self) -> int:
        return max(1, int(self.rec.get("gpus_needed") or 1))

    def _release_gpus_now(self) -> None:
        if self.node.manages_gpus:
            self.store.release_gpus(self.node.name, self.id)
        self.ctx.gpus = None

    def _swarm_port(self) -> int | None:
        spec, _ = swarm_plan(self.bp)
        return spec.port if spec else None

    def _reserve_swarm_port(self) -> bool:
        """Wait a little for the swarm port on this node; False hands the job back to its queue."""
        port = self._swarm_port()
        if port is None:
            return True
        deadline = time.monotonic() + self.settings.capacity_wait_seconds
        while not self.store.reserve_swarm_port(self.node.name, self.id, port):
            if time.monotonic() >= deadline or self.store.cancel_requested(self.id):
                return False
            time.sleep(0.25)
        return True

    def _wait_for_gpus(self) -> bool:
        """Wait a little for GPUs here; if none free up, hand the job back to its queue."""
        deadline = time.monotonic() + self.settings.capacity_wait_seconds
        while time.monotonic() < deadline:
            if self.store.cancel_requested(self.id):
                return True
            if self.store.reserve_gpus(self.node.name, self.id, self._gpus_needed(), self.node.gpus):
                return True
            time.sleep(0.25)
        return False

    def _apply_preflight(self, plan: Any) -> None:
        original = Path(self.bp.yaml_abspath())
        result_dir = Path(self.bp.exp_result_dir)
        atomic_write_bytes(result_dir / "config.original.yaml", original.read_bytes())
        # Room for the report and finish.flag even if the run fills the disk (released at collecting).
        take_reserve(result_dir, self.settings.result_reserve_bytes)
        command = plan.command
        changes = list(plan.changes)
        self.ctx.config_path = str(original)
        self.ctx.command = command
        if changes:
            self._patch_config([c.model_dump(mode="json") for c in changes])
        self.ctx.cleanup_on_stop = bool(plan.cleanup_on_stop)
        self.ctx.preflight_changes = [c.model_dump(mode="json") for c in [*changes, *plan.command_changes]]
        self.ctx.val_path = plan.val_result_path  # absolute, resolved from the launch directory
        self.ctx.train_path = plan.train_result_path
        self.ctx.val_chosen = any(c.key.endswith(".val_print_to_markdown_file_path") for c in changes)
        # The user's own results file may hold earlier runs' lines (AgentJet appends): only what
        # is written after this point is this run's, across every attempt.
        self.ctx.val_start = file_start(plan.val_result_path)

    def _patch_config(self, new_changes: list[dict[str, Any]]) -> str:
        """Write every change so far (preflight and repairs) onto a fresh copy of the user's YAML.

        Returns the diff of this step (previous copy → new copy); the user's file is never touched.
        """
        if not new_changes:
            return ""
        merged: dict[str, dict[str, Any]] = {c["key"]: dict(c) for c in self.ctx.yaml_changes}
        for c in new_changes:
            merged[c["key"]] = {**c, "old": merged.get(c["key"], c)["old"]}
        self.ctx.yaml_changes = list(merged.values())
        original = Path(self.bp.yaml_abspath())
        patched = patched_config_path(original, self.id)
        before = Path(self.ctx.config_path).read_text(encoding="utf-8") if self.ctx.config_path else ""
        write_patched_yaml(original, patched, [ConfigChange.model_validate(c) for c in self.ctx.yaml_changes])
        self.ctx.config_path = str(patched)
        self.ctx.command = self._point_command_at(self.ctx.command, patched)
        after = patched.read_text(encoding="utf-8")
        return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                            "config (before)", "config (after)"))

    def _root_problems(self) -> list[Problem]:
        """Codebase, result dir, YAML and venv resolved now, each inside the allowed roots."""
        out = []
        for fld, path, keep_name in (("exp_codebase_dir", self.bp.exp_codebase_dir, False),
                                     ("exp_result_dir", self.bp.exp_result_dir, False),
                                     ("exp_yaml_path", self.bp.yaml_abspath(), False),
                                     ("exp_venv_exe", self.bp.exp_venv_exe, True)):
            try:
                if path:
                    check_inside(path, self.roots, keep_name=keep_name)
            except OutsideRoots as exc:
                out.append(Problem(level=Level.error, field=fld, message=str(exc)))
        return out

    def _share_node_gpus(self) -> None:
        """On a node shared with other runs, AgentJet's all-GPUs-free check would fail (it ignores
        CUDA_VISIBLE_DEVICES): skip it, since our reservation already keeps the GPUs disjoint."""
        gpus = self.ctx.gpus
        if gpus is None or len(gpus) >= self.node.gpus or launcher_segment(self.ctx.command) is None:
            return
        new = add_flag(self.ctx.command, SKIP_GPU_CHECK)  # to every launcher call that lacks it
        if new == self.ctx.command:
            return
        self.ctx.preflight_changes.append(ConfigChange(
            key="exp_launch_command", old=self.ctx.command, new=new,
            reason=f"this node's {self.node.gpus} GPUs are shared; this run has GPUs {gpus} "
                   f"(CUDA_VISIBLE_DEVICES), which AgentJet's GPU check does not look at",
        ).model_dump(mode="json"))
        self.ctx.command = new

    def _point_command_at(self, command: str, config: Path) -> str:
        if conf_path(command) is None:
            return command
        codebase = Path(self.bp.exp_codebase_dir)
        try:
            return replace_conf(command, str(config.relative_to(codebase)))
        except ValueError:
            return replace_conf(command, str(config))

    # -- launching ---------------------------------------------------------------------------
    def _apply_swarm(self) -> None:
        """Swarm mode: the launch command is the client; its results file is found by swarm_run."""
        spec, _ = swarm_plan(self.bp)
        # An earlier run's files were moved to previous/ already (_move_earlier_run); keep room for the report.
        result_dir = Path(self.bp.exp_result_dir)
        result_dir.mkdir(parents=True, exist_ok=True)
        take_reserve(result_dir, self.settings.result_reserve_bytes)
        self.ctx.command = self.bp.exp_launch_command
        self.ctx.val_path = swarm_results_path(self.bp)
        self.ctx.swarm = {"spec": spec.model_dump() if spec else None}

    def _on_launching(self) -> bool:
        self._renew()
        if self.journal.cancel_requested():
            self.fire("cancel", "stop requested")
            return True
        session = session_name(self.bp.exp_purpose, self.id)
        paths = attempt_paths(self.bp.exp_result_dir, self.lc.attempt)
        adopted = self._find_running_attempt(session, paths)
        if adopted is None:
            outside = self._root_problems()  # checked at each launch: a path may have been swapped since
            if outside:
                self.fire("anomaly", "refused to launch: " + "; ".join(str(p) for p in outside))
                return True
            if self.runner.exists(session):
                self.runner.kill_session(session)  # the previous attempt's lingering pane
            env = attempt_env(self.bp, self.id, self.ctx.env, self.ctx.gpus)
            if self.ctx.swarm:
                try:
                    env = start_or_reuse(self.runner, self.ctx.swarm, self.bp, exp_id=self.id, env=env,
                                         attempt=self.lc.attempt, publish=self.journal.publish,
                                         boot_timeout=self.settings.swarm_boot_timeout_seconds)
                except SwarmServerFailed as exc:
                    self.fire("anomaly", f"swarm server: {exc.reason}")
                    return True
            try:
                self.handle = self.runner.start(
                    session, self.ctx.command, cwd=self.bp.exp_codebase_dir, env=env,
                    log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
                )
            except (OSError, RuntimeError) as exc:
                self.fire("anomaly", f"could not start the tmux session: {exc}")
                return True
            self.ctx.attempts.append(AttemptInfo(
                number=self.lc.attempt, started_at=self.handle.started_at, ended_at=None, exit_code=None,
                command=self.ctx.command, log_path=str(paths["log"]), end_reason="",
            ).model_dump())
        else:
            self.handle = adopted
        self.fire("launched", f"attempt {self.lc.attempt} running in tmux session {session}",
                  fields={"handle": self.handle.to_dict(), "tmux_session": session})
        return True

    def _find_running_attempt(self, session: str, paths: dict[str, Path]) -> RunHandle | None:
        """After a crash between starting tmux and recording it: find that attempt, never relaunch it."""
        if self.handle is not None and Path(self.handle.log_path) == paths["log"]:
            return self.handle
        if self.runner.exists(session) and paths["pid"].exists() and not paths["rc"].exists():
            handle = RunHandle(
                session=session, log_path=paths["log"], rc_path=paths["rc"], pid_path=paths["pid"],
                wrapper_path=paths["log"].with_suffix(".sh"), socket_path=self.runner.socket_path,
            )
            handle.wait_for_pid(1.0, local=not self.runner.remote())
            return handle
        return None

    # -- running: observe, let the rules propose, the machine decides ------------------------------
    def _on_running(self) -> bool:
        assert self.handle is not None
        earlier = [a for a in self.ctx.attempts if a.get("number") != self.lc.attempt]
        watch = self.watch = AttemptWatch(self.handle, Path(self.ctx.val_path) if self.ctx.val_path else None,
                                          val_start=self.ctx.val_start, earlier_log=attempt_evaluations(earlier))
        watch.last_output_at = self.handle.started_at
        if watch.resume():  # an adopted run: go on where the last watcher saved, not from byte 0
            log.info("%s: log scan resumed at byte %d", self.id, watch.offset)
        preload_plotting()  # in the background: the plot at the end must not pay the import
        waiter = ExitWaiter()
        self.journal.on_cancel = waiter.wake
        try:
            return self._watch_loop(watch, waiter)
        finally:
            self.journal.on_cancel = None
            waiter.close()

    def _watch_loop(self, watch: AttemptWatch, waiter: ExitWaiter) -> bool:
        """One pass: one bounded slice of the log, the results file, then every rule. Passes follow
        each other at once while the log has a backlog, else every poll interval or at the exit."""
        assert self.handle is not None
        attempt_started = self.handle.started_at
        started = self.started_at or attempt_started
        next_tail = 0.0
        sent_lines = -1  # log lines already in Redis' tail list (-1: none of this watch: replace the list)
        local = not self.runner.remote()
        while True:
            t0 = time.monotonic()
            now = time.time()
            self._renew()
            alive = watch.alive(self.runner)
            if alive and local:
                waiter.watch(self.handle.pid, self.handle.pid_create_time)
            read_before = watch.bytes_read
            watch.read_log(now)
            watch.maybe_save(t0)
            new_evals = watch.read_results(now)
            if new_evals:
                self._on_evaluations(new_evals)
            exit_code = None
            if not alive:
                exit_code = watch.exit_code(self.runner)
                watch.finish_log(time.time())
            obs = Observation(
                now=now, started_at=started, attempt_started_at=attempt_started,
                max_seconds=self.bp.exp_max_time_seconds, process_alive=alive, exit_code=exit_code,
                cancel_requested=self.journal.cancel_requested(), last_output_at=watch.last_output_at,
                last_eval_at=watch.last_eval_at, completed_run=watch.scanner.completed_run,
                # While it runs, only a specific signature counts (a caught, logged traceback does not).
                cause=watch.scanner.live_cause if alive else watch.scanner.cause, cause_seen_at=watch.cause_seen_at,
                progress_after_cause=watch.scanner.progress_after_cause,
                evaluations=self._primary_evaluations(),
                first_step_seen=watch.first_step_seen,
                first_step_timeout=first_step_timeout_from_text(self.bp.exp_max_time_text),
            )
            self._maybe_report(now - started)
            if watch.bytes_read != read_before and t0 >= next_tail:
                sent_lines = self._send_tail(watch, sent_lines)
                next_tail = t0 + 1.0
            if self.on_watch:
                self.on_watch(self.id, time.monotonic() - t0, watch.bytes_read - read_before,
                              now - watch.last_output_at)
            proposal = decide(self.rules, obs, self.lc.can)
            if proposal is not None:
                self._end_attempt(proposal, alive)
                self._send_tail(watch, sent_lines)  # the last lines, read after the process ended
                return True
            if not watch.behind:
                waiter.wait(self.settings.poll_interval)

    def _send_tail(self, watch: AttemptWatch, sent: int) -> int:
        """The lines scanned since the last call onto the capped tail in Redis; returns the new mark."""
        total = watch.scanner.line_count
        new = total - sent if sent >= 0 else LOG_TAIL_LINES
        if new > 0:
            count = min(new, LOG_TAIL_LINES)
            self.journal.append_tail(watch.scanner.tail(count), watch.bytes_read,
                                     replace=sent < 0 or new > LOG_TAIL_LINES)
        return total

    def _primary_evaluations(self) -> list[Any]:
        assert self.watch is not None
        summary = self.watch.summary
        primary = summary.primary_dataset
        return [e for e in summary.evaluations if not primary or e.dataset == primary]

    def _on_evaluations(self, new: list[Any]) -> None:
        assert self.watch is not None
        metrics = latest_metrics(self.watch.summary)
        self.journal.update({"latest_metrics": metrics})
        for e in new:
            self.journal.publish(
                {"type": "evaluation", "step": e.step, "dataset": e.dataset, "metrics": e.metrics}
            )

    def _maybe_report(self, elapsed: float) -> None:
        """Progress events on the seed's backoff cadence: a log excerpt and the latest metrics."""
        if elapsed < report_due_at(self.ctx.reports_sent, self.backoff):
            return
        self.ctx.reports_sent += 1
        assert self.watch is not None
        self.journal.publish({
            "type": "progress", "elapsed": round(elapsed, 1), "max_seconds": self.bp.exp_max_time_seconds,
            "log_excerpt": self.watch.scanner.tail(20), "metrics": latest_metrics(self.watch.summary),
        })

    def _end_attempt(self, proposal: Proposal, alive: bool) -> None:
        assert self.handle is not None and self.watch is not None
        exit_code = None
        # What the log said before we stopped it: our own SIGINT makes the job print a traceback.
        cause = proposal.finding or self.watch.scanner.cause
        if alive:
            grace = 2.0 if proposal.force_kill else self.settings.stop_grace_seconds
            try:
                exit_code = self.runner.stop(self.handle, grace)
            except RuntimeError as exc:  # ProcessesSurvived: record it, go on
                self.journal.publish({"type": "warning", "message": f"stop left processes behind: {exc}"})
            self.watch.finish_log(time.time())
        else:
            exit_code = self.runner.exit_code(self.handle)
        if self.watch.skipped_bytes:
            self.journal.publish({"type": "warning", "message": f"{self.watch.skipped_bytes} bytes of the log were "
                                  "not scanned: it grew faster than it could be read; its end was"})
        remove_checkpoint(self.handle.log_path)
        self._cleanup_processes()
        attempt = self.ctx.attempts[-1] if self.ctx.attempts else None
        if attempt is not None:
            attempt.update(ended_at=time.time(), exit_code=exit_code, end_reason=proposal.reason,
                           **{CONSOLE_KEY: self.watch.console_evaluations()})
        if proposal.trigger == "anomaly":
            self.ctx.pending_repair = {
                "cause": cause.model_dump() if cause else None,
                "reason": proposal.reason,
                "log_excerpt": self._excerpt(cause),
                "log_tail": self.watch.scanner.tail(80),
            }
        detail = {"rule": proposal.rule}
        if cause is not None:
            detail["signature"] = cause.signature
        self.fire(proposal.trigger, proposal.reason, **detail)

    def _excerpt(self, cause: Finding | None) -> str:
        assert self.watch is not None
        return "\n".join(self.watch.scanner.tail(25 if cause is not None else 40))

    def _cleanup_processes(self) -> None:
        """Scoped cleanup: this experiment's own processes only (never `--autokill`'s host-wide kill)."""
        killed = self.runner.kill_marked(MARKER, self.id, grace=5.0)  # where the runs live (session host)
        if killed:
            self.journal.publish({"type": "cleanup", "killed_pids": killed,
                                  "message": f"killed {len(killed)} leftover process(es) of this experiment"})

    def _renew(self) -> None:
        self.journal.renew(self.settings.lease_seconds)

    # -- failing / repairing -------------------------------------------------------------------
    def _on_failing(self) -> bool:
        self._renew()
        pending = self.ctx.pending_repair or {}
        cause = Finding.model_validate(pending["cause"]) if pending.get("cause") else None
        sig_id = cause.signature if cause else "unknown"
        explanation = cause.explanation if cause else str(pending.get("reason", self.lc.reason))
        record = RepairRecord(at=time.time(), attempt=self.lc.attempt, signature=sig_id,
                              explanation=explanation, log_excerpt=str(pending.get("log_excerpt", "")),
                              changes=[], diff="", source="none", result="", next="")
        if self.lc.attempt == 0 or not self.ctx.command:  # rejected before any launch
            record.result = "not repairable"
            record.explanation = self.lc.reason
            self.ctx.repairs.append(record.model_dump())
            self.fire("give_up", self.lc.reason or "rejected by preflight")
            return True
        advise = advice_source(self.settings, bp=self.bp, ctx=self.ctx, pending=pending, publish=self.journal.publish,
                               budget_left=self.lc.can("repair", signature=sig_id))
        quote = decisive_line(cause, pending.get("log_tail") or [])  # the outcome line quotes the log
        quoted = f" — {quote}" if quote else ""
        actions, source, why = plan_repair(cause, pending, hook=self.settings.repair_hook, bp=self.bp,
                                           attempt=self.lc.attempt, config_path=self.ctx.config_path, advise=advise)
        if source == "adviser":
            record = record.model_copy(update=advice_fields(pending))
        resolved = None
        if actions:
            data = read_yaml_data(Path(self.ctx.config_path)) if self.ctx.config_path else {}
            resolved = resolve_repair(actions, yaml_data=data, command=self.ctx.command, env=self.ctx.env,
                                      installed=lambda prog: shutil.which(prog) is not None)
        record.source = source
        if resolved is None or not resolved.applicable:
            record.result = "not repairable" if not actions else "no applicable change"
            record.changes = resolved.notes if resolved else []
            self.ctx.repairs.append(record.model_dump())
            self.fire("give_up", f"{sig_id}: {why or record.result}{quoted}",
                      repair_stat=f"{sig_id}|{record.result}")
            return True
        if not self.lc.can("repair", signature=sig_id):
            record.result = "budget spent"
            self.ctx.repairs.append(record.model_dump())
            self.fire("give_up", f"{sig_id}: repair budget spent{quoted}", repair_stat=f"{sig_id}|budget spent")
            return True
        record.result = "relaunched"
        record.changes = list(resolved.notes)
        self.ctx.repairs.append(record.model_dump())
        self.ctx.pending_repair = {**pending, "resolved": resolved.model_dump(mode="json")}
        self.fire("repair", f"{sig_id}: {why}", repair_stat=f"{sig_id}|relaunched", signature=sig_id)
        return True

    def _on_repairing(self) -> bool:
        self._renew()
        resolved = (self.ctx.pending_repair or {}).get("resolved") or {}
        self.ctx.env.update(resolved.get("env") or {})
        self.ctx.command = resolved.get("command") or self.ctx.command
        diff = self._patch_config(resolved.get("yaml_changes") or [])
        if "swarm_server" in (resolved.get("cleanups") or []):
            stop_ours(self.runner, self.ctx.swarm, self.settings.stop_grace_seconds, self.journal.publish)
        if resolved.get("cleanups"):
            self._cleanup_processes()  # every cleanup kind is scoped to this experiment's processes
        if self.ctx.repairs:
            self.ctx.repairs[-1]["diff"] = diff
        self.ctx.pending_repair = {}
        self.fire("relaunch", f"fix applied; attempt {self.lc.attempt + 1}")
        return True  # what the relaunch led to is linked when collecting (link_repair_outcomes)

    # -- collecting ------------------------------------------------------------------------------
    def _on_collecting(self) -> bool:
        if self.lc.attempt:
            self._renew()
        if self.handle is not None and self.runner.is_running(self.handle):
            self.runner.stop(self.handle, self.settings.stop_grace_seconds)
        if self.lc.attempt:
            self._cleanup_processes()
        stop_ours(self.runner, self.ctx.swarm, self.settings.stop_grace_seconds, self.journal.publish)
        link_repair_outcomes(self.ctx, self.lc.outcome)
        advised = learn_from_advice(self.ctx, self.lc.outcome, exp_id=self.id,
                                    suggestions_file=self.settings.suggestions_path())
        result_dir = self.bp.exp_result_dir
        failure: OSError | None = None
        try:
            release_reserve(result_dir)  # the room kept since launch is for exactly these files
            self._tidy_config_copy()  # before the report: it points at the kept copy
            data = report_data(self.id, self.bp, self.rec, self.lc, self.ctx, node=self.node.name,
                               watch=self.watch, started_at=self.started_at)
            write_report(data)
            write_repair_log(result_dir, data)
        except OSError as exc:
            failure = exc
        try:
            # A run whose results could not be written is not "completed": the flag says failed.
            write_finish_flag(result_dir, self.id, "failed" if failure else self.lc.outcome)
        except OSError as exc:
            failure = failure or exc
        if self.node.manages_gpus:
            self.journal.call(lambda: self.store.release_gpus(self.node.name, self.id))
        if self.ctx.swarm and (port := self._swarm_port()) is not None:
            self.journal.call(lambda: self.store.release_swarm_port(self.node.name, self.id, port))
        metrics = latest_metrics(self.watch.summary) if self.watch else self.rec.get("latest_metrics")
        with contextlib.suppress(OSError):
            remove_temp_files(result_dir)  # e.g. the wrapper's rc temp file when the disk was full
        if failure is not None:
            self._result_write_failed(failure, metrics)
            return True
        self.fire("collected", fields={"latest_metrics": metrics}, advised=advised)  # keeps the outcome's reason
        return True

    def _result_write_failed(self, exc: OSError, metrics: Any) -> None:
        """An unwritable result dir (full disk, outside the roots) must not keep the experiment unfinished
        (re-adopted for ever), nor end it as anything but failed: recorded, counted, temp files removed."""
        why = write_error_reason(exc)
        code = errno.errorcode.get(exc.errno or 0, "") or type(exc).__name__
        self.journal.publish({"type": "result_write_failed", "errno": code, "path": str(exc.filename or ""),
                              "message": f"could not write the result files: {why}"})
        self.fire("write_failed", f"result files not written: {why}", fields={"latest_metrics": metrics},
                  write_failure=code, previous_outcome=self.lc.outcome)

    def _tidy_config_copy(self) -> None:
        """Keep the patched config in the result dir, and out of the user's codebase."""
        cfg = Path(self.ctx.config_path) if self.ctx.config_path else None
        if cfg and cfg != Path(self.bp.yaml_abspath()) and cfg.exists():
            kept = Path(self.bp.exp_result_dir) / "config.patched.yaml"
            atomic_write_bytes(kept, cfg.read_bytes())
            remove_patched_copy(cfg)
            self.ctx.config_path = str(kept)  # the report's "YAML (as run)" points at the kept copy


__all__ = ["ExperimentDriver", "LostOwnership", "TransitionConflict"]
