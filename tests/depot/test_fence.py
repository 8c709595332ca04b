"""Depots an operator can fence: ``copy_allow`` (where copies may push) and ``require_token_for``.

The copy fence is checked as a pure decision (``CopyAllow``), through the configuration's three sources, through
the API (``403 forbidden``, counted in /metrics), and as the promise that matters: a refused copy opens no
connection and resolves no name, checked with random targets against a recording transport and patched sockets,
and with a real socket that would see the connection.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnet.client.wire.depot_client import Allocation, DepotClient, Forbidden, Unauthorized, Upstream
from lnet.depot import Depot, DepotConfig
from lnet.depot.cli import main as depot_main
from lnet.depot.config import TOKEN_OPERATIONS, ConfigError
from lnet.depot.copy_allow import CopyAllow

from .conftest import MakeDepot, Routes

TOKEN = "operator-token-0123456789"
CAP = "A" * 32
FENCE = ("atl.example.org", "*.lnet.example.org", "10.0.0.0/8", "2001:db8::/32", "192.0.2.7")

# -- the decision ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("atl.example.org", True),
        ("ATL.Example.ORG", True),  # hosts are matched in lower case...
        ("atl.example.org.", True),  # ...and without the root's trailing dot
        ("x.lnet.example.org", True),
        ("a.b.lnet.example.org", True),
        ("lnet.example.org", False),  # a wildcard is for the names under the domain, not the domain
        ("evillnet.example.org", False),
        ("atl.example.org.evil.net", False),
        ("sunnyvale.example.org", False),
        ("10.1.2.3", True),
        ("11.0.0.1", False),
        ("::ffff:10.9.8.7", True),  # an IPv4-mapped IPv6 address is its IPv4 address
        ("::ffff:11.0.0.1", False),
        ("2001:db8::1", True),
        ("[2001:db8::1]", True),
        ("2001:db9::1", False),
        ("192.0.2.7", True),
        ("192.0.2.8", False),
        ("fe80::1%eth0", False),
        # Numeric spellings the C resolver reads as addresses, Python's ipaddress does not: never admitted.
        ("10.1", False),
        ("167772161", False),  # 10.0.0.1 as one number
        ("0xa.0.0.1", False),
        ("localhost", False),
        ("", False),
    ],
)
def test_copy_allow_matches_hosts_as_spelt(host: str, allowed: bool) -> None:
    assert CopyAllow.parse(FENCE).allows(host) is allowed


def test_names_and_addresses_never_meet() -> None:
    # A name is not resolved to be checked against ranges, nor an address looked up to be checked against names.
    assert not CopyAllow.parse(["127.0.0.0/8"]).allows("localhost")
    assert not CopyAllow.parse(["localhost"]).allows("127.0.0.1")


def test_anywhere_and_nowhere() -> None:
    assert CopyAllow.parse(["*"]).allows("anything.at.all")
    assert CopyAllow.parse(["*"]).allows("167772161")
    assert not CopyAllow.parse([]).allows("atl.example.org")  # an empty list: this depot copies nowhere


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("10.1.2.3/8", "has host bits set: did you mean 10.0.0.0/8"),
        ("10.0.0.0/33", "not a CIDR range"),
        ("http://atl.example.org:6714", "not URLs"),
        ("atl.example.org:6714", "not ports"),
        ("*.*.example.org", "a wildcard"),
        ("*.10", "a wildcard"),
        ("at*l.example.org", "neither a host name"),
        ("a b", "neither a host name"),
        ("10.1", "looks like an address"),
        ("", "empty entry"),
    ],
)
def test_malformed_entries_say_what_is_wrong(entry: str, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        CopyAllow.parse([entry])


def test_a_star_goes_alone() -> None:
    with pytest.raises(ValueError, match="give it alone"):
        CopyAllow.parse(["*", "atl.example.org"])


# -- the configuration: file, environment, flag -------------------------------------------------------------------


def test_copy_allow_from_file_environment_and_flag(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('copy_allow = ["ATL.example.org.", "10.0.0.0/8", "192.0.2.7"]\n')
    assert DepotConfig.load(file).copy_allow == ("atl.example.org", "10.0.0.0/8", "192.0.2.7")
    environ = {"LNET_DEPOT_COPY_ALLOW": "*.lnet.example.org, fd00::/8,"}  # spaces and a trailing comma are fine
    assert DepotConfig.load(file, environ).copy_allow == ("*.lnet.example.org", "fd00::/8")
    assert DepotConfig.load(file, environ, {"copy_allow": "*"}).copy_allow == ("*",)
    assert DepotConfig().copy_allow == ("*",)  # the default: anywhere (docs/depot.md says why)


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("file", "depot.toml: copy_allow: '10.1.2.3/8' has host bits set"),
        ("environment", "LNET_DEPOT_COPY_ALLOW: '10.1.2.3/8' has host bits set"),
        ("flag", "--copy-allow: '10.1.2.3/8' has host bits set"),
    ],
)
def test_a_malformed_copy_allow_names_its_source(tmp_path: Path, source: str, needle: str) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('copy_allow = ["10.1.2.3/8"]\n' if source == "file" else "")
    environ = {"LNET_DEPOT_COPY_ALLOW": "10.1.2.3/8"} if source == "environment" else {}
    flags = {"copy_allow": "10.1.2.3/8"} if source == "flag" else {}
    with pytest.raises(ConfigError, match=re.escape(needle)):
        DepotConfig.load(file, environ, flags)


def test_copy_allow_is_a_list_in_the_file(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text("copy_allow = 10\n")
    with pytest.raises(ConfigError, match="copy_allow: expected a list of strings"):
        DepotConfig.load(file)


def test_weather_peers_must_be_inside_the_fence() -> None:
    environ = {"LNET_DEPOT_COPY_ALLOW": "atl.example.org", "LNET_DEPOT_WEATHER_PEERS": "http://sunnyvale.example.org"}
    with pytest.raises(ConfigError, match="weather peer http://sunnyvale.example.org is not in copy_allow"):
        DepotConfig.load(None, environ)
    environ["LNET_DEPOT_WEATHER_PEERS"] = "http://ATL.example.org:6714"
    assert DepotConfig.load(None, environ).weather_peers[0].url == "http://atl.example.org:6714"


def test_lnet_depot_flags(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LNET_DEPOT_OPERATOR_TOKEN", TOKEN)
    code = depot_main([
        "--copy-allow", "atl.example.org,10.0.0.0/8", "--copy-allow", "*.lnet.example.org",
        "--require-token-for", "allocate,copy,READ", "--print-config",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "copy_allow = ('atl.example.org', '*.lnet.example.org', '10.0.0.0/8')" in out
    assert "require_token_for = ('allocate', 'copy', 'read')" in out
    assert depot_main(["--copy-allow", "http://atl.example.org", "--print-config"]) == 2
    assert "--copy-allow: hosts and address ranges, not URLs" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"require_token_for": ("allocate", "reed")}, "unknown operation 'reed' (known: allocate, read, digest"),
        ({"require_token_for": ("write",)}, "cannot name 'write': other depots push into this one"),
        ({"require_token_for": ("health",)}, "cannot name 'health'"),
        ({"require_token_for": ("allocate", "read"), "operator_token": None}, "names read but no operator_token"),
    ],
)
def test_bad_require_token_for(values: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(needle)):
        DepotConfig(**{"operator_token": TOKEN, **values})


def test_require_token_for_from_file_and_environment(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text(f'operator_token = "{TOKEN}"\nrequire_token_for = ["allocate", "copy", "status"]\n')
    assert DepotConfig.load(file).token_required_for == {"allocate", "copy", "status"}
    environ = {"LNET_DEPOT_REQUIRE_TOKEN_FOR": "read,digest"}
    assert DepotConfig.load(file, environ).token_required_for == {"read", "digest"}
    assert DepotConfig().token_required_for == frozenset()  # no token: nothing needs one (as before)
    assert DepotConfig(operator_token=TOKEN).token_required_for == {"allocate"}  # the default: as before


# -- the API: 403, counted ------------------------------------------------------------------------------------


async def _source(client: DepotClient, data: bytes = b"fenced bytes") -> Allocation:
    alloc = await client.allocate_one(100, 60)
    await client.write(alloc.write, data)
    return alloc


async def test_a_refused_copy_is_403_and_counted(open_depot: MakeDepot, routes: Routes) -> None:
    async with open_depot("d1", copy_allow=("d2.test",)) as (depot, one), open_depot("d2") as (_, two):
        source = await _source(one)
        target = await two.allocate_one(100, 60)
        assert (await one.copy(source.read, target.write_url)).nbytes == 12  # listed: copied
        pushes = len(routes.puts)
        for refused in ("http://d3.test:6714", "http://10.0.0.1:6714", "http://[::1]:6714"):
            with pytest.raises(Forbidden) as refusal:
                await one.copy(source.read, f"{refused}/v1/data/{CAP}")
            assert refusal.value.status == 403
            assert "copy_allow" in refusal.value.message
        assert "'::1' is not one of them" in refusal.value.message
        assert len(routes.puts) == pushes  # nothing was pushed anywhere
        text = (await one._http.get("/metrics")).text
        assert "lnet_depot_copies_refused_total 3.0" in text
        assert 'lnet_depot_requests_total{operation="copy",status="403"} 3.0' in text
        assert [link["to"] for link in (await one.status())["links"]] == ["http://d2.test:6714"]  # no weather made up
        assert depot.metrics.copies_refused._value.get() == 3


async def test_the_refusal_body_names_the_host_and_code(open_depot: MakeDepot) -> None:
    async with open_depot("d1", copy_allow=("d2.test",)) as (_, one):
        source = await _source(one)
        answer = await one._http.post(
            f"/v1/copy/{source.read}", json={"to": f"http://evil.test:6714/v1/data/{CAP}"},
            headers={"Accept": "application/json"},
        )
        assert answer.status_code == 403
        body = answer.json()
        assert body["error"] == "forbidden"
        assert "'evil.test' is not one of them" in body["message"]


async def test_malformed_targets_are_400_before_the_fence(open_depot: MakeDepot) -> None:
    async with open_depot("d1", copy_allow=("d2.test",)) as (depot, one):
        source = await _source(one)
        answer = await one._http.post(f"/v1/copy/{source.read}", json={"to": "http://d2.test:6714/v1/status"})
        assert answer.status_code == 400
        assert depot.metrics.copies_refused._value.get() == 0


async def test_an_empty_fence_refuses_every_copy(open_depot: MakeDepot) -> None:
    async with open_depot("d1", copy_allow=()) as (_, one), open_depot("d2") as (_, two):
        source = await _source(one)
        target = await two.allocate_one(100, 60)
        with pytest.raises(Forbidden):
            await one.copy(source.read, target.write_url)
        assert await two.read(target.read) == b""


# -- the promise: a refused copy opens no connection ----------------------------------------------------------


class Recording(httpx.AsyncBaseTransport):
    """The depot's outbound seam: every request it would send; each accepted as a depot's write would be."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        length = 0
        async for chunk in request.stream:  # type: ignore[union-attr]
            length += len(chunk)
        return httpx.Response(204, headers={"X-Lnet-Length": str(length)})


