"""Human-written sizes ("64MiB") and durations ("30s", "2h"): parsing them, and showing sizes to people.

Pure functions shared by every lnet program (the depot's configuration, the client's options and output); they
raise ``ValueError`` with a message that names the offending text, so a config loader can report it as it is.
``lnet.units.numbers`` checks the numbers read from documents and requests. The package stands alone so that
the depot, the client and the testbed import it without loading one another: it must import nothing but the
standard library.
"""

from __future__ import annotations

import re

__all__ = ["format_size", "parse_duration", "parse_size"]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str) -> int:
    """Bytes from an int or a string such as ``"4096"``, ``"64MiB"``, ``"1.5GB"``. Never negative."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        number: float = value
    elif isinstance(value, float):
        number = value
    else:
        match = _NUMBER_UNIT.match(value)
        if match is None or match.group(2).lower() not in _SIZE_UNITS:
            raise ValueError(f"not a size: {value!r} (expected bytes or e.g. '64MiB', '1.5GB')")
        number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if number < 0 or number != number:
        raise ValueError(f"a size cannot be negative: {value!r}")
    if number != int(number):
        raise ValueError(f"a size must be a whole number of bytes: {value!r}")
    return int(number)


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number or a string such as ``"30s"``, ``"2h"``, ``"1d"``, ``"250ms"``. Never negative."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _NUMBER_UNIT.match(value)
        if match is None or match.group(2).lower() not in _DURATION_UNITS:
            raise ValueError(f"not a duration: {value!r} (expected seconds or e.g. '30s', '2h', '1d')")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"a duration must be finite and not negative: {value!r}")
    return seconds


def format_size(nbytes: float) -> str:
    """``1536`` -> ``"1.5 KiB"``: for people, never parsed back."""
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
