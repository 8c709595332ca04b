"""``lnet-depot``: run a depot. Configuration from ``--config FILE``, then ``LNET_DEPOT_*``, then flags."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from functools import partial
from pathlib import Path

import trio

from lnet.protocol import innermost

from .app import VERSION
from .config import DEFAULT_PORT, ConfigError, DepotConfig
from .server import serve, wait_for_signal

__all__ = ["main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_EPILOG = f"""\
Sizes are bytes or strings like 64MiB, 1.5GB; durations are seconds or strings like 30s, 2h, 1d.
Every flag has an environment variable (--max-allocation: LNET_DEPOT_MAX_ALLOCATION) and a key in the
TOML file (max_allocation = "256MiB"). Flags win over the environment, the environment over the file.

examples:
  lnet-depot --listen 0.0.0.0:{DEFAULT_PORT} --capacity 8GiB --max-allocation 64MiB
  lnet-depot --config /etc/lnet/depot.toml
  LNET_DEPOT_OPERATOR_TOKEN=$(cat /etc/lnet/token) lnet-depot --listen 0.0.0.0:{DEFAULT_PORT}
  lnet-depot --weather-peer http://atl.example.org:{DEFAULT_PORT} --weather-bytes-per-hour 64MiB

Network weather probes are off unless peers and a byte budget per hour are both given; peers come as
URL[=TOKEN], several separated by commas in LNET_DEPOT_WEATHER_PEERS, or as [[weather.peers]] tables
(url, token) in the TOML file.

Without an operator token anyone who reaches the port may allocate (up to the capacity): on a public
address, set one. --require-token-for extends it to more operations (allocate, read, digest, copy, probe,
extend, free, status, metrics; comma-separated).

Copies go anywhere a client names unless --copy-allow lists where they may go: host names (matched as the
copy's URL spells them, never resolved), *.domain wildcards, IP addresses and CIDR ranges (matching targets
given as addresses), comma-separated or repeated; anything else is refused with 403 before any connection.
  lnet-depot --copy-allow 'atl.example.org,*.lnet.example.org,192.0.2.0/24'
  LNET_DEPOT_COPY_ALLOW=10.0.0.0/8,fd00::/8 lnet-depot

SIGTERM or Ctrl-C stops the depot gracefully; hard allocations survive a restart.
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lnet-depot",
        description="Run an lnet depot: lend time-limited buffers to lnet transfers over HTTP.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="TOML configuration file")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"address to serve on (default 127.0.0.1:{DEFAULT_PORT})")
    p.add_argument("--name", help="this depot's name in /v1/status (default: the host name)")
    p.add_argument("--capacity", metavar="SIZE", help="bytes lent out at most, all allocations together (1GiB)")
    p.add_argument("--max-allocation", metavar="SIZE", help="largest single allocation (256MiB)")
    p.add_argument("--max-duration", metavar="TIME", help="longest lifetime of an allocation (1d)")
    p.add_argument("--operator-token", metavar="TOKEN", help="require this bearer token to allocate")
    p.add_argument(
        "--operator-token-file", type=Path, metavar="FILE",
        help="read the operator token from FILE (keeps it out of the process list)",
    )
    p.add_argument(
        "--require-token-for", metavar="OPS",
        help="operations that need the operator token, comma-separated (default: allocate)",
    )
    p.add_argument(
        "--copy-allow", action="append", metavar="HOSTS",
        help="hosts, *.domains, addresses and CIDR ranges copies may push to, comma-separated or repeated "
        "(default: * = anywhere)",
    )
    p.add_argument("--data-dir", metavar="DIR", help="where hard allocations are kept")
    p.add_argument("--certfile", metavar="FILE", help="TLS certificate (with --keyfile: serve https)")
    p.add_argument("--keyfile", metavar="FILE", help="TLS private key")
    p.add_argument("--max-concurrent-requests", metavar="N", help="requests served at once before 503 busy (512)")
    p.add_argument(
        "--max-requests-per-client", metavar="N", help="requests from one address (IPv6: one /64) before 429 (128)"
    )
    p.add_argument(
        "--min-bytes-per-second", metavar="SIZE",
        help="slowest a body may move on average, either way, once --body-grace has passed (4KiB)",
    )
    p.add_argument("--body-grace", metavar="TIME", help="time a body may take before its pace is checked (10s)")
    p.add_argument("--copy-timeout", metavar="TIME", help="bound on each network wait of a copy (60s)")
    p.add_argument("--read-timeout", metavar="TIME", help="bound on each wait for a client's bytes (60s)")
    p.add_argument("--graceful-timeout", metavar="TIME", help="time in-flight requests get at shutdown (10s)")
    p.add_argument("--max-lanes", metavar="N", help="copy lanes in use at once before 503 busy (1024)")
    p.add_argument(
        "--weather-peer", action="append", metavar="URL[=TOKEN]",
        help="probe this peer depot in the background (repeat for several; a token here shows in ps: prefer "
        "the file or LNET_DEPOT_WEATHER_PEERS)",
    )
    p.add_argument(
        "--weather-bytes-per-hour", metavar="SIZE",
        help="hard cap on the bytes the weather probes push in any hour (0: probes off, the default)",
    )
    p.add_argument("--weather-interval", metavar="TIME", help="time between rounds of weather probes (300s)")
    p.add_argument("--weather-block", metavar="SIZE", help="bytes of each probe push (4MiB)")
    p.add_argument("--rtt-interval", metavar="TIME",
                   help="time between rounds of timing the round trip to each weather peer and each depot of the "
                   "directory, reported in /v1/status for clients to rank depot-to-depot edges by; probes or not "
                   "(30s; 0: off)")
    p.add_argument(
        "--directory", action="append", metavar="URL",
        help="register in the depot directory at this etcd endpoint (repeat or comma-separate a cluster's); "
        "docs/directory.md",
    )
    p.add_argument("--advertise", metavar="URL",
                   help="the URL other hosts reach this depot by (default: the listen address, if not a wildcard)")
    p.add_argument("--directory-prefix", metavar="PREFIX", help="the directory's key prefix (/lnet/)")
    p.add_argument("--directory-ttl", metavar="TIME", help="the entry's lease: gone this long after a crash (15s)")
    p.add_argument("--directory-user", metavar="USER", help="this depot's etcd user")
    p.add_argument("--directory-password-file", type=Path, metavar="FILE", help="the etcd user's password")
    p.add_argument("--directory-cafile", metavar="FILE", help="CA bundle that signed etcd's certificate")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--no-fast-path", dest="fast_path", action="store_const", const=False, default=None,
        help="serve data through hypercorn and h11 as they are, without the fast path (slower; see docs/depot.md)",
    )
    p.add_argument(
        "--no-prefault", dest="prefault", action="store_const", const=False, default=None,
        help="leave a fresh allocation's pages to be faulted in by its first write, on the event loop, instead of "
             "when it is lent, in a worker thread (see docs/depot.md, 'The data path')",
    )
    p.add_argument("--print-config", action="store_true", help="print the effective configuration and exit")
    p.add_argument("--version", action="version", version=f"lnet-depot {VERSION}")
    return p


