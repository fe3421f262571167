"""The one vocabulary of the metrics an evaluation carries: their names, which are headline, their display
labels, which drive the plateau rule and the report's deltas, which one ranks, and which way is better.

Parsers (statemachine/logs/) recognise the trainer's raw keys (`TGC@4`, `pass@1`, `val-core/.../reward/...`)
and report them under these names; everything after them — the rules, the reports and plots, the console, the
CLI, `/metrics`, the notifications and `compare` — reads the names from here. A new headline metric is a line
here (plus the parser that recognises its raw key); tests/unit/test_metric_vocabulary.py keeps it so: no other
product module spells a headline metric's name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

MEAN_REWARD = "mean_reward"
STD_REWARD = "std_reward"
PASS_RATE_FAMILY = "task_pass_rate"  # one metric per k: task_pass_rate@1, task_pass_rate@4, ...
PASS_RATE_PREFIX = f"{PASS_RATE_FAMILY}@"
PASS_RATE_K = f"{PASS_RATE_PREFIX}k"  # how prose names the family
PASS_RATE_RE = re.compile(rf"^{PASS_RATE_FAMILY}@(\d+)$")  # task_pass_rate@4-all-pass and the like are not

# Task counts an evaluation may carry beside its rates (shown in tables, never ranked).
NUM_ALL_SUCCESS_TASKS = "num_all_success_tasks"
NUM_PASS_N_TASKS = "num_pass_n_tasks"
TOTAL_TASKS = "total_tasks"
PASS_N = "pass_n"
COUNT_METRICS = (NUM_ALL_SUCCESS_TASKS, NUM_PASS_N_TASKS, TOTAL_TASKS, PASS_N)


def pass_rate(k: int | str) -> str:
    """The name of the share of tasks solved in `k` tries."""
    return f"{PASS_RATE_PREFIX}{k}"


def pass_rate_k(name: str) -> str:
    """The k of a `task_pass_rate@k` name ("" for any other name)."""
    match = PASS_RATE_RE.match(name)
    return match[1] if match else ""


@dataclass(frozen=True)
class HeadlineMetric:
    """A metric (or a family, one per k) that every view shows: its per-experiment /metrics gauge carries
    the latest value; `label` is its short column title."""

    name: str
    label: str
    description: str
    gauge: str
    family: bool = False  # `name` is the prose name of a family (task_pass_rate@k); the gauge has a `k` label

    def covers(self, metric: str) -> bool:
        """`metric` is this headline metric (or one of its family)."""
        return PASS_RATE_RE.match(metric) is not None if self.family else metric == self.name

    def k_of(self, metric: str) -> str:
        """The k of `metric` as a member of this family ("" when it is not one, or this is no family)."""
        return pass_rate_k(metric) if self.family else ""


HEADLINE = (
    HeadlineMetric(MEAN_REWARD, "reward", "mean reward over the validation tasks",
                   f"ajet_runner_experiment_{MEAN_REWARD}"),
    HeadlineMetric(PASS_RATE_K, "pass@k", "share of validation tasks solved in k tries",
                   f"ajet_runner_experiment_{PASS_RATE_FAMILY}", family=True),
)
HEADLINE_METRIC = MEAN_REWARD  # ranks a stage by default, the progress bar's value, the stage's best gauge
PLATEAU_METRICS = (MEAN_REWARD, pass_rate(1))  # the plateau rule stops a run once all of these stopped moving
DELTA_METRICS = (MEAN_REWARD, pass_rate(1))  # the report shows their change since the first evaluation
PROGRESS_METRICS = (MEAN_REWARD, pass_rate(1))  # what a follower shows, in order (a swarm client has no reward)
TABLE_FIRST = (MEAN_REWARD, STD_REWARD)  # table columns before the pass rates and the counts
STAGE_BEST_GAUGE = f"ajet_runner_stage_best_{HEADLINE_METRIC}"
CHART_TITLE = f"{MEAN_REWARD} and {PASS_RATE_K} over steps"  # the report's and the console's chart
PLATEAU_PROSE = " and ".join(PLATEAU_METRICS)

_SHORT = {MEAN_REWARD: "reward", STD_REWARD: "std", NUM_PASS_N_TASKS: "solved", NUM_ALL_SUCCESS_TASKS: "all-pass",
          TOTAL_TASKS: "tasks"}

# Direction of "better": the metrics where a larger value means a better model (the ones `best` tracks),
# under the runner's names and the raw keys the parsers keep beside them.
_HIGHER_IS_BETTER_RE = re.compile(
    rf"^(?:{MEAN_REWARD}|{NUM_PASS_N_TASKS}|{PASS_RATE_FAMILY}@.*|num_.*success.*|(?:.+/)?TGC@\d+(?:-all-pass)?"
    r"|val-core/.+/(?:reward|acc|score)/(?:mean@\d+|(?:best|maj)@\d+/mean))$"
)


def higher_is_better(metric: str) -> bool:
    """A larger value of `metric` means a better model."""
    return bool(_HIGHER_IS_BETTER_RE.match(metric))


@functools.lru_cache(maxsize=4096)
def ranked_metric(name: str) -> bool:
    """The metrics a stage is compared by: those where higher is better, not the task counts."""
    return higher_is_better(name) and not name.startswith("num_")


def short_label(metric: str) -> str:
    """A column title short enough for a 10-column table in 80 characters (`pass@4`, `reward`, ...)."""
    k = pass_rate_k(metric)
    return f"pass@{k}" if k else _SHORT.get(metric, metric)


def rates_by_k(names: Iterable[str]) -> list[str]:
    """The `task_pass_rate@k` names among `names`, by k."""
    return sorted((n for n in set(names) if pass_rate_k(n)), key=lambda n: int(pass_rate_k(n)))


def is_headline(name: str) -> bool:
    """`name` is a headline metric (charted, exported as a gauge): mean_reward, task_pass_rate@k."""
    return any(h.covers(name) for h in HEADLINE)


def chart_metrics(names: Iterable[str]) -> list[str]:
    """The headline metrics present in `names`, in chart (and colour) order: mean_reward, then the rates by k."""
    present = set(names)
    out: list[str] = []
    for headline in HEADLINE:
        out += rates_by_k(present) if headline.family else [headline.name] if headline.name in present else []
    return out


def progress_value(metrics: dict[str, object]) -> tuple[str, float] | None:
    """The first PROGRESS_METRICS value a run reported (name, value)."""
    for name in PROGRESS_METRICS:
        value = metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return name, float(value)
    return None
