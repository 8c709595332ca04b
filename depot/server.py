"""Runs a ``Depot`` behind hypercorn's trio worker: binding, TLS, timeouts, graceful shutdown.

``serve`` reports the URL it listens on through ``task_status`` (so tests ``await nursery.start(serve, ...)`` on
port 0) and returns once a shutdown was asked for and the in-flight requests finished or ran out of time.
"""

from __future__ import annotations

import logging
import math
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.config import Sockets
from hypercorn.trio import serve as hypercorn_serve

from lnet.protocol import h11_receive

from . import direct, fast_path
from .app import Depot
from .config import DepotConfig
from .fast_path import FastPath

__all__ = ["depot_url", "install_server_patches", "serve", "wait_for_signal"]

log = logging.getLogger("lnet.depot")

_TCP_USER_TIMEOUT: int | None = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only


class _Config(HypercornConfig):
    """hypercorn's configuration, whose TCP listening sockets carry ``TCP_USER_TIMEOUT`` (each accepted connection
    inherits it): how long sent bytes may stay unacknowledged, or unsent because the client's window is shut.

    hypercorn bounds reads (``read_timeout``) but not writes, and sends with the cancellation shielded: a client
    that requests an allocation and stops reading would hold its request (a place of ``max_concurrent_requests``)
    and the allocation's buffer (pinned, counted against the capacity even once freed) for as long as it kept
    its connection open. The kernel cuts such a connection after ``read_timeout``; the send fails and the
    request ends."""

    user_timeout_ms = 0

    def create_sockets(self) -> Sockets:
        sockets = super().create_sockets()
        if _TCP_USER_TIMEOUT is not None and self.user_timeout_ms > 0:
            for sock in (*sockets.secure_sockets, *sockets.insecure_sockets):
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, _TCP_USER_TIMEOUT, self.user_timeout_ms)
        return sockets


def install_server_patches(enabled: bool = True) -> FastPath:
    """What the depot changes in the libraries under it, applied when a server starts and never at import: the log
    filter that keeps capabilities out of the HTTP libraries' logs, the keep-alive fix (``direct``, whether or not
    the fast path is on), and the fast path if ``enabled`` and the libraries are those it was checked against
    (``fast_path``); returns whether the fast path is on. Idempotent."""
    h11_receive.install_http_patches(speed_ups=False)  # the speed-ups come with the fast path, all or nothing
    direct.install_keep_alive_fix()
    return fast_path.install(enabled)


def _say_what_is_off(fast: FastPath, config: DepotConfig) -> None:
    """One warning line at start when the fast path or the keep-alive fix is off (/v1/status and /metrics say it
    too)."""
    if fast.active:
        return
    message = f"fast path off: {fast.reason}; data bodies go through hypercorn and h11 as they are (slower)"
    if not direct.keep_alive_fixed():
        message += (
            f"; keep-alive fix off too: idle connections are closed after keep_alive_timeout lowered to "
            f"read_timeout ({min(config.keep_alive_timeout, config.read_timeout):g}s)"
        )
    log.warning("%s", message)


def _hypercorn_config(config: DepotConfig) -> HypercornConfig:
    hc = _Config()
    hc.user_timeout_ms = max(1, math.ceil(config.read_timeout * 1000))
    host, port = config.host_port
    hc.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    hc.read_timeout = max(1, math.ceil(config.read_timeout))
    # hypercorn's idle timer runs from a connection's start (or its last answer) until a request's head is in: at
    # read_timeout it also cuts a client that sends its head a byte at a time (each read alone would be in time),
    # and without the keep-alive fix (direct.keep_alive_fixed) it keeps a connection hypercorn stopped reading
    # from held open, unread, no longer than that either.
    hc.keep_alive_timeout = min(config.keep_alive_timeout, config.read_timeout)
    hc.graceful_timeout = config.graceful_timeout
    hc.accesslog = None  # our own access log redacts capabilities; hypercorn's would print them whole
    hc.errorlog = logging.getLogger("lnet.depot.server")
    hc.h11_max_incomplete_size = 64 * 1024
    hc.alpn_protocols = ["http/1.1"]  # the depot speaks HTTP/1.1 only (app.py refuses HTTP/2 with 505: why there)
    hc.backlog = 1024
    if config.certfile is not None and config.keyfile is not None:
        hc.certfile = str(config.certfile)
        hc.keyfile = str(config.keyfile)
    return hc


def depot_url(config: DepotConfig, bound: str) -> str:
    """The base URL of a depot from hypercorn's bound address (``http://127.0.0.1:43121``)."""
    address = bound.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    if host in ("0.0.0.0", "[::]"):
        host = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    return f"{config.scheme}://{host}:{port}"


async def wait_for_signal() -> None:
    """Return at the first SIGTERM or SIGINT: the trigger for a graceful shutdown."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("%s: finishing in-flight requests, then stopping", signal.Signals(signum).name)
            return


async def serve(
    config: DepotConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a depot until ``shutdown_trigger`` returns (or forever); ``task_status`` gets its base URL."""
    fast = install_server_patches(config.fast_path)
    _say_what_is_off(fast, config)
    hc = _hypercorn_config(config)
    _check_bindable(*config.host_port)
    stopping = trio.Event()  # set at the shutdown trigger: the directory entry goes before the requests drain

    async def trigger() -> None:
        assert shutdown_trigger is not None
        await shutdown_trigger()
        stopping.set()

    async with Depot(config, fast_path=fast) as depot, trio.open_nursery() as nursery:
        binds = await nursery.start(_serve_hypercorn, depot, hc, trigger if shutdown_trigger is not None else None)
        url = depot_url(config, binds[0])
        log.info("depot %s listening on %s (capacity %d bytes)", config.name, url, config.capacity)
        if config.directory:
            from .directory_link import register_until_stopped

            nursery.start_soon(register_until_stopped, depot, url, stopping)
        task_status.started(url)
    log.info("depot %s stopped; hard allocations are on disk in %s", config.name, config.data_dir)


def _check_bindable(host: str, port: int) -> None:
    """Fail early, with the address in the message, when the address cannot be bound (hypercorn would leak the
    socket it tried)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise OSError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from None


async def _serve_hypercorn(
    depot: Depot,
    hc: HypercornConfig,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    # hypercorn's own ASGI types are narrower than starlette's; the protocol is the same
    app: Any = direct.serving(depot.app) if depot.fast_path.active else depot.app
    await hypercorn_serve(app, hc, shutdown_trigger=shutdown_trigger, task_status=task_status, mode="asgi")
