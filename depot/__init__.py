"""The lnet depot: a server lending time-limited buffers through capabilities, HTTP-native (docs/protocol.md).

``Depot`` is the application (run it in process with ``httpx.ASGITransport``); ``serve`` runs it behind
hypercorn; ``DepotConfig`` is its configuration. Importing the package loads the server (starlette, hypercorn):
what both sides of the protocol share lives in ``lnet.protocol``, sizes and durations in ``lnet.units``, and the
client imports those, never this package.
"""

from __future__ import annotations

from .app import VERSION, Depot
from .config import ConfigError, DepotConfig
from .server import serve

__version__ = VERSION

__all__ = ["ConfigError", "Depot", "DepotConfig", "__version__", "serve"]
