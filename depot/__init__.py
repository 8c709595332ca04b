"""The lnet depot: a server lending time-limited buffers through capabilities, HTTP-native (PROTOCOL.md).

``Depot`` is the application (run it in process with ``httpx.ASGITransport``); ``serve`` runs it behind
hypercorn; ``DepotConfig`` is its configuration.

They are imported when first asked for, not with the package: the client imports ``lnet.depot.protocol`` and
``lnet.depot.h11_receive``, and must not load starlette and hypercorn to do so. Sizes and durations live in
``lnet.units`` (``lnet.depot.units`` is its old name, kept for depot modules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .app import Depot
    from .config import ConfigError, DepotConfig
    from .server import serve

__all__ = ["ConfigError", "Depot", "DepotConfig", "__version__", "serve"]

_WHERE = {"Depot": "app", "ConfigError": "config", "DepotConfig": "config", "serve": "server"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
