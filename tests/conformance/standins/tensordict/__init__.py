"""Conformance-tier stand-in for tensordict (a torch extension): import surface only."""

from ajet_conformance import importstub as _importstub

__version__ = "0.9.1"
__ajet_conformance_standin__ = True

_importstub.install("tensordict", __import__(__name__))
