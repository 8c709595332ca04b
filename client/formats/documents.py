"""The small JSON documents lnet's client keeps (manifests, reports, lnet-get's resume state): reading them
within a size bound, checking their shape with messages that name the field, and writing them privately.

Shared by ``manifest`` and ``report`` so that both refuse bad input the same way; each passes its own error
class, so callers still catch ``ManifestError`` or ``ReportError``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from lnet.units.numbers import kind

T = TypeVar("T")

__all__ = ["check_object", "load_document", "read_json", "write_private_file"]


def read_json(path: Path, limit: int, error: type[Exception], what: str) -> Any:
    """The JSON document at ``path``, at most ``limit`` bytes; anything else raises ``error`` naming the file."""
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than {limit} bytes: not a {what}")
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise error(f"{path}: not JSON: {exc}") from None


def load_document(path: Path, limit: int, error: type[Exception], what: str, parse: Callable[[Any], T]) -> T:
    """``parse`` of the JSON document at ``path`` (see ``read_json``); an ``error`` from ``parse`` names the file."""
    document = read_json(path, limit, error, what)
    try:
        return parse(document)
    except error as exc:
        raise error(f"{path}: {exc}") from None


def check_object(value: Any, where: str, fields: tuple[str, ...], error: type[Exception]) -> dict[str, Any]:
    """``value`` as an object with exactly ``fields``: a missing one or a typo never passes silently."""
    if not isinstance(value, dict):
        raise error(f"{where} must be an object, not {kind(value)}")
    missing = [key for key in fields if key not in value]
    if missing:
        raise error(f"{where} lacks {', '.join(missing)}")
    unknown = [str(key) for key in value if key not in fields]
    if unknown:
        raise error(f"{where} has unknown fields: {', '.join(sorted(unknown))[:200]}")
    return value


def write_private_file(path: Path, data: bytes) -> None:
    """``data`` into ``path`` atomically (a temporary file beside it, then a rename), readable by the owner only
    from the first byte on: for manifests, and every other small file lnet's client keeps beside its work."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp creates it 0600
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
