"""lnet-send over an overlay larger than a transfer explores (a directory may list hundreds of depots): every
depot is asked for its status and round trip at once, at most ``max_depots`` of them (32) become the transfer's
candidates, and the transfer says so in one line. On the emulated network under trio's autojump clock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get, send
from lnet.client.exits import ExitCode

from .network import MiB, Network, depots
from .test_send_cli import emulated
from .test_send_cli import emulated_depots_file as depots_file


async def test_forty_depots_give_the_scheduler_thirty_two_candidates_and_the_bytes_arrive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    names = [f"d{i:02d}" for i in range(40)]
    data = os.urandom(4 * MiB + 5)
    source = tmp_path / "f.bin"
    source.write_bytes(data)
    async with depots(network, names, tmp_path, capacity=64 * MiB) as clients:
        code = await send.run([str(source), "--to", "d00", "--depots", str(depots_file(tmp_path, network, names)),
                               "--block-size", "1MiB", "--json", "--manifest", str(tmp_path / "m.json"),
                               "--memory", str(tmp_path / "edges.json")], io=emulated(network))
        assert code == ExitCode.OK
        captured = capsys.readouterr()
        assert "32 of the 40 depots that answered are this transfer's candidates" in captured.err
        assert "8 left out" in captured.err
        summary = json.loads(captured.out)
        used = {name for edge in summary["edges"] for name in (edge["from"], edge["to"])} - {"me"}
        assert "d00" in used
        assert len(used) <= 32
        talked_to = {end for pair, sent in network.bytes_sent.items() if sent > 0 for end in pair} - {"here"}
        assert len(talked_to) <= 32  # the others were asked their status and round trip only (no bytes counted)
        out = tmp_path / "back.bin"
        code = await get.run([str(tmp_path / "m.json"), "-o", str(out), "--no-progress"], io=emulated(network))
        assert code == ExitCode.OK
        assert out.read_bytes() == data
        for name in names[1:]:  # nothing left behind at the depots on the way
            assert int((await clients[name].status())["used"]) == 0
