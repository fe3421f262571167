"""Accepting a blueprint: parse, validate, check placement, record, enqueue — or refuse with reasons."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.archive import archive_previous_run
from ajet_runner.resultdir.refusal import write_refusal
from ajet_runner.resultdir.roots import confined
from ajet_runner.statemachine.blueprint import parse_deadline
from ajet_runner.statemachine.blueprint.parse import ParseDeadline, parse_blueprint, validate_blueprint
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.fixes.preflight import gang_shape, gpus_needed, read_yaml_data
from ajet_runner.statemachine.lifecycle import EventType, Lifecycle, State
from ajet_runner.statemachine.models import Blueprint, Level, Problem
from ajet_runner.store.naming import host_queue, session_name
from ajet_runner.store.per_experiment.queue import drive_job_id, target_queue
from ajet_runner.store.store import NODE_ALIVE_SECONDS, RedisError, ResultDirTaken, Store, new_id

# A blueprint parses in well under 100 ms whatever it holds (tests/fuzz, bench/bench_hostile_parse.py); the
# deadline is the backstop that keeps one request from holding a submission thread if that ever stops being so.
PARSE_DEADLINE_SECONDS = 1.0
ADD_A_NODE = ("To add a node, run `ajet-runner worker --node <name>` on another GPU machine with the same "
              "REDIS_URL (on Kubernetes, the Helm chart's worker DaemonSet runs one on every GPU node); or lower "
              "ajet.trainer_common.nnodes")


class SubmissionRejected(ValueError):
    """The blueprint cannot run: `problems` names each reason and its field."""

    def __init__(self, problems: Sequence[Problem], status: int = 422, report_dir: str = "") -> None:
        self.problems = list(problems)
        self.status = status
        self.report_dir = report_dir  # where the refusal's report and finish.flag were written, if anywhere
        super().__init__("; ".join(str(p) for p in self.problems))


def _inside(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == os.path.realpath(r) or real.startswith(os.path.realpath(r).rstrip("/") + "/")
               for r in roots)


def live_nodes(store: Store, now: float | None = None, nodes: list[dict[str, Any]] | None = None
               ) -> list[dict[str, Any]]:
    """The nodes that sent a heartbeat recently (of `nodes`, if already read)."""
    now = now or time.time()
    return [n for n in (store.nodes.all() if nodes is None else nodes)
            if now - float(n.get("last_seen", 0)) < NODE_ALIVE_SECONDS]


def _gpu_shape(bp: Blueprint, check_disk: bool) -> tuple[int, int, int]:
    """GPUs needed, nodes, GPUs per node, from the user's YAML (1, 1, 1 when it is not read)."""
    if not check_disk:
        return 1, 1, 1
    try:
        data = read_yaml_data(Path(bp.yaml_abspath()))
        nnodes, per_node = gang_shape(data)
        return gpus_needed(data), nnodes, per_node
    except (OSError, ValueError):
        return 1, 1, 1


