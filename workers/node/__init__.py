"""One GPU node's worker: the supervisor, the watcher and its slots (and what the drivers it hosts share), its own
metrics. The node's identity and GPUs are in workers/identity/."""
