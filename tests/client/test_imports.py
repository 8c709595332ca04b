"""Importing the client has no side effects and loads nothing of the depot server.

Each check runs in a fresh interpreter (``sys.modules`` of this one is full of whatever other tests imported),
so what it reports is what ``lnet-get``, ``lnet-send`` and a library user pay at import.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import lnet.client

SERVER_MODULES = ("starlette", "hypercorn", "lnet.depot.app", "lnet.depot.server", "lnet.depot.store")
# What `--help` must not pay for: the event loop, the HTTP stack, the terminal UI, plotting, the scheduler.
HEAVY_MODULES = ("trio", "httpx", "h11", "rich", "matplotlib", "networkx", "lnet.scheduler", *SERVER_MODULES)


def client_modules() -> list[str]:
    return sorted(
        info.name for info in pkgutil.walk_packages(lnet.client.__path__, "lnet.client.") if info.name != "__main__"
    )


def loaded_after(code: str) -> dict[str, object]:
    """Run ``code`` in a fresh interpreter; what it loaded and whether the HTTP libraries were patched."""
    probe = (
        f"{code}\n"
        "import json, sys\n"
        "patched = None\n"
        "if 'h11._receivebuffer' in sys.modules:\n"
        "    from h11._receivebuffer import ReceiveBuffer\n"
        "    patched = ReceiveBuffer._extract.__module__ != 'h11._receivebuffer'\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'patched': patched}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_client_module_is_found() -> None:
    modules = client_modules()
    assert "lnet.client.wire.depot_client" in modules
    assert "lnet.client.fetching.mirrors" in modules
    assert len(modules) > 20


def test_importing_every_client_module_loads_no_server_and_patches_nothing() -> None:
    code = "\n".join(f"import {name}" for name in client_modules())
    result = loaded_after(code)
    modules = result["modules"]
    assert isinstance(modules, list)
    loaded = [name for name in modules if name.split(".")[0] in SERVER_MODULES or name in SERVER_MODULES]
    assert loaded == []
    assert result["patched"] is False  # h11 is loaded, but left as it is until a client starts


@pytest.mark.parametrize("command", ["get", "send"])
def test_a_command_module_loads_nothing_heavy_before_it_parses(command: str) -> None:
    modules = loaded_after(f"import lnet.client.commands.{command}")["modules"]
    assert isinstance(modules, list)
    heavy = sorted({name for name in modules for prefix in HEAVY_MODULES if name == prefix
                    or name.startswith(prefix + ".")})
    assert heavy == []


def test_a_depot_client_applies_the_patches_when_made() -> None:
    result = loaded_after(
        "from lnet.client.wire.depot_client import DepotClient\n"
        "import logging\n"
        "DepotClient('http://127.0.0.1:9')\n"
        "assert logging.getLogger('httpx').filters, 'no capability filter on httpx'\n"
    )
    assert result["patched"] is True
