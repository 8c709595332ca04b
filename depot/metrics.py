"""Prometheus metrics of one depot, in a registry of its own so that several depots can share a process."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .lanes import CopyLanes
from .store import Reliability, Store

__all__ = ["DepotMetrics"]


class DepotMetrics:
    def __init__(self, store: Store, lanes: CopyLanes) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        capacity = Gauge("lnet_depot_capacity_bytes", "Bytes the depot may lend in all", registry=reg)
        capacity.set_function(lambda: store.capacity)
        used = Gauge("lnet_depot_used_bytes", "Bytes lent out in live allocations", registry=reg)
        used.set_function(lambda: store.used)
        allocations = Gauge("lnet_depot_allocations", "Live allocations", ["reliability"], registry=reg)
        for reliability in Reliability:
            allocations.labels(str(reliability)).set_function(
                lambda r=reliability: store.count_by_reliability()[r]  # type: ignore[misc]
            )
        self.requests = Counter(
            "lnet_depot_requests", "Requests answered, by operation and HTTP status", ["operation", "status"],
            registry=reg,
        )
        self.bytes_in = Counter("lnet_depot_bytes_in", "Bytes written into allocations", registry=reg)
        self.bytes_out = Counter(
            "lnet_depot_bytes_out", "Bytes sent out of allocations, by read, copy or (weather) probe", ["kind"],
            registry=reg,
        )
        waiting = Gauge("lnet_depot_copies_waiting", "Copies waiting for a place in their lane", registry=reg)
        waiting.set_function(lambda: lanes.waiting)
        lanes_in_use = Gauge("lnet_depot_copy_lanes", "Copy lanes with a push running or waiting", registry=reg)
        lanes_in_use.set_function(lambda: lanes.lanes)
        self.lane_timeouts = Counter(
            "lnet_depot_lane_timeouts", "Copies that waited copy_timeout in their lane and were refused", registry=reg
        )
        self.weather_probes = Counter(
            "lnet_depot_weather_probes", "Weather probes to peers, by outcome", ["outcome"], registry=reg
        )
        self.copy_seconds = Histogram(
            "lnet_depot_copy_seconds",
            "Duration of depot-to-depot copies",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=reg,
        )
        self.expired = Counter("lnet_depot_expired", "Allocations reclaimed at expiry", registry=reg)
        self.busy = Counter("lnet_depot_busy_refusals", "Requests refused as busy", registry=reg)
        self.client_refusals = Counter(
            "lnet_depot_client_refusals",
            "Requests refused (429) because their client address had max_requests_per_client in progress",
            registry=reg,
        )
        self.slow_bodies = Counter(
            "lnet_depot_slow_bodies_cut",
            "Bodies cut for falling behind min_bytes_per_second after body_grace: in (a write's or a control body), "
            "out (a read's), push (a copy's, to a slow target)",
            ["direction"],
            registry=reg,
        )
        self.copies_failed = Counter(
            "lnet_depot_copies_failed",
            "Copies that failed at their target: network (unreachable, reset, stalled), target_error (it answered an "
            "error), unverified (it answered, but not as a depot's write does: another status, or a length short of "
            "the push), slow (it took the push slower than min_bytes_per_second)",
            ["reason"],
            registry=reg,
        )
        self.copies_refused = Counter(
            "lnet_depot_copies_refused", "Copies refused (403) because copy_allow does not list the target's host",
            registry=reg,
        )
        self.fast_path = Gauge(
            "lnet_depot_fast_path",
            "1 when data bodies go straight between socket and allocation (the fast path), 0 when they go through "
            "hypercorn and h11 as they are (switched off, or library versions it was not checked against)",
            registry=reg,
        )

    def watch_load(
        self, in_flight: Callable[[], int], saturated: Callable[[], bool], clients: Callable[[], int]
    ) -> None:
        """Gauges of the depot's load, read when /metrics is asked for."""
        reg = self.registry
        Gauge("lnet_depot_requests_in_flight", "Requests holding a place", registry=reg).set_function(in_flight)
        Gauge(
            "lnet_depot_saturated", "1 while every request place is taken (/readyz answers 503)", registry=reg
        ).set_function(lambda: float(saturated()))
        Gauge(
            "lnet_depot_clients_in_flight", "Client addresses (IPv6: /64s) with a request in progress", registry=reg
        ).set_function(clients)

    def render(self) -> bytes:
        return generate_latest(self.registry)
