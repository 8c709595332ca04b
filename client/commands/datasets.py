"""Datasets by name (``lnet.directory.datasets``): ``lnet publish NAME SOURCE...`` records where a dataset's
replicas are, and ``lnet-get NAME --directory URL`` fetches from them as from a list of URLs.

The entry lives under a lease as long as ``--expires`` (default 1 day): it goes by itself. Sources may carry
capabilities (a depot data URL): only their scheme and host are ever printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lnet.client.exits import ExitCode, run_interruptible
from lnet.client.formats.overlay import Overlay, OverlayError
from lnet.units import parse_duration

if TYPE_CHECKING:
    from lnet.client.commands.outcome import Failed
    from lnet.client.formats.overlay import DirectoryRef
    from lnet.directory.datasets import Dataset
    from lnet.directory.etcd import EtcdSettings

__all__ = ["PublishArgs", "add_publish_arguments", "resolve_dataset", "run_publish"]

DEFAULT_EXPIRES = "1d"


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def add_publish_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset's name (letters, digits, '.', '_', '-')")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="where its replicas are: HTTP(S) mirrors that honour Range, or the URL lnet-send printed")
    p.add_argument("--directory", metavar="URL", help="the depot directory (default: the depots file's)")
    p.add_argument("--depots", type=Path, metavar="FILE", help="the depots file that names the directory")
    p.add_argument("--expires", default=DEFAULT_EXPIRES, metavar="TIME",
                   help=f"how long the entry lasts ({DEFAULT_EXPIRES}); it goes by itself after")
    p.add_argument("--sha256", metavar="HEX", help="the file's SHA-256, checked by lnet-get after the download")


@dataclass(frozen=True)
class PublishArgs:
    name: str
    sources: tuple[str, ...]
    directory: str | None
    depots: Path | None
    expires: str
    sha256: str | None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> PublishArgs:
        return cls(ns.name, tuple(ns.sources), ns.directory, ns.depots, ns.expires, ns.sha256)


def _settings(directory: str | None, depots: Path | None, timeout_s: float) -> tuple[DirectoryRef, EtcdSettings]:
    import os

    from lnet.client.commands.discover import directory_ref, etcd_settings
    from lnet.client.formats.overlay import depots_path

    overlay = None
    if depots is not None or depots_path(None).exists():
        overlay = Overlay.load(depots)
    ref = directory_ref(directory, overlay, os.environ)
    if ref is None:
        raise OverlayError("no directory: give --directory URL (or directory = \"URL\" in the depots file)")
    return ref, etcd_settings(ref, timeout_s)


def run_publish(args: PublishArgs) -> int:
    from lnet.directory.datasets import Dataset, dataset_key
    from lnet.directory.entries import EntryError
    from lnet.directory.etcd import EtcdClient, EtcdError, EtcdUnavailable

    try:
        seconds = parse_duration(args.expires)
        if seconds < 1:
            raise ValueError("--expires must be at least 1s")
        ref, settings = _settings(args.directory, args.depots, 5.0)
        now = time.time()
        dataset = Dataset(args.name, args.sources, round(now, 3), round(now + seconds, 3),
                          args.sha256.lower() if args.sha256 else None)
        key = dataset_key(ref.prefix, args.name)
    except (ValueError, OverlayError, EntryError) as exc:
        print(f"lnet publish: {exc}", file=sys.stderr)
        return ExitCode.USAGE

    async def put() -> None:
        async with EtcdClient(settings) as etcd:
            lease, _ = await etcd.grant(max(1, int(seconds)))
            await etcd.put(key, dataset.encode(), lease=lease)

    try:
        run_interruptible(put)
    except (EtcdUnavailable, EtcdError) as exc:
        print(f"lnet publish: {exc}", file=sys.stderr)
        return ExitCode.UNREACHABLE
    where = ", ".join(_where(source) for source in args.sources)
    print(f"published {args.name}: {len(args.sources)} source(s) ({where}) until "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(dataset.expires))}", file=sys.stderr)
    return ExitCode.OK


async def resolve_dataset(name: str, directory: str | None, depots: Path | None, timeout_s: float) -> Dataset | Failed:
    """``lnet-get NAME --directory URL``: NAME's entry in the directory (its sources, its sha256 if recorded)."""
    from lnet.client.commands.outcome import Failed
    from lnet.directory.datasets import dataset_key, parse_dataset
    from lnet.directory.entries import EntryError
    from lnet.directory.etcd import EtcdClient, EtcdError, EtcdUnavailable

    try:
        ref, settings = _settings(directory, depots, min(timeout_s, 10.0))
        key = dataset_key(ref.prefix, name)
    except (ValueError, OverlayError) as exc:
        return Failed(ExitCode.USAGE, str(exc))
    try:
        async with EtcdClient(settings) as etcd:
            found = await etcd.get(key)
    except (EtcdUnavailable, EtcdError) as exc:
        return Failed(ExitCode.UNREACHABLE, f"cannot look {name} up in the directory: {exc}")
    if found is None:
        return Failed(ExitCode.USAGE, f"no dataset {name} in the directory (lnet publish records one)")
    try:
        return parse_dataset(found.key, found.value, ref.prefix, now=time.time())
    except EntryError as exc:
        return Failed(ExitCode.UNREACHABLE, f"the directory's entry for {name} cannot be used: {exc}")
