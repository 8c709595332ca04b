"""Capabilities: their shape, which both sides check before a token goes anywhere."""

from __future__ import annotations

from lnet.protocol import is_capability, new_capability


def test_capability_shape_is_exact() -> None:
    token = new_capability()
    assert is_capability(token)
    for bad in (token + "\n", " " + token, token[:10], token + "/x", token.replace(token[3], "+")):
        assert not is_capability(bad)
