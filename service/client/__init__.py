"""The typed Python client of the HTTP API (public as `ajet_runner.client`)."""
