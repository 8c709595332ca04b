"""Append-only files of checksummed JSON lines: the send journal and ``lnet-get --follow``'s state.

Each line is ``CRC SP JSON LF``, ``CRC`` the CRC-32 of the JSON text as 8 lower-case hex digits. A record is
appended in one ``write`` whatever the file's size (a rewrite per record would make a long transfer quadratic),
and a crash tears at most the line being written: ``decode`` keeps the longest prefix of whole lines whose
checksum holds, and says where it ends, so that the writer cuts the file there before appending again.
Pure: bytes in, values out.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = ["decode", "encode"]

_FRAME = re.compile(rb"[0-9a-f]{8} ")


def encode(document: Mapping[str, Any]) -> bytes:
    text = json.dumps(document, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()
    return b"%08x " % zlib.crc32(text) + text + b"\n"


def decode(data: bytes) -> tuple[list[dict[str, Any]], list[int]]:
    """The objects of the whole, valid lines at the start of ``data``, and where each of them ends; never raises.
    Stops at the first line that is torn (no newline), fails its checksum, or is not a JSON object."""
    documents: list[dict[str, Any]] = []
    ends: list[int] = []
    position = 0
    while (end := data.find(b"\n", position)) >= 0:
        document = checked(data[position:end])
        if document is None:
            break
        documents.append(document)
        position = end + 1
        ends.append(position)
    return documents, ends


def checked(line: bytes) -> dict[str, Any] | None:
    """The object one line (without its newline) holds, if its frame and checksum are right."""
    if not _FRAME.fullmatch(line[:9]):
        return None
    text = line[9:]
    try:
        if int(line[:8], 16) != zlib.crc32(text):
            return None
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None
