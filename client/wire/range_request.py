"""A replica's URL and the range request for it, with the standard library only: ``RangeConnection`` writes these
requests, and ``predial`` writes a download's first one before trio is loaded.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

__all__ = ["USER_AGENT", "Target", "is_url", "parse_url", "range_request", "redact_url"]

USER_AGENT = "lnet-get"


class Target(NamedTuple):  # not a dataclass: `lnet-get` dials before dataclasses (and inspect) are loaded
    scheme: str
    host: str
    port: int
    target: str  # path and query
    host_header: str


def is_url(text: str) -> bool:
    """Whether ``text`` names an HTTP(S) replica (a command's source), not a file."""
    return text.startswith(("http://", "https://"))


def parse_url(url: str) -> Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {redact_url(url)}")
    default = 443 if parts.scheme == "https" else 80
    try:
        port = parts.port or default
    except ValueError:
        raise ValueError(f"bad port in {redact_url(url)}") from None
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, target, host_header)


def redact_url(url: str) -> str:
    """The URL with its path's last long segment cut short: a depot's read URL holds a capability."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    if segments and len(segments[-1]) > 24:
        segments[-1] = segments[-1][:6] + "…"
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{'/'.join(segments)}{query}"


def range_request(target: Target, start: int, end: int, method: str = "GET") -> bytes:
    """A ``Range`` request for bytes ``[start, end)`` (``end`` > ``start``)."""
    return (
        f"{method} {target.target} HTTP/1.1\r\nHost: {target.host_header}\r\n"
        f"Range: bytes={start}-{end - 1}\r\nUser-Agent: {USER_AGENT}\r\nAccept-Encoding: identity\r\n\r\n"
    ).encode("latin-1")
