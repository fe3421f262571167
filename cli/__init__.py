"""The `ajet-runner` command: the one place that wires `service/` (API, client) and `workers/` (the node's
worker) into one program. Neither of those packages imports this one or each other."""
