"""The experiments' side of the store: records and their transitions, event streams, indexes and lists,
who drives a run, result-dir claims, idempotent submission and the job queue."""
