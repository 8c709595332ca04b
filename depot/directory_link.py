"""The depot's side of the directory: its entry (``lnet.directory.entries.DepotRecord``) built from the running
``Depot``, the registration kept beside the server, and what ``/v1/status`` and ``/metrics`` show of it.

Off unless ``directory`` is configured. A directory that is down never stops the depot: the registration retries
in the background (``lnet.directory.registration``) while the depot serves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

import httpx
import trio
from prometheus_client import Gauge

from lnet.directory.entries import DepotRecord, depot_key, weather_links
from lnet.directory.etcd import EtcdClient, EtcdError, EtcdSettings, EtcdUnavailable
from lnet.directory.listing import list_depots
from lnet.directory.registration import Registration
from lnet.protocol import PROTOCOL_VERSION, describe_error

from .app import VERSION

if TYPE_CHECKING:
    from .app import Depot
    from .config import DepotConfig

__all__ = ["MAX_DIRECTORY_PEERS", "advertised_url", "follow_peers", "register_until_stopped"]

MAX_DIRECTORY_PEERS = 256
"""The most depots of the directory a depot times its round trips to (each costs two small requests a round)."""

log = logging.getLogger("lnet.depot")


def advertised_url(config: DepotConfig, bound_url: str) -> str:
    """The URL others reach the depot by: ``advertise``, else the address it is serving on (the config refuses
    a wildcard listen address without ``advertise``)."""
    return (config.advertise or bound_url).rstrip("/")


def etcd_settings(config: DepotConfig) -> EtcdSettings:
    return EtcdSettings(
        endpoints=config.directory,
        user=config.directory_user,
        password=config.directory_password,
        cafile=config.directory_cafile,
        certfile=config.directory_certfile,
        keyfile=config.directory_keyfile,
        timeout_s=config.directory_timeout,
    )


def depot_record(depot: Depot, url: str, wall: float) -> DepotRecord:
    config, store = depot.config, depot.store
    return DepotRecord(
        name=config.name,
        url=url,
        capacity=store.capacity,
        free=max(0, store.capacity - store.used),
        max_allocation=config.max_allocation,
        max_duration=config.max_duration,
        token_required_for=tuple(sorted(depot.token_required_for)),
        version=VERSION,
        protocol=PROTOCOL_VERSION,
        updated=round(wall, 3),
        links=weather_links(depot.links.summary(depot.clock())),
    )


def _metrics(depot: Depot, registration: Registration) -> None:
    registry = depot.metrics.registry
    status = registration.status
    registered = Gauge("lnet_depot_directory_registered",
                       "1 while the depot's entry is in the directory (lease kept alive), else 0", registry=registry)
    registered.set_function(lambda: 1.0 if status.state == "registered" else 0.0)
    # Totals kept by the registration itself, read when scraped (gauges: a counter cannot follow a value)
    writes = Gauge("lnet_depot_directory_writes", "Times the depot's directory entry was written", registry=registry)
    writes.set_function(lambda: status.writes)
    failures = Gauge("lnet_depot_directory_failures",
                     "Directory requests that failed (the depot retries with backoff)", registry=registry)
    failures.set_function(lambda: status.failures)


async def register_until_stopped(depot: Depot, bound_url: str, stopping: trio.Event) -> None:
    """Keep the depot's entry in the directory until ``stopping`` is set; then revoke its lease."""
    config = depot.config
    url = advertised_url(config, bound_url)
    try:
        client = EtcdClient(etcd_settings(config))
    except (OSError, ValueError) as exc:  # a CA or certificate file that cannot be read: said, and served on
        reason = str(exc)[:300]
        log.error("directory: cannot register (%s); the depot serves without it", reason)
        depot.directory_status = lambda: {"state": "off", "last_error": reason}
        return
    async with client:
        registration = Registration(
            client,
            depot_key(config.directory_prefix, config.name),
            lambda wall: depot_record(depot, url, wall),
            ttl_s=int(config.directory_ttl),
            min_interval_s=config.directory_rewrite_interval,
        )
        depot.directory_status = registration.status.to_json
        _metrics(depot, registration)
        async with trio.open_nursery() as nursery:
            if config.rtt_interval > 0:
                nursery.start_soon(follow_peers, depot, client, url)
            await registration.run(stopping)
            nursery.cancel_scope.cancel()


async def follow_peers(depot: Depot, client: EtcdClient, url: str) -> NoReturn:
    """Every ``rtt_interval``, the depots registered in the directory become the ones this depot times its round
    trips to (``Depot.round_trip_peers``), beside its weather peers: at most ``MAX_DIRECTORY_PEERS``, itself
    left out. A directory that cannot be read leaves the last list as it is, and is tried again next time."""
    config = depot.config
    configured = tuple(peer.url for peer in config.weather_peers)
    while True:
        try:
            with trio.fail_after(config.directory_timeout):
                listing = await list_depots(client, config.directory_prefix)
        except (EtcdError, EtcdUnavailable, httpx.HTTPError, trio.TooSlowError, OSError) as exc:
            log.debug("directory: cannot list the depots to time round trips to (%s)", describe_error(exc))
        except Exception:  # a bug here must not stop the depot: say so loudly, and try again next time
            log.exception("directory: listing the depots to time round trips to failed unexpectedly")
        else:
            others = sorted(record.url.rstrip("/") for name, record in listing.depots.items()
                            if name != config.name and record.url.rstrip("/") != url)
            depot.round_trip_peers = tuple(dict.fromkeys([*configured, *others[:MAX_DIRECTORY_PEERS]]))
        await trio.sleep(config.rtt_interval)
