"""Checks of the numbers lnet reads from others: a depot's control bodies, manifests, reports, topology files.

One check for each kind of number, so that "a number" means the same everywhere: an ``int`` or a ``float``, never a
``bool`` (which Python counts as an ``int``), finite, and within the caller's bounds. Each caller passes its own
error class (``BadRequest``, ``ManifestError``, ``TopologyError``, ...), and the message names the field as the
caller calls it (``where``). Like the rest of ``lnet.units`` it imports nothing but the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["finite_number", "kind", "show"]


def kind(value: object) -> str:
    """The type of ``value`` as a message names it (``null`` for JSON's null)."""
    return "null" if value is None else type(value).__name__


def show(value: object) -> str:
    """``value`` for an error message: short, and a huge number by its size."""
    if isinstance(value, int) and value.bit_length() > 100:
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def finite_number(
    value: object,
    where: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    meaning: str | None = None,
    error: Callable[[str], Exception] = ValueError,
) -> float:
    """``value`` as a float if it is a finite number in ``[low, high]``; else ``error`` with a message naming
    ``where``: "must be a number, not str", or "is 1e+300, not ``meaning``" (by default the bounds)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{where} must be a number, not {kind(value)}")
    # Compared as it is: a 400-digit int is out of bounds, not an OverflowError from float().
    if not (low <= value <= high) or (isinstance(value, float) and not math.isfinite(value)):
        if meaning is None:
            meaning = "a finite number" + ("" if (low, high) == (-math.inf, math.inf) else f" in [{low:g}, {high:g}]")
        raise error(f"{where} is {show(value)}, not {meaning}")
    try:
        return float(value)
    except OverflowError:  # an int beyond a float, with no bound to stop it
        raise error(f"{where} is {show(value)}, not a finite number") from None
