from pathlib import Path

import pytest

from lnet.depot.config import ConfigError, DepotConfig


def test_flags_win_over_environment_over_file(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('capacity = "2GiB"\nmax_allocation = "1GiB"\nmax_duration = "2h"\nname = "atl"\n')
    config = DepotConfig.load(
        file,
        {"LNET_DEPOT_MAX_ALLOCATION": "512MiB", "LNET_DEPOT_MAX_DURATION": "1h", "HOME": "/x"},
        {"max_duration": "30m", "capacity": None},
    )
    assert config.capacity == 2 * 2**30  # from the file
    assert config.max_allocation == 512 * 2**20  # the environment over the file
    assert config.max_duration == 1800.0  # the flag over both
    assert config.name == "atl"


def test_depot_table_is_accepted(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('[depot]\nlisten = "0.0.0.0:7000"\n')
    assert DepotConfig.load(file).host_port == ("0.0.0.0", 7000)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('capacity = "lots"', "capacity"),
        ('colour = "blue"', "unknown key 'colour'"),
        ('max_allocation = "2GiB"', "exceeds capacity"),
        ('listen = "nowhere"', "HOST:PORT"),
        ('certfile = "/tmp/cert.pem"', "certfile and keyfile go together"),
        ('operator_token = "short"', "at least 16"),
        ("max_duration = 0", "max_duration"),
        ("capacity = [", "cannot read config file"),
    ],
)
def test_bad_file_values_name_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    file = tmp_path / "depot.toml"
    file.write_text(text + "\n")
    with pytest.raises(ConfigError, match=needle):
        DepotConfig.load(file)


def test_bad_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="LNET_DEPOT_CAPACITY"):
        DepotConfig.load(None, {"LNET_DEPOT_CAPACITY": "-3"})
    with pytest.raises(ConfigError, match="LNET_DEPOT_BOGUS"):
        DepotConfig.load(None, {"LNET_DEPOT_BOGUS": "1"})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        DepotConfig.load(tmp_path / "absent.toml")


def test_the_shipped_example_configuration_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "depot.example.toml"
    config = DepotConfig.load(example)
    assert (config.name, config.capacity, config.max_allocation) == ("atl", 8 * 2**30, 64 * 2**20)
