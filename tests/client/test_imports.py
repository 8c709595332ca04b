"""Importing the client has no side effects and loads nothing of the depot server.

Each check runs in a fresh interpreter (``sys.modules`` of this one is full of whatever other tests imported),
so what it reports is what ``lnet-get``, ``lnet-send`` and a library user pay at import.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import lnet.client

SERVER_MODULES = ("starlette", "hypercorn", "lnet.depot")
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
    loaded = [name for name in modules for prefix in SERVER_MODULES if name == prefix or name.startswith(prefix + ".")]
    assert loaded == []
    assert result["patched"] is False  # h11 is loaded, but left as it is until a client starts


@pytest.mark.parametrize("command", ["get", "send", "cli"])
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


# What each layer may import of the client (its own package always): dependencies run one way, from the commands
# down. ``exits`` sits below them all.
MAY_IMPORT = {
    "commands": {"commands", "sending", "fetching", "wire", "engines", "formats", "exits"},
    "sending": {"sending", "fetching", "wire", "engines", "formats", "exits"},
    "fetching": {"fetching", "wire", "engines", "formats", "exits"},
    "wire": {"wire", "exits"},
    "formats": {"formats", "exits"},
    "engines": {"engines"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_dependencies_run_one_way(layer: str) -> None:
    root = Path(lnet.client.__path__[0])
    wrong = []
    for path in sorted((root / layer).glob("*.py")):
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[:2] == ["lnet", "client"] and len(parts) > 2 and parts[2] in {*MAY_IMPORT, "exits"}:
                if parts[2] not in MAY_IMPORT[layer]:
                    wrong.append(f"{path.name}: {name}")
    assert wrong == []


def test_the_engines_import_the_standard_library_only() -> None:
    root = Path(lnet.client.__path__[0]) / "engines"
    outside = {
        name for path in root.glob("*.py") for name in imported_modules(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith(("lnet.client.engines", "__future__"))
    }
    assert outside == set()


def test_no_layer_below_the_commands_parses_arguments() -> None:
    """Commands parse ``argv`` once into typed options; the libraries never see argparse."""
    root = Path(lnet.client.__path__[0])
    below = [layer for layer in MAY_IMPORT if layer != "commands"]
    wrong = [
        f"{path.relative_to(root)}"
        for layer in below for path in sorted((root / layer).glob("*.py"))
        if "argparse" in imported_modules(path)
    ]
    assert wrong == []


# The parsing step: the only functions of the commands that take an ``argparse.Namespace`` (``parse_arguments``
# takes the function that turns one into a command's options).
PARSING_STEP = {"from_namespace", "parse_arguments", "bound", "_bound"}


def test_a_namespace_goes_no_further_than_the_parsing_step() -> None:
    root = Path(lnet.client.__path__[0]) / "commands"
    wrong = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for argument in arguments:
                annotation = ast.unparse(argument.annotation) if argument.annotation is not None else ""
                if "Namespace" in annotation and node.name not in PARSING_STEP:
                    wrong.append(f"{path.name}: {node.name}({argument.arg}: {annotation})")
    assert wrong == []
