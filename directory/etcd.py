"""A small client of etcd's v3 JSON gateway (``/v3/...``, plain HTTP(S) with base64 keys and values), on httpx.

Only what the directory needs: put, range (a key or a prefix), delete, leases (grant, keep alive, revoke), a
watch on a prefix, and user authentication. Several endpoints of one cluster may be given; a request that cannot
reach one tries the next. Every wait is bounded: each request by ``timeout_s`` (httpx's timeouts and a trio
deadline around the whole request), a watch by ``idle_s`` between two messages (the caller opens it again from
the revision it reached).

It knows nothing of depots or entries (``entries.py``) and must not log secrets: the password and the auth token
never leave this module except in the ``Authorization`` header.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from lnet.protocol.http_body import with_body

__all__ = [
    "EtcdClient",
    "EtcdError",
    "EtcdSettings",
    "EtcdUnavailable",
    "KeyValue",
    "WatchEvent",
    "parse_endpoints",
    "prefix_end",
]

log = logging.getLogger("lnet.directory")

# gRPC status codes etcd answers with (google.golang.org/grpc/codes)
_NOT_FOUND = 5
_PERMISSION_DENIED = 7
_UNAUTHENTICATED = 16
_INVALID_ARGUMENT = 3


class EtcdUnavailable(Exception):
    """No endpoint of the cluster answered within the timeout (down, unreachable, TLS refused)."""


class EtcdError(Exception):
    """etcd answered with an error: ``code`` is its gRPC status (7: permission denied, 5: not found)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def denied(self) -> bool:
        return self.code in (_PERMISSION_DENIED, _UNAUTHENTICATED)


