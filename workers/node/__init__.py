"""One GPU node's worker: its identity and GPUs, the supervisor, the watcher and its slots, its own metrics."""
