"""Comparing the experiments of a stage: one row each, what differs, the ranking, repeats, curves. Pure.

The input is one `ExperimentFacts` per experiment, read from its `results.json` and the YAML it was given
(`config.original.yaml` in its result dir, plus its sweep values) — or, while it is not finished or its
files cannot be read, from its record. "What differs" compares those YAMLs as given: the runner's own
changes (results paths, experiment names, checkpoint dirs, its preflight fixes) are the same rule applied
to every experiment and only bookkeeping, so they are left out; a repair made during a run is per row.
Keys that only pick a random seed make repeats: experiments that differ in nothing else form a group
whose spread (mean, standard deviation, range) the ranking shows.

Nothing here guesses: an experiment with no evaluation has no metric value (it is ranked last with
"none recorded"), a failed one is listed with its decisive line as the runner recorded it, and one whose
YAML could not be read is named as such instead of being assumed equal to the others.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field, computed_field, field_serializer, field_validator

from ajet_runner.statemachine.blueprint.sweep import format_value, is_seed_key
from ajet_runner.statemachine.comparison.stage_stats import (
    GroupCurve,
    KeyVerdict,
    competition_ranks,
    group_curves,
    run_labels,
    seed_noise,
    verdicts,
)
from ajet_runner.statemachine.lifecycle import FINISHED, SUCCEEDED
from ajet_runner.statemachine.logs.results import ResultSummary, summarize
from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC, higher_is_better, ranked_metric
from ajet_runner.statemachine.models import Evaluation

__all__ = ["DEFAULT_METRIC", "SUCCEEDED", "ExperimentFacts", "MetricValues", "StageComparison", "compare",
           "decisive_of", "facts_from_record", "facts_from_results", "flatten"]

DEFAULT_METRIC = HEADLINE_METRIC  # what a stage is ranked by unless asked otherwise
UNSET = "(unset)"
UNKNOWN = "(unknown)"
_QUOTED_LINE = re.compile(r'((?:log line \d+|last log line): ".*")')


class ExperimentFacts(BaseModel):
    """What the comparison knows of one experiment."""

    id: str
    purpose: str = ""
    state: str = FINISHED
    outcome: str = ""
    reason: str = ""
    attempts: int = 0
    repairs: int = 0
    repair_signatures: list[str] = Field(default_factory=list)
    elapsed_seconds: float | None = None
    train_steps: int = 0
    evaluations: list[Evaluation] = Field(default_factory=list)  # stored as Evaluation.to_json gives them
    config: dict[str, Any] | None = None  # the YAML as given plus its sweep values, flattened; None: unknown
    config_source: str = ""
    launch_command: str | None = None  # the blueprint's; None: unknown
    sweep: dict[str, Any] = Field(default_factory=dict)
    result_dir: str = ""
    report_path: str = ""
    repair_log_path: str = ""
    source: str = ""  # results.json | record (not finished, or its files unreadable here)
    decisive: str = ""  # for one that did not succeed: the line that decided it

    @field_validator("evaluations", mode="before")
    @classmethod
    def _stored_evaluations(cls, value: Any) -> Any:
        """The stored form (results.json, the facts the API sends), tolerantly: an item naming no step is none."""
        if not isinstance(value, list):
            return value
        items = (e if isinstance(e, Evaluation) else Evaluation.from_json(e) for e in value)
        return [e for e in items if e is not None]

    @field_serializer("evaluations")
    def _evaluations_stored(self, value: list[Evaluation]) -> list[dict[str, Any]]:
        return [e.to_json() for e in value]


class MetricValues(BaseModel):
    final: float | None = None
    final_step: int | None = None
    best: float | None = None
    best_step: int | None = None


class Row(BaseModel):
    id: str
    label: str = ""  # what differs from the other runs, `lr=1e-6, seed=2` (stage_stats.run_labels)
    purpose: str
    state: str
    outcome: str
    attempts: int
    repairs: int
    repair_signatures: list[str]
    elapsed_seconds: float | None
    train_steps: int
    metrics: dict[str, MetricValues]
    differs: dict[str, str]  # differing key -> this experiment's value (as text)
    command_part: str | None  # the part of the launch command that differs (None: all the same)
    result_dir: str
    report_path: str
    repair_log_path: str
    source: str
    decisive: str
    succeeded: bool


class Ranked(BaseModel):
    id: str
    value: float | None
    step: int | None = None
    rank: int | None = None  # competition rank: equal values share one (None: no value)
    tied: bool = False


class RepeatGroup(BaseModel):
    """Experiments that differ only in seed keys: the spread of the ranking metric across them."""

    label: str  # the non-seed values they share (`key=value, …`, or "all")
    members: list[str]
    seeds: dict[str, str]  # id -> its seed values
    final_mean: float | None = None
    final_std: float | None = None
    final_min: float | None = None
    final_max: float | None = None
    best_mean: float | None = None
    best_std: float | None = None
    best_min: float | None = None
    best_max: float | None = None
    counted: int = 0  # members with a value of the metric


class StageComparison(BaseModel):
    stage: str
    metric: str
    metrics: list[str]
    rows: list[Row]
    differing_keys: list[str]  # every key whose values differ, seed keys included
    seed_keys: list[str]
    unknown_config: list[str]  # ids whose YAML could not be read
    command_differs: bool
    unknown_command: list[str]
    ranking_final: list[Ranked]
    ranking_best: list[Ranked]
    repeat_groups: list[RepeatGroup]
    not_succeeded: list[str]  # ids (finished without success, or not finished), in row order
    curves: dict[str, dict[str, list[list[float]]]]  # metric -> id -> [[step, value], ...]
    # metric -> the runs grouped by their compared values (they differ only in seeds): mean curve and band;
    # empty when no seed key differs
    group_curves: dict[str, list[GroupCurve]] = Field(default_factory=dict)
    seed_noise: float | None = None  # pooled sd of the final metric across seeds; None: no repeats
    verdicts: list[KeyVerdict] = Field(default_factory=list)  # one per compared key

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented use; mypy rejects decorated properties
    @property
    def compared_keys(self) -> list[str]:
        """The differing keys that are not seeds: what the stage compares."""
        return [k for k in self.differing_keys if k not in self.seed_keys]


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A YAML mapping as dotted keys; lists and scalars are values."""
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, Mapping) and value:
                out.update(flatten(value, name))
            else:
                out[name] = value
    elif prefix:
        out[prefix] = data
    return out


