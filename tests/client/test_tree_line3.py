"""A directory tree end to end on the emulated line3 testbed (src, depot, dst; 10 ms, 50 Mbit/s hops): the round
trip the planner measures, the tree sent through the depot, and rebuilt at dst exactly.

Needs root and network namespaces; elsewhere the test skips and says so.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from .test_line3 import line3
from .test_tree import snapshot

pytestmark = pytest.mark.root


async def test_a_tree_through_a_depot(requires_root: None, bed_name: str, tmp_path: Path) -> None:
    source = tmp_path / "tree"
    (source / "docs" / "empty").mkdir(parents=True)
    for i in range(60):
        (source / "docs" / f"note {i:02d}.txt").write_bytes(os.urandom(997 * i))
    (source / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 1))
    (source / "config.json").write_bytes(b'{"model": 1}')
    os.symlink("docs/note 01.txt", source / "latest")
    os.chmod(source / "config.json", 0o640)
    async with line3(tmp_path, bed_name) as bed:
        sent = await bed.tb.run("src", bed.send_argv(source, "--path", "depot", "--priority", "*.json"), check=False)
        assert sent.returncode == 0, sent.stderr.decode()
        summary = json.loads(sent.stdout)
        # the planner's round trip is the first hop's, measured: 2 x 10 ms on the emulated link, plus the depot
        assert 0.02 <= summary["plan"]["rtt_s"] < 0.04
        assert summary["path"] == ["src", "depot", "dst"]
        assert summary["files"] == 62
        out = tmp_path / "received"
        got = await bed.tb.run("dst", [sys.executable, "-m", "lnet.client.get", str(tmp_path / "manifest.json"),
                                       "-o", str(out), "--no-progress"], check=False)
        assert got.returncode == 0, got.stderr.decode()
    assert snapshot(out) == snapshot(source)
