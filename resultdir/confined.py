"""The one writer of result-dir files: every file the runner writes, moves or removes in a result dir goes
through here (report, results.json, plot, repair log, config copies, logs and the wrapper's files, the
reserve, `finish.flag`, the archive into `previous/`).

Nothing is done by path once the directory is open. A directory is opened by a walk of directory fds
from a resolved root, each component opened with O_NOFOLLOW (confined to the allowed roots when a
:func:`ajet_runner.resultdir.roots.confined` block is active); files are created in it with
O_EXCL/O_NOFOLLOW, renamed with renameat relative to those fds (`os.rename(..., src_dir_fd=,
dst_dir_fd=)`), sub-directories opened with O_NOFOLLOW, so a symlink swapped in at any point is refused
(ELOOP), never followed. A sub-directory the runner owns (`previous/`, `logs/`) that is a symlink is
refused with the reason, whether or not roots are configured.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from ajet_runner.resultdir.roots import OutsideRoots, active_roots, root_of

TEMP_PREFIX = ".ajet-tmp-"
DEFAULT_MODE = 0o644  # result files are for people to read; mkstemp would leave 0600
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

__all__ = ["DEFAULT_MODE", "TEMP_PREFIX", "SymlinkRefused", "atomic_write_at", "atomic_write_bytes",
           "atomic_write_text", "fsync_dir", "make_dir", "move_at", "open_dir", "open_subdir", "read_at",
           "remove_file", "write_at"]


class SymlinkRefused(OSError):
    """A directory the runner writes into is a symlink: refused, with where it points."""

    def __init__(self, path: str, target: str, what: str) -> None:
        self.path, self.target = path, target
        super().__init__(errno.ELOOP, f"{path} is a symlink (to {target}): {what} never follows a link; "
                                      f"remove it, or choose another result dir")

    def __str__(self) -> str:
        return str(self.strerror)


def open_dir(directory: str | os.PathLike[str], *, create: bool = True) -> int:
    """An O_DIRECTORY fd for `directory` (created if missing), confined to the active roots.

    Confined: the real path must be inside a root, and the walk from that root opens each
    component with O_NOFOLLOW, so a symlink swapped in after the check is refused (ELOOP) too.
    """
    path = os.path.abspath(os.fspath(directory))
    roots = active_roots()
    if not roots:
        if create:
            Path(path).mkdir(parents=True, exist_ok=True)
        return os.open(path, _DIR_FLAGS)
    real = os.path.realpath(path)
    root = root_of(real, roots)
    if root is None:
        raise OutsideRoots(path, real, roots)
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in [p for p in os.path.relpath(real, root).split("/") if p not in ("", ".")]:
            nfd = _open_component(fd, part, create=create, path=path, real=real, roots=roots)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _dir_fd(dfd: int, name: str, create: bool) -> int:
    """`name` under `dfd` opened as a directory (made first when `create`); a symlink there fails (ELOOP)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=dfd)
    return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)


def _open_component(fd: int, part: str, *, create: bool, path: str, real: str, roots: Sequence[str]) -> int:
    """An O_DIRECTORY fd for directory `part` under `fd` (made first when `create`), not following a symlink:
    one that appeared there is refused as outside the roots."""
    try:
        return _dir_fd(fd, part, create)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OutsideRoots(path, f"{real} (a symlink appeared at {part!r})", roots) from exc
        raise


def make_dir(directory: str | os.PathLike[str]) -> Path:
    """Create `directory` (and its parents) the confined way; returns it."""
    os.close(open_dir(directory))
    return Path(directory)


def open_subdir(dfd: int, name: str, *, create: bool = False, where: str = "", what: str = "the runner") -> int:
    """The sub-directory `name` of `dfd` (created if `create`), never through a symlink: a symlink there
    raises SymlinkRefused naming its target (`where` is the path shown for `dfd`)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain directory name: {name!r}")
    try:
        return _dir_fd(dfd, name, create)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                target = os.readlink(name, dir_fd=dfd)
            except OSError:
                raise exc from None  # not a symlink: a file where the directory goes
            raise SymlinkRefused(os.path.join(where, name) if where else name, target, what) from exc
        raise


def fsync_dir(dfd: int) -> None:
    """Make a rename itself durable (best effort: some filesystems refuse fsync on a dir)."""
    with contextlib.suppress(OSError):
        os.fsync(dfd)


def write_at(dfd: int, name: str, data: bytes, *, truncate: bool = True, mode: int = DEFAULT_MODE) -> None:
    """Write `name` in the directory `dfd` in place (truncated, or appended to), never through a symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_TRUNC if truncate else os.O_APPEND)
    fd = os.open(name, flags, mode, dir_fd=dfd)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_at(dfd: int, name: str, limit: int = 1 << 20) -> bytes:
    """At most `limit` bytes of `name` in `dfd`, never through a symlink (OSError when absent or a link)."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def atomic_write_at(dfd: int, name: str, data: bytes, mode: int | None = None, *, durable: bool = True) -> None:
    """Readers of `name` in `dfd` see the old file or the whole new one, never a part: a temp file created
    with O_EXCL|O_NOFOLLOW, fsynced, renamed over `name` relative to `dfd`. The temp file is removed
    on any error (e.g. ENOSPC) before the error propagates. `durable=False` skips both fsyncs: for a
    cache that only has to survive a process (not the machine) going down."""
    if mode is None:
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode & 0o7777
        except OSError:
            mode = DEFAULT_MODE
    tmp = f"{TEMP_PREFIX}{name}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    if durable:
        fsync_dir(dfd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None, *,
                       durable: bool = True) -> Path:
    """:func:`atomic_write_at` in `path`'s directory, opened the confined way (created if missing)."""
    target = Path(path)
    dfd = open_dir(target.parent)
    try:
        atomic_write_at(dfd, target.name, data, mode, durable=durable)
    except OSError as exc:
        if not os.path.isabs(str(exc.filename or "")):
            exc.filename = str(target)  # the reason names the file, e.g. ENOSPC on finish.flag
        raise
    finally:
        os.close(dfd)
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """UTF-8 text through :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def remove_file(path: str | os.PathLike[str]) -> bool:
    """Unlink `path` relative to its (confined) directory; True if it was there."""
    target = Path(path)
    try:
        dfd = open_dir(target.parent, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        os.unlink(target.name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True


def move_at(src_dfd: int, name: str, dst_dfd: int) -> bool:
    """renameat: `name` from one opened directory into another (a symlink moves as the link itself);
    False when it is gone already."""
    try:
        os.rename(name, name, src_dir_fd=src_dfd, dst_dir_fd=dst_dfd)
    except FileNotFoundError:
        return False
    return True
