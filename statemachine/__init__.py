"""The pure core: the lifecycle machine, the watch rules and the timing policies at the top, and one
sub-package per family of reading and deciding (blueprint, shell, logs, failures, fixes, comparison).
No Redis, tmux or HTTP here; tests/unit/test_layers.py keeps it so."""
