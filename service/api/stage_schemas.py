"""What the /v1/stages routes accept and answer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from ajet_runner.service.api.plain_text import PlainText
from ajet_runner.service.api.schemas import NODE_PATTERN, STAGE_PATTERN, ExperimentSummary
from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC
from ajet_runner.statemachine.models import Problem


class StageBlueprint(BaseModel):
    blueprint: str = Field(..., min_length=1, description="the blueprint's markdown text")
    blueprint_path: PlainText | None = Field(None, max_length=4096, description="where it came from (shown in "
                                             "reports)")


class StageSubmitRequest(BaseModel):
    stage: str = Field(..., pattern=STAGE_PATTERN, description="the stage's name (new, or one to add to)")
    blueprints: list[StageBlueprint] = Field(..., min_length=1, max_length=64)
    sweep: list[Annotated[PlainText, StringConstraints(max_length=2000)]] = Field(
        default_factory=list, max_length=16, description="KEY=V1,V2 (each): expand every blueprint into one "
        "experiment per combination (a key here replaces the same key of a blueprint's [exp_sweep] part)")
    stage_dir: PlainText | None = Field(None, max_length=4096, description="where the stage report is written when its "
                                  "last experiment finishes (default: a single sweep's result dir)")
    webhook_url: str | None = Field(None, max_length=2048, pattern=r"^https?://",
                                    description="this stage's webhook (instead of AJET_RUNNER_WEBHOOK_URL)")
    node: str | None = Field(None, pattern=NODE_PATTERN)
    priority: Literal["normal", "high"] | None = None
    wait_for_node: bool = False
    max_experiments: int | None = Field(None, ge=1, le=1000, description="the sweep combinations allowed (default "
                                        "64): a larger grid is refused unless the submitter says so here")


class RefusedExperiment(BaseModel):
    blueprint: str = ""
    label: str = Field("", description="the blueprint and, for a sweep, its values")
    status: int
    problems: list[Problem] = Field(default_factory=list)


class StageSubmitView(BaseModel):
    stage: str
    stage_dir: str = ""
    experiments: list[ExperimentSummary]
    refused: list[RefusedExperiment] = Field(default_factory=list, description="experiments the submission path "
                                             "refused (the others were submitted)")


class StageSummary(BaseModel):
    name: str
    created_at: float | None = None
    dir: str = Field("", description="where the stage report is written when the stage finishes")
    webhook: bool = Field(False, description="the stage has its own webhook URL")
    total: int = 0
    states: dict[str, int] = Field(default_factory=dict)
    outcomes: dict[str, int] = Field(default_factory=dict)
    finished: bool = Field(False, description="every experiment of it is finished")
    succeeded: bool = Field(False, description="finished, and every experiment completed or early-stopped")
    best: dict[str, Any] | None = Field(None, description="{metric, id, value, step}: the best value of "
                                        f"{HEADLINE_METRIC} any of its experiments reached")
    report: str | None = Field(None, description="the stage report written into its dir, once it is")


class StageView(StageSummary):
    experiments: list[ExperimentSummary] = Field(default_factory=list, description="in submission order")


class StageAddRequest(BaseModel):
    # Bounds: one more than the most of each still fits the request size limit, so too many is a 422, not a 413.
    ids: list[Annotated[PlainText, StringConstraints(min_length=1, max_length=64)]] = Field(default_factory=list,
                                                                                            max_length=200)
    result_dirs: list[Annotated[PlainText, StringConstraints(min_length=1, max_length=4096)]] = Field(
        default_factory=list, max_length=200, description="each names the experiment last run in it")