def _expected(host: str) -> bool:
    """The specification, written out again: names as spelt, addresses (and IPv4-mapped ones) by range."""
    bare = host.strip("[]").lower()
    bare = bare[:-1] if bare.endswith(".") else bare
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare == "atl.example.org" or bare.endswith(".lnet.example.org")
    candidates = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    ranges = [ipaddress.ip_network(entry) for entry in FENCE if entry[0].isdigit()]
    return any(a in network for a in candidates for network in ranges if a.version == network.version)


_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_names = st.builds(
    lambda labels, suffix, upper, dot: ((".".join(labels) + suffix).upper() if upper else ".".join(labels) + suffix)
    + ("." if dot else ""),
    st.lists(_label, min_size=1, max_size=3),
    st.sampled_from(["", ".lnet.example.org", ".example.org", ".org"]),
    st.booleans(),
    st.booleans(),
)
_hosts = st.one_of(
    st.sampled_from([
        "atl.example.org", "ATL.EXAMPLE.ORG", "atl.example.org.", "lnet.example.org", "localhost", "127.0.0.1",
        "10.1", "167772161", "0xa000001", "[::1]", "[::ffff:127.0.0.1]", "192.0.2.7", "192.0.2.8",
    ]),
    _names,
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(network="10.0.0.0/8").map(str),
    st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
    st.ip_addresses(network="2001:db8::/32").map(lambda a: f"[{a}]"),
    st.ip_addresses(v=4).map(lambda a: f"[::ffff:{a}]"),
)
_targets = st.tuples(_hosts, st.one_of(st.none(), st.integers(1, 65535)))


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every name lookup and socket connection fail the test loudly, and log the attempt."""
    attempts: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}{args[:2]!r}")
            raise AssertionError(f"the depot touched the network: {what}")

        return call

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", refuse("connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("connect_ex"))
    monkeypatch.setattr(trio.socket, "getaddrinfo", refuse("trio getaddrinfo"))
    return attempts


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(targets=st.lists(_targets, min_size=1, max_size=8))
def test_no_refused_copy_opens_a_connection(
    monkeypatch: pytest.MonkeyPatch, targets: list[tuple[str, int | None]]
) -> None:
    attempts = _no_network(monkeypatch)

    async def scenario() -> None:
        recording = Recording()
        with tempfile.TemporaryDirectory() as tmp:
            config = DepotConfig(name="d1", listen="127.0.0.1:0", data_dir=Path(tmp), capacity=1 << 20,
                                 max_allocation=1 << 16, copy_allow=FENCE)
            async with Depot(config, copy_transport=recording) as depot:
                client = DepotClient("http://d1.test:6714", transport=httpx.ASGITransport(app=depot.app))
                async with client:
                    source = await _source(client)
                    refused = 0
                    for host, port in targets:
                        url = f"http://{host}" + (f":{port}" if port else "") + f"/v1/data/{CAP}"
                        before = len(recording.requests)
                        answer = await client._http.post(f"/v1/copy/{source.read}", json={"to": url})
                        pushed = recording.requests[before:]
                        if _expected(host):
                            assert answer.status_code == 200, (url, answer.content)
                            [push] = pushed  # exactly one push, to the host that was checked
                            assert _same(push.url.host, host), (push.url, host)
                        else:
                            assert answer.status_code == 403, (url, answer.status_code)
                            assert pushed == []
                            refused += 1
                    assert depot.metrics.copies_refused._value.get() == refused

    trio.run(scenario)
    assert attempts == []


def _same(pushed: str, given: str) -> bool:
    def bare(host: str) -> str:
        host = host.strip("[]").lower()
        return host[:-1] if host.endswith(".") else host

    try:
        return ipaddress.ip_address(bare(pushed)) == ipaddress.ip_address(bare(given))
    except ValueError:
        return bare(pushed) == bare(given)


async def test_a_refused_copy_never_reaches_a_real_listener(tmp_path: Path) -> None:
    """With the depot's real HTTP client: the refused copy's target listens, and sees no connection; the same copy
    allowed does connect and push (so the check can fail)."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    target = f"http://127.0.0.1:{port}/v1/data/{CAP}"

    async def serve_pushes(seen: list[int]) -> None:
        """Serve each connection one depot-like answer to one push; note each connection in ``seen``."""
        while True:
            accepted, _ = await listener.accept()
            seen.append(1)
            with accepted, trio.fail_after(5):
                received = b""
                while b"\r\n\r\n" not in received:
                    received += await accepted.recv(65536)
                head, _, body = received.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                while len(body) < length:
                    body += await accepted.recv(65536)
                await accepted.send(f"HTTP/1.1 204 No Content\r\nX-Lnet-Length: {length}\r\n\r\n".encode())

    for fence, status in ((("10.0.0.0/8", "localhost"), 403), (("127.0.0.0/8",), 200)):
        config = DepotConfig(name="d1", listen="127.0.0.1:0", data_dir=tmp_path / fence[0].replace("/", "_"),
                             copy_allow=fence, copy_timeout=5.0)
        async with Depot(config) as depot:
            async with DepotClient("http://d1.test:6714", transport=httpx.ASGITransport(app=depot.app)) as client:
                source = await _source(client)
                seen: list[int] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(serve_pushes, seen)
                    answer = await client._http.post(f"/v1/copy/{source.read}", json={"to": target})
                    # A connection the depot opened on the way to its answer is in the listen queue by now:
                    # give the accept loop its turn, then count.
                    await trio.sleep(0.2)
                    nursery.cancel_scope.cancel()
                assert answer.status_code == status
                assert seen == ([] if status == 403 else [1])
    listener.close()


