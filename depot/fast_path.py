"""The depot's fast path: whether it is on, and putting it in place when a server starts.

The fast path is what makes a depot's data path run near the speed of a plain socket (docs/depot.md,
"Throughput"): data bodies received straight into the allocation and reads sent straight from it
(``lnet.depot.direct``), h11's copy-saving receive buffer and httpcore's uncopied sends (``h11_receive``, for the
depot's pushes), and hypercorn reading 1 MiB per receive (``MAX_RECV``). Each replaces private internals of
hypercorn, h11 or httpcore, so the fast path is applied all or nothing, and only when every part finds the
versions it was checked against (``checked_versions``; constraints.txt pins them) with what it replaces. It can
be switched off (``fast_path = false``, ``--no-fast-path``); a depot whose fast path is off serves the same
protocol through the libraries as they are, slower, and says so: a warning at start, ``"fast_path": false`` in
``/v1/status`` and ``lnet_depot_fast_path 0`` in ``/metrics``.

The patches are per process: a depot with the fast path switched off, in a process where another turned it on
(tests), takes no body or reply the direct way but leaves the libraries patched (the patched h11 and httpcore
behave the same, only faster).

This module must not import hypercorn, h11 or httpcore's private modules at import: ``install`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from lnet.protocol import h11_receive

from . import direct

__all__ = ["RECEIVE_SIZE", "FastPath", "checked_versions", "install"]

# Hypercorn reads 64 KiB per receive; bulk uploads are many MiB, and a bigger read means far fewer trips through
# the event loop per byte (measured by bench/depot_throughput.py).
RECEIVE_SIZE = 1024 * 1024

OFF_BY_CONFIG = "switched off (fast_path = false)"


@dataclass(frozen=True)
class FastPath:
    """Whether a depot's fast path is on, and if not, why."""

    active: bool
    reason: str = ""  # why it is off; empty when on


def checked_versions() -> dict[str, frozenset[str]]:
    """The versions of each library the fast path was checked against."""
    return {
        "hypercorn": direct.CHECKED_HYPERCORN,
        "h11": direct.CHECKED_H11 & h11_receive.CHECKED_H11,
        "httpcore": h11_receive.CHECKED_HTTPCORE,
    }


def install(enabled: bool = True) -> FastPath:
    """Put the fast path in place if ``enabled`` and every part can be; idempotent. Nothing is changed unless
    everything is (hypercorn's read size included)."""
    if not enabled:
        return FastPath(False, OFF_BY_CONFIG)
    problems = [problem for problem in (direct.check(), h11_receive.check()) if problem is not None]
    if problems:
        return FastPath(False, "; ".join(dict.fromkeys(problems)))
    if not (direct.install() and h11_receive.install()):  # cannot happen after the checks; never claim it
        return FastPath(False, "its patches did not take")
    from hypercorn.trio import tcp_server

    tcp_server.MAX_RECV = RECEIVE_SIZE
    return FastPath(True)
