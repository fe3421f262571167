"""A simulated AgentJet: same launcher surface and log shapes, no GPU, no models.

Only PyYAML and the standard library are needed, so any Python venv can run it.
"""

__version__ = "0.0.0+sim"