async def test_upstream_still_reports_an_allowed_but_dead_target(open_depot: MakeDepot) -> None:
    async with open_depot("d1", copy_allow=("*.test",)) as (_, one):
        source = await _source(one)
        with pytest.raises(Upstream, match="ConnectError"):
            await one.copy(source.read, f"http://nowhere.test:1/v1/data/{CAP}")


# -- require_token_for: each operation ------------------------------------------------------------------------


async def _do(operation: str, client: DepotClient, alloc: Allocation, other: Allocation) -> int:
    """Perform ``operation`` with ``client``; the HTTP status (401 raised as Unauthorized becomes 401)."""
    try:
        if operation == "allocate":
            await client.allocate_one(100, 60)
        elif operation == "read":
            assert await client.read(alloc.read) == b"fenced bytes"
            answer = await client._http.head(f"/v1/data/{alloc.read}")
            return answer.status_code
        elif operation == "digest":
            await client.digest(alloc.read)
        elif operation == "copy":
            await client.copy(alloc.read, other.write_url, dest_offset=0)
        elif operation == "probe":
            await client.probe(alloc.manage)
        elif operation == "extend":
            await client.extend(alloc.manage, 10)
        elif operation == "free":
            await client.free(alloc.manage)
        elif operation == "status":
            await client.status()
        elif operation == "metrics":
            return (await client._http.get("/metrics")).status_code
        else:
            raise AssertionError(operation)
    except Unauthorized:
        return 401
    return 200


