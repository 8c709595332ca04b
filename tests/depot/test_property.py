"""Random requests thrown at two in-process depots: never a 5xx, and no refused request changes a stored byte.

A model keeps what every live allocation must hold; after each request the depots are read back and compared.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgpack
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnet.depot import Depot, DepotConfig

from .conftest import Routes

BASES = ("http://one.test:6714", "http://two.test:6714")

junk_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-5, max_value=5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
small_sizes = st.one_of(st.integers(min_value=1, max_value=4096), junk_numbers)


@dataclass
class Held:
    base: str
    read: str
    write: str
    manage: str
    size: int
    data: bytearray = field(default_factory=bytearray)


@dataclass
class Model:
    held: list[Held] = field(default_factory=list)


def token_choice(model: Model, data: st.DataObject, kind: str) -> str:
    options: list[str] = ["A" * 32, "short", "../../etc", "%00", "x" * 300]
    for h in model.held:
        options += [h.read, h.write, h.manage]
    preferred = [getattr(h, kind) for h in model.held]
    use_own_kind = preferred and data.draw(st.integers(0, 3)) > 0
    return data.draw(st.sampled_from(preferred) if use_own_kind else st.sampled_from(options))


def encode(data: st.DataObject, body: Any) -> tuple[bytes, str]:
    form = data.draw(st.sampled_from(["json", "msgpack", "garbage", "wrong-type"]))
    if form == "garbage":
        kind = data.draw(st.sampled_from(["application/json", "application/msgpack"]))
        return data.draw(st.binary(max_size=40)), kind
    if form == "wrong-type":
        return b"size=5", "text/html"
    if form == "msgpack":
        try:
            return msgpack.packb(body, use_bin_type=True), "application/msgpack"
        except OverflowError:  # msgpack has no integers past 64 bits: send those as JSON
            pass
    try:
        return json.dumps(body).encode(), "application/json"
    except (TypeError, ValueError):
        return b"{", "application/json"


async def one_request(http: httpx.AsyncClient, model: Model, data: st.DataObject) -> httpx.Response:
    op = data.draw(st.sampled_from(["allocate", "write", "read", "copy", "probe", "extend", "free", "junk"]))
    base = data.draw(st.sampled_from(BASES))
    if op == "allocate":
        if data.draw(st.integers(0, 3)) > 0:  # mostly well formed, so that there is data to protect
            body = data.draw(
                st.fixed_dictionaries(
                    {"size": st.integers(1, 2048), "duration": st.integers(1, 600)},
                    optional={"count": st.integers(1, 3), "reliability": st.sampled_from(["soft", "hard"])},
                )
            )
            content = msgpack.packb(body) if data.draw(st.booleans()) else json.dumps(body).encode()
            ctype = "application/msgpack" if content[:1] != b"{" else "application/json"
            answer = await http.post(f"{base}/v1/allocations", content=content, headers={"Content-Type": ctype})
            if answer.status_code == 201:
                for a in answer.json()["allocations"]:
                    model.held.append(Held(base, a["read"], a["write"], a["manage"], a["size"]))
            return answer
        body = data.draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "size": small_sizes,
                    "duration": st.one_of(st.integers(min_value=1, max_value=600), junk_numbers),
                    "count": st.one_of(st.integers(min_value=1, max_value=3), junk_numbers),
                    "reliability": st.sampled_from(["soft", "hard", "maybe", 3]),
                    "extra": st.just(1),
                },
            )
        )
        content, ctype = encode(data, body)
        answer = await http.post(f"{base}/v1/allocations", content=content, headers={"Content-Type": ctype})
        if answer.status_code == 201:
            for a in answer.json()["allocations"]:
                model.held.append(Held(base, a["read"], a["write"], a["manage"], a["size"]))
        return answer
    if op == "write":
        cap = token_choice(model, data, "write")
        payload = data.draw(st.binary(max_size=600))
        params = {}
        if data.draw(st.booleans()):
            params["offset"] = data.draw(st.sampled_from(["0", "1", "-1", "x", "99999999999999999999999", "10", "100"]))
        target = next((h for h in model.held if cap == h.write), None)
        url = f"{target.base if target else base}/v1/data/{cap}"
        answer = await http.put(url, content=payload, params=params)
        if answer.status_code == 204:
            assert target is not None
            offset = int(params.get("offset", len(target.data)))
            target.data[offset : offset + len(payload)] = payload
            assert answer.headers["x-lnet-length"] == str(len(target.data))
        return answer
    if op == "read":
        cap = token_choice(model, data, "read")
        holder = next((h for h in model.held if cap == h.read), None)
        header = data.draw(st.sampled_from(["", "bytes=0-9", "bytes=5-", "bytes=-3", "bytes=9-2", "bytes=a-b",
                                            "items=0-1", "bytes=0-1,3-4", "bytes=100000-"]))
        headers = {"Range": header} if header else {}
        answer = await http.get(f"{holder.base if holder else base}/v1/data/{cap}", headers=headers)
        if holder is not None and answer.status_code in (200, 206) and not header:
            assert answer.content == bytes(holder.data)
        return answer
    if op == "copy":
        cap = token_choice(model, data, "read")
        source = next((h for h in model.held if cap == h.read), None)
        target = data.draw(st.sampled_from(model.held)) if model.held and data.draw(st.booleans()) else None
        to = (
            f"{target.base}/v1/data/{target.write}"
            if target
            else data.draw(st.sampled_from(["file:///etc/passwd", f"{base}/v1/status", "http://x/v1/data/" + "A" * 32,
                                            "nonsense", ""]))
        )
        body = data.draw(
            st.fixed_dictionaries(
                {"to": st.just(to)},
                optional={"offset": small_sizes, "length": small_sizes, "dest_offset": small_sizes},
            )
        )
        content, ctype = encode(data, body)
        answer = await http.post(
            f"{source.base if source else base}/v1/copy/{cap}", content=content, headers={"Content-Type": ctype}
        )
        if answer.status_code == 200:
            assert source is not None
            assert target is not None
            offset = body.get("offset", 0)
            length = body.get("length", len(source.data) - offset)
            dest = body.get("dest_offset")  # null is taken as absent: appended
            dest = len(target.data) if dest is None else dest
            target.data[dest : dest + length] = source.data[offset : offset + length]
        return answer
    if op in ("probe", "extend", "free"):
        cap = token_choice(model, data, "manage")
        holder = next((h for h in model.held if cap == h.manage), None)
        url = f"{holder.base if holder else base}/v1/manage/{cap}"
        if op == "probe":
            answer = await http.get(url)
            if holder is not None and answer.status_code == 200:
                assert answer.json()["length"] == len(holder.data)
            return answer
        if op == "extend":
            content, ctype = encode(data, {"extend": data.draw(st.one_of(st.integers(1, 100), junk_numbers))})
            return await http.post(url, content=content, headers={"Content-Type": ctype})
        answer = await http.delete(url)
        if answer.status_code == 204:
            assert holder is not None
            model.held.remove(holder)
        return answer
    method = data.draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]))
    path = data.draw(st.sampled_from(["/", "/v1", "/v1/data/", "/v1/copy", "/v1/allocations/x", "/metrics",
                                      "/v1/status", "/v1/manage/", "/healthz", "/v1/data/" + "A" * 32]))
    return await http.request(method, base + path, content=data.draw(st.binary(max_size=30)))


async def check_everything_held(http: httpx.AsyncClient, model: Model) -> None:
    for h in model.held:
        answer = await http.get(f"{h.base}/v1/data/{h.read}")
        assert answer.status_code == 200, answer.text
        assert answer.content == bytes(h.data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_requests_never_fail_the_depot_or_its_data(data: st.DataObject) -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            routes = Routes()
            configs = [
                DepotConfig(name=f"d{i}", listen="127.0.0.1:0", data_dir=Path(tmp) / f"d{i}", capacity=64 * 1024,
                            max_allocation=4096, max_duration=600)
                for i in range(2)
            ]
            async with Depot(configs[0], copy_transport=routes) as one, Depot(configs[1], copy_transport=routes) as two:
                routes.add(BASES[0], one)
                routes.add(BASES[1], two)
                model = Model()
                async with httpx.AsyncClient(transport=routes) as http:
                    for _ in range(data.draw(st.integers(min_value=1, max_value=25))):
                        answer = await one_request(http, model, data)
                        assert answer.status_code < 500 or answer.status_code in (502, 503, 507), answer.text
                        if answer.status_code >= 400:
                            error = answer.json() if answer.headers.get("content-type") == "application/json" else {}
                            assert error.get("error") in {"bad_request", "unauthorized", "not_found", "too_large",
                                                          "range", "conflict", "depot_full", "busy", "upstream"}
                        await check_everything_held(http, model)
                    for base, depot in zip(BASES, (one, two), strict=True):
                        assert depot.store.used <= depot.config.capacity
                        assert (await http.get(f"{base}/healthz")).status_code == 200

    trio.run(scenario)

