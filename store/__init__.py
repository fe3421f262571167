"""The layer `workers/` and `service/` share: settings, the Redis store and its key names, the
producer side of the job queue, and the names of nodes, queues and tmux sessions.

It imports `statemachine/` (pure) and nothing else of the project; `workers/` and `service/` import it
and never each other.
"""
