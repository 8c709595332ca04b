"""Test helpers: put a file's blocks into depots with the one ``DepotClient`` and describe them in a ``Manifest``.

``upload_blocks`` is what a finished ``lnet-send`` leaves behind, without the relay: every block in its own
allocation at each of the given depots (the first depot is the block's first source, the others its fallbacks).
``Counting`` wraps a transport to count (and, when told, fail) requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import httpx

from lnet.client.formats.manifest import BlockEntry, BlockSource, Manifest, hash_bytes
from lnet.client.wire.depot_client import DepotClient

Tamper = Callable[[int, int, bytes], bytes]
"""``tamper(block_index, depot_position, data)``: the bytes to store instead of the block's own."""


async def upload_blocks(
    data: bytes,
    depots: DepotClient | Sequence[DepotClient],
    *,
    block_size: int,
    algorithm: str = "sha256",
    name: str = "file.bin",
    duration_s: float = 600,
    path: Sequence[str] = (),
    tamper: Tamper | None = None,
) -> Manifest:
    """Store ``data`` cut in blocks of ``block_size`` at every depot of ``depots``; the manifest lists them."""
    clients = [depots] if isinstance(depots, DepotClient) else list(depots)
    blocks = []
    for index, offset in enumerate(range(0, len(data), block_size)):
        chunk = data[offset : offset + block_size]
        sources = []
        for position, client in enumerate(clients):
            stored = tamper(index, position, chunk) if tamper else chunk
            allocation = await client.allocate_one(max(len(stored), 1), duration_s)
            if stored:
                await client.write(allocation.write, stored)
            sources.append(BlockSource(client.base_url, allocation.read, allocation.expires))
        blocks.append(BlockEntry(index, offset, len(chunk), hash_bytes(algorithm, chunk), tuple(sources)))
    return Manifest(
        name=name,
        size=len(data),
        block_size=block_size,
        hash_algorithm=algorithm,
        file_hash=hash_bytes(algorithm, data),
        created=time.time(),
        path=tuple(path),
        blocks=tuple(blocks),
    )


class Counting(httpx.AsyncBaseTransport):
    """Passes requests to ``inner``, counting block reads (``GET /v1/data/...``) per host; ``fail`` decides,
    per read, whether to answer it with a connection error instead (an unreachable depot)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, fail: Callable[[httpx.Request], bool] | None = None) -> None:
        self.inner = inner
        self.fail = fail
        self.reads: dict[str, int] = {}

    @property
    def total_reads(self) -> int:
        return sum(self.reads.values())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.startswith("/v1/data/"):
            host = request.url.host
            self.reads[host] = self.reads.get(host, 0) + 1
            if self.fail is not None and self.fail(request):
                raise httpx.ConnectError(f"{host} is down (test)", request=request)
        return await self.inner.handle_async_request(request)
