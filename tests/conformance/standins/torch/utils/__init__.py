"""Stand-in ``torch.utils``."""

from ajet_conformance import importstub as _importstub

from . import data  # noqa: F401

_importstub.install("torch.utils", __import__(__name__, fromlist=["_"]))
