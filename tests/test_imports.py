"""How the lnet packages import one another: the client never loads the depot, and nothing imports in a circle.

The client and the depot meet in ``lnet.protocol`` (errors, capabilities, digests, the HTTP patches) and
``lnet.units``; the client must work without the server installed, so no client module may load ``lnet.depot``,
at import or later. The import graph is read from the source with ``ast`` (every module the packages of
pyproject.toml hold), so that a cycle is found whichever module happens to be imported first; the loading is
checked in fresh interpreters, since this one has imported whatever other tests needed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def package_dirs() -> dict[str, Path]:
    """Each top-level lnet package and the directory it lives in (pyproject.toml's ``package-dir``)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / where for name, where in setuptools["package-dir"].items()}


def module_files() -> dict[str, Path]:
    """Every lnet module (``lnet.client.commands.send``) and its source file; ``__main__`` modules left out."""
    modules: dict[str, Path] = {}
    for package, directory in package_dirs().items():
        for path in sorted(directory.rglob("*.py")):
            parts = list(path.relative_to(directory).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    top_level: bool  # run when the module is imported: not in a function, not under ``if TYPE_CHECKING:``


def _is_type_checking(node: ast.If) -> bool:
    return ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """The lnet modules ``name`` imports. ``from P import m`` is an import of module ``P.m`` where that is a
    module, else of ``P``; relative imports are resolved against ``name``'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            top_level = False
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, top_level)
            return
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            targets = []
        for target in targets:
            while target and target not in known:  # ``import lnet.client.formats.manifest as m`` and the like
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append(Import(name, target, top_level))
        for child in ast.iter_child_nodes(node):
            visit(child, top_level)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def import_graph(*, top_level_only: bool) -> nx.DiGraph:
    modules = module_files()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for found in imports_of(name, path, set(modules)):
            if found.top_level or not top_level_only:
                graph.add_edge(found.source, found.target)
    return graph


def test_the_graph_sees_every_package_and_their_imports() -> None:
    graph = import_graph(top_level_only=True)
    assert {"lnet.client.wire.depot_client", "lnet.depot.app", "lnet.protocol", "lnet.units", "lnet.testbed.cli",
            "lnet.scheduler"} <= set(graph)
    assert graph.has_edge("lnet.client.wire.depot_client", "lnet.protocol")
    assert graph.has_edge("lnet.depot.app", "lnet.depot.weather_probes")  # relative, ``from .weather_probes``
    assert graph.has_edge("lnet.depot.app", "lnet.depot.direct")  # ``from . import direct``
    assert not graph.has_edge("lnet.client.commands.send", "lnet.client.commands.send_transfer")  # in a function
    assert import_graph(top_level_only=False).has_edge(
        "lnet.client.commands.send", "lnet.client.commands.send_transfer"
    )


@pytest.mark.parametrize("top_level_only", [True, False], ids=["at-import", "deferred-and-typing-too"])
def test_no_module_imports_itself_in_a_circle(top_level_only: bool) -> None:
    """At import a cycle is a load-order bug waiting; with the imports deferred into functions or kept for the
    type checker it is still two modules that cannot be understood, or moved, one without the other."""
    cycles = sorted(sorted(cycle) for cycle in nx.simple_cycles(import_graph(top_level_only=top_level_only)))
    assert cycles == [], cycles


def test_the_shared_packages_import_neither_side() -> None:
    graph = import_graph(top_level_only=False)
    shared = [name for name in graph if name.split(".")[1] in {"protocol", "units"}]
    assert "lnet.protocol.h11_receive" in shared
    wrong = sorted(
        f"{source} -> {target}" for source in shared for target in graph.successors(source)
        if target.split(".")[1] not in {"protocol", "units"}
    )
    assert wrong == []
    units = [name for name in graph if name.startswith("lnet.units")]
    assert [target for name in units for target in graph.successors(name)] == []  # the standard library only


def test_no_client_module_imports_the_depot_anywhere() -> None:
    """Not at import, and not in a function either: the client runs the depot as a program (``lnet demo``)."""
    graph = import_graph(top_level_only=False)
    client_side = [name for name in graph if name.split(".")[1] in {"client", "protocol"}]
    wrong = sorted(
        f"{source} -> {target}" for source in client_side for target in graph.successors(source)
        if target.split(".")[1] == "depot"
    )
    assert wrong == []


# Each module is imported in a child forked from one interpreter that has loaded the third-party libraries
# (they load nothing of lnet), so that each import is fresh and the check stays quick.
_PROBE = """
import importlib, json, os, sys
import blake3, h11, httpx, msgpack, rich.console, trio
results = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            out = sorted(m for m in sys.modules if m == "lnet.depot" or m.startswith("lnet.depot."))
        except BaseException as exc:
            out = [f"import failed: {exc!r}"]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while piece := os.read(read, 1 << 16):
        data += piece
    os.close(read)
    os.waitpid(pid, 0)
    results[name] = json.loads(data)
print(json.dumps(results))
"""


def test_importing_any_client_module_loads_nothing_of_the_depot() -> None:
    names = sorted(name for name in module_files() if name.split(".")[1] in {"client", "protocol"})
    assert len(names) > 40
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(names)], capture_output=True, text=True, timeout=300, check=True
    )
    results: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(results) == names
    loaded = {name: modules for name, modules in results.items() if modules}
    assert loaded == {}


def test_the_probe_would_see_the_depot() -> None:
    """The check above can fail: importing a depot module in the same way reports the depot."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(["lnet.depot.config"])], capture_output=True, text=True,
        timeout=120, check=True,
    )
    assert "lnet.depot.config" in json.loads(done.stdout.strip().splitlines()[-1])["lnet.depot.config"]