def load_config(args: argparse.Namespace, environ: dict[str, str]) -> DepotConfig:
    overrides = {
        key: getattr(args, key)
        for key in (
            "listen", "name", "capacity", "max_allocation", "max_duration", "operator_token", "data_dir",
            "certfile", "keyfile", "max_concurrent_requests", "copy_timeout", "read_timeout", "graceful_timeout",
            "log_level", "max_lanes", "weather_bytes_per_hour", "weather_interval", "weather_block", "prefault",
            "require_token_for", "fast_path", "advertise", "directory_prefix", "directory_ttl", "directory_user",
            "directory_cafile", "max_requests_per_client", "min_bytes_per_second", "body_grace", "rtt_interval",
        )
    }
    if args.directory is not None:
        overrides["directory"] = ",".join(args.directory)
    if args.directory_password_file is not None:
        try:
            overrides["directory_password"] = args.directory_password_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--directory-password-file: {exc}") from None
    if args.copy_allow is not None:
        overrides["copy_allow"] = ",".join(args.copy_allow)
    overrides["weather_peers"] = args.weather_peer
    if args.operator_token_file is not None:
        try:
            overrides["operator_token"] = args.operator_token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--operator-token-file: {exc}") from None
    return DepotConfig.load(args.config, environ, overrides)


async def _run(config: DepotConfig) -> None:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, config, shutdown_trigger=wait_for_signal))
        # Printed whatever the log level: scripts and tests read the address from here (port 0 is allowed).
        print(f"lnet-depot {config.name}: serving on {url}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args, dict(os.environ))
    except ConfigError as exc:
        print(f"lnet-depot: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.print_config:
        for key, value in sorted(vars(config).items()):
            if key == "directory_password" and value is not None:
                value = "(set)"
            if key == "operator_token" and value is not None:
                value = value[:4] + "…"
            print(f"{key} = {value!r}")
        return EXIT_OK
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if config.log_level.lower() != "debug":
        # httpx logs every outgoing request at INFO: each copy's push and, with a directory, the lease's renewal
        # every few seconds; the depot's own lines (and the target's access log) already say what happened
        logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        trio.run(_run, config)
    except Exception as exc:  # what a nursery raises comes wrapped in exception groups
        cause = innermost(exc)
        if isinstance(cause, OSError):
            print(f"lnet-depot: cannot serve on {config.listen}: {cause.strerror or cause}", file=sys.stderr)
        elif isinstance(cause, RuntimeError):
            print(f"lnet-depot: {cause}", file=sys.stderr)
        else:
            raise
        return EXIT_FAILED
    return EXIT_OK



if __name__ == "__main__":
    sys.exit(main())
