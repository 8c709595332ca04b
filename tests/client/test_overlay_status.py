"""``lnet depots``: a mix of live, stopped, hanging, token-refusing and wrong depots, in process on trio's clock and
then over real sockets through ``lnet depots`` itself (its exit status, its ``--json``, its table)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from rich.console import Console

from lnet.client.commands.cli import main
from lnet.client.commands.depots import exit_code, health_from_status, query_all, render_table, to_json
from lnet.client.exits import ExitCode
from lnet.client.formats.overlay import DepotEntry, Overlay
from lnet.client.wire.depot_client import DepotClient
from lnet.depot import Depot, DepotConfig

from .network import inline

MiB = 1024 * 1024
TOKEN = "operator-token-0123456789"


class Hosts(httpx.AsyncBaseTransport):
    """In-process hosts by base URL: an unknown one refuses the connection, a hanging one never answers; a push
    (PUT) runs at 8 Mbit/s on trio's clock."""

    def __init__(self) -> None:
        self.apps: dict[str, httpx.ASGITransport] = {}
        self.hanging: set[str] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        if base in self.hanging:
            await trio.sleep_forever()
        if base not in self.apps:
            raise httpx.ConnectError(f"connection refused by {base}", request=request)
        if request.method == "PUT":  # a push takes its time on the wire: 8 Mbit/s, say
            await trio.sleep(int(request.headers["content-length"]) * 8 / 8e6)
        return await self.apps[base].handle_async_request(request)


