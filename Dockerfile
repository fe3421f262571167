# ajet-runner: one image for the HTTP API (`ajet-runner serve`) and the GPU-node workers (`ajet-runner worker`).
# The chart in helm/ajet-runner runs it; see values.yaml there for GPUs, storage and tmux.
#
#   docker build -t ajet-runner:0.1.0 .
#   docker run --rm ajet-runner:0.1.0 --help

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY logsetup ./logsetup
COPY statemachine ./statemachine
COPY store ./store
COPY workers ./workers
COPY service ./service
COPY cli ./cli
COPY resultdir ./resultdir
# ajet_runner/ links the folders above into one import package
COPY ajet_runner ./ajet_runner
# The samples ship in the wheel (package ajet_runner.examples) so `ajet-runner demo` works in the image.
COPY examples ./examples
COPY constraints.txt ./
RUN pip wheel --no-cache-dir -c constraints.txt --wheel-dir /wheels ".[node]"

FROM python:3.11-slim
# tmux runs the experiments; procps gives ps/pkill for scoped clean-ups; tini reaps the orphans that
# training jobs leave behind when the worker is PID 1. nsenter (util-linux, in the base image) serves
# the chart's worker.tmux.runOnHost mode. fonts-noto-cjk: Chinese and Japanese labels in the PNG plots.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tmux procps tini fonts-noto-cjk \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
COPY --from=build /src/constraints.txt /constraints.txt
# [node]: the plotting stack the workers draw the reports' PNGs with (a bare client install leaves it out)
RUN pip install --no-cache-dir --no-index -c /constraints.txt --find-links /wheels "ajet-runner[node]" && rm -rf /wheels /constraints.txt

# The worker must run as the user who owns the experiment files and tmux sessions; the chart sets
# runAsUser (1000 by default). This user only gives that uid a home and a name.
RUN groupadd --gid 1000 ajet && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash ajet
ENV PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    HOME=/home/ajet
USER 1000:1000
WORKDIR /home/ajet
EXPOSE 8080 9101
# /healthz of `serve` (port 8080, or AJET_RUNNER_HEALTH_PORT) or of a worker with a metrics port
# (AJET_RUNNER_METRICS_PORT). Kubernetes ignores this and uses the chart's probes.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('AJET_RUNNER_HEALTH_PORT') or os.environ.get('AJET_RUNNER_METRICS_PORT') or '8080'; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--", "ajet-runner"]
CMD ["--help"]
