"""Stand-in ``torch.distributed``: a single process that never joined a group."""

from ajet_conformance import importstub as _importstub


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return False


def get_rank(*args, **kwargs) -> int:
    return 0


def get_world_size(*args, **kwargs) -> int:
    return 1


_importstub.install("torch.distributed", __import__(__name__, fromlist=["_"]))
