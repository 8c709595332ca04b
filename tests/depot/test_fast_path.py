"""The depot's fast path (``lnet.depot.fast_path``): on with the versions constraints.txt pins, off (and saying so)
when switched off or with versions it was not checked against, and a depot serves correctly either way.

The first tests are the ones that fail when a dependency is upgraded past the versions the fast path was checked
against: docs/depot.md, "The fast path and the pinned versions", says what to do then."""

from __future__ import annotations

import ast
import json
import logging
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path

import pytest
import trio
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from lnet.client.wire.depot_client import DepotClient
from lnet.depot import DepotConfig, direct, fast_path, serve

from .processes import depot_process

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def pinned() -> dict[str, str]:
    """constraints.txt: package (canonical name) -> exact version."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, exact = line.partition("==")
            assert sep, f"constraints.txt: not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = exact
    return pins


def test_the_installed_versions_are_the_pinned_ones() -> None:
    """The environment is the locked one (``./run`` installs with constraints.txt), so the next test checks what
    runs in production."""
    wrong = {name: (exact, version(name)) for name, exact in pinned().items() if version(name) != exact}
    assert wrong == {}


def test_the_pins_satisfy_what_pyproject_asks() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values()
                                                 for r in extra)]
    pins = pinned()
    unpinned, outside = [], []
    for text in requirements:
        requirement = Requirement(text)
        exact = pins.get(canonicalize_name(requirement.name))
        if exact is None:
            unpinned.append(requirement.name)
        elif exact not in requirement.specifier:
            outside.append(f"{requirement.name}=={exact} not {requirement.specifier}")
    assert unpinned == []
    assert outside == []


def test_the_fast_path_is_active_with_the_pinned_versions() -> None:
    """Fails when constraints.txt moves hypercorn, h11 or httpcore to a version the fast path was not checked
    against: check it (docs/depot.md), add the version to the CHECKED sets, and run the benchmark."""
    pins = pinned()
    checked = fast_path.checked_versions()
    unchecked = {name: pins[name] for name, versions in checked.items() if pins[name] not in versions}
    assert unchecked == {}
    assert fast_path.install() == fast_path.FastPath(True)
    assert Version(pins["h11"]) >= Version("0.16.0")  # CVE-2025-43859 is fixed in 0.16.0


@asynccontextmanager
async def depot(tmp_path: Path, name: str, **overrides: object) -> AsyncIterator[str]:
    config = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / name, name=name, **overrides)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        yield url
        nursery.cancel_scope.cancel()


async def metric(client: DepotClient, name: str) -> float:
    text = (await client._http.get("/metrics")).text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} not in /metrics"
    return float(match.group(1))


async def test_a_served_depot_takes_the_fast_path_and_says_so(tmp_path: Path) -> None:
    payload = bytes(range(256)) * (MiB // 256)
    async with depot(tmp_path, "d") as url, DepotClient(url) as client:
        status = await client.status()
        assert status["fast_path"] is True
        assert "fast_path_off" not in status
        assert await metric(client, "lnet_depot_fast_path") == 1
        alloc = await client.allocate_one(MiB, 60)
        taken, sent = direct.bodies_taken, direct.replies_sent
        await client.write(alloc.write, payload)
        assert await client.read(alloc.read) == payload
        assert (direct.bodies_taken, direct.replies_sent) == (taken + 1, sent + 1)


async def test_switched_off_in_process_it_takes_no_body_directly_and_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Even where another depot of this process put the fast path in place (the patches are per process)."""
    fast_path.install()
    payload = bytes(range(256)) * (3 * MiB // 256)
    with caplog.at_level(logging.WARNING, logger="lnet"):
        async with depot(tmp_path, "off", fast_path=False) as url, DepotClient(url) as client:
            status = await client.status()
            assert status["fast_path"] is False
            assert status["fast_path_off"] == "switched off (fast_path = false)"
            assert await metric(client, "lnet_depot_fast_path") == 0
            alloc = await client.allocate_one(4 * MiB, 60)
            taken, sent = direct.bodies_taken, direct.replies_sent
            await client.write(alloc.write, payload)
            assert await client.read(alloc.read) == payload
            assert await client.read(alloc.read, start=MiB + 3, end=2 * MiB) == payload[MiB + 3 : 2 * MiB]
            assert (direct.bodies_taken, direct.replies_sent) == (taken, sent)  # hypercorn's way, not the direct one
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("fast path off: switched off (fast_path = false); data bodies go through")


async def test_a_depot_process_with_the_fast_path_off_starts_says_so_and_serves(tmp_path: Path) -> None:
    """``--no-fast-path`` in a process of its own (nothing patched but the keep-alive fix): one warning line,
    ``fast_path`` false in /v1/status and 0 in /metrics; writes, reads, copies both ways with a depot whose fast
    path is on, and an idle connection is still closed at read_timeout (the keep-alive fix does not ride on the
    fast path)."""
    payload = bytes(range(251)) * (6 * MiB // 251)
    async with (
        depot_process("--data-dir", str(tmp_path / "off"), "--no-fast-path", "--read-timeout", "1s") as off,
        depot_process("--data-dir", str(tmp_path / "on")) as on,
        DepotClient(off.url, timeout=10) as slow,
        DepotClient(on.url) as fast,
    ):
        status = await slow.status()
        assert status["fast_path"] is False
        assert status["fast_path_off"] == "switched off (fast_path = false)"
        assert await metric(slow, "lnet_depot_fast_path") == 0
        assert (await fast.status())["fast_path"] is True
        warnings = [line for line in off.log if " WARNING " in line]
        assert len(warnings) == 1
        assert "fast path off: switched off" in warnings[0]
        assert "keep-alive fix off" not in warnings[0]
        assert not any(" WARNING " in line for line in on.log)

        source = await slow.allocate_one(8 * MiB, 60)
        await slow.write(source.write, payload)
        assert await slow.read(source.read) == payload
        there = await fast.allocate_one(8 * MiB, 60)
        assert (await slow.copy(source.read, there.write_url)).nbytes == len(payload)  # off -> on
        back = await slow.allocate_one(8 * MiB, 60)
        assert (await fast.copy(there.read, back.write_url)).nbytes == len(payload)  # on -> off
        assert await slow.read(back.read) == payload

        await trio.sleep(1.5)  # the idle connection passes read_timeout: the depot must close it, not hold it
        with trio.fail_after(3):
            await slow.status()


UNCHECKED = r"""
import json, sys
from hypercorn.trio import tcp_server
from lnet.depot import direct, fast_path, server
from lnet.protocol import h11_receive
which = sys.argv[1]
if which == "hypercorn":
    direct.CHECKED_HYPERCORN = frozenset({"0.0.1"})
else:
    h11_receive.CHECKED_H11 = frozenset({"0.0.1"})
    direct.CHECKED_H11 = frozenset({"0.0.1"})
report = server.install_server_patches(True)
print(json.dumps({
    "active": report.active, "reason": report.reason, "max_recv": tcp_server.MAX_RECV,
    "direct": direct.installed(), "h11": h11_receive.installed(), "keep_alive": direct.keep_alive_fixed(),
}))
"""


@pytest.mark.parametrize("library", ["hypercorn", "h11"])
def test_with_a_version_it_was_not_checked_against_nothing_is_patched(library: str) -> None:
    """All or nothing, hypercorn's read size included; the keep-alive fix needs hypercorn's version only."""
    done = subprocess.run(
        [sys.executable, "-c", UNCHECKED, library], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(done.stdout)
    assert report["active"] is False
    assert report["reason"].startswith(f"{library} {version(library)} is not a version it was checked against")
    assert report["max_recv"] == 2**16  # hypercorn's own
    assert (report["direct"], report["h11"]) == (False, False)
    assert report["keep_alive"] is (library == "h11")


PRIVATE = ("h11", "httpcore", "hypercorn", "httpx", "starlette", "trio")


def test_no_module_imports_a_private_module_of_a_library_at_import() -> None:
    """Private modules are imported inside the steps that use them (``install``), so that a rename in a library
    turns the fast path off instead of breaking the import of the depot and the client."""
    found = []
    for path in sorted([*(ROOT / "depot").glob("*.py"), *(ROOT / "client").rglob("*.py")]):
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] in PRIVATE and any(part.startswith("_") for part in parts[1:]):
                    found.append(f"{path.relative_to(ROOT)}: {name}")
    assert found == []
