"""Token format, accessors and hashing (pure)."""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warden.core.tokens import (
    hash_token,
    is_accessor,
    looks_like_token,
    make_accessor,
    make_token,
    same_hash,
)

PEPPER = b"p" * 32


def test_token_is_prefix_and_32_bytes_of_url_safe_base64() -> None:
    random = bytes(range(32))
    token = make_token(random)
    assert token.startswith("wdn_")
    body = token[4:]
    assert "=" not in body and "+" not in body and "/" not in body
    assert base64.urlsafe_b64decode(body + "=") == random
    assert looks_like_token(token)


@given(st.binary(min_size=32, max_size=32))
def test_every_token_round_trips_and_has_the_shape(random: bytes) -> None:
    token = make_token(random)
    assert looks_like_token(token)
    assert len(token) == 4 + 43


def test_wrong_amount_of_randomness_is_refused() -> None:
    with pytest.raises(ValueError):
        make_token(b"short")
    with pytest.raises(ValueError):
        make_accessor(b"x" * 5)


@pytest.mark.parametrize("text", ["", "wdn_", "wdn_" + "a" * 42, "wdn_" + "a" * 44, "abc_" + "a" * 43,
                                  "wdn_" + "a" * 42 + "=", None, 7, "wdn_" + "a" * 42 + "\n"])
def test_malformed_tokens_do_not_look_like_tokens(text: object) -> None:
    assert not looks_like_token(text)


def test_accessor_is_separate_and_not_a_token() -> None:
    accessor = make_accessor(os.urandom(12))
    assert is_accessor(accessor)
    assert not looks_like_token(accessor)
    assert not is_accessor(make_token(os.urandom(32)))


def test_hash_is_hmac_under_the_pepper_and_hides_the_token() -> None:
    token = make_token(os.urandom(32))
    digest = hash_token(token, PEPPER)
    assert len(digest) == 64 and token not in digest
    assert hash_token(token, PEPPER) == digest
    assert hash_token(token, b"q" * 32) != digest  # another pepper, another hash
    assert hash_token(make_token(os.urandom(32)), PEPPER) != digest


def test_a_short_pepper_is_refused() -> None:
    with pytest.raises(ValueError):
        hash_token("wdn_x", b"short")


def test_same_hash_compares_exactly() -> None:
    digest = hash_token(make_token(os.urandom(32)), PEPPER)
    assert same_hash(digest, digest)
    assert not same_hash(digest, digest[:-1] + ("0" if digest[-1] != "0" else "1"))
    assert not same_hash(digest, "")
