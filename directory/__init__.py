"""The depot directory: depots register themselves in etcd, clients find them there (docs/directory.md).

``etcd`` is a small client of etcd's v3 JSON gateway; ``entries`` the keys and the strict check of every entry
read; ``pacing`` the backoff and the bound on rewrites; ``registration`` the loop that keeps one entry alive under
a lease. It imports neither the depot server nor the client's commands: both sides import it.
"""

from __future__ import annotations

from .entries import DEFAULT_PREFIX, DepotRecord, EntryError, depot_key, parse_depot_record
from .etcd import EtcdClient, EtcdError, EtcdSettings, EtcdUnavailable, parse_endpoints

__all__ = [
    "DEFAULT_PREFIX",
    "DepotRecord",
    "EntryError",
    "EtcdClient",
    "EtcdError",
    "EtcdSettings",
    "EtcdUnavailable",
    "depot_key",
    "parse_depot_record",
    "parse_endpoints",
]
