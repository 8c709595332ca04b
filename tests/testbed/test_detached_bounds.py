"""`lnet-testbed up` waits for its emulator's ready report for `setup_timeout_s` at most, as `Testbed` does."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import lnet.testbed.testbed as testbed
from lnet.testbed import TestbedError, Topology

from .conftest import TOPOLOGIES

# An "emulator" that detaches as the real one does, then holds the ready pipe open without ever reporting.
_SILENT = "import os, time\nif os.fork() > 0:\n    os._exit(0)\ntime.sleep(3)\n"


@pytest.mark.root
@pytest.mark.usefixtures("requires_root")
def test_an_emulator_that_never_reports_fails_up_within_the_setup_timeout(
    bed_name: str, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testbed, "_emulator_argv", lambda *args: [sys.executable, "-c", _SILENT])
    topology = Topology.load(TOPOLOGIES / "line3.toml")
    started = time.monotonic()
    with pytest.raises(TestbedError, match="did not report within 0.5 s"):
        testbed.start_detached(topology, bed_name, state_root, backend="userspace", setup_timeout_s=0.5)
    assert time.monotonic() - started < 2.5  # not the silent emulator's 3 s, nor forever
    assert not (state_root / bed_name).exists()  # cleaned up as after any failed start
