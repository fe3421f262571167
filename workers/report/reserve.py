"""Room for the final files: a pre-allocated reserve file in the result dir, held from launch to collecting.

A run that fills the result disk with logs or checkpoints would otherwise leave no room for the
report and `finish.flag`. The reserve is taken (fallocate) before the first launch and released
just before the final files are written, so those always find `size` bytes free.
"""

from __future__ import annotations

import contextlib
import errno
import os

from ajet_runner.resultdir.confined import open_dir

RESERVE_NAME = ".ajet-runner-reserve"


def take_reserve(result_dir: str | os.PathLike[str], size: int) -> int:
    """Allocate `size` bytes (idempotent); returns the size held. Raises OSError (e.g. ENOSPC)."""
    if size <= 0:
        return 0
    dfd = open_dir(result_dir)
    try:
        fd = os.open(RESERVE_NAME, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                _write_zeros(fd, size)  # a filesystem without fallocate: real blocks all the same
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(RESERVE_NAME, dir_fd=dfd)
            raise
        os.close(fd)
    finally:
        os.close(dfd)
    return size


def _write_zeros(fd: int, size: int) -> None:
    chunk = b"\0" * min(size, 1 << 20)
    done = os.fstat(fd).st_size
    os.lseek(fd, done, os.SEEK_SET)
    while done < size:
        done += os.write(fd, chunk[: size - done])


def release_reserve(result_dir: str | os.PathLike[str]) -> bool:
    """Free the reserve; True if one was there. Never raises for a missing dir or file."""
    try:
        dfd = open_dir(result_dir, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        os.unlink(RESERVE_NAME, dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True