async def not_a_depot(scope: Any, receive: Any, send: Any) -> None:
    """Some other web service where a depot should be."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] != "http":
        return
    status = 200 if scope["path"] == "/v1/status" else 404
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": b"<html>hello</html>"})


def depots_file(path: Path, depots: dict[str, tuple[str, str | None]]) -> Path:
    lines = ['here = "ornl"']
    for name, (url, token) in depots.items():
        lines += [f"[depots.{name}]", f'url = "{url}"'] + ([f'token = "{token}"'] if token else [])
    path.write_text("\n".join(lines) + "\n")
    return path


def config(tmp_path: Path, name: str, **overrides: Any) -> DepotConfig:
    return DepotConfig(
        name=name, listen="127.0.0.1:0", data_dir=tmp_path / name, capacity=64 * MiB, max_allocation=16 * MiB,
        max_duration=7200, **overrides,
    )


async def test_a_mix_of_depots_in_process(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    hosts = Hosts()
    url = {name: f"http://{name}.test:6714" for name in
           ("atl", "sunnyvale", "denver", "chicago", "houston", "kc", "elpaso")}
    gated = {"operator_token": TOKEN, "require_token_for": ("allocate", "status")}
    async with AsyncExitStack() as stack:
        # worker-thread work (a fresh allocation's prefault) inline: the autojump clock jumps while a thread runs
        atl = await stack.enter_async_context(Depot(config(tmp_path, "atl"), copy_transport=hosts, offload=inline))
        sunnyvale = await stack.enter_async_context(Depot(config(tmp_path, "sunnyvale", **gated), offload=inline))
        denver = await stack.enter_async_context(Depot(config(tmp_path, "denver-1", **gated), offload=inline))
        hosts.apps[url["atl"]] = httpx.ASGITransport(app=atl.app)
        hosts.apps[url["sunnyvale"]] = httpx.ASGITransport(app=sunnyvale.app)
        hosts.apps[url["denver"]] = httpx.ASGITransport(app=denver.app)
        hosts.apps[url["houston"]] = httpx.ASGITransport(app=not_a_depot)
        hosts.hanging |= {url["kc"], url["elpaso"]}
        # atl measures its link to sunnyvale with one copy
        async with DepotClient(url["atl"], transport=hosts) as a, DepotClient(
            url["sunnyvale"], token=TOKEN, transport=hosts
        ) as s:
            source = await a.allocate_one(MiB, 600)
            await a.write(source.write, b"w" * MiB)
            target = await s.allocate_one(MiB, 600)
            await a.copy(source.read, target.write_url)
        await trio.sleep(30)  # the figure ages

        overlay = Overlay.parse((depots_file(tmp_path / "depots.toml", {
            "atl": (url["atl"], None),
            "sunnyvale": (url["sunnyvale"] + "/", TOKEN),
            "denver": (url["denver"], "not-the-operator-token"),
            "chicago": (url["chicago"], None),
            "houston": (url["houston"], None),
            "kc": (url["kc"], None),
            "elpaso": (url["elpaso"], None),
        })).read_text())
        started = trio.current_time()
        healths = await query_all(overlay, timeout_s=5.0, transport=hosts)
        took = trio.current_time() - started

    assert took == pytest.approx(5.0, abs=0.5)  # two depots hung, asked at once: one timeout, not two
    by_name = {health.name: health for health in healths}
    assert [health.name for health in healths] == list(overlay.depots)  # the file's order
    assert {name: health.state for name, health in by_name.items()} == {
        "atl": "ok", "sunnyvale": "ok", "denver": "refused", "chicago": "unreachable", "houston": "not a depot",
        "kc": "unreachable", "elpaso": "unreachable",
    }
    atl_health = by_name["atl"]
    assert (atl_health.capacity, atl_health.free, atl_health.max_allocation, atl_health.max_duration) == (
        64 * MiB, 63 * MiB, 16 * MiB, 7200.0)
    assert (atl_health.version, atl_health.protocol) == ("0.1.0", 1)
    assert atl_health.in_flight == 1  # the status request itself
    [link] = atl_health.links
    assert (link.to, link.peer, link.source, link.count, link.failures) == (
        "http://sunnyvale.test:6714", "sunnyvale", "copy", 1, 0)
    assert link.mbps == pytest.approx(8.0, rel=0.01)
    assert atl_health.newest_weather_age_s == pytest.approx(30.0, abs=1.0)
    assert by_name["sunnyvale"].token_required_for == ("allocate", "status")
    assert by_name["sunnyvale"].newest_weather_age_s is None
    assert by_name["denver"].depot_name is None
    assert "401 unauthorized" in (by_name["denver"].reason or "")
    assert "its token is refused" in (by_name["denver"].reason or "")
    assert "connection refused by http://chicago.test:6714" in (by_name["chicago"].reason or "")
    assert "text/html" in (by_name["houston"].reason or "")
    assert by_name["kc"].reason == "no answer within 5s"
    assert exit_code(healths) == ExitCode.UNREACHABLE
    assert exit_code([h for h in healths if h.state != "unreachable"]) == ExitCode.USAGE
    assert exit_code([h for h in healths if h.state == "ok"]) == ExitCode.OK

    document = json.loads(json.dumps(to_json(healths)))
    assert document["kind"] == "lnet-depots/1"
    assert (document["healthy"], document["unhealthy"], document["exit"]) == (2, 5, 3)
    first = document["depots"][0]
    assert (first["name"], first["state"], first["free"], first["links"][0]["peer"]) == ("atl", "ok", 63 * MiB,
                                                                                         "sunnyvale")
    console = Console(record=True, width=220)
    console.print(render_table(healths))
    text = console.export_text()
    for needle in ("atl", "63.0 MiB / 64.0 MiB", "16.0 MiB", "2h", "30s ago", "sunnyvale", "Mbit/s",
                   "token for allocate, status", "no answer within 5s", "not a depot", "refused"):
        assert needle in text, needle


async def test_a_depot_that_calls_itself_otherwise_is_still_ok(tmp_path: Path) -> None:
    hosts = Hosts()
    async with Depot(config(tmp_path, "atlanta-7")) as depot:
        hosts.apps["http://atl.test:6714"] = httpx.ASGITransport(app=depot.app)
        overlay = Overlay.parse('here = "ornl"\n[depots.atl]\nurl = "http://atl.test:6714"\n')
        [health] = await query_all(overlay, transport=hosts)
    assert (health.state, health.depot_name) == ("ok", "atlanta-7")
    console = Console(record=True, width=200)
    console.print(render_table([health]))
    assert "(calls itself atlanta-7)" in console.export_text()


# -- lnet depots itself, over real sockets --------------------------------------------------------------------


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    hc = HypercornConfig()
    hc.bind = ["127.0.0.1:0"]
    hc.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(hypercorn_serve, app, hc, mode="asgi"))
        yield binds[0]
        nursery.cancel_scope.cancel()


def stopped_port() -> str:
    """A loopback URL nothing listens on (bound, then closed: the kernel refuses connections to it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def lnet(*argv: str) -> int:
    return await trio.to_thread.run_sync(main, list(argv))


async def test_lnet_depots_over_real_sockets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Depot(config(tmp_path, "atl")) as atl, serving(atl.app) as atl_url, serving(not_a_depot) as web:
        stopped = stopped_port()
        mix = depots_file(tmp_path / "mix.toml", {"atl": (atl_url, None), "chicago": (stopped, None),
                                                  "houston": (web, None)})
        assert await lnet("depots", "--depots", str(mix), "--json", "--timeout", "3s") == ExitCode.UNREACHABLE
        document = json.loads(capsys.readouterr().out)
        states = {d["name"]: (d["state"], d["reason"]) for d in document["depots"]}
        assert states["atl"] == ("ok", None)
        assert states["chicago"][0] == "unreachable"
        assert "ConnectError" in states["chicago"][1]
        assert states["houston"][0] == "not a depot"

        misconfigured = depots_file(tmp_path / "bad.toml", {"atl": (atl_url, None), "houston": (web, None)})
        assert await lnet("depots", "--depots", str(misconfigured)) == ExitCode.USAGE
        out, err = capsys.readouterr()
        assert "atl" in out
        assert "not a depot" in out
        assert "1 of 2 depots did not answer as they should: houston" in err

        healthy = depots_file(tmp_path / "good.toml", {"atl": (atl_url, None)})
        assert await lnet("depots", "--depots", str(healthy)) == ExitCode.OK
        out, err = capsys.readouterr()
        assert "ok" in out
        assert "64.0 MiB / 64.0 MiB" in out
        assert err == ""


async def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert await lnet("depots", "--depots", str(tmp_path / "absent.toml")) == ExitCode.USAGE
    assert "cannot read the depots file" in capsys.readouterr().err
    good = depots_file(tmp_path / "d.toml", {"atl": ("http://127.0.0.1:1", None)})
    assert await lnet("depots", "--depots", str(good), "--timeout", "soon") == ExitCode.USAGE
    assert "not a duration" in capsys.readouterr().err


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["depots", "--help"]) == 0
    out = capsys.readouterr().out
    for needle in ("--json", "--timeout", "--depots", "LNET_DEPOTS", "examples:", "unreachable", "not a depot",
                   "exit status:", "require_token_for", "cron"):
        assert needle in out, needle


def test_the_command_does_not_load_the_depot_server() -> None:
    code = (
        "import sys, lnet.client.commands.depots, lnet.client.commands.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'hypercorn') "
        "or m in ('lnet.depot.app', 'lnet.depot.server')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"



def test_a_saturated_depot_is_busy_and_a_client_over_its_share_too() -> None:
    status = {"name": "atl", "version": "0.1.0", "protocol": 1, "capacity": 100, "used": 0, "max_allocation": 100,
              "max_duration": 60.0, "in_flight": 512, "max_concurrent_requests": 512, "saturated": True, "links": []}
    health = health_from_status(DepotEntry("atl", "http://atl.test:6714"), status, {})
    assert (health.state, health.reason) == ("busy", "saturated: all 512 of its request places are taken")
    assert health.in_flight == 512  # its figures are still shown
    assert exit_code([health]) == ExitCode.UNREACHABLE  # try again later
    calm = health_from_status(DepotEntry("atl", "http://atl.test:6714"), {**status, "saturated": False}, {})
    assert (calm.state, calm.reason) == ("ok", None)
