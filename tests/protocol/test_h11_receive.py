"""The copy-saving h11 receive buffer returns exactly what h11's own does, on random input."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import h11
from h11._receivebuffer import ReceiveBuffer
from hypothesis import given
from hypothesis import strategies as st

from lnet.protocol import h11_receive

ORIGINAL = h11_receive.original_methods()  # h11's own, whether or not install() ran before

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.binary(max_size=64).map(lambda b: b.replace(b"x", b"\r\n"))),
        st.tuples(st.just("add"), st.binary(max_size=64).map(lambda b: bytearray(b.replace(b"y", b"\n\n")))),
        st.tuples(st.just("at_most"), st.integers(min_value=0, max_value=80)),
        st.tuples(st.just("line"), st.none()),
        st.tuples(st.just("lines"), st.none()),
    ),
    max_size=40,
)


def run(ops: list[tuple[str, object]], *, fast: bool) -> list[object]:
    buffer = ReceiveBuffer()
    extract = h11_receive._extract if fast else ORIGINAL["_extract"]
    at_most = h11_receive._maybe_extract_at_most if fast else ORIGINAL["maybe_extract_at_most"]
    iadd = h11_receive._iadd if fast else ORIGINAL["__iadd__"]
    seen: list[object] = []
    saved = ReceiveBuffer._extract
    ReceiveBuffer._extract = extract  # type: ignore[method-assign]
    try:
        for name, arg in ops:
            if name == "add":
                assert isinstance(arg, bytes | bytearray)
                iadd(buffer, arg)
            elif name == "at_most":
                assert isinstance(arg, int)
                out = at_most(buffer, arg)
                seen.append(None if out is None else bytes(out))
            elif name == "line":
                line = buffer.maybe_extract_next_line()
                seen.append(None if line is None else bytes(line))
            else:
                lines = buffer.maybe_extract_lines()
                seen.append(None if lines is None else [bytes(x) for x in lines])
            seen.append(bytes(buffer))
    finally:
        ReceiveBuffer._extract = saved  # type: ignore[method-assign]
    return seen


@given(operations)
def test_same_results_as_h11(ops: list[tuple[str, object]]) -> None:
    assert run(ops, fast=True) == run(ops, fast=False)


def test_it_is_installed_for_this_h11() -> None:
    h11_receive.install_http_patches()  # what a Depot, a DepotClient or a RangeConnection does when made

    assert h11_receive.installed()


def test_a_whole_extract_hands_out_the_buffer_without_copying() -> None:
    buffer = ReceiveBuffer()
    buffer += b"a" * 1000
    inner = buffer._data
    out = h11_receive._maybe_extract_at_most(buffer, 5000)
    assert out is inner
    assert len(buffer) == 0


def test_received_bytes_that_all_go_are_handed_out_as_they_came() -> None:
    buffer = ReceiveBuffer()
    received = bytes(range(256)) * 64
    h11_receive._iadd(buffer, received)
    assert h11_receive._maybe_extract_at_most(buffer, len(received) + 1) is received  # no copy at all
    assert len(buffer) == 0


async def test_httpcore_writes_a_body_view_as_it_is_and_the_same_bytes() -> None:
    class Stream:
        def __init__(self) -> None:
            self.written: list[Any] = []

        async def write(self, data: Any, timeout: float | None = None) -> None:  # noqa: ASYNC109
            self.written.append(data)

    body = memoryview(bytearray(os.urandom(200_000)))
    events = [
        h11.Request(method="PUT", target="/v1/data/x", headers=[("Host", "d"), ("Content-Length", str(len(body)))]),
        h11.Data(data=body),
        h11.EndOfMessage(),
    ]
    fast = SimpleNamespace(_h11_state=h11.Connection(h11.CLIENT), _network_stream=Stream())
    for event in events:
        await h11_receive._send_event(fast, event)
    assert any(piece is body for piece in fast._network_stream.written)  # not copied
    plain = h11.Connection(h11.CLIENT)
    expected = b"".join(plain.send(event) or b"" for event in events)
    assert b"".join(bytes(piece) for piece in fast._network_stream.written) == expected


def test_importing_the_depot_patches_nothing_and_making_one_only_guards_the_logs() -> None:
    """No import side effects. Making a depot adds the log filter; the speed-ups come with a server's fast path
    (``lnet.depot.fast_path``), and a client's ``install_http_patches()`` adds them too."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "import lnet.depot.app, lnet.depot.server\n"
        "from lnet.protocol import h11_receive\n"
        "print(h11_receive.installed())\n"
        "from lnet.depot import Depot, DepotConfig\n"
        "import tempfile\n"
        "Depot(DepotConfig(name='d', listen='127.0.0.1:0', data_dir=tempfile.mkdtemp(), capacity=1 << 20,"
        " max_allocation=1 << 20))\n"
        "print(h11_receive.installed(), bool(logging.getLogger('httpx').filters))\n"
        "h11_receive.install_http_patches()\n"
        "print(h11_receive.installed())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stderr
