"""The depot protocol's shared vocabulary: error codes and their exceptions, body encoding, capabilities.

Both sides import this module, the depot to raise and encode errors and the client to decode and re-raise them,
so that a code means one thing everywhere. It holds no I/O and no server state, and imports neither side.
Beside it: ``clock`` (Unix time that follows trio's clock), ``h11_receive`` (the HTTP patches every lnet
process applies when it starts speaking HTTP) and ``http_body`` (the one request body every lnet request sends).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from enum import StrEnum
from typing import Any, Protocol

import blake3
import msgpack

__all__ = [
    "DIGESTS",
    "MSGPACK",
    "JSON",
    "MAX_RETRY_AFTER",
    "PROTOCOL_VERSION",
    "BadRequest",
    "Busy",
    "Conflict",
    "DepotError",
    "DepotFull",
    "ErrorCode",
    "Forbidden",
    "Hasher",
    "NotFound",
    "RangeNotSatisfiable",
    "TooLarge",
    "Unauthorized",
    "Upstream",
    "capability_key",
    "decode_body",
    "describe_error",
    "encode_body",
    "error_from_body",
    "hash_bytes",
    "hasher",
    "is_capability",
    "new_capability",
    "parse_retry_after",
    "redact",
    "redact_capabilities",
    "guard_http_logs",
    "innermost",
    "wants_msgpack",
]

PROTOCOL_VERSION = 1
MSGPACK = "application/msgpack"
JSON = "application/json"

# 24 random bytes: 192 bits, comfortably over the protocol's 128-bit floor, 32 URL-safe characters.
_CAPABILITY_BYTES = 24
_CAPABILITY_SHAPE = re.compile(r"[A-Za-z0-9_-]{22,128}")


class ErrorCode(StrEnum):
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    TOO_LARGE = "too_large"
    RANGE = "range"
    CONFLICT = "conflict"
    DEPOT_FULL = "depot_full"
    BUSY = "busy"
    UPSTREAM = "upstream"


class DepotError(Exception):
    """A protocol error: what a depot answers with, and what the client raises.

    ``status`` is the HTTP status; subclasses fix the code and the usual status, and a few carry more
    (``retry_after`` seconds for ``depot_full`` and ``busy``, the target's status for ``upstream``).
    """

    code: ErrorCode = ErrorCode.BAD_REQUEST
    default_status = 400

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None, **details: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else self.default_status
        self.retry_after = retry_after
        self.details = details

    def body(self) -> dict[str, Any]:
        return {"error": str(self.code), "message": self.message, **self.details}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status})"


class BadRequest(DepotError):
    code = ErrorCode.BAD_REQUEST
    default_status = 400


class Unauthorized(DepotError):
    code = ErrorCode.UNAUTHORIZED
    default_status = 401


class Forbidden(DepotError):
    """The depot's operator does not allow this (a copy to a host outside ``copy_allow``); a token does not help."""

    code = ErrorCode.FORBIDDEN
    default_status = 403


class NotFound(DepotError):
    code = ErrorCode.NOT_FOUND
    default_status = 404


class TooLarge(DepotError):
    code = ErrorCode.TOO_LARGE
    default_status = 413


class RangeNotSatisfiable(DepotError):
    code = ErrorCode.RANGE
    default_status = 416


class Conflict(DepotError):
    code = ErrorCode.CONFLICT
    default_status = 409


class DepotFull(DepotError):
    code = ErrorCode.DEPOT_FULL
    default_status = 507


class Busy(DepotError):
    code = ErrorCode.BUSY
    default_status = 503


class Upstream(DepotError):
    code = ErrorCode.UPSTREAM
    default_status = 502


_BY_CODE: dict[str, type[DepotError]] = {
    str(cls.code): cls
    for cls in (
        BadRequest, Unauthorized, Forbidden, NotFound, TooLarge, RangeNotSatisfiable, Conflict, DepotFull, Busy,
        Upstream,
    )
}


def error_from_body(status: int, body: Any, retry_after: float | None = None) -> DepotError:
    """The typed exception for an error response; an unknown or missing code still gives a ``DepotError``."""
    fields = dict(body) if isinstance(body, dict) else {}
    code = fields.pop("error", None)
    message = fields.pop("message", None)
    if not isinstance(message, str):
        message = f"HTTP {status}"
    cls = _BY_CODE.get(code, DepotError) if isinstance(code, str) else DepotError
    # The status line and the Retry-After header say those two, not the body: a body naming them would otherwise
    # give the constructor the same keyword twice (TypeError).
    details = {str(key): value for key, value in fields.items() if str(key) not in _NOT_DETAILS}
    return cls(message, status=status, retry_after=retry_after, **details)


_NOT_DETAILS = frozenset({"status", "retry_after"})


# The longest ``Retry-After`` a reader believes (seconds): a peer must not park a caller for days.
MAX_RETRY_AFTER = 3600.0


def parse_retry_after(value: str | None) -> float | None:
    """The seconds of a ``Retry-After`` header in its delta-seconds form, at most ``MAX_RETRY_AFTER``; None for
    anything else (an HTTP date, garbage). It comes from a peer, so it never raises: ASCII digits only
    (``str.isdigit`` also takes "²", which ``float`` refuses), and a 400-digit number is an hour, not infinity."""
    if value is None:
        return None
    value = value.strip()
    if not value or not value.isascii() or not value.isdigit():
        return None
    return min(float(value), MAX_RETRY_AFTER)


def wants_msgpack(accept: str | None) -> bool:
    return accept is not None and MSGPACK in accept


def encode_body(obj: Any, accept: str | None) -> tuple[bytes, str]:
    """msgpack when the request's ``Accept`` names it, JSON otherwise (so that curl works with no flags)."""
    if wants_msgpack(accept):
        return msgpack.packb(obj, use_bin_type=True), MSGPACK
    return json.dumps(obj, separators=(",", ":")).encode(), JSON


def decode_body(content_type: str | None, data: bytes) -> Any:
    """Decode a control body, msgpack or JSON by its content type (JSON when none is given).

    Raises ``BadRequest`` for anything malformed or ambiguous (a map naming a key twice: decoders keep the last
    silently, and two readers of one body could disagree on what it asked), and ``BadRequest`` with status 415
    for any other content type (a JSON text sent as ``text/plain`` or a form is not taken for JSON), whatever
    the decoder's own exception would have been.
    """
    kind = (content_type or JSON).split(";", 1)[0].strip().lower()
    if kind not in (MSGPACK, JSON):
        raise BadRequest(
            f"unsupported content type {kind[:64]!r}: send application/msgpack or application/json", status=415
        )
    if not data:
        return {}
    try:
        if kind == MSGPACK:
            return msgpack.unpackb(data, raw=False, strict_map_key=True, object_pairs_hook=_map_once)
        return json.loads(data, object_pairs_hook=_map_once)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, RecursionError) as exc:
        raise BadRequest(f"malformed {kind} body: {exc}") from None


