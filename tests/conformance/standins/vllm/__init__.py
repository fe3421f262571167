"""Conformance-tier stand-in for vLLM (a CUDA inference engine): import surface only."""

from ajet_conformance import importstub as _importstub

__version__ = "0.10.0"  # the vllm that verl-bundle 0.5.0.post2[vllm] pins
__ajet_conformance_standin__ = True

_importstub.install("vllm", __import__(__name__))
