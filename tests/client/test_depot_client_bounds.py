"""The one depot client against a depot that answers oddly (through ``httpx.MockTransport``): whatever the
answer, it raises one of its own exceptions, never a ``ValueError`` or ``TypeError``, and reads a bounded amount."""

from __future__ import annotations

import httpx
import pytest

from lnet.client.wire.depot_client import Busy, DepotClient, DepotFull
from lnet.depot.protocol import MAX_RETRY_AFTER

FULL = b'{"error": "depot_full", "message": "no room"}'


@pytest.mark.parametrize(
    ("header", "expected"), [(b"\xb2", None), (b"9" * 400, MAX_RETRY_AFTER), (b"5", 5.0)]
)
async def test_an_odd_retry_after_is_ignored_or_capped(header: bytes, expected: float | None) -> None:
    def depot(request: httpx.Request) -> httpx.Response:
        return httpx.Response(507, headers=[(b"retry-after", header), (b"content-type", b"application/json")],
                              content=FULL)

    async with DepotClient("http://d.test", transport=httpx.MockTransport(depot)) as client:
        with pytest.raises(DepotFull) as raised:
            await client.allocate_one(1000, 60)
    assert raised.value.retry_after == expected


async def test_an_error_body_naming_a_status_still_raises_the_protocol_error() -> None:
    def depot(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": "busy", "message": "later", "status": 200, "retry_after": 9})

    async with DepotClient("http://d.test", transport=httpx.MockTransport(depot)) as client:
        with pytest.raises(Busy) as raised:
            await client.status()
    assert (raised.value.status, raised.value.retry_after, raised.value.message) == (503, None, "later")
