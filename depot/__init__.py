"""The lnet depot: a server lending time-limited buffers through capabilities, HTTP-native (PROTOCOL.md).

``Depot`` is the application (run it in process with ``httpx.ASGITransport``); ``serve`` runs it behind
hypercorn; ``DepotConfig`` is its configuration.
"""

__version__ = "0.1.0"

from .app import Depot
from .config import ConfigError, DepotConfig
from .server import serve

__all__ = ["ConfigError", "Depot", "DepotConfig", "__version__", "serve"]
