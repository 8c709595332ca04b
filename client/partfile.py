"""The part file a download writes before its output is complete: its names, its size, positional writes.

Shared by ``lnet-get MANIFEST`` (``lnet.client.get``) and ``lnet-get URL ...`` (``lnet.client.mirrors``): bytes go
to ``OUT.lnet-part`` at their offsets, what is in place is recorded in ``OUT.lnet-part.state``, and the part file
is renamed to ``OUT`` only when the whole file is verified.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["part_path", "preallocate", "state_path", "write_at"]


def part_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-part")


def state_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-part.state")


def write_at(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """All of ``data`` at ``offset`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def preallocate(fd: int, size: int) -> None:
    """Give the part file its full size now, so a full disk shows at the start and not after hours."""
    os.ftruncate(fd, size)
    if size > 0 and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
