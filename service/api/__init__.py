"""The HTTP API (FastAPI): routes, models, errors, auth, middleware and the API process's own metrics."""
