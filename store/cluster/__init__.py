"""The cluster's side of the store: nodes and their slots, gangs, stages, the outbox, console sessions, the
/metrics counters and reads."""
