"""``lnet-send --trace``'s records of what the scheduler was told and decided (``lnet.client.sending.trace``)."""

from __future__ import annotations

from lnet.client.sending.trace import trace_decision, trace_event
from lnet.scheduler import EdgeMemory, Keep, Measurement, PathScheduler, ProbeDone

MB = 1_000_000


def test_a_measurement_is_traced_per_stream_and_says_whether_a_probe_took_it() -> None:
    event = Measurement(("a", "b"), 2 * MB, 2.0, at=100.0, streams=4.0, began=99.0)
    kind, data = trace_event(event, 10.0, probing={("a", "b")})
    assert kind == "measure"
    assert data["mbps_per_stream"] == 8.0
    assert data["probe"] is True
    assert data["began"] == 9.0  # one second before the measurement, on the transfer's clock
    done = trace_event(ProbeDone(("a", "b"), 100.0), 10.0, probing=())
    assert done == ("probe-done", {"t": 10.0, "edge": ["a", "b"]})


def test_a_quiet_tick_is_not_traced_and_a_re_evaluation_shows_the_weights() -> None:
    memory = EdgeMemory()
    memory.observe("s", "d", MB, 1.0, 0.0)
    scheduler = PathScheduler(["s", "d"], "s", "d", memory)
    start = scheduler.start(0.0)
    data = trace_decision(start, scheduler, 0.0, 0.0)
    assert data is not None
    assert data["decision"] == "Switch"
    assert data["weights_mbps"] == {"s>d": 8.0}
    assert trace_decision(Keep(("s", "d")), scheduler, 1.0, 1.0) is None