def _map_once(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A decoded map, refused when it names a key twice."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadRequest(f"the body names {str(key)[:64]!r} twice")
        out[key] = value
    return out


def describe_error(exc: BaseException) -> str:
    """``Type: message`` for a transport error; httpx's often have an empty message and wrap the real cause."""
    detail = ""
    cause: BaseException | None = exc
    for _ in range(8):  # the innermost message is the telling one (e.g. CERTIFICATE_VERIFY_FAILED)
        if cause is None:
            break
        detail = str(cause) or detail
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {detail or 'no detail'}"


def innermost(exc: BaseException) -> BaseException:
    """The exception inside nested exception groups (what a trio nursery raises), following first members."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


# The hashes a depot's digest and lnet's manifests know, with their hex digest lengths: blake2b at its default
# (and largest) digest of 64 bytes. blake3 (the default of lnet-send) costs about a third of sha256's CPU per byte
# on a CPU with SHA extensions, and a sixth of blake2b's (docs/depot.md, "The three-depot chain").
DIGESTS = {"blake3": 64, "sha256": 64, "blake2b": 128}


class Hasher(Protocol):
    """What ``hasher`` returns: the part of hashlib's interface lnet uses (blake3's object has it too)."""

    @property
    def name(self) -> str: ...

    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


def hasher(algorithm: str) -> Hasher:
    """A fresh hash object for ``algorithm``, one of ``DIGESTS``. All three let go of the GIL while they hash a
    large buffer, so a worker thread hashes while the event loop goes on."""
    if algorithm == "blake3":
        return blake3.blake3()
    if algorithm in ("sha256", "blake2b"):
        return hashlib.new(algorithm)
    raise ValueError(f"unknown hash algorithm {algorithm!r} (expected one of {', '.join(DIGESTS)})")


def hash_bytes(algorithm: str, data: bytes | bytearray | memoryview) -> str:
    """The hex digest of ``data`` under ``algorithm``."""
    hashing = hasher(algorithm)
    hashing.update(data)
    return hashing.hexdigest()


def new_capability() -> str:
    return secrets.token_urlsafe(_CAPABILITY_BYTES)


def is_capability(token: str) -> bool:
    """Does ``token`` have the shape of a capability? (Says nothing of whether it names anything.)"""
    return _CAPABILITY_SHAPE.fullmatch(token) is not None


def capability_key(token: str) -> str:
    """What a depot indexes and stores instead of the capability itself: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def redact(token: str) -> str:
    """A capability as it may appear in a log line: its first six characters."""
    return token[:6] + "…"


_CAPABILITY_IN_URL = re.compile(r"(/v1/(?:data|copy|manage|digest)/)([A-Za-z0-9_-]+)")


def redact_capabilities(text: str) -> str:
    """``text`` with every capability in a depot URL path cut to its first six characters."""
    return _CAPABILITY_IN_URL.sub(lambda m: m.group(1) + redact(m.group(2)), text)


class RedactCapabilities(logging.Filter):
    """A logging filter that redacts capabilities in URLs: httpx logs every request URL whole at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_capabilities(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


def guard_http_logs() -> None:
    """Make sure the HTTP libraries' own loggers never print a capability (idempotent)."""
    for name in ("httpx", "httpcore", "hypercorn.access", "hypercorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactCapabilities) for f in logger.filters):
            logger.addFilter(RedactCapabilities())