def submit(
    store: Store,
    text: str,
    *,
    blueprint_path: str = "",
    node: str | None = None,
    priority: str | None = None,
    allowed_roots: Sequence[str] = (),
    check_disk: bool = True,
    exp_id: str | None = None,
    wait_for_node: bool = False,
    nodes: Sequence[str] | None = None,
    stage: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    stage_settings: Mapping[str, str] | None = None,
    host_check: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Record and enqueue the blueprint (under `exp_id` if given: an idempotency claim); returns the new
    record. Raises SubmissionRejected.

    A named node that no live worker serves is refused unless `wait_for_node` (it would wait for ever).
    `nodes` limits a multi-node run to those nodes; the first is its head (as `node`).
    `stage` tags it (indexed with the record); `overrides` replace parts of the parsed blueprint (one
    experiment of a sweep: its result dir, purpose and values; service/stage_submit.py); `stage_settings`
    (the stage's dir and webhook URL) are written with the record, so only an accepted experiment writes them.
    Each check is a refusal of its own, in the order a person reads them.
    `host_check(host)` says why the ssh host the blueprint names cannot be reached by that name ("" when it
    can): given where the submitting process's ssh config is the one the run will use (`ajet-runner run`).
    """
    named = list(dict.fromkeys(nodes or []))
    node = _head_node(node, named)
    bp, problems = _parse(text, overrides, check_disk)
    problems += _root_problems(bp, allowed_roots)
    problems += _host_problems(bp, host_check)
    errors = [p for p in problems if p.level == Level.error]
    exp_id = exp_id or new_id()
    roots = tuple(os.path.realpath(r) for r in allowed_roots)  # every write below stays inside them
    if errors:
        raise _refused(store, bp, exp_id, problems, blueprint_path, check_disk, roots=roots)
    needed, nnodes, per_node = _gpu_shape(bp, check_disk)
    dir_key = os.path.realpath(bp.exp_result_dir)
    holder, nodes_seen = store.result_dirs.submission_view(dir_key)  # one round trip for every check below
    live = live_nodes(store, nodes=nodes_seen)
    try:
        _check_placement(live, bp, node, named, wait_for_node, (needed, nnodes, per_node))
    except SubmissionRejected as exc:
        raise _refused(store, bp, exp_id, exc.problems, blueprint_path, check_disk, exc.status,
                       roots=roots) from None
    if holder is not None:  # the cheap early answer; the claim below is what decides
        raise _dir_taken(bp.exp_result_dir, holder[0], holder[1], dir_key)
    queue_name, unserved = _queue_for(live, bp.exp_host, node)
    record = _record(bp, text, exp_id, problems, blueprint_path=blueprint_path, node=node, named=named,
                     shape=(needed, nnodes, per_node), priority=priority, queue_name=queue_name, stage=stage)
    _create(store, bp, exp_id, record, queue_name, unserved, dir_key, stage_settings if stage else None)
    return _admit(store, bp, exp_id, record, unserved, roots=roots, check_disk=check_disk)


def _host_problems(bp: Blueprint, host_check: Callable[[str], str] | None) -> list[Problem]:
    """The blueprint's ssh host, when the submitting process can tell it cannot be reached by that name."""
    if not bp.exp_host or host_check is None:
        return []
    unknown = host_check(bp.exp_host)
    return [Problem(level=Level.error, field="exp_host", message=unknown)] if unknown else []


def _create(store: Store, bp: Blueprint, exp_id: str, record: dict[str, Any], queue_name: str, unserved: str,
            dir_key: str, stage_settings: Mapping[str, str] | None) -> None:
    """The claim on the result dir and the record (with its indexes and `submitted` event, which names the
    queue) in one compare-and-set: of concurrent submissions naming one dir, one wins; the others write nothing."""
    message = f"submitted to queue {queue_name}" + (f"; {unserved}" if unserved else "")
    try:
        store.records.create(exp_id, record, {"message": message, "purpose": bp.exp_purpose},
                             result_dir_key=dir_key, stage_settings=stage_settings)
    except ResultDirTaken as taken:
        raise _dir_taken(bp.exp_result_dir, taken.holder, taken.state, taken.held_dir, dir_key) from None


def _queue_for(live: list[dict[str, Any]], host: str, node: str | None) -> tuple[str, str]:
    """The queue to wait in, and why an ssh host's experiment may wait there ("" when served)."""
    if host and not node:
        return host_queue(host), _unserved_host(live, host)
    return target_queue(node), ""


def _admit(store: Store, bp: Blueprint, exp_id: str, record: dict[str, Any], unserved: str, *,
           roots: Sequence[str], check_disk: bool) -> dict[str, Any]:
    """Archive an earlier run's files, then admit the created record and enqueue its job in one step;
    on any failure the record is withdrawn (never admitted: the dir is free again)."""
    try:
        previous = _archive_previous(bp, roots) if check_disk else ""
        # The job only once the dir is ready: a worker never starts while the earlier run is being moved.
        admitted = store.records.admit(exp_id, {"previous_run": previous}, also=lambda pipe: store.jobs.enqueue_drive(
            exp_id, record["queue"], at_front=record["priority"] == "high", max_seconds=bp.exp_max_time_seconds,
            job_id=record["job_id"], pipeline=pipe))
        if unserved:  # said where people look (events, the console), not left to wait silently
            with contextlib.suppress(RedisError):
                store.events.publish(exp_id, {"type": EventType.host, "state": "unserved", "host": bp.exp_host,
                                       "message": unserved})
        return admitted
    except BaseException:
        with contextlib.suppress(RedisError):
            store.records.withdraw(exp_id)  # never admitted: the record goes and the dir is free again
        raise


def _record(bp: Blueprint, text: str, exp_id: str, problems: Sequence[Problem], *, blueprint_path: str,
            node: str | None, named: Sequence[str], shape: tuple[int, int, int], priority: str | None,
            queue_name: str, stage: str | None) -> dict[str, Any]:
    """The new experiment's record, as queued."""
    needed, nnodes, per_node = shape
    return {
        "state": State.queued.value, "lifecycle": Lifecycle.initial_dict(exp_id), "purpose": bp.exp_purpose,
        "result_dir": bp.exp_result_dir, "max_seconds": bp.exp_max_time_seconds or "", "blueprint": text,
        "blueprint_json": bp.stored(), "blueprint_path": blueprint_path, "target_node": node or "", "node": "",
        "gpus_needed": needed, "nnodes": nnodes, "gpus_per_node": per_node, "target_nodes": ",".join(named),
        "priority": priority or "normal", "queue": queue_name, "job_id": drive_job_id(exp_id), "attempt": 0,
        "outcome": "", "tmux_session": session_name(bp.exp_purpose, exp_id),
        "problems": [p.model_dump(mode="json") for p in problems], "previous_run": "",
        **({"stage": stage} if stage else {}),
    }


def _head_node(node: str | None, named: Sequence[str]) -> str | None:
    """The head node: `node`, else the first of `named`; refused when the two disagree."""
    if named and node and node != named[0]:
        raise SubmissionRejected([Problem(level=Level.error, field="nodes", message=(
            f"the first of nodes ({named[0]}) is the head, but node names {node}: give one or make them agree"))])
    return node or (named[0] if named else None)


def _parse(text: str, overrides: Mapping[str, Any] | None, check_disk: bool) -> tuple[Blueprint, list[Problem]]:
    """The blueprint (with `overrides`) and its problems, within one parse deadline."""
    deadline = parse_deadline.after(PARSE_DEADLINE_SECONDS)
    try:  # bounded work per request: a hostile text is refused, it cannot hold a submission thread
        bp = parse_blueprint(text, deadline=deadline)
        if overrides:
            bp = bp.model_copy(update=dict(overrides))
        problems = validate_blueprint(bp, check_disk=check_disk, deadline=deadline)  # the sweep part: same budget
    except ParseDeadline:
        raise SubmissionRejected([Problem(level=Level.error, field="blueprint", message=(
            f"the blueprint took over {format_limit(PARSE_DEADLINE_SECONDS)} to parse and was refused unread; a "
            "real one parses in milliseconds (look for a huge line or deeply nested lists)"))]) from None
    if bp.exp_sweep.strip() and not bp.exp_sweep_values:
        problems.append(Problem(level=Level.error, field="exp_sweep", message=(
            "this blueprint is a sweep (its [exp_sweep] part): submit it as a stage, which makes one experiment "
            "per combination (`ajet-runner submit --stage NAME FILE`, POST /v1/stages)")))
    return bp, problems


def _root_problems(bp: Blueprint, allowed_roots: Sequence[str]) -> list[Problem]:
    """One error per path field outside `allowed_roots` (none when no roots are set)."""
    problems = []
    for fld in ("exp_codebase_dir", "exp_result_dir", "exp_yaml_path", "exp_venv_exe") if allowed_roots else ():
        value = bp.yaml_abspath() if fld == "exp_yaml_path" and bp.exp_yaml_path else getattr(bp, fld)
        # The venv's python is a symlink to the system interpreter by design: its directory must be inside.
        probe = os.path.join(os.path.dirname(value), ".") if fld == "exp_venv_exe" and value else value
        if "\x00" in value:
            continue  # refused by validation already (here os.path would raise)
        if value and not _inside(probe, allowed_roots):
            problems.append(Problem(level=Level.error, field=fld,
                                    message=f"{value} is outside the allowed roots ({', '.join(allowed_roots)})"))
    return problems


def _check_placement(live: list[dict[str, Any]], bp: Blueprint, node: str | None, named: Sequence[str],
                     wait_for_node: bool, shape: tuple[int, int, int]) -> None:
    """Refuse a run no live node could take: an unserved named node, too few named nodes, too few GPUs."""
    needed, nnodes, per_node = shape
    for name in [node, *named[1:]] if node and not wait_for_node else []:
        _check_node_served(live, name)
    if named and len(named) < nnodes:
        raise SubmissionRejected([Problem(level=Level.error, field="nodes", message=(
            f"names {len(named)} node(s) but the run needs {nnodes} (ajet.trainer_common.nnodes): name {nnodes}"))])
    if nnodes > 1:
        _check_gang_capacity(live, nnodes, per_node, node, named)
    elif not bp.exp_host:  # an ssh host's GPUs are not the workers' to count
        _check_capacity(live, needed, node)


def _archive_previous(bp: Blueprint, roots: Sequence[str]) -> str:
    """Move an earlier run's files to previous/ (only once the dir is ours: a stale finish.flag goes before
    anyone waits for ours); where they went, or a refusal."""
    try:
        with confined(roots):
            return archive_previous_run(bp.exp_result_dir, bp.exp_codebase_dir)
    except OSError as exc:
        raise SubmissionRejected([Problem(
            level=Level.error, field="exp_result_dir",
            message=f"an earlier run's files could not be moved to previous/: {exc}")]) from None


def _refused(store: Store, bp: Any, exp_id: str, problems: Sequence[Problem], blueprint_path: str,
             check_disk: bool, status: int = 422, roots: Sequence[str] = ()) -> SubmissionRejected:
    """The rejection, after writing its report and finish.flag when the result dir allows it (only where
    this process sees the nodes' disk, inside the allowed roots, and only while no live experiment holds
    the dir: the report is written under a short claim of its own)."""
    errors = [p for p in problems if p.level == Level.error]
    written = False
    if check_disk and os.path.isabs(bp.exp_result_dir or "") and not any(p.field == "exp_result_dir" for p in errors):
        written = _write_refusal(store, bp, exp_id, problems, errors, blueprint_path, roots)
    return SubmissionRejected(errors, status=status, report_dir=bp.exp_result_dir if written else "")


def _write_refusal(store: Store, bp: Any, exp_id: str, problems: Sequence[Problem], errors: list[Problem],
                   blueprint_path: str, roots: Sequence[str]) -> bool:
    """Write the refusal's report under a short claim of the dir; True when written (a warning joins `errors`
    when a live experiment holds the dir)."""
    dir_key = os.path.realpath(bp.exp_result_dir)
    try:
        store.result_dirs.hold(dir_key, exp_id)
    except ResultDirTaken as taken:
        errors.append(Problem(level=Level.warning, field="exp_result_dir", message=(
            f"no refusal report was written: {_holder_text(taken.holder, taken.state, taken.held_dir, dir_key)}")))
        return False
    try:
        with confined(roots):
            return write_refusal(bp.exp_result_dir, exp_id, bp.exp_purpose, problems,
                                 blueprint_path=blueprint_path, codebase=bp.exp_codebase_dir)
    finally:
        store.result_dirs.release(dir_key, exp_id)


def _holder_text(holder: str, state: str, held_dir: str, dir_key: str) -> str:
    """Who holds the dir, and which dir: the same one, one inside it, or one it is inside."""
    if state == "holding":
        what = f"experiment {holder} is writing its refusal report into {held_dir}"
    else:
        what = f"experiment {holder} is still {state}"
    if held_dir == dir_key:
        return f"the dir belongs to {what}"
    where = "is inside" if dir_key.startswith(held_dir.rstrip("/") + "/") else "contains"
    return f"it {where} {held_dir}, the result dir of {what}"


def _dir_taken(result_dir: str, holder: str, state: str, held_dir: str, dir_key: str = "") -> SubmissionRejected:
    """Two live experiments must never share a result dir (nor nest one in the other): archiving it for the
    new one would move the running one's files away. Refused without writing anything there (409)."""
    where = _holder_text(holder, state, held_dir, dir_key or held_dir)
    return SubmissionRejected([Problem(
        level=Level.error, field="exp_result_dir",
        message=f"{result_dir} is taken: {where}; wait for it to finish or choose another dir",
    )], status=409)


def _check_node_served(nodes: list[dict[str, Any]], node: str) -> None:
    live = sorted(n["name"] for n in nodes)
    if node in live:
        return
    raise SubmissionRejected([Problem(
        level=Level.error, field="node",
        message=f"no live worker serves node {node} (live: {', '.join(live) or 'none'}); submit with "
                f"wait_for_node (CLI --wait-for-node) to queue it until one does",
    )])


def _unserved_host(live: list[dict[str, Any]], host: str) -> str:
    """Why an experiment naming ssh host `host` will wait ("" when a live worker serves it)."""
    if any(host in (n.get("hosts") or []) for n in live):
        return ""
    return (f"no live worker serves ssh host {host}: it waits queued (queue {host_queue(host)}) until one does: "
            f"`ajet-runner worker --executor ssh --host {host}`")


def _check_capacity(nodes: list[dict[str, Any]], needed: int, node: str | None) -> None:
    """Refuse what no live node could ever run; what fits somewhere later simply waits queued."""
    biggest = _most_gpus(nodes, node)
    if biggest is not None and needed > biggest:
        where = f"node {node}" if node else "any live node"
        raise SubmissionRejected([Problem(
            level=Level.error, field="exp_yaml_path",
            message=f"the run needs {needed} GPUs (n_gpus_per_node x nnodes) but {where} has at most {biggest}",
        )], status=409)


def _most_gpus(nodes: list[dict[str, Any]], node: str | None) -> int | None:
    """The most GPUs a live node (`node` only, if named) has; None when a node reports none (CPU-only, or
    none alive yet): nothing to judge."""
    if node:
        nodes = [n for n in nodes if n["name"] == node]
    managed = [n for n in nodes if int(n.get("gpus", 0)) > 0]
    if not managed or len(managed) < len(nodes):
        return None
    return max(int(n["gpus"]) for n in managed)


def _check_gang_capacity(live_now: list[dict[str, Any]], nodes: int, per_node: int, head: str | None,
                         named: Sequence[str] = ()) -> None:
    """A multi-node run needs `nodes` distinct live nodes with `per_node` GPUs each (the head, if named,
    among them; only the `named` ones, if any). Refused only when the live nodes could never hold it;
    busy ones just make it wait."""
    live = [n for n in live_now if not named or n["name"] in named]
    if not live:
        return  # none alive yet: nothing to judge
    problems = _gang_shortfall(live, nodes, per_node, head)
    if problems:
        raise SubmissionRejected([Problem(
            level=Level.error, field="exp_yaml_path",
            message=f"the run needs {nodes} nodes with {per_node} GPUs each (nnodes x n_gpus_per_node) but "
                    + "; ".join(problems) + f". {ADD_A_NODE}",
        )], status=409)


def _gang_shortfall(live: list[dict[str, Any]], nodes: int, per_node: int, head: str | None) -> list[str]:
    """Why the live nodes cannot hold the run: a head with too few GPUs, too few nodes that fit."""
    # A node that manages no GPUs (gpus 0) runs a rank without a GPU reservation: it counts as fitting.
    fit = sorted(n["name"] for n in live if int(n.get("gpus", 0)) == 0 or int(n.get("gpus", 0)) >= per_node)
    problems = []
    if head and head in {n["name"] for n in live} and head not in fit:
        problems.append(f"the named head node {head} has fewer than {per_node} GPUs")
    if len(fit) < nodes:
        problems.append(f"only {len(fit)} live node(s) have {per_node} GPUs ({', '.join(fit) or 'none'})")
    return problems