def _text(value: Any) -> str:
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return format_value(value)


def _value(f: ExperimentFacts, key: str) -> str:
    """The experiment's value of `key` as text: from its YAML (UNSET when it has none), else from its sweep
    values alone (UNKNOWN for any other key: its YAML could not be read)."""
    if f.config is not None:
        return _text(f.config[key]) if key in f.config else UNSET
    return _text(f.sweep[key]) if key in f.sweep else UNKNOWN


def decisive_of(reason: str, repairs: Iterable[Mapping[str, Any]] = (), log_tail: Iterable[str] = ()) -> str:
    """The line that decided an outcome, as recorded: the quoted log line of the outcome's reason, else
    the last repair's log excerpt, else the last log line; '' when the runner recorded none."""
    m = _QUOTED_LINE.search(reason or "")
    if m:
        return m.group(1)
    for rep in reversed(list(repairs)):
        excerpt = str(rep.get("log_excerpt") or "").strip()
        if excerpt:
            return f'log excerpt: "{excerpt.splitlines()[-1].strip()[:240]}"'
    tail = [t for t in log_tail if str(t).strip()]
    if tail:
        return f'last log line: "{str(tail[-1]).strip()[:240]}"'
    return ""


def _field(doc: Mapping[str, Any], key: str) -> str:
    """A field as text ("" when absent or empty)."""
    return str(doc.get(key) or "")


