"""The local executor: a tmux session beside the worker (or on a session host sharing the node's disk)."""
