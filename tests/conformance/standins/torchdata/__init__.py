"""Conformance-tier stand-in for torchdata (a torch extension): import surface only."""

from ajet_conformance import importstub as _importstub

__version__ = "0.11.0"
__ajet_conformance_standin__ = True

_importstub.install("torchdata", __import__(__name__))
