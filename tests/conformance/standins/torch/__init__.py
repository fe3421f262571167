"""Conformance-tier stand-in for PyTorch: import surface only, no tensors, no GPU.

See ``ajet_conformance.importstub`` for why it exists. Explicit here: what changes control
flow in AgentJet/verl at import time (``cuda.is_available() -> False``, no ``torch.npu``,
``distributed.is_initialized() -> False``) and the exception type a CUDA OOM raises, so a
failure injection prints a real-looking ``torch.OutOfMemoryError: CUDA out of memory...``.
"""

import pickle as _pickle

from ajet_conformance import importstub as _importstub

__version__ = "2.7.1"  # the torch that verl-bundle 0.5.0.post2's extras pin
__ajet_conformance_standin__ = True


class OutOfMemoryError(RuntimeError):
    """Raised by the failure injection ``cuda_oom``; printed as ``torch.OutOfMemoryError: ...``."""


OutOfMemoryError.__module__ = "torch"


class Tensor(_importstub.Stub):
    pass


Tensor.__module__ = "torch"


def manual_seed(seed):
    return None


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def save(obj, f, *args, **kwargs):
    """Pickles `obj` (the stand-in checkpoints use it for ``data.pt``)."""
    if hasattr(f, "write"):
        _pickle.dump(obj, f)
        return
    with open(f, "wb") as fh:
        _pickle.dump(obj, fh)


def load(f, *args, **kwargs):
    if hasattr(f, "read"):
        return _pickle.load(f)
    with open(f, "rb") as fh:
        return _pickle.load(fh)


from . import cuda, distributed, utils  # noqa: E402, F401  (real torch exposes these after `import torch`)

_importstub.install("torch", __import__(__name__))
_deny = frozenset({"npu", "xpu", "mlu", "musa", "hpu"})  # absent accelerators: hasattr() must be False
