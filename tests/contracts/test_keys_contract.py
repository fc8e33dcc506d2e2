"""The Keys port (core/ports/registry.py) held to the same checks in its fake
(tests/support/fake_keys.FakeKeys: no cipher) and the real keystore (adapters/keystore.Keystore:
AES-256-GCM, key files in a folder): what the secret and grant services rely on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.fake_keys import FakeKeys
from warden.adapters.keystore import Keystore
from warden.core.errors import Unavailable
from warden.core.ports import Keys


@pytest.fixture(params=["fake", "host"])
def keys(request: pytest.FixtureRequest, tmp_path: Path) -> Keys:
    return FakeKeys() if request.param == "fake" else Keystore(tmp_path / "keys", {})


def test_the_pepper_is_32_bytes_and_stays(keys: Keys) -> None:
    pepper = keys.pepper()
    assert len(pepper) == 32 and keys.pepper() == pepper


def test_a_sealed_value_opens_under_its_own_name_only(keys: Keys) -> None:
    sealed = keys.seal("API_KEY", b"s3cret")
    assert keys.open("API_KEY", sealed) == b"s3cret"
    with pytest.raises(Unavailable):
        keys.open("OTHER_KEY", sealed)  # a row copied onto another name


def test_an_altered_value_does_not_open(keys: Keys) -> None:
    sealed = keys.seal("API_KEY", b"s3cret")
    flipped = sealed.ciphertext[:-1] + bytes([sealed.ciphertext[-1] ^ 1])
    with pytest.raises(Unavailable):
        keys.open("API_KEY", dataclasses.replace(sealed, ciphertext=flipped))
    with pytest.raises(Unavailable):
        keys.open("API_KEY", dataclasses.replace(sealed, key_id="a-key-that-is-gone"))


def test_a_rotation_reseals_under_the_next_key(keys: Keys) -> None:
    old = keys.seal("API_KEY", b"one")
    kid, key = keys.begin_rotation()
    assert keys.begin_rotation() == (kid, key)  # after a crash: the same next key again
    new = keys.seal("API_KEY", b"one", key=(kid, key))
    assert new.key_id == kid != old.key_id
    assert keys.open("API_KEY", old) == keys.open("API_KEY", new) == b"one"  # both, while rotating
    keys.finish_rotation()
    assert keys.open("API_KEY", new) == b"one"
    assert keys.seal("OTHER", b"two").key_id == kid
    with pytest.raises(Unavailable):
        keys.open("API_KEY", old)  # the old key is gone