@pytest.mark.parametrize("operation", TOKEN_OPERATIONS)
async def test_require_token_for_each_operation(open_depot: MakeDepot, operation: str) -> None:
    async with open_depot("d1", operator_token=TOKEN, require_token_for=(operation,)) as (depot, anonymous):
        owner = DepotClient(anonymous.base_url, token=TOKEN, transport=httpx.ASGITransport(app=depot.app))
        async with owner:
            alloc, other = await _source(owner), await owner.allocate_one(100, 60)
            assert await _do(operation, anonymous, alloc, other) == 401
            assert depot.store.allocations == 2  # the refused request changed nothing
            assert await _do(operation, owner, alloc, other) == 200
            # Writes are never gated, and nothing else is gated but the one operation (in an order that frees last).
            fresh = await owner.allocate_one(100, 60)
            assert await anonymous.write(fresh.write, b"x") == 1
            spare = await _source(owner)
            for unaffected in TOKEN_OPERATIONS:
                if unaffected != operation:
                    assert await _do(unaffected, anonymous, spare, fresh) == 200, unaffected
            assert (await anonymous._http.get("/healthz")).status_code == 200
            text = (await owner._http.get("/metrics")).text
            assert f'lnet_depot_requests_total{{operation="{operation}",status="401"}}' in text
            status = await owner.status()
            assert status["token_required_for"] == [operation]
            assert status["auth_required"] is (operation == "allocate")


