"""Stand-in ``torch.cuda``: there is no GPU here."""

from ajet_conformance import importstub as _importstub

from .. import OutOfMemoryError  # noqa: F401  (torch.cuda.OutOfMemoryError is torch.OutOfMemoryError)


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def current_device() -> int:
    raise RuntimeError("conformance stand-in: no CUDA device")


def empty_cache() -> None:
    return None


def synchronize(*args, **kwargs) -> None:
    return None


_importstub.install("torch.cuda", __import__(__name__, fromlist=["_"]))
