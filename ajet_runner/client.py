"""The public Python client of the ajet-runner HTTP API.

    from ajet_runner.client import AjetRunnerClient

    with AjetRunnerClient("http://gpu-head:8080", token="s3cret") as api:
        exp = api.submit_file("blueprint_1.md")
        print(api.wait(exp.id, timeout=3600).outcome)
"""

from ajet_runner.service.client.answers import DeleteResult, Event, EventPage, Experiment, ExperimentPage, Node
from ajet_runner.service.client.api_client import (
    AjetRunnerClient,
    ApiError,
    ApiUnavailable,
    AsyncAjetRunnerClient,
    EmptyStage,
    LogChunk,
    StageNotFound,
)

__all__ = ["AjetRunnerClient", "ApiError", "ApiUnavailable", "AsyncAjetRunnerClient", "DeleteResult", "EmptyStage",
           "Event", "EventPage", "Experiment", "ExperimentPage", "LogChunk", "Node", "StageNotFound"]
