"""The attempt's processes: the tmux session and its exit-code wrapper, the session host, scoped cleanup."""