def parse_endpoints(raw: str | Sequence[str]) -> tuple[str, ...]:
    """Endpoints from ``URL[,URL...]`` or a list: each ``http(s)://HOST:PORT`` with no path, in order, no repeats.
    Raises ``ValueError`` naming the bad one."""
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    endpoints: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"a directory endpoint is a URL, not {type(item).__name__}")
        url = item.strip().rstrip("/")
        if not url:
            continue
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ValueError(f"directory endpoint {url!r} is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
            raise ValueError(f"a directory endpoint is http(s)://HOST:PORT (etcd's client URL), not {url!r}")
        del port
        if url not in endpoints:
            endpoints.append(url)
    if not endpoints:
        raise ValueError("no directory endpoint given")
    return tuple(endpoints)


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes a range cover every key starting with ``prefix`` (etcd's rule)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


@dataclass(frozen=True)
class EtcdSettings:
    """How to reach the directory: endpoints, the credentials of this program's etcd user, TLS files, the bound
    on each request."""

    endpoints: tuple[str, ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)  # a secret: never in a repr
    cafile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no directory endpoint given")
        if (self.user is None) != (self.password is None):
            raise ValueError("a directory user needs its password, and a password its user")
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("directory certfile and keyfile go together")
        if not self.timeout_s > 0:
            raise ValueError("the directory timeout must be more than 0")


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class WatchEvent:
    """A key put (``value`` set) or deleted (``value`` None, a lease's expiry included) at ``revision``."""

    key: bytes
    value: bytes | None
    revision: int


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        return b""
    return base64.b64decode(text, validate=True)


def _int(value: Any) -> int:
    """The gateway writes int64 fields as strings (and leaves out zeros)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise EtcdError(f"etcd answered a number as {value!r:.40}")
    return int(value)


class EtcdClient:
    """One connection pool to the cluster; an async context manager."""

    def __init__(self, settings: EtcdSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        verify: ssl.SSLContext | bool = True
        if settings.cafile is not None or settings.certfile is not None:
            verify = ssl.create_default_context(cafile=str(settings.cafile) if settings.cafile else None)
            if settings.certfile is not None and settings.keyfile is not None:  # a client certificate
                verify.load_cert_chain(str(settings.certfile), str(settings.keyfile))
        self._http = httpx.AsyncClient(
            transport=transport,
            verify=verify,
            timeout=httpx.Timeout(settings.timeout_s),
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=4),
        )
        self._current = 0  # the endpoint that answered last: asked first
        self._token: str | None = None

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._http.aclose()

    @property
    def endpoint(self) -> str:
        return self.settings.endpoints[self._current]

    # -- requests -------------------------------------------------------------------------------------------

    async def _post(self, path: str, body: dict[str, Any], *, authenticated: bool = True) -> dict[str, Any]:
        """POST to the first endpoint that answers; an expired auth token is renewed once."""
        for attempt in range(2):
            headers = {}
            if authenticated and self.settings.user is not None:
                if self._token is None:
                    await self._authenticate()
                assert self._token is not None
                headers["Authorization"] = self._token
            answer = await self._send(path, body, headers)
            error = answer.get("error") if isinstance(answer, dict) else None
            if error is None:
                return answer
            code = answer.get("code")
            message = str(answer.get("message") or error)[:300]
            if attempt == 0 and authenticated and self.settings.user is not None and "auth token" in message:
                self._token = None  # expired (simple tokens live 5 minutes unused): ask for a new one
                continue
            if "user name is empty" in message:  # authentication is on and this client gave no user
                raise EtcdError("etcd: the directory requires a user (authentication is on): give one and its "
                                "password", _UNAUTHENTICATED)
            raise EtcdError(f"etcd: {message}", code if isinstance(code, int) else None)
        raise AssertionError("unreachable")

    async def _send(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        endpoints = self.settings.endpoints
        failures: list[str] = []
        for step in range(len(endpoints)):
            index = (self._current + step) % len(endpoints)
            url = endpoints[index] + path
            try:
                with trio.fail_after(self.settings.timeout_s):
                    response = await self._http.send(_json_request(self._http, url, body, headers))
            except (httpx.TransportError, trio.TooSlowError) as exc:
                failures.append(f"{endpoints[index]}: {_reason(exc)}")
                continue
            self._current = index
            try:
                answer = response.json()
            except ValueError:
                raise EtcdError(f"{endpoints[index]} answered {response.status_code} without JSON: not etcd's "
                                "v3 gateway?") from None
            if not isinstance(answer, dict):
                raise EtcdError(f"{endpoints[index]} answered {type(answer).__name__}, not an object")
            if response.status_code >= 400 and "error" not in answer:
                raise EtcdError(f"{endpoints[index]} answered HTTP {response.status_code}")
            return answer
        raise EtcdUnavailable("the directory does not answer: " + "; ".join(failures))

    async def _authenticate(self) -> None:
        answer = await self._send(
            "/v3/auth/authenticate", {"name": self.settings.user, "password": self.settings.password}, {}
        )
        token = answer.get("token")
        if not isinstance(token, str) or not token:
            message = str(answer.get("message") or answer.get("error") or "no token")[:200]
            raise EtcdError(f"etcd refused user {self.settings.user!r}: {message}", _UNAUTHENTICATED)
        self._token = token

    # -- keys -----------------------------------------------------------------------------------------------

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Write ``key``; returns the revision."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        answer = await self._post("/v3/kv/put", body)
        return _int(answer.get("header", {}).get("revision"))

    async def get(self, key: bytes) -> KeyValue | None:
        _, found = await self._range({"key": _b64(key)})
        return found[0] if found else None

    async def range_prefix(self, prefix: bytes, *, limit: int = 0) -> tuple[int, list[KeyValue]]:
        """Every key under ``prefix`` (up to ``limit``, 0: all) and the revision the answer is as of."""
        body: dict[str, Any] = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}
        if limit:
            body["limit"] = str(limit)
        return await self._range(body)

    async def _range(self, body: dict[str, Any]) -> tuple[int, list[KeyValue]]:
        answer = await self._post("/v3/kv/range", body)
        revision = _int(answer.get("header", {}).get("revision"))
        kvs = answer.get("kvs") or []
        if not isinstance(kvs, list):
            raise EtcdError("etcd answered a range whose kvs are not a list")
        found = []
        for raw in kvs:
            if not isinstance(raw, dict):
                continue
            try:
                found.append(KeyValue(_unb64(raw.get("key")), _unb64(raw.get("value")),
                                      _int(raw.get("mod_revision")), _int(raw.get("lease"))))
            except ValueError:
                log.warning("directory: a key etcd returned is not base64; skipped")
        return revision, found

    async def delete(self, key: bytes) -> int:
        """Delete ``key``; returns how many keys went (0 or 1)."""
        answer = await self._post("/v3/kv/deleterange", {"key": _b64(key)})
        return _int(answer.get("deleted"))

    # -- leases ---------------------------------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: its id and the TTL etcd granted (seconds)."""
        answer = await self._post("/v3/lease/grant", {"TTL": str(ttl_s)})
        lease, ttl = _int(answer.get("ID")), _int(answer.get("TTL"))
        if not lease or ttl <= 0:
            raise EtcdError(f"etcd granted no lease: {str(answer)[:200]}")
        return lease, ttl

    async def keepalive(self, lease: int) -> int:
        """Renew ``lease``; returns its new TTL, 0 when it has expired (or was never granted)."""
        answer = await self._post("/v3/lease/keepalive", {"ID": str(lease)})
        result = answer.get("result", answer)
        return _int(result.get("TTL")) if isinstance(result, dict) else 0

    async def revoke(self, lease: int) -> bool:
        """Revoke ``lease`` (its keys go at once); False when it was already gone."""
        try:
            await self._post("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if exc.code == _NOT_FOUND:
                return False
            raise
        return True

    # -- watching -------------------------------------------------------------------------------------------

    async def watch_prefix(
        self, prefix: bytes, start_revision: int, *, idle_s: float
    ) -> AsyncGenerator[list[WatchEvent], None]:
        """The changes under ``prefix`` from ``start_revision`` on, a batch at a time, until the stream breaks or
        is silent for ``idle_s`` (then it ends: open it again from the last revision seen + 1). Raises
        ``EtcdUnavailable`` when no endpoint answers, ``EtcdError`` when etcd refuses the watch (compacted
        history: list again)."""
        headers = {}
        if self.settings.user is not None:
            if self._token is None:
                await self._authenticate()
            assert self._token is not None
            headers["Authorization"] = self._token
        create = {"create_request": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix)),
                                     "start_revision": str(start_revision)}}
        url = self.endpoint + "/v3/watch"
        timeout = httpx.Timeout(self.settings.timeout_s, read=idle_s)
        try:
            response = await self._http.send(_json_request(self._http, url, create, headers, timeout), stream=True)
            try:
                if response.status_code >= 400:
                    raise EtcdError(f"etcd refused the watch: HTTP {response.status_code}")
                async for line in response.aiter_lines():
                    events = _watch_events(line)
                    if events:
                        yield events
            finally:
                await response.aclose()
        except httpx.ReadTimeout:
            return
        except httpx.TransportError as exc:
            self._current = (self._current + 1) % len(self.settings.endpoints)
            raise EtcdUnavailable(f"the directory's watch broke: {_reason(exc)}") from None


