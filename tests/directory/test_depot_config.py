"""The depot's directory keys: from flags, the environment and the file; a wildcard listen address needs
``advertise``; the password never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnet.depot.cli import main
from lnet.depot.config import ConfigError, DepotConfig


def test_directory_from_the_environment_the_file_and_flags(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('directory = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]\nadvertise = "http://atl:6714"\n')
    config = DepotConfig.load(file)
    assert config.directory == ("http://10.0.0.1:2379", "http://10.0.0.2:2379")
    assert config.advertise == "http://atl:6714"
    config = DepotConfig.load(environ={"LNET_DEPOT_DIRECTORY": "http://127.0.0.1:2379,http://127.0.0.2:2379"})
    assert config.directory == ("http://127.0.0.1:2379", "http://127.0.0.2:2379")
    assert config.directory_ttl == 15


def test_a_wildcard_listen_address_needs_advertise() -> None:
    with pytest.raises(ConfigError, match="wildcard address: give advertise"):
        DepotConfig.load(overrides={"listen": "0.0.0.0:6714", "directory": "http://127.0.0.1:2379"})
    config = DepotConfig.load(overrides={"listen": "0.0.0.0:6714", "directory": "http://127.0.0.1:2379",
                                         "advertise": "http://atl.example.org:6714"})
    assert config.advertise == "http://atl.example.org:6714"
    DepotConfig.load(overrides={"listen": "0.0.0.0:6714"})  # no directory: no advertise needed


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"directory": "etcd:2379"}, "http"),
        ({"directory": "http://127.0.0.1:2379", "directory_ttl": "60s"}, "directory_ttl must be 1 to 30"),
        ({"directory": "http://127.0.0.1:2379", "directory_prefix": "lnet"}, "prefix"),
        ({"directory": "http://127.0.0.1:2379", "directory_user": "atl"}, "password"),
        ({"directory": "http://127.0.0.1:2379", "advertise": "http://atl:6714/path"}, "base URL"),
        ({"directory": "http://127.0.0.1:2379", "name": "my depot"}, "letters, digits"),
    ],
)
def test_bad_directory_settings_are_configuration_errors(overrides: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        DepotConfig.load(overrides=overrides)


def test_the_cli_takes_directory_flags_and_hides_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password = tmp_path / "pw"
    password.write_text("s3cret-directory-password\n")
    code = main(["--directory", "http://127.0.0.1:2379", "--advertise", "http://atl:6714", "--directory-user",
                 "depot-atl", "--directory-password-file", str(password), "--print-config"])
    out = capsys.readouterr().out
    assert code == 0
    assert "directory = ('http://127.0.0.1:2379',)" in out
    assert "s3cret" not in out
    assert "directory_password = '(set)'" in out


def test_the_example_configuration_with_its_directory_lines_loads(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "depot.example.toml"
    lines = example.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# The depot directory"))
    for i in range(start + 1, start + 6):
        lines[i] = lines[i].removeprefix("# ")
    file = tmp_path / "depot.toml"
    file.write_text("\n".join(lines) + "\n")
    config = DepotConfig.load(file, overrides={"directory_password": "x" * 16})
    assert config.directory == ("https://etcd1.example.org:2379", "https://etcd2.example.org:2379")
    assert config.advertise == "http://atl.example.org:6714"
    assert config.directory_ttl == 15
