"""Notifications: the outbox's deliverer (a thread of each worker) posts webhooks and writes stage reports."""
