"""The directory's pure parts: the entry schema and its strict check, backoff, the pacing of rewrites."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lnet.directory.entries import (
    MAX_ENTRY_BYTES,
    DepotRecord,
    EntryError,
    check_prefix,
    depot_key,
    parse_depot_record,
    weather_links,
)
from lnet.directory.pacing import Backoff, RewritePacer

PREFIX = "/lnet/"


def _record(**changes: Any) -> DepotRecord:
    values: dict[str, Any] = {
        "name": "atl", "url": "http://198.51.100.7:6714", "capacity": 1 << 30, "free": 1 << 29,
        "max_allocation": 1 << 26, "max_duration": 86400.0, "token_required_for": ("allocate",),
        "version": "0.1.0", "protocol": 1, "updated": 1_800_000_000.0,
        "links": ({"to": "http://198.51.100.8:6714", "source": "copy", "mbps": 41.5, "at": 1_799_999_990.0},),
    }
    return DepotRecord(**{**values, **changes})


def _document(**changes: Any) -> bytes:
    document = json.loads(_record().encode())
    document.update(changes)
    return json.dumps(document).encode()


def test_a_record_survives_encoding_and_parsing() -> None:
    record = _record()
    assert parse_depot_record(depot_key(PREFIX, "atl"), record.encode(), PREFIX) == record


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_document(kind="lnet-depot/9"), "kind"),
        (_document(name="svl"), "name differs"),
        (_document(url="http://user:pw@198.51.100.7:6714"), "url"),
        (_document(url="file:///etc/passwd"), "url"),
        (_document(url="http://198.51.100.7:6714/v1/data/x"), "url"),
        (_document(capacity=-1), "capacity"),
        (_document(capacity=True), "capacity"),
        (_document(free=2 << 30), "free exceeds"),
        (_document(max_duration="1d"), "max_duration"),
        (_document(token_required_for="allocate"), "token_required_for"),
        (_document(token_required_for=["Allocate; rm -rf"]), "token_required_for"),
        (_document(version="x" * 33), "version"),
        (_document(links=[{"to": "http://x", "source": "copy", "mbps": -1}]), "mbps"),
        (_document(links=[{"to": 7, "source": "copy"}]), "link"),
        (b'{"kind": "lnet-depot/1", "name": "atl", "capacity": NaN}', "not JSON"),
        (b" " * (MAX_ENTRY_BYTES + 1), "more than"),
    ],
)
def test_a_malformed_or_hostile_entry_is_refused_with_the_reason(value: bytes, why: str) -> None:
    with pytest.raises(EntryError, match=why):
        parse_depot_record(depot_key(PREFIX, "atl"), value, PREFIX)


def test_a_key_outside_the_depots_or_with_a_bad_name_is_refused() -> None:
    with pytest.raises(EntryError, match="not a depot's key"):
        parse_depot_record(b"/lnet/memory/x", _record().encode(), PREFIX)
    with pytest.raises(EntryError, match="bad depot name"):
        parse_depot_record(b"/lnet/depots/../etc", _record().encode(), PREFIX)


def test_unknown_fields_are_ignored_and_known_ones_still_checked() -> None:
    record = parse_depot_record(depot_key(PREFIX, "atl"), _document(future="yes"), PREFIX)
    assert record == _record()


def test_weather_links_keep_the_figures_the_freshest_first_and_no_error_text() -> None:
    links = [
        {"to": "http://a:1", "source": "copy", "mbps": 10.0, "at": 5.0, "error": "secret-ish", "age_s": 3.0},
        {"to": "http://b:1", "source": "probe", "mbps": 20.0, "at": 9.0},
        {"to": 5, "source": "copy"},
    ]
    kept = weather_links(links)
    assert [link["to"] for link in kept] == ["http://b:1", "http://a:1"]
    assert "error" not in kept[1]
    assert "age_s" not in kept[1]  # it changes every second: the entry would never be the same twice


def test_same_but_time() -> None:
    assert _record().same_but_time(_record(updated=5.0))
    assert not _record().same_but_time(_record(free=5))
    assert not _record().same_but_time(None)


def test_prefix_rules() -> None:
    assert check_prefix("/lnet/") == "/lnet/"
    for bad in ("lnet/", "/lnet", "/l net/"):
        with pytest.raises(ValueError, match="prefix"):
            check_prefix(bad)


def test_backoff_doubles_to_its_ceiling_with_jitter_and_resets() -> None:
    backoff = Backoff(first_s=1.0, most_s=8.0)
    assert [backoff.next_delay(0.999999) for _ in range(5)] == pytest.approx([1, 2, 4, 8, 8], rel=1e-5)
    assert backoff.next_delay(0.0) == 4.0  # half the delay at the least
    backoff.reset()
    assert backoff.next_delay(0.0) == 0.5


def test_rewrites_are_paced_and_refreshed() -> None:
    pacer = RewritePacer(min_interval_s=10.0, refresh_s=300.0)
    assert pacer.due(0.0, changed=False)  # the first write at once
    pacer.wrote(0.0)
    assert not pacer.due(5.0, changed=True)
    assert pacer.wait_s(5.0, changed=True) == 5.0
    assert pacer.due(10.0, changed=True)
    assert not pacer.due(299.0, changed=False)
    assert pacer.due(300.0, changed=False)
    pacer.forget()
    assert pacer.due(1.0, changed=False)


def test_merge_keeps_the_files_depots_and_tokens_and_leaves_out_what_cannot_be_used() -> None:
    from lnet.client.commands.discover import merge
    from lnet.client.formats.overlay import Overlay

    overlay = Overlay.parse('here = "me"\n[depots.atl]\nurl = "http://198.51.100.7:6714"\ntoken = "t0123456789abcdef"\n'
                            '[depots.alias]\nurl = "http://198.51.100.9:6714"\n')
    records = {
        "atl": _record(url="http://203.0.113.66:6714"),  # another URL under a name the file has: the file's
        "svl": _record(name="svl", url="http://198.51.100.8:6714", token_required_for=()),
        "same": _record(name="same", url="http://198.51.100.9:6714", token_required_for=()),  # the file's URL
        "gated": _record(name="gated", url="http://198.51.100.10:6714"),  # needs a token it cannot have
        "me": _record(name="me", url="http://198.51.100.11:6714", token_required_for=()),
    }
    merged, notes = merge(overlay, records)
    assert list(merged.depots) == ["atl", "alias", "svl"]
    assert merged.depots["atl"].url == "http://198.51.100.7:6714"
    assert merged.depots["atl"].token == "t0123456789abcdef"
    assert merged.depots["svl"].token is None
    assert any("atl" in note and "another URL" in note for note in notes)
    assert any("gated" in note and "token" in note for note in notes)
    assert len(notes) == 2  # the client's own vertex is left out without a word
