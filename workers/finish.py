"""Atomic writes and `finish.flag`: the implementation lives in `resultdir.flag`, shared with
the control plane (which writes the flag of a refused or cancelled-while-queued experiment)."""

from resultdir.flag import (
    FLAG_NAME,
    TEMP_PREFIX,
    atomic_write_bytes,
    atomic_write_text,
    clear_finish_flag,
    iso_utc,
    read_finish_flag,
    remove_file,
    remove_temp_files,
    write_error_reason,
    write_finish_flag,
)

__all__ = ["FLAG_NAME", "TEMP_PREFIX", "atomic_write_bytes", "atomic_write_text", "clear_finish_flag",
           "iso_utc", "read_finish_flag", "remove_file", "remove_temp_files", "write_error_reason",
           "write_finish_flag"]
