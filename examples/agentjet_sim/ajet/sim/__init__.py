"""Internals of the simulator (config composition, console output, failures, metrics)."""
