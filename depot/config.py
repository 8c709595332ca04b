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
from urllib.parse import urlsplit

import platformdirs

from lnet.units import parse_duration, parse_size

from .copy_allow import ANYWHERE, CopyAllow

__all__ = ["DEFAULT_PORT", "TOKEN_OPERATIONS", "ConfigError", "DepotConfig", "WeatherPeer"]

DEFAULT_PORT = 6714
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
SECONDS = 1.0
MINUTES = 60 * SECONDS
HOURS = 60 * MINUTES
DAYS = 24 * HOURS


# The operations ``require_token_for`` may name: the protocol's, by the names of /metrics and the access log.
TOKEN_OPERATIONS = ("allocate", "read", "digest", "copy", "probe", "extend", "free", "status", "metrics")
# ... and why the others may not.
_NEVER_GATED = {
    "write": "other depots push into this one (copy) without its token; a write capability comes only from an "
    "allocation, so gate 'allocate'",
    "health": "health checks must answer anyone (load balancers, lnet depots)",
    "ready": "readiness checks must answer anyone (load balancers)",
}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and its source."""


def _default_data_dir() -> Path:
    return platformdirs.user_data_path("lnet") / "depot"


@dataclass(frozen=True)
class WeatherPeer:
    """A depot this one probes in the background: its base URL, and the operator token to allocate there."""

    url: str
    token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # the token is a secret: never print it whole
        token = "" if self.token is None else f", token={self.token[:4]}…"
        return f"WeatherPeer({self.url!r}{token})"


@dataclass(frozen=True)
class DepotConfig:
    name: str = field(default_factory=socket.gethostname)
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    capacity: int = 1 * GiB
    max_allocation: int = 256 * MiB
    max_duration: float = 1 * DAYS
    max_count: int = 1024
    operator_token: str | None = field(default=None, repr=False)  # a secret: never in a repr
    # The operations that need the operator token (when one is set); allocating only, unless the operator says.
    require_token_for: tuple[str, ...] = ("allocate",)
    # The hosts and address ranges copies may push to (copy_allow.py); anywhere unless the operator says.
    copy_allow: tuple[str, ...] = (ANYWHERE,)
    data_dir: Path = field(default_factory=_default_data_dir)
    certfile: Path | None = None
    keyfile: Path | None = None
    # Requests being served at once; beyond it a request is answered 503 busy at once.
    max_concurrent_requests: int = 512
    # ... of them from one client address (an IPv6 /64 counts as one); beyond it, 429 busy. A quarter of the
    # default places: one host (or NAT) cannot take the depot over, and a client's window of copies and writes
    # (lnet-send keeps 16 blocks and a few copies per hop in flight, on at most 64 connections) fits.
    max_requests_per_client: int = 128
    # Fair pace of a body, either way (a write's, a read's, a control body, a copy's push): once body_grace has
    # passed it must average min_bytes_per_second since it began, so a body of N bytes ends within
    # body_grace + N / min_bytes_per_second (its total deadline) or is cut.
    min_bytes_per_second: int = 4 * KiB
    body_grace: float = 10 * SECONDS
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
    # The data path's fast path (fast_path.py): on unless switched off; it also stays off, and says so, with library
    # versions it was not checked against.
    fast_path: bool = True
    # Fault a fresh soft allocation's pages in when it is lent, in a worker thread (store.prefault), not while its
    # first write streams in on the event loop. Off: pages are faulted in by the writes, and an allocation never
    # written costs no memory.
    prefault: bool = True
    # Copy lanes (an lnet extension): lanes with a push running or waiting at once; beyond it, 503 busy.
    max_lanes: int = 1024
    # Network weather probes: off unless both peers and a budget are given. The budget is a hard cap on the
    # bytes the probes push in any hour; each probe pushes two blocks of weather_block to one peer.
    weather_peers: tuple[WeatherPeer, ...] = ()
    weather_bytes_per_hour: int = 0
    weather_interval: float = 5 * MINUTES
    weather_block: int = 4 * MiB
    # Round trips to the weather peers (lnet.depot.round_trips): a few hundred bytes a peer a round, no budget;
    # timed whether or not the probes are on. 0: off.
    rtt_interval: float = 30.0
    # The depot directory (etcd, docs/directory.md): off unless endpoints are given.
    directory: tuple[str, ...] = ()
    advertise: str | None = None
    directory_prefix: str = "/lnet/"
    directory_ttl: float = 15 * SECONDS
    directory_rewrite_interval: float = 10 * SECONDS
    directory_timeout: float = 5 * SECONDS
    directory_user: str | None = None
    directory_password: str | None = field(default=None, repr=False)  # a secret: never in a repr
    directory_cafile: Path | None = None
    directory_certfile: Path | None = None
    directory_keyfile: Path | None = None

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
        if self.max_requests_per_client < 1:
            problems.append("max_requests_per_client must be at least 1")
        if self.min_bytes_per_second < 1:
            problems.append("min_bytes_per_second must be at least 1 byte")
        if self.max_lanes < 1:
            problems.append("max_lanes must be at least 1")
        problems += self._weather_problems()
        for name in (
            "read_timeout", "keep_alive_timeout", "copy_timeout", "graceful_timeout", "links_window",
            "weather_interval", "body_grace",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be more than 0")
        if (self.certfile is None) != (self.keyfile is None):
            problems.append("certfile and keyfile go together: give both or neither")
        if self.operator_token is not None and len(self.operator_token) < 16:
            problems.append("operator_token must be at least 16 characters")
        problems += self._fence_problems()
        problems += _directory_problems(self)
        if self.log_level.lower() not in ("debug", "info", "warning", "error"):
            problems.append("log_level must be one of debug, info, warning, error")
        try:
            _ = self.host_port
        except ConfigError as exc:
            problems.append(str(exc))
        if problems:
            raise ConfigError("; ".join(problems))

    def _weather_problems(self) -> list[str]:
        problems = []
        if self.rtt_interval < 0:
            problems.append("rtt_interval must be 0 (off) or more")
        if self.weather_block < 1:
            problems.append("weather_block must be at least 1 byte")
        urls = [peer.url for peer in self.weather_peers]
        if len(set(urls)) != len(urls):
            problems.append("weather_peers names a peer twice")
        if self.weather_enabled:
            if self.weather_block > self.max_allocation:
                problems.append(
                    f"weather_block ({self.weather_block}) exceeds max_allocation ({self.max_allocation})"
                )
            if self.weather_bytes_per_hour < 2 * self.weather_block:
                problems.append(
                    "weather_bytes_per_hour must be 0 (off) or at least 2 x weather_block (one probe pushes two)"
                )
        return problems

    def _fence_problems(self) -> list[str]:
        problems = []
        for name in self.require_token_for:
            if name in _NEVER_GATED:
                problems.append(f"require_token_for cannot name {name!r}: {_NEVER_GATED[name]}")
            elif name not in TOKEN_OPERATIONS:
                problems.append(
                    f"require_token_for: unknown operation {name!r} (known: {', '.join(TOKEN_OPERATIONS)})"
                )
        beyond = [name for name in self.require_token_for if name != "allocate"]
        if beyond and self.operator_token is None:
            problems.append(f"require_token_for names {', '.join(beyond)} but no operator_token is set")
        try:
            fence = self.copy_fence
        except ValueError as exc:
            return [*problems, f"copy_allow: {exc}"]
        for peer in self.weather_peers:
            host = urlsplit(peer.url).hostname or ""
            if not fence.allows(host):
                problems.append(f"weather peer {peer.url} is not in copy_allow: its probes would be refused")
        return problems

    @property
    def copy_fence(self) -> CopyAllow:
        """``copy_allow`` parsed (``ValueError`` if an entry is bad; ``__post_init__`` has checked it)."""
        return CopyAllow.parse(self.copy_allow)

    @property
    def token_required_for(self) -> frozenset[str]:
        """The operations that need the operator token: none without one."""
        return frozenset(self.require_token_for) if self.operator_token is not None else frozenset()

    @property
    def weather_enabled(self) -> bool:
        return bool(self.weather_peers) and self.weather_bytes_per_hour > 0

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
        """The configuration from a TOML file, then ``LNET_DEPOT_<KEY>`` variables, then ``overrides`` (flags).
        ``max_allocation`` not given anywhere is the smaller of 256 MiB and the capacity."""
        values: dict[str, Any] = {}
        keys = {f.name for f in dataclasses.fields(cls)}
        if file is not None:
            try:
                table = tomllib.loads(Path(file).read_text())
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {file}: {exc}") from None
            table = _flatten_weather(table, file)
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
        if "max_allocation" not in values:  # a small depot lends at most what it has
            values["max_allocation"] = min(cls.max_allocation, values.get("capacity", cls.capacity))
        try:
            return cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None


def _flatten_weather(document: dict[str, Any], file: Path) -> dict[str, Any]:
    """The depot's keys of a TOML document: the ``[depot]`` table or the top level, with a ``[weather]`` table
    (at the top level or as ``[depot.weather]``) turned into ``weather_*`` keys."""
    table = dict(document.get("depot", document))
    weather = table.pop("weather", None)
    if weather is None and "depot" in document:
        weather = document.get("weather")
    if weather is None:
        return table
    if not isinstance(weather, dict):
        raise ConfigError(f"{file}: weather must be a table ([weather], with [[weather.peers]])")
    for key, raw in weather.items():
        name = "weather_" + key.replace("-", "_")
        if name in table:
            raise ConfigError(f"{file}: {name} is given twice (as weather.{key} too)")
        table[name] = raw
    return table


def _directory_problems(config: DepotConfig) -> list[str]:
    """The directory's keys checked (``lnet.directory`` is loaded only when a directory is configured)."""
    if not config.directory:
        return []
    from lnet.directory.entries import check_prefix, depot_key
    from lnet.directory.etcd import EtcdSettings
    from lnet.directory.registration import MAX_TTL_S

    problems = []
    try:
        depot_key(check_prefix(config.directory_prefix), config.name)
        EtcdSettings(config.directory, config.directory_user, config.directory_password, config.directory_cafile,
                     config.directory_certfile, config.directory_keyfile, config.directory_timeout)
    except ValueError as exc:
        problems.append(str(exc))
    if not 1 <= config.directory_ttl <= MAX_TTL_S:
        problems.append(f"directory_ttl must be 1 to {MAX_TTL_S} seconds")
    if config.directory_rewrite_interval < 1:
        problems.append("directory_rewrite_interval must be at least 1 second")
    if config.advertise is None:
        host = config.listen.rpartition(":")[0].strip("[]")
        if host in ("", "0.0.0.0", "::"):
            problems.append(f"listen {config.listen} is a wildcard address: give advertise (--advertise URL), the "
                            "URL other hosts reach this depot by, to register it in the directory")
    return problems


