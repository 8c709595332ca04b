"""``get_directory``: a directory tree lnet delivered, fetched and rebuilt under ``OUT``.

The tree's packed stream is fetched with ``get_file`` (verified block by block, resumable: a re-run fetches only
what is missing) into ``OUT.lnet-stream``, then ``formats.tree.rebuild`` puts the tree in place and the stream
file is removed. It must not print or import the commands.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import httpx
import trio

from lnet.client.fetching.blocks import (
    DEFAULT_PARALLEL,
    DEFAULT_TIMEOUT_S,
    GetResult,
    OutputError,
    get_file,
)
from lnet.client.fetching.partfile import whole_file_is
from lnet.client.formats import tree

__all__ = ["get_directory", "stream_path"]


def stream_path(out: Path) -> Path:
    return out.with_name(out.name + ".lnet-stream")


def _stream_is_whole(path: Path, manifest: tree.TreeManifest) -> bool:
    """Whether an earlier run left the whole verified stream (it was renamed into place only once verified)."""
    stream = manifest.stream
    return whole_file_is(path, stream.size, stream.hash_algorithm, stream.file_hash)


def _check_output(out: Path) -> None:
    if os.path.lexists(out) and not out.is_dir():
        raise OutputError(f"{out} exists and is not a directory")


async def get_directory(
    manifest: tree.TreeManifest, out: Path, *, parallel: int = DEFAULT_PARALLEL, timeout_s: float = DEFAULT_TIMEOUT_S,
    on_progress: Callable[[int], None] | None = None, tokens: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> GetResult:
    """Fetch the tree's stream (resuming), then rebuild the tree under ``out`` and remove the stream file."""
    spool = stream_path(out)
    _check_output(out)
    started = trio.current_time()
    if await trio.to_thread.run_sync(_stream_is_whole, spool, manifest):
        if on_progress is not None:
            on_progress(manifest.size)
        result = GetResult(spool, manifest.size, 0.0, len(manifest.stream.blocks), len(manifest.stream.blocks),
                               0, 0)
    else:
        result = await get_file(manifest.stream, spool, parallel=parallel, timeout_s=timeout_s,
                                    on_progress=on_progress, tokens=tokens, transport=transport)
    try:
        await trio.to_thread.run_sync(tree.rebuild, manifest, spool, out)
    except OSError as exc:
        raise OutputError(f"{out}: {exc.strerror or exc}") from None
    except tree.RebuildError as exc:
        raise OutputError(str(exc)) from None
    os.unlink(spool)
    return replace(result, path=out, seconds=trio.current_time() - started)


