import pytest

from lnet.units import format_size, parse_duration, parse_size
from lnet.units.numbers import finite_number


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


class Refused(ValueError):
    """A caller's own error class, which ``finite_number`` raises instead of ValueError."""


@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), (7, 7.0), (2.5, 2.5), (-3, -3.0)])
def test_finite_number(value: object, expected: float) -> None:
    assert finite_number(value, "x") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "x must be a number, not bool"),
        ("7", "x must be a number, not str"),
        (None, "x must be a number, not null"),
        (float("nan"), "x is nan, not a finite number"),
        (float("inf"), "x is inf, not a finite number"),
        (10**400, "x is a 1329-bit number, not a finite number"),  # not an OverflowError
    ],
)
def test_finite_number_refuses_with_the_callers_error(value: object, message: str) -> None:
    with pytest.raises(Refused) as refused:
        finite_number(value, "x", error=Refused)
    assert str(refused.value) == message


def test_finite_number_bounds_and_their_meaning() -> None:
    assert finite_number(10, "x", low=0, high=10) == 10.0
    with pytest.raises(ValueError, match=r"^x is -1, not a finite number in \[0, 10\]$"):
        finite_number(-1, "x", low=0, high=10)
    with pytest.raises(ValueError, match=r"^x is 1e\+300, not a time$"):
        finite_number(1e300, "x", low=0, high=1e12, meaning="a time")
    with pytest.raises(ValueError, match="not a time"):
        finite_number(10**400, "x", low=0, high=1e12, meaning="a time")
