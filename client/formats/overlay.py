"""The depots file: what lnet-send and lnet-get know of the overlay (DESIGN.md, "The depots file").

    here = "ornl"                      # the client's own vertex name
    directory = "http://127.0.0.1:2379"  # optional: the depots registered there join these (docs/directory.md)
    [depots.atl]
    url = "http://198.51.100.7:6714"
    token = "..."                      # optional operator token for allocating there
    location = "Atlanta, GA"           # optional, for people

Found at ``--depots FILE``, else ``$LNET_DEPOTS``, else ``depots.toml`` in the user's config directory.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import platformdirs

__all__ = [
    "DepotEntry", "DirectoryRef", "Overlay", "OverlayError", "default_depots_path", "depots_path", "url_key",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class OverlayError(ValueError):
    """The depots file cannot be used; the message says where and why."""


@dataclass(frozen=True)
class DepotEntry:
    name: str
    url: str
    token: str | None = None
    location: str | None = None

    def __repr__(self) -> str:
        token = "…" if self.token else None
        return f"DepotEntry({self.name!r}, {self.url!r}, token={token!r})"


@dataclass(frozen=True)
class DirectoryRef:
    """Where the depot directory is (docs/directory.md): etcd endpoints, and how to sign in there. The password
    is read from ``password_file`` when the directory is asked, never kept in a repr."""

    endpoints: tuple[str, ...]
    prefix: str = "/lnet/"
    user: str | None = None
    password_file: Path | None = None
    cafile: Path | None = None


@dataclass(frozen=True)
class Overlay:
    here: str
    depots: Mapping[str, DepotEntry]
    source: Path | None = None
    directory: DirectoryRef | None = None

    def url_to_vertex(self) -> dict[str, str]:
        return {entry.url: name for name, entry in self.depots.items()}

    def vertices(self) -> list[str]:
        return [self.here, *self.depots]

    @classmethod
    def parse(cls, text: str, source: Path | None = None) -> Overlay:
        where = str(source) if source else "depots file"
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise OverlayError(f"{where}: not TOML: {exc}") from None
        return cls.from_table(table, where, source)

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str, source: Path | None = None) -> Overlay:
        unknown = sorted(set(table) - {"here", "depots", "directory"})
        if unknown:
            raise OverlayError(f"{where}: unknown key(s) {', '.join(unknown)}; expected 'here', [depots.NAME] and "
                               "'directory'")
        here = table.get("here")
        if not isinstance(here, str) or not _NAME.match(here):
            raise OverlayError(f"{where}: 'here' must name this client's vertex (letters, digits, '.', '_', '-')")
        directory = _directory(table["directory"], where) if "directory" in table else None
        raw = table.get("depots", {} if directory is not None else None)
        if not isinstance(raw, dict) or (not raw and directory is None):
            raise OverlayError(f"{where}: no depots: add at least one [depots.NAME] with a url, or a directory")
        depots: dict[str, DepotEntry] = {}
        for name, spec in raw.items():
            if not _NAME.match(name):
                raise OverlayError(f"{where}: bad depot name {name!r}")
            if name == here:
                raise OverlayError(f"{where}: depot {name!r} has the client's own name ('here')")
            if not isinstance(spec, dict):
                raise OverlayError(f"{where}: [depots.{name}] must be a table")
            extra = sorted(set(spec) - {"url", "token", "location"})
            if extra:
                raise OverlayError(f"{where}: [depots.{name}]: unknown key(s) {', '.join(extra)}")
            url = spec.get("url")
            if not isinstance(url, str):
                raise OverlayError(f"{where}: [depots.{name}] needs url = \"http(s)://HOST:PORT\"")
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
                raise OverlayError(f"{where}: [depots.{name}] url must be http(s)://HOST[:PORT], not {url!r}")
            token, location = spec.get("token"), spec.get("location")
            if token is not None and not isinstance(token, str):
                raise OverlayError(f"{where}: [depots.{name}] token must be a string")
            if location is not None and not isinstance(location, str):
                raise OverlayError(f"{where}: [depots.{name}] location must be a string")
            depots[name] = DepotEntry(name, url.rstrip("/"), token, location)
        return cls(here, depots, source, directory)

    @classmethod
    def load(cls, path: Path | None = None, environ: Mapping[str, str] | None = None) -> Overlay:
        """From ``path``, else ``$LNET_DEPOTS``, else the user's config directory."""
        chosen = depots_path(path, environ)
        try:
            text = chosen.read_text()
        except OSError as exc:
            raise OverlayError(
                f"cannot read the depots file {chosen}: {exc.strerror} (give --depots FILE or set LNET_DEPOTS)"
            ) from None
        return cls.parse(text, chosen)


def _directory(raw: Any, where: str) -> DirectoryRef:
    """``directory = "URL"`` (or a list of a cluster's URLs), or a ``[directory]`` table: ``endpoints``, ``prefix``,
    ``user``, ``password_file``, ``cafile``."""
    from lnet.directory.entries import check_prefix
    from lnet.directory.etcd import parse_endpoints

    table: Mapping[str, Any] = raw if isinstance(raw, dict) else {"endpoints": raw}
    extra = sorted(set(table) - {"endpoints", "prefix", "user", "password_file", "cafile"})
    if extra:
        raise OverlayError(f"{where}: [directory]: unknown key(s) {', '.join(extra)}")
    strings = {key: table.get(key) for key in ("prefix", "user", "password_file", "cafile")}
    if any(value is not None and not isinstance(value, str) for value in strings.values()):
        raise OverlayError(f"{where}: [directory]: prefix, user, password_file and cafile are strings")
    endpoints = table.get("endpoints")
    try:
        if not isinstance(endpoints, str | list):
            raise ValueError("directory is an etcd URL, a list of them, or a table with endpoints")
        ref = DirectoryRef(
            parse_endpoints(endpoints),
            check_prefix(strings["prefix"] or "/lnet/"),
            strings["user"],
            Path(strings["password_file"]).expanduser() if strings["password_file"] else None,
            Path(strings["cafile"]).expanduser() if strings["cafile"] else None,
        )
    except ValueError as exc:
        raise OverlayError(f"{where}: directory: {exc}") from None
    if (ref.user is None) != (ref.password_file is None):
        raise OverlayError(f"{where}: [directory]: user and password_file go together")
    return ref


def depots_path(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Which depots file is meant: ``path``, else ``$LNET_DEPOTS``, else the user's config directory's."""
    env = os.environ if environ is None else environ
    return path or (Path(env["LNET_DEPOTS"]) if env.get("LNET_DEPOTS") else default_depots_path())


def default_depots_path() -> Path:
    return platformdirs.user_config_path("lnet") / "depots.toml"


def url_key(url: str) -> str:
    """A base URL as a depot spells its links' ``to``: scheme, host in lower case, port if given."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
