"""``lnet-send`` and ``lnet-get`` as a person runs them, against real depot processes on loopback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lnet.client.commands import get, send
from lnet.client.exits import ExitCode

from .loopback import depots_file, loopback_depots

MiB = 1024 * 1024


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(9 * MiB + 777))
    return path


def test_send_through_a_pinned_chain_then_get(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with loopback_depots(["a", "b", "c"], tmp_path) as depots:
        config = depots_file(tmp_path, depots)
        manifest = tmp_path / "payload.manifest.json"
        memory = tmp_path / "edges.json"
        code = send.main([str(payload), "--to", "c", "--depots", str(config), "--path", "a,b", "--block-size", "1MiB",
                          "--manifest", str(manifest), "--memory", str(memory), "--json"])
        assert code == ExitCode.OK
        summary = json.loads(capsys.readouterr().out)
        assert summary["path"] == ["me", "a", "b", "c"]
        assert summary["blocks"] == 10
        assert {(e["from"], e["to"]) for e in summary["edges"]} == {("me", "a"), ("a", "b"), ("b", "c")}
        assert manifest.stat().st_mode & 0o777 == 0o600
        document = json.loads(manifest.read_text())
        assert document["size"] == payload.stat().st_size
        assert {s["depot"] for b in document["blocks"] for s in b["sources"]} == {depots["c"].url}
        assert json.loads(memory.read_text())  # the edges were remembered for a warm start
        out = tmp_path / "fetched.bin"
        assert get.main([str(manifest), "-o", str(out), "--no-progress"]) == ExitCode.OK
        assert out.read_bytes() == payload.read_bytes()


def test_warm_start_with_the_scheduler(tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with loopback_depots(["a", "c"], tmp_path) as depots:
        config = depots_file(tmp_path, depots)
        memory = tmp_path / "edges.json"
        argv = [str(payload), "--to", "c", "--depots", str(config), "--memory", str(memory), "--json",
                "--manifest", str(tmp_path / "m.json"), "--block-size", "1MiB"]
        assert send.main([*argv, "--cold"]) == ExitCode.OK
        cold = json.loads(capsys.readouterr().out)
        assert send.main(argv) == ExitCode.OK
        warm = json.loads(capsys.readouterr().out)
        assert cold["path"][0] == warm["path"][0] == "me"
        assert warm["path"][-1] == "c"
        assert warm["path_attempts"][0]["path"] == warm["path"]  # no exploring: the remembered path at once


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--to", "nowhere"], "no such depot"),
        (["--to", "c", "--path", "a,zz"], "unknown depot"),
        (["--to", "c", "--path", "a,a"], "only once"),
        (["--to", "c", "--block-size", "huge"], "not a size"),
    ],
)
def test_usage_errors(
    tmp_path: Path, payload: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.a]\nurl = "http://127.0.0.1:9"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')
    assert send.main([str(payload), "--depots", str(config), *argv]) == ExitCode.USAGE
    assert needle in capsys.readouterr().err


def test_missing_file_and_bad_depots_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.c]\nurl = "ftp://example.org"\n')
    assert send.main([str(tmp_path / "absent"), "--to", "c", "--depots", str(config)]) == ExitCode.USAGE
    assert "url must be http(s)" in capsys.readouterr().err


def test_an_unreachable_destination_exits_3(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with loopback_depots(["c"], tmp_path) as depots:
        config = depots_file(tmp_path, depots)
        depots["c"].kill()
        code = send.main([str(payload), "--to", "c", "--depots", str(config), "--timeout", "2s",
                          "--memory", str(tmp_path / "m.json")])
    assert code == ExitCode.UNREACHABLE
    assert "does not answer" in capsys.readouterr().err