def _as_endpoints(raw: Any) -> tuple[str, ...]:
    from lnet.directory.etcd import parse_endpoints

    if not isinstance(raw, str | list | tuple):
        raise ValueError(f"expected a URL or a list of URLs, got {type(raw).__name__}")
    endpoints: tuple[str, ...] = parse_endpoints(raw)
    return endpoints


def _as_base_url(raw: Any) -> str:
    return _peer(_as_str(raw), None).url


def _as_str(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"expected a string, got {raw!r}")
    return raw


def _as_secret(raw: Any) -> str:
    """A string that must never be echoed (the operator token), even when it is not one."""
    if not isinstance(raw, str):
        raise ValueError(f"expected a string (in quotes), got a {type(raw).__name__}")
    return raw


def _as_bool(raw: Any) -> bool:
    """A TOML boolean, or from the environment and flags one of true/false, yes/no, on/off, 1/0."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in ("true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
    raise ValueError(f"expected true or false, got {raw!r:.40}")


def _as_int(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"expected a whole number, got {raw!r}")
    return int(raw)


def _as_path(raw: Any) -> Path:
    return Path(_as_str(raw)).expanduser()


def _as_peers(raw: Any) -> tuple[WeatherPeer, ...]:
    """Weather peers from TOML (a list of tables ``{url, token?}`` or of strings) or from the environment and
    flags (``URL[=TOKEN]``, several separated by commas)."""
    if isinstance(raw, str):
        raw = [item for item in raw.split(",") if item.strip()]
    if not isinstance(raw, list | tuple):
        raise ValueError(f"expected a list of peers, got {type(raw).__name__}")
    peers = []
    for item in raw:
        if isinstance(item, WeatherPeer):
            peers.append(item)
            continue
        if isinstance(item, str):
            url, sep, given = item.strip().partition("=")
            peers.append(_peer(url, given if sep else None))
        elif isinstance(item, dict):
            unknown = sorted(set(item) - {"url", "token"})
            if unknown:
                raise ValueError(f"unknown peer key(s) {', '.join(unknown)}: a peer has url and token")
            if not isinstance(item.get("url"), str):
                raise ValueError("each peer needs a url")
            token: Any = item.get("token")
            if token is not None and not isinstance(token, str):
                raise ValueError("a peer's token must be a string")
            peers.append(_peer(item["url"], token))
        else:
            raise ValueError(f"a peer is a URL or a table {{url, token}}, not {type(item).__name__}")
    return tuple(peers)


def _as_names(raw: Any) -> tuple[str, ...]:
    """A list of strings from TOML, or from the environment and flags as one comma-separated string (empty items,
    as from a trailing comma, are dropped there); each stripped, in order, without repeats."""
    if isinstance(raw, str):
        raw = [item for item in raw.split(",") if item.strip()]
    if not isinstance(raw, list | tuple) or not all(isinstance(item, str) for item in raw):
        raise ValueError(f"expected a list of strings, got {raw!r:.80}")
    return tuple(dict.fromkeys(item.strip() for item in raw))


def _as_copy_allow(raw: Any) -> tuple[str, ...]:
    """Entries checked and spelt canonically (``*``, names, ``*.domains``, CIDR ranges)."""
    return CopyAllow.parse(_as_names(raw)).entries()


def _as_operations(raw: Any) -> tuple[str, ...]:
    return tuple(name.lower() for name in _as_names(raw))


def _peer(url: str, token: str | None) -> WeatherPeer:
    """A peer's base URL, checked: http(s), a host, maybe a port, nothing else."""
    try:
        parts = urlsplit(url.strip())
        _ = parts.port
    except ValueError:
        raise ValueError(f"not a URL: {url[:80]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a peer is an http(s) base URL like http://host:6714, not {url[:80]!r}")
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise ValueError(f"a peer is a base URL with no path, query or credentials: {parts.netloc[:80]!r}")
    if token is not None and not token.strip():
        raise ValueError(f"empty token for peer {parts.netloc!r}")
    # Spelt as the depot spells a copy's target in ``links`` (host in lower case), so that a peer's probes and
    # copies meet under one name.
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port is not None else ""
    return WeatherPeer(f"{parts.scheme}://{host}{port}", token.strip() if token is not None else None)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "name": _as_str,
    "listen": _as_str,
    "capacity": parse_size,
    "max_allocation": parse_size,
    "max_duration": parse_duration,
    "max_count": _as_int,
    "operator_token": _as_secret,
    "require_token_for": _as_operations,
    "copy_allow": _as_copy_allow,
    "data_dir": _as_path,
    "certfile": _as_path,
    "keyfile": _as_path,
    "max_concurrent_requests": _as_int,
    "max_requests_per_client": _as_int,
    "min_bytes_per_second": parse_size,
    "body_grace": parse_duration,
    "read_timeout": parse_duration,
    "keep_alive_timeout": parse_duration,
    "copy_timeout": parse_duration,
    "graceful_timeout": parse_duration,
    "links_window": parse_duration,
    "busy_retry_after": parse_duration,
    "full_retry_after": parse_duration,
    "log_level": _as_str,
    "fast_path": _as_bool,
    "prefault": _as_bool,
    "max_lanes": _as_int,
    "weather_peers": _as_peers,
    "weather_bytes_per_hour": parse_size,
    "weather_interval": parse_duration,
    "rtt_interval": parse_duration,
    "weather_block": parse_size,
    "directory": _as_endpoints,
    "advertise": _as_base_url,
    "directory_prefix": _as_str,
    "directory_ttl": parse_duration,
    "directory_rewrite_interval": parse_duration,
    "directory_timeout": parse_duration,
    "directory_user": _as_str,
    "directory_password": _as_secret,
    "directory_cafile": _as_path,
    "directory_certfile": _as_path,
    "directory_keyfile": _as_path,
}


def _convert(name: str, raw: Any, source: str) -> Any:
    try:
        return _CONVERTERS[name](raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
