"""The depot's side of the directory: its entry (``lnet.directory.entries.DepotRecord``) built from the running
``Depot``, the registration kept beside the server, and what ``/v1/status`` and ``/metrics`` show of it.

Off unless ``directory`` is configured. A directory that is down never stops the depot: the registration retries
in the background (``lnet.directory.registration``) while the depot serves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio
from prometheus_client import Gauge

from lnet.directory.entries import DepotRecord, depot_key, weather_links
from lnet.directory.etcd import EtcdClient, EtcdSettings
from lnet.directory.registration import Registration
from lnet.protocol import PROTOCOL_VERSION

from .app import VERSION

if TYPE_CHECKING:
    from .app import Depot
    from .config import DepotConfig

__all__ = ["advertised_url", "register_until_stopped"]

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
        await registration.run(stopping)
