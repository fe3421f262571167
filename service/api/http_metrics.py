"""The API process's own series: request latency per route template and `process_*`.

Its own module so /metrics (service/cluster_metrics.py) and the app (service/api/application.py) share the registry
without importing each other.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector

HTTP_REGISTRY = CollectorRegistry(auto_describe=True)
HTTP_LATENCY = Histogram(
    "ajet_runner_http_request_duration_seconds", "HTTP API request time to response headers, by route template",
    ("method", "route", "status"), registry=HTTP_REGISTRY,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
# The API's own process_* series (CPU, memory, fds, start time): the cluster metrics say nothing about
# the process that serves them. On this registry, not the global one, so /metrics stays what we list.
ProcessCollector(registry=HTTP_REGISTRY)
