"""The per-direction link model, exactly: delay, serialisation, tail drop, loss, jitter without reordering."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnet.testbed.linkmodel import LinkDirection
from lnet.testbed.topology import Link


def direction(**kw: float | None) -> LinkDirection:
    params: dict[str, float | None] = {"delay_ms": 10.0, "rate_mbit": None, "loss": 0.0, "jitter_ms": 0.0,
                                       "queue_ms": None}
    params.update(kw)
    return LinkDirection(Link("a", "b", **params), random.Random(1))  # type: ignore[arg-type]


def test_delay_only() -> None:
    d = direction(delay_ms=25.0)
    assert d.admit(100.0, 1500) == pytest.approx(100.025)
    assert d.admit(100.0, 9000) == pytest.approx(100.025)


def test_rate_serialises_back_to_back_packets() -> None:
    d = direction(delay_ms=0.0, rate_mbit=8.0)  # one byte per microsecond
    assert d.admit(0.0, 1000) == pytest.approx(0.001)
    assert d.admit(0.0, 1000) == pytest.approx(0.002)
    assert d.admit(0.0005, 1000) == pytest.approx(0.003)
    assert d.admit(1.0, 1000) == pytest.approx(1.001)  # idle link: no backlog


def test_bounded_queue_tail_drops() -> None:
    d = direction(delay_ms=0.0, rate_mbit=8.0, queue_ms=2.5)  # 2.5 ms of backlog = 2500 bytes
    times = [d.admit(0.0, 1000) for _ in range(6)]
    # packets 1-4 wait 0, 1, 2, 3 ms... the fourth would wait 3 ms > 2.5 ms: dropped, and so is every later one
    assert times[:3] == [pytest.approx(0.001), pytest.approx(0.002), pytest.approx(0.003)]
    assert times[3:] == [None, None, None]
    assert d.stats.tail_drops == 3
    assert d.stats.delivered == 3


def test_default_queue_is_one_link_rtt_at_least_20ms() -> None:
    assert Link("a", "b", delay_ms=50.0).effective_queue_ms == 100.0
    assert Link("a", "b", delay_ms=2.0).effective_queue_ms == 20.0


def test_random_loss_rate() -> None:
    d = direction(loss=0.1)
    n = 20000
    delivered = sum(d.admit(0.0, 100) is not None for _ in range(n))
    # binomial: 4 standard deviations
    assert abs((n - delivered) / n - 0.1) < 4 * math.sqrt(0.1 * 0.9 / n)
    assert d.stats.random_drops == n - delivered


def test_lost_packets_still_use_the_wire() -> None:
    d = direction(delay_ms=0.0, rate_mbit=8.0, loss=0.999999)
    assert d.admit(0.0, 1000) is None
    assert d.free_at == pytest.approx(0.001)


def test_configure_changes_future_packets_only() -> None:
    d = direction(delay_ms=10.0)
    first = d.admit(0.0, 100)
    d.configure(Link("a", "b", delay_ms=50.0))
    assert first == pytest.approx(0.010)
    assert d.admit(1.0, 100) == pytest.approx(1.050)


@settings(database=None)  # nothing to replay across runs; and the shared example database may not be writable
@given(st.lists(st.tuples(st.floats(0, 0.01), st.integers(40, 9000)), min_size=2, max_size=200))
def test_jitter_never_reorders_and_stays_in_bounds(arrivals: list[tuple[float, int]]) -> None:
    d = LinkDirection(Link("a", "b", delay_ms=20.0, jitter_ms=5.0, rate_mbit=100.0, queue_ms=1000.0),
                      random.Random(7))
    now = 0.0
    last = -1.0
    sent = 0.0  # when the packet's last byte is on the wire: its turn on the 100 Mbit/s link, then its bytes
    for gap, size in arrivals:
        now += gap
        sent = max(sent, now) + size * 8 / 100e6
        at = d.admit(now, size)
        assert at is not None
        assert at >= last  # FIFO within a direction
        assert at >= now + 0.015 - 1e-9  # never earlier than delay - jitter after arrival
        assert at <= max(last, sent + 0.025) + 1e-9  # never later than delay + jitter, unless held behind another
        last = at
