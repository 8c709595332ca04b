from pathlib import Path

import pytest

from lnet.depot.cli import _parser, load_config
from lnet.depot.config import ConfigError, DepotConfig, WeatherPeer

MiB = 1024 * 1024


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


def test_weather_peers_from_a_toml_table(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text(
        '[depot]\nname = "atl"\nmax_lanes = 16\n\n'
        '[weather]\nbytes_per_hour = "64MiB"\ninterval = "10m"\nblock = "2MiB"\n\n'
        '[[weather.peers]]\nurl = "http://ORNL.example.org:6714/"\ntoken = "ornl-operator-token-01234"\n\n'
        '[[weather.peers]]\nurl = "https://[2001:db8::1]:6714"\n'
    )
    config = DepotConfig.load(file)
    assert config.weather_peers == (
        WeatherPeer("http://ornl.example.org:6714", "ornl-operator-token-01234"),
        WeatherPeer("https://[2001:db8::1]:6714"),
    )
    assert (config.weather_bytes_per_hour, config.weather_interval, config.weather_block) == (64 * MiB, 600.0,
                                                                                             2 * MiB)
    assert config.weather_enabled
    assert config.max_lanes == 16
    assert "ornl-operator-token-01234" not in repr(config)  # print-config and logs show it cut short
    nested = tmp_path / "nested.toml"
    nested.write_text('[depot.weather]\nbytes_per_hour = "8MiB"\npeers = ["http://a.example:6714"]\n')
    assert DepotConfig.load(nested).weather_peers == (WeatherPeer("http://a.example:6714"),)


def test_weather_from_the_environment_and_flags() -> None:
    config = DepotConfig.load(
        None,
        {"LNET_DEPOT_WEATHER_PEERS": "http://a.example:6714=tok-a-0123456789, http://b.example:6714",
         "LNET_DEPOT_WEATHER_BYTES_PER_HOUR": "100MiB"},
        {"weather_interval": "1m", "weather_peers": None},
    )
    assert config.weather_peers == (WeatherPeer("http://a.example:6714", "tok-a-0123456789"),
                                    WeatherPeer("http://b.example:6714"))
    assert config.weather_interval == 60.0
    flags = DepotConfig.load(None, {}, {"weather_peers": ["http://c.example:6714"]})
    assert flags.weather_peers == (WeatherPeer("http://c.example:6714"),)
    assert not flags.weather_enabled  # a peer but no budget: probes stay off
    assert DepotConfig().weather_enabled is False


@pytest.mark.parametrize(
    ("environ", "needle"),
    [
        ({"LNET_DEPOT_WEATHER_PEERS": "ftp://a.example"}, "http(s) base URL"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://a.example:6714/v1/data/x"}, "no path"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://u:p@a.example:6714"}, "credentials"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://a.example:6714="}, "empty token"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://a.example:6714,http://a.example:6714"}, "twice"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://a:6714", "LNET_DEPOT_WEATHER_BYTES_PER_HOUR": "7MiB"}, "2 x weather"),
        ({"LNET_DEPOT_WEATHER_PEERS": "http://a:6714", "LNET_DEPOT_WEATHER_BYTES_PER_HOUR": "1GiB",
          "LNET_DEPOT_WEATHER_BLOCK": "512MiB"}, "exceeds max_allocation"),
        ({"LNET_DEPOT_WEATHER_INTERVAL": "0"}, "weather_interval"),
        ({"LNET_DEPOT_MAX_LANES": "0"}, "max_lanes"),
    ],
)
def test_bad_weather_settings_name_the_problem(environ: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        DepotConfig.load(None, environ)


def test_bad_weather_tables(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text('[[weather.peers]]\nurl = "http://a:6714"\ncolour = "red"\n')
    with pytest.raises(ConfigError, match="unknown peer key"):
        DepotConfig.load(file)
    file.write_text('weather_block = "1MiB"\n[weather]\nblock = "2MiB"\n')
    with pytest.raises(ConfigError, match="given twice"):
        DepotConfig.load(file)


def test_a_small_depot_lends_at_most_its_capacity_unless_told_otherwise() -> None:
    assert DepotConfig.load(overrides={"capacity": "64MiB"}).max_allocation == 64 * 2**20
    assert DepotConfig.load(overrides={"capacity": "8GiB"}).max_allocation == 256 * 2**20
    assert DepotConfig.load(overrides={"capacity": "64MiB", "max_allocation": "16MiB"}).max_allocation == 16 * 2**20
    with pytest.raises(ConfigError, match="exceeds capacity"):
        DepotConfig.load(overrides={"capacity": "64MiB", "max_allocation": "128MiB"})


def test_the_fast_path_switch_from_file_environment_and_flag(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text("fast_path = false\n")
    assert DepotConfig().fast_path is True
    assert DepotConfig.load(file).fast_path is False
    assert DepotConfig.load(None, {"LNET_DEPOT_FAST_PATH": "off"}).fast_path is False
    assert DepotConfig.load(file, {"LNET_DEPOT_FAST_PATH": "yes"}).fast_path is True
    assert DepotConfig.load(None, {}, {"fast_path": False}).fast_path is False
    with pytest.raises(ConfigError, match="LNET_DEPOT_FAST_PATH: expected true or false"):
        DepotConfig.load(None, {"LNET_DEPOT_FAST_PATH": "maybe"})


def test_the_prefault_switch_from_file_environment_and_flag(tmp_path: Path) -> None:
    file = tmp_path / "depot.toml"
    file.write_text("prefault = false\n")
    assert DepotConfig().prefault is True
    assert DepotConfig.load(file).prefault is False
    assert DepotConfig.load(None, {"LNET_DEPOT_PREFAULT": "off"}).prefault is False
    assert load_config(_parser().parse_args(["--no-prefault"]), {}).prefault is False
    assert load_config(_parser().parse_args([]), {}).prefault is True
