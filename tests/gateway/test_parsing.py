"""Header and key rules, as pure functions (the HTTP client would normalize some of these away)."""

from __future__ import annotations

import pytest

from gateway.errors import BadRequest, TokenRequired
from gateway.parsing import MAX_TOKEN, parse_key, parse_resource, parse_token


@pytest.mark.parametrize("key", ["a/../b", "./a", "..", ".", "/a", "a\\b", "a\x00b", "a\nb"])
def test_dot_segments_and_odd_characters_are_refused(key: str) -> None:
    with pytest.raises(BadRequest, match="not valid"):
        parse_key(key)


@pytest.mark.parametrize("key", ["a", "orders/2024/x-1.json", "a.b/c~d", "k:v@h=1,2+3%"])
def test_path_like_keys_are_accepted(key: str) -> None:
    assert parse_key(key) == key


def test_resource_defaults_to_the_key() -> None:
    assert parse_resource(None, key="orders/1") == "orders/1"
    assert parse_resource("lock", key="orders/1") == "lock"


def test_token_bounds() -> None:
    assert parse_token("1", required=True) == 1
    assert parse_token(str(MAX_TOKEN), required=True) == MAX_TOKEN
    assert parse_token(None, required=False) is None
    with pytest.raises(TokenRequired):
        parse_token(None, required=True)
    with pytest.raises(BadRequest):
        parse_token(str(MAX_TOKEN + 1), required=True)
