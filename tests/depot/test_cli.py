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
