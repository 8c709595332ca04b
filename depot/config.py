"""The depot's configuration: one typed object, from a TOML file, then ``LNET_DEPOT_*`` variables, then flags.

Later sources win. Every value is checked here, so that the server never starts on a configuration it would
later trip over; a bad value raises ``ConfigError`` naming the key and where it came from.
"""

from __future__ import annotations

import dataclasses
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from .units import parse_duration, parse_size

__all__ = ["DEFAULT_PORT", "ConfigError", "DepotConfig"]

DEFAULT_PORT = 6714
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
SECONDS = 1.0
MINUTES = 60 * SECONDS
HOURS = 60 * MINUTES
DAYS = 24 * HOURS


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and its source."""


def _default_data_dir() -> Path:
    return platformdirs.user_data_path("lnet") / "depot"


@dataclass(frozen=True)
class DepotConfig:
    name: str = field(default_factory=socket.gethostname)
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    capacity: int = 1 * GiB
    max_allocation: int = 256 * MiB
    max_duration: float = 1 * DAYS
    max_count: int = 1024
    operator_token: str | None = None
    data_dir: Path = field(default_factory=_default_data_dir)
    certfile: Path | None = None
    keyfile: Path | None = None
    # Requests being served at once; beyond it a request is answered 503 busy at once.
    max_concurrent_requests: int = 512
    # Bound on each wait for a client's bytes (a stalled upload) and on idle keep-alive connections.
    read_timeout: float = 60 * SECONDS
    keep_alive_timeout: float = 75 * SECONDS
    # Bound on each network wait of a depot-to-depot copy (connect, each chunk written, the answer).
    copy_timeout: float = 60 * SECONDS
    # How long in-flight requests may run on after SIGTERM before they are cut off.
    graceful_timeout: float = 10 * SECONDS
    # How far back /v1/status reports the throughput of copies to each peer.
    links_window: float = 1 * HOURS
    busy_retry_after: float = 1 * SECONDS
    full_retry_after: float = 5 * SECONDS
    log_level: str = "info"

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not self.name or len(self.name) > 128:
            problems.append("name must be 1 to 128 characters")
        if self.capacity < 1:
            problems.append("capacity must be at least 1 byte")
        if self.max_allocation < 1:
            problems.append("max_allocation must be at least 1 byte")
        elif self.max_allocation > self.capacity:
            problems.append(f"max_allocation ({self.max_allocation}) exceeds capacity ({self.capacity})")
        if self.max_duration < 1:
            problems.append("max_duration must be at least 1 second")
        if self.max_count < 1:
            problems.append("max_count must be at least 1")
        if self.max_concurrent_requests < 1:
            problems.append("max_concurrent_requests must be at least 1")
        for name in ("read_timeout", "keep_alive_timeout", "copy_timeout", "graceful_timeout", "links_window"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be more than 0")
        if (self.certfile is None) != (self.keyfile is None):
            problems.append("certfile and keyfile go together: give both or neither")
        if self.operator_token is not None and len(self.operator_token) < 16:
            problems.append("operator_token must be at least 16 characters")
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            problems.append("log_level must be one of debug, info, warning, error")
        try:
            _ = self.host_port
        except ConfigError as exc:
            problems.append(str(exc))
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ConfigError(f"listen must be HOST:PORT, got {self.listen!r}")
        return host.strip("[]"), int(port)

    @property
    def scheme(self) -> str:
        return "https" if self.certfile else "http"

    @classmethod
    def load(
        cls,
        file: Path | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> DepotConfig:
        """The configuration from a TOML file, then ``LNET_DEPOT_<KEY>`` variables, then ``overrides`` (flags)."""
        values: dict[str, Any] = {}
        keys = {f.name for f in dataclasses.fields(cls)}
        if file is not None:
            try:
                table = tomllib.loads(Path(file).read_text())
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {file}: {exc}") from None
            table = table.get("depot", table)
            for key, raw in table.items():
                name = key.replace("-", "_")
                if name not in keys:
                    raise ConfigError(f"{file}: unknown key {key!r} (known: {', '.join(sorted(keys))})")
                values[name] = _convert(name, raw, f"{file}: {key}")
        for var, raw in (environ or {}).items():
            if var.startswith("LNET_DEPOT_"):
                name = var.removeprefix("LNET_DEPOT_").lower()
                if name not in keys:
                    raise ConfigError(f"unknown environment variable {var}")
                values[name] = _convert(name, raw, var)
        for name, raw in (overrides or {}).items():
            if raw is not None:
                values[name] = _convert(name, raw, f"--{name.replace('_', '-')}")
        try:
            return cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None


def _as_str(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r}")
    return raw


def _as_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"expected a whole number, got {raw!r}")
    return int(raw)


def _as_path(raw: Any) -> Path:
    return Path(_as_str(raw)).expanduser()


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "name": _as_str,
    "listen": _as_str,
    "capacity": parse_size,
    "max_allocation": parse_size,
    "max_duration": parse_duration,
    "max_count": _as_int,
    "operator_token": _as_str,
    "data_dir": _as_path,
    "certfile": _as_path,
    "keyfile": _as_path,
    "max_concurrent_requests": _as_int,
    "read_timeout": parse_duration,
    "keep_alive_timeout": parse_duration,
    "copy_timeout": parse_duration,
    "graceful_timeout": parse_duration,
    "links_window": parse_duration,
    "busy_retry_after": parse_duration,
    "full_retry_after": parse_duration,
    "log_level": _as_str,
}


def _convert(name: str, raw: Any, source: str) -> Any:
    try:
        return _CONVERTERS[name](raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
