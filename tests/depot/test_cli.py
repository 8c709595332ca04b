"""``lnet-depot`` as a person meets it: --help, --print-config, and clear failures."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from lnet.depot.cli import main


def test_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for needle in ("--capacity", "--operator-token-file", "LNET_DEPOT_MAX_ALLOCATION", "examples:", "64MiB"):
        assert needle in out


def test_print_config_merges_sources_and_hides_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "depot.toml"
    config.write_text('capacity = "2GiB"\nname = "atl"\n')
    token = tmp_path / "token"
    token.write_text("s3cret-operator-token-value\n")
    monkeypatch.setenv("LNET_DEPOT_MAX_ALLOCATION", "64MiB")
    code = main(["--config", str(config), "--operator-token-file", str(token), "--name", "atlanta", "--print-config"])
    assert code == 0
    out = capsys.readouterr().out
    assert "capacity = 2147483648" in out
    assert "max_allocation = 67108864" in out
    assert "name = 'atlanta'" in out
    assert "s3cr…" in out
    assert "s3cret-operator-token-value" not in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--capacity", "many"], "not a size"),
        (["--listen", "nowhere"], "HOST:PORT"),
        (["--max-allocation", "2GiB", "--capacity", "1GiB"], "exceeds capacity"),
        (["--operator-token-file", "/nonexistent/token"], "--operator-token-file"),
    ],
)
def test_configuration_errors_exit_2(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_a_busy_port_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d"), "--log-level", "error"])
    assert code == 1
    assert "cannot serve" in capsys.readouterr().err


def test_weather_flags_and_a_hidden_peer_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LNET_DEPOT_WEATHER_PEERS", "http://a.example:6714=peer-token-secret-value")
    code = main(["--weather-bytes-per-hour", "64MiB", "--weather-interval", "2m", "--weather-block", "1MiB",
                 "--max-lanes", "8", "--print-config"])
    assert code == 0
    out = capsys.readouterr().out
    assert "weather_peers = (WeatherPeer('http://a.example:6714', token=peer…),)" in out
    assert "peer-token-secret-value" not in out
    assert "weather_bytes_per_hour = 67108864" in out
    assert "weather_interval = 120.0" in out
    assert "max_lanes = 8" in out
    code = main(["--weather-peer", "http://b.example:6714", "--weather-peer", "http://c.example:6714",
                 "--print-config"])
    assert code == 0
    assert "WeatherPeer('http://b.example:6714'), WeatherPeer('http://c.example:6714')" in capsys.readouterr().out
    assert main(["--weather-peer", "nowhere"]) == 2
    assert "--weather-peer" in capsys.readouterr().err
