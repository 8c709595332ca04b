import pytest

from lnet.units import format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("64MiB", 64 * 2**20), ("1.5GB", 1_500_000_000), ("2 KiB", 2048), (7, 7), ("0", 0)],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "12XB", "MiB", "1.5", "0.3KiB", "nan", "1e9"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"), [("30", 30.0), ("30s", 30.0), ("2h", 7200.0), ("1d", 86400.0), ("250ms", 0.25), (5, 5.0)]
)
def test_parse_duration(text: str | int, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "-5s", "soon", "3 weeks", "inf"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_size() -> None:
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(3 * 2**30) == "3.0 GiB"


def test_capability_shape_is_exact() -> None:
    from lnet.protocol import is_capability, new_capability

    token = new_capability()
    assert is_capability(token)
    for bad in (token + "\n", " " + token, token[:10], token + "/x", token.replace(token[3], "+")):
        assert not is_capability(bad)
