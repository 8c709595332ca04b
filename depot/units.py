"""The depot's name for ``lnet.units`` (sizes and durations), kept so that depot modules and benchmarks that
import ``lnet.depot.units`` go on working; new code imports ``lnet.units``."""

from __future__ import annotations

from lnet.units import format_size, parse_duration, parse_size

__all__ = ["format_size", "parse_duration", "parse_size"]
