"""Comparing the runs of a stage: rows, labels, ranks, seed bands and verdicts."""