async def test_the_token_must_be_a_bearer_token(open_depot: MakeDepot) -> None:
    async with open_depot("d1", operator_token=TOKEN, require_token_for=("status",)) as (_, anonymous):
        for header in (f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer", TOKEN):
            answer = await anonymous._http.get("/v1/status", headers={"Authorization": header})
            assert answer.status_code == 401, header
        answer = await anonymous._http.get("/v1/status", headers={"Authorization": f"bearer  {TOKEN}"})
        assert answer.status_code == 200
        refusal = await anonymous._http.get("/v1/status", headers={"Accept": "application/json"})
        assert refusal.json() == {
            "error": "unauthorized",
            "message": "status at this depot needs the operator token: Authorization: Bearer TOKEN",
        }


async def test_default_keeps_todays_behaviour(open_depot: MakeDepot) -> None:
    async with open_depot("d1", operator_token=TOKEN) as (depot, anonymous):
        with pytest.raises(Unauthorized):
            await anonymous.allocate_one(100, 60)
        owner = DepotClient(anonymous.base_url, token=TOKEN, transport=httpx.ASGITransport(app=depot.app))
        async with owner:
            alloc = await _source(owner)
        assert await anonymous.read(alloc.read) == b"fenced bytes"
        assert (await anonymous.status())["token_required_for"] == ["allocate"]