def _watch_events(line: str) -> list[WatchEvent]:
    if not line.strip():
        return []
    try:
        message = json.loads(line)
    except ValueError:
        raise EtcdError("etcd's watch sent a line that is not JSON") from None
    if not isinstance(message, dict):
        return []
    if "error" in message:
        error = message["error"]
        text = error.get("message") if isinstance(error, dict) else error
        raise EtcdError(f"etcd ended the watch: {str(text)[:200]}")
    result = message.get("result")
    if not isinstance(result, dict):
        return []
    if result.get("canceled") or result.get("compact_revision"):
        reason = result.get("cancel_reason") or "the history it needs was compacted"
        raise EtcdError(f"etcd cancelled the watch: {str(reason)[:200]}")
    revision = _int(result.get("header", {}).get("revision"))
    events = []
    for raw in result.get("events") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("kv"), dict):
            continue
        kv = raw["kv"]
        try:
            key = _unb64(kv.get("key"))
            value = None if raw.get("type") == "DELETE" else _unb64(kv.get("value"))
        except ValueError:
            continue
        events.append(WatchEvent(key, value, _int(kv.get("mod_revision")) or revision))
    return events


def _reason(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError | httpx.TimeoutException):
        return "no answer in time"
    text = str(exc) or type(exc).__name__
    return text[:200]


def _json_request(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str],
    timeout: httpx.Timeout | None = None,
) -> httpx.Request:
    """A POST of ``body`` as JSON (its body a ``OneBuffer``: a request cut off mid-body leaves nothing to finalize)."""
    request = http.build_request("POST", url, headers={**headers, "Content-Type": "application/json"},
                                 timeout=timeout if timeout is not None else http.timeout)
    return with_body(request, json.dumps(body).encode())
