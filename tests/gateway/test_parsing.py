"""Header and key rules, as pure functions (the HTTP client would normalize some of these away)."""

from __future__ import annotations

import re

import pytest

from gateway.errors import MalformedRequest, TokenRequired
from gateway.fencing_token import parse_token, token_or_none
from gateway.parsing import MAX_LIST_LIMIT, parse_key, parse_limit, parse_resource
from lockclient.wire import MAX_TOKEN, TOKEN_PATTERN, parse_decimal


@pytest.mark.parametrize("key", ["a/../b", "./a", "..", ".", "/a", "a\\b", "a\x00b", "a\nb"])
def test_dot_segments_and_odd_characters_are_refused(key: str) -> None:
    with pytest.raises(MalformedRequest, match="not valid"):
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
    with pytest.raises(MalformedRequest):
        parse_token(str(MAX_TOKEN + 1), required=True)


# Every script's digits pass str.isdigit() (superscripts too), and int() reads most of them.
NOT_ASCII_DIGITS = ["\uff11", "\u0661", "\u0967", "\u00b2", "1\u00b2", "\U0001d7cf"]
SPELLINGS = ["+1", "-1", " 1", "1 ", "1_0", "01", "0", "1.0", "1e3", "0x1", "", "1\n"]


@pytest.mark.parametrize("raw", [*NOT_ASCII_DIGITS, *SPELLINGS, "1" * 4301, "1" * 20, str(MAX_TOKEN + 1)])
def test_a_token_is_ascii_digits_in_range_in_one_spelling(raw: str) -> None:
    with pytest.raises(MalformedRequest, match="is not a decimal integer"):
        parse_token(raw, required=True)
    assert token_or_none(raw) is None


@pytest.mark.parametrize(
    "raw", ["1", "9", "10", "999", "1000", "1001", *NOT_ASCII_DIGITS, *SPELLINGS, "1" * 5000]
)
def test_the_parser_accepts_what_the_documented_token_pattern_does(raw: str) -> None:
    """`TOKEN_PATTERN` is the OpenAPI document's; the gateway checks with `parse_decimal`."""
    for text in (raw, str(MAX_TOKEN), str(MAX_TOKEN - 1), str(MAX_TOKEN + 1), "9" * 19, "1" + "0" * 18):
        documented = re.fullmatch(TOKEN_PATTERN, text) is not None
        assert (parse_decimal(text, low=1, high=MAX_TOKEN) is not None) == documented, text


def test_a_limit_is_ascii_digits_in_1_to_1000() -> None:
    assert (parse_limit(None), parse_limit("1"), parse_limit(str(MAX_LIST_LIMIT))) == (1000, 1, 1000)
    for raw in ("0", "1001", "01", "\uff11", "1" * 4301):
        with pytest.raises(MalformedRequest, match=r"decimal integer in 1\.\.1000"):
            parse_limit(raw)
