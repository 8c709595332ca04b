"""lnet-send's usage errors about --source URLs never echo a URL whole: it may hold a depot's read capability."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnet.client.commands import send
from lnet.client.exits import ExitCode

CAPABILITY = "Zq3" * 11


def test_a_source_that_is_not_http_is_refused_without_echoing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')
    argv = ["--source", f"htp://d.example:6714/v1/data/{CAPABILITY}", "--to", "c", "--depots", str(config), "--json"]
    assert send.main(argv) == ExitCode.USAGE
    out = capsys.readouterr()
    assert "not an http(s) URL" in out.err
    assert CAPABILITY not in out.out + out.err
