"""How the topology's `window` turns into throughput: one plain TCP stream over a 1 Gbit/s link, for several
windows and MTUs, measured against window / RTT. This is the measurement behind the receive-buffer sizing in
lnet/testbed/netns.py (`WINDOW_PER_RCVBUF_BYTE`). Needs root.

    python bench/testbed_window.py [--delay-ms 25] [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import uuid

import trio

from lnet.testbed import Testbed, Topology
from lnet.testbed.measure import tcp_throughput

CASES = [(1500, 12288), (1500, 20480), (1500, 65536), (1500, 262144), (1500, 1048576),
         (9000, 262144), (9000, 1048576), (9000, 4194304)]


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay-ms", type=float, default=25.0)
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    rows = []
    for mtu, window in CASES:
        topo = Topology.parse(f'mtu = {mtu}\n[defaults]\nwindow = {window}\n[hosts.a]\n[hosts.b]\n[[links]]\n'
                              f'a = "a"\nb = "b"\ndelay_ms = {args.delay_ms}\nrate_mbit = 1000\n')
        async with Testbed(topo, name=f"winbench-{uuid.uuid4().hex[:6]}") as tb:
            got = await tcp_throughput(tb, "a", "b", seconds=args.seconds, skip_s=2.0)
        expected = window * 8 / (2 * args.delay_ms / 1000) / 1e6
        rows.append({"mtu": mtu, "window_bytes": window, "expected_mbit_s": round(expected, 2),
                     "measured_mbit_s": round(got, 2), "ratio": round(got / expected, 3)})
        print(f"MTU {mtu:5d} window {window:8d} B: window/RTT {expected:8.2f} Mbit/s, measured {got:8.2f} "
              f"(x{got / expected:.3f})", flush=True)
    out = trio.Path(__file__).parent / "results"
    await out.mkdir(exist_ok=True)
    await (out / "testbed_window.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    trio.run(main)