def _mapping(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A field that should be a mapping ({} when it is not)."""
    value = doc.get(key)
    return value if isinstance(value, Mapping) else {}


def _mappings(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The mappings of a field that should be a list of them (other items skipped; [] when absent)."""
    return [item for item in doc.get(key) or [] if isinstance(item, Mapping)]


def _str_or_none(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return value if isinstance(value, str) else None


def _signatures(repairs: list[Mapping[str, Any]]) -> list[str]:
    return [str(r.get("signature") or "unknown") for r in repairs]


def _flat_config(config: Mapping[str, Any] | None, sweep: Mapping[str, Any]) -> dict[str, Any] | None:
    """The flattened config with the sweep's values over it (None: the config is unknown)."""
    if config is None:
        return None
    flat = flatten(config)
    flat.update(sweep)
    return flat


def facts_from_results(doc: Mapping[str, Any], *, config: Mapping[str, Any] | None, config_source: str = "",
                       report_path: str = "", repair_log_path: str = "") -> ExperimentFacts:
    """From a `results.json` (the runner's) and the YAML the experiment was given (None: unreadable)."""
    sweep = dict(doc.get("sweep") or {})
    flat = _flat_config(config, sweep)
    repairs = _mappings(doc, "repairs")
    outcome = _field(doc, "outcome")
    reason = _field(doc, "reason")
    return ExperimentFacts(
        id=_field(doc, "id"), purpose=_field(doc, "purpose"), state=FINISHED, outcome=outcome,
        reason=reason, attempts=int(doc.get("attempt_count") or len(doc.get("attempts") or [])),
        repairs=int(doc.get("repair_count") or len(repairs)),
        repair_signatures=_signatures(repairs),
        elapsed_seconds=_number(doc.get("elapsed_seconds")), train_steps=int(doc.get("train_steps") or 0),
        evaluations=[dict(e) for e in _mappings(doc, "evaluations")],
        config=flat, config_source=config_source,
        launch_command=_str_or_none(doc, "launch_command"),
        sweep=sweep, result_dir=_field(doc, "result_dir"), report_path=report_path,
        repair_log_path=repair_log_path, source="results.json",
        decisive="" if outcome in SUCCEEDED else decisive_of(reason, repairs, doc.get("log_tail") or []),
    )


def facts_from_record(rec: Mapping[str, Any], evaluations: Iterable[Mapping[str, Any]] = (), *,
                      config: Mapping[str, Any] | None = None, config_source: str = "") -> ExperimentFacts:
    """From a record (decoded, as the store returns it) and its `evaluation` events: for an experiment not
    finished yet, or whose results.json cannot be read where the comparison runs."""
    ctx, bp = _mapping(rec, "ctx"), _mapping(rec, "blueprint_json")
    sweep = dict(bp.get("exp_sweep_values") or {})
    flat = _flat_config(config, sweep)
    repairs = _mappings(ctx, "repairs")
    outcome = _field(rec, "outcome")
    state = _field(rec, "state")
    reason = _field(rec, "reason")
    return ExperimentFacts(
        id=_field(rec, "id"), purpose=_field(rec, "purpose"), state=state, outcome=outcome,
        reason=reason, attempts=len(ctx.get("attempts") or []) or int(_number(rec.get("attempt")) or 0),
        repairs=len(repairs), repair_signatures=_signatures(repairs),
        elapsed_seconds=_elapsed(rec), train_steps=0, evaluations=_event_evaluations(evaluations), config=flat,
        config_source=config_source, launch_command=_str_or_none(bp, "exp_launch_command"),
        sweep=sweep, result_dir=_field(rec, "result_dir"), source="record",
        decisive="" if outcome in SUCCEEDED or state != FINISHED else decisive_of(reason, repairs),
    )


def _elapsed(rec: Mapping[str, Any]) -> float | None:
    """Seconds from the record's start to its finish (None until both are known)."""
    started, finished = _number(rec.get("started_at")), _number(rec.get("finished_at"))
    return max(0.0, finished - started) if started and finished else None


def _event_evaluations(evaluations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`evaluation` events as results.json writes evaluations (events without metrics skipped)."""
    return [{"step": e.get("step"), "dataset": e.get("dataset") or "", "metrics": dict(e.get("metrics") or {})}
            for e in evaluations if isinstance(e.get("metrics"), Mapping)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value in (None, ""):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _summary(facts: ExperimentFacts) -> tuple[dict[str, MetricValues], dict[str, list[list[float]]]]:
    """Best and final of each validation metric on the primary dataset, and its curve."""
    summary = summarize([_finite_only(e) for e in facts.evaluations])
    mine = [e for e in summary.evaluations if e.dataset == summary.primary_dataset]
    final = summary.final.get("metrics", {}) if summary.final else {}
    names = sorted({m for e in mine for m in e.metrics if validation_metric(m)})
    mine.sort(key=lambda e: e.step)
    out: dict[str, MetricValues] = {}
    curves: dict[str, list[list[float]]] = {}
    for name in names:
        out[name] = _metric_values(summary, final, name)
        curves[name] = _curve(mine, name)
    return out, curves


def _metric_values(summary: ResultSummary, final: Mapping[str, Any], name: str) -> MetricValues:
    """Metric `name`'s final (in the `final` evaluation's metrics) and best values, with their steps."""
    best = summary.best.get(name) or {}
    return MetricValues(final=_number(final.get(name)),
                        final_step=summary.final.get("step") if name in final else None,
                        best=_number(best.get("value")), best_step=best.get("step"))


def _finite_only(evaluation: Evaluation) -> Evaluation:
    """The evaluation without its non-finite metrics (a NaN or inf loss is no best or final value)."""
    return evaluation.model_copy(update={"metrics": {k: v for k, v in evaluation.metrics.items() if math.isfinite(v)}})


def _curve(evaluations: list[Evaluation], name: str) -> list[list[float]]:
    """[step, value] of metric `name` in each evaluation (in the order given) that has a finite one."""
    return [[float(e.step), float(e.metrics[name])] for e in evaluations
            if name in e.metrics and math.isfinite(e.metrics[name])]


validation_metric = ranked_metric  # the metrics a stage is compared by (statemachine/metric_vocabulary.py)


def _command_parts(commands: Mapping[str, str]) -> dict[str, str]:
    """Per id, the part of its launch command that differs from the others (common words trimmed)."""
    words = {exp_id: _command_words(cmd) for exp_id, cmd in commands.items()}
    head, tail = _common_ends(list(words.values()))
    return {exp_id: " ".join(w[head:len(w) - tail]) or "(nothing: shorter)" for exp_id, w in words.items()}


def _common_ends(lists: list[list[str]]) -> tuple[int, int]:
    """How many leading, then how many trailing (of the rest), words all the lists share."""
    head = 0
    while all(len(w) > head for w in lists) and len({w[head] for w in lists}) == 1:
        head += 1
    tail = 0
    while all(len(w) - head > tail for w in lists) and len({w[len(w) - 1 - tail] for w in lists}) == 1:
        tail += 1
    return head, tail


def _command_words(cmd: str) -> list[str]:
    """A launch command's words as the shell splits them (at spaces when its quoting is unbalanced)."""
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def _ranked(rows: list[Row], metric: str, which: str) -> list[Ranked]:
    lower = not higher_is_better(metric)
    have: list[Ranked] = []
    missing: list[Ranked] = []
    for row in rows:
        mv = row.metrics.get(metric)
        value = getattr(mv, which) if mv else None
        step = getattr(mv, f"{which}_step") if mv else None
        (have if value is not None else missing).append(Ranked(id=row.id, value=value, step=step))
    have.sort(key=lambda r: (r.value if lower else -(r.value or 0.0), r.id))
    ranked = have + missing
    ranks, tied = competition_ranks([r.value for r in ranked])
    for item, rank, tie in zip(ranked, ranks, tied, strict=True):
        item.rank, item.tied = rank, tie
    return ranked


def _spread(values: list[float]) -> tuple[float | None, float | None, float | None, float | None]:
    if not values:
        return None, None, None, None
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), std, min(values), max(values)


def _seed_split(differing: list[str]) -> tuple[list[str], list[str]]:
    """The differing keys that are seeds (repeats of one setting), and the others (what is compared)."""
    seeds = [k for k in differing if is_seed_key(k)]
    return seeds, [k for k in differing if k not in seeds]


def _known_finals(members: list[str], finals: Mapping[str, float | None]) -> list[float]:
    """The final values of `members` that are known."""
    return [x for m in members if (x := finals.get(m)) is not None]


def compare(stage: str, experiments: Iterable[ExperimentFacts], metric: str = DEFAULT_METRIC) -> StageComparison:
    """The comparison of `experiments` (in the order given) by `metric`."""
    facts = list(experiments)
    summaries = {f.id: _summary(f) for f in facts}
    differing = _differing_keys(facts)
    seeds, compared = _seed_split(differing)
    rows, parts = _rows(facts, summaries, differing, [*compared, *seeds])  # seeds last in the labels
    command_differs = bool(parts)
    groups = _repeat_groups(rows, differing, seeds, metric, command_differs)
    names, curves = _metric_curves(facts, summaries)
    finals = _finals(rows, metric)
    lower = not higher_is_better(metric)
    noise = seed_noise([_known_finals(g.members, finals) for g in groups])
    by_group = _seed_groups(rows, compared, parts) if seeds else {}
    return StageComparison(
        stage=stage, metric=metric, metrics=names, rows=rows, differing_keys=differing, seed_keys=seeds,
        unknown_config=[f.id for f in facts if f.config is None], command_differs=command_differs,
        unknown_command=[f.id for f in facts if f.launch_command is None],
        ranking_final=_ranked(rows, metric, "final"), ranking_best=_ranked(rows, metric, "best"),
        repeat_groups=groups, not_succeeded=[r.id for r in rows if not r.succeeded], curves=curves,
        group_curves=_group_curves(by_group, curves, rows),
        seed_noise=noise, verdicts=verdicts(compared, _differs_by_id(rows), finals, noise, metric, lower))


def _differing_keys(facts: list[ExperimentFacts]) -> list[str]:
    """The config keys (or sweep keys, where the config is unknown) whose known values differ."""
    keys = sorted({k for f in facts for k in (f.config if f.config is not None else f.sweep)})
    return [k for k in keys if len({v for f in facts if (v := _value(f, k)) != UNKNOWN}) > 1]


def _rows(facts: list[ExperimentFacts], summaries: Mapping[str, tuple[dict[str, MetricValues], Any]],
          differing: list[str], label_keys: list[str]) -> tuple[list[Row], dict[str, str]]:
    """The rows, labelled by `label_keys`, and each id's differing launch command part ({} when the commands
    are alike)."""
    commands = {f.id: f.launch_command for f in facts if f.launch_command is not None}
    parts = _command_parts(commands) if len(set(commands.values())) > 1 else {}
    rows = [_row(f, summaries[f.id][0], differing, parts or None) for f in facts]
    labels = run_labels({r.id: r.differs for r in rows}, label_keys, parts)
    for row in rows:
        row.label = labels[row.id]
    return rows, parts


def _row(f: ExperimentFacts, metrics: dict[str, MetricValues], differing: list[str],
         parts: dict[str, str] | None) -> Row:
    """One experiment's row (`parts`: each id's launch command part, None when the commands are alike)."""
    return Row(
        id=f.id, purpose=f.purpose, state=f.state, outcome=f.outcome, attempts=f.attempts, repairs=f.repairs,
        repair_signatures=f.repair_signatures, elapsed_seconds=f.elapsed_seconds, train_steps=f.train_steps,
        metrics=metrics, differs={k: _value(f, k) for k in differing},
        command_part=(parts.get(f.id, UNKNOWN) if parts is not None else None), result_dir=f.result_dir,
        report_path=f.report_path, repair_log_path=f.repair_log_path, source=f.source, decisive=f.decisive,
        succeeded=f.state == FINISHED and f.outcome in SUCCEEDED)


def _metric_curves(facts: list[ExperimentFacts], summaries: Mapping[str, tuple[Any, dict[str, list[list[float]]]]]
                   ) -> tuple[list[str], dict[str, dict[str, list[list[float]]]]]:
    """Every metric any experiment has (the default first), and per metric each experiment's curve."""
    names = sorted({m for metrics, _ in summaries.values() for m in metrics},
                   key=lambda m: (m != DEFAULT_METRIC, m))
    return names, {m: {f.id: summaries[f.id][1].get(m, []) for f in facts if summaries[f.id][1].get(m)}
                   for m in names}


def _group_curves(by_group: dict[str, list[str]], curves: dict[str, dict[str, list[list[float]]]],
                  rows: list[Row]) -> dict[str, Any]:
    """Per metric, the curves of each group of seeds (none when no seeds differ)."""
    if not by_group:
        return {}
    return {m: group_curves(by_group, by_id, _finals(rows, m), not higher_is_better(m)) for m, by_id in curves.items()}


def _finals(rows: list[Row], metric: str) -> dict[str, float | None]:
    """Each row's final value of `metric` (None where it has none)."""
    return {r.id: (r.metrics[metric].final if metric in r.metrics else None) for r in rows}


def _differs_by_id(rows: list[Row]) -> dict[str, dict[str, str]]:
    """Each row's values of the differing keys, by experiment id."""
    return {r.id: r.differs for r in rows}


def _seed_groups(rows: list[Row], compared: list[str], parts: dict[str, str]) -> dict[str, list[str]]:
    """The ids of each group of runs alike but for their seeds, by the group's whole label."""
    by_group: dict[str, list[str]] = {}
    shared = run_labels(_differs_by_id(rows), compared, parts, limit=None)  # whole: a group's key
    for row in rows:
        by_group.setdefault(shared[row.id] or "all runs", []).append(row.id)
    return by_group


def _values_of(members: list[Row], metric: str, which: str) -> list[float]:
    """The members' known `which` ("final" or "best") values of `metric`."""
    values = (getattr(m.metrics[metric], which) for m in members if metric in m.metrics)
    return [v for v in values if v is not None]


def _repeat_group(label: str, members: list[Row], seeds: list[str], metric: str) -> RepeatGroup:
    """One group of runs alike but for their seeds: the spread of its finals and bests."""
    finals = _values_of(members, metric, "final")
    fm, fs, fmin, fmax = _spread(finals)
    bm, bs, bmin, bmax = _spread(_values_of(members, metric, "best"))
    return RepeatGroup(
        label=label, members=[m.id for m in members],
        seeds={m.id: ", ".join(f"{k}={m.differs[k]}" for k in seeds) for m in members},
        final_mean=fm, final_std=fs, final_min=fmin, final_max=fmax, best_mean=bm, best_std=bs, best_min=bmin,
        best_max=bmax, counted=len(finals))


def _repeat_groups(rows: list[Row], differing: list[str], seeds: list[str], metric: str,
                   command_differs: bool) -> list[RepeatGroup]:
    """Rows whose non-seed values (and launch command part) are all equal, when seeds differ among them."""
    if not seeds:
        return []
    others = [k for k in differing if k not in seeds]
    by_key: dict[tuple[str, ...], list[Row]] = {}
    for row in _fully_known(rows, differing):
        by_key.setdefault(_repeat_key(row, others, command_differs), []).append(row)
    groups = [_repeat_group(_group_label(others, key), members, seeds, metric)
              for key, members in by_key.items() if len(members) >= 2]
    sign = 1 if not higher_is_better(metric) else -1
    groups.sort(key=lambda g: (g.final_mean is None, (g.final_mean or 0.0) * sign, g.label))
    return groups


def _fully_known(rows: list[Row], differing: list[str]) -> list[Row]:
    """The rows whose value of every differing key is known (only those can be repeats of one setting)."""
    return [row for row in rows if not any(row.differs.get(k) == UNKNOWN for k in differing)]


def _group_label(others: list[str], key: tuple[str, ...]) -> str:
    """`k=v, …` of the values a repeat group shares ("all" when nothing but the seed differs)."""
    return ", ".join(f"{k}={v}" for k, v in zip(others, key, strict=False)) or "all"


def _repeat_key(row: Row, others: list[str], command_differs: bool) -> tuple[str, ...]:
    """What a row's seed group is known by: its non-seed values (and launch command part, when they differ)."""
    return tuple(row.differs[k] for k in others) + ((row.command_part or "",) if command_differs else ())
