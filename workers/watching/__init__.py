"""Watching one attempt: its process, new log bytes and its results file (`watch.AttemptWatch`), the
scanner's checkpoint beside the log, and the helpers that read only this run's part of a results file.
The driver watches with it; the report and the swarm read what it kept. It sits on the executor seam."""
