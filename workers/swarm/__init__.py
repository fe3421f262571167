"""Swarm mode inside one run: the swarm server (start, reuse, watch, stop) and the client's results."""
