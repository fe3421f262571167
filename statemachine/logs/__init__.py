"""Reading what a run writes: log lines, step and validation metrics, result files, checkpoints."""
