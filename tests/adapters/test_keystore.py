"""The keystore: key files (0600, atomic, shared by racing processes), AES-GCM, rotation."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from warden.adapters.keystore import KEY_BYTES, Keystore, Sealed, key_id
from warden.core.errors import InvalidInput, Unavailable


def test_ensure_creates_both_keys_private_and_is_idempotent(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    assert sorted(keys.ensure()) == ["keys/master.key", "keys/pepper"]
    for name in ("pepper", "master.key"):
        info = (tmp_path / "keys" / name).stat()
        assert stat.S_IMODE(info.st_mode) == 0o600
        assert info.st_size == KEY_BYTES
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    pepper = keys.pepper()
    assert keys.ensure() == []
    assert Keystore(tmp_path / "keys", {}).pepper() == pepper
    assert not [p for p in (tmp_path / "keys").iterdir() if p.name.endswith(".tmp")]


def test_keys_are_made_on_first_use(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    sealed = keys.seal("A", b"value")
    assert (tmp_path / "keys" / "master.key").exists()
    assert keys.open("A", sealed) == b"value"


def test_racing_processes_agree_on_one_pepper(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from warden.adapters.keystore import Keystore;"
            "sys.stdout.write(Keystore(Path(sys.argv[1]), {}).pepper().hex())")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "keys")], stdout=subprocess.PIPE)
             for _ in range(6)]
    seen = {p.communicate(timeout=60)[0] for p in procs}
    assert len(seen) == 1
    assert bytes.fromhex(seen.pop().decode()) == (tmp_path / "keys" / "pepper").read_bytes()


def test_a_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    keys.ensure()
    os.chmod(tmp_path / "keys" / "pepper", 0o644)
    with pytest.raises(Unavailable, match="chmod 600"):
        Keystore(tmp_path / "keys", {}).pepper()


def test_a_damaged_key_file_is_refused(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    keys.ensure()
    (tmp_path / "keys" / "master.key").write_bytes(b"short")
    with pytest.raises(Unavailable, match="damaged"):
        keys.current_key()


def test_keys_may_come_from_the_environment(tmp_path: Path) -> None:
    master = os.urandom(32)
    env = {"WARDEN_MASTER_KEY": base64.b64encode(master).decode(),
           "WARDEN_TOKEN_PEPPER": base64.urlsafe_b64encode(b"p" * 32).decode()}
    keys = Keystore(tmp_path / "keys", env)
    assert keys.ensure() == []
    assert keys.pepper() == b"p" * 32
    assert keys.current_key() == (key_id(master), master)
    assert not (tmp_path / "keys" / "master.key").exists()
    with pytest.raises(InvalidInput, match="WARDEN_MASTER_KEY"):
        keys.begin_rotation()


def test_a_bad_environment_key_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="base64"):
        Keystore(tmp_path / "keys", {"WARDEN_MASTER_KEY": "not-a-key"}).current_key()


def test_seal_binds_the_name_and_detects_tampering(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    sealed = keys.seal("API_KEY", b"sk-live-123")
    assert b"sk-live-123" not in sealed.ciphertext
    assert len(sealed.nonce) == 12
    assert keys.open("API_KEY", sealed) == b"sk-live-123"
    with pytest.raises(Unavailable, match="altered"):
        keys.open("OTHER_NAME", sealed)  # a row copied onto another name
    flipped = bytes([sealed.ciphertext[0] ^ 1]) + sealed.ciphertext[1:]
    with pytest.raises(Unavailable, match="altered"):
        keys.open("API_KEY", Sealed(flipped, sealed.nonce, sealed.key_id))
    assert keys.seal("API_KEY", b"sk-live-123").nonce != sealed.nonce


def test_rotation_keeps_old_rows_readable_until_finished(tmp_path: Path) -> None:
    keys = Keystore(tmp_path / "keys", {})
    old = keys.seal("A", b"one")
    new_id, new_key = keys.begin_rotation()
    assert new_id != old.key_id
    resealed = keys.seal("A", b"one", key=(new_id, new_key))
    # Mid-rotation (a crash here): both keys are on disk, both rows open.
    assert keys.open("A", old) == b"one"
    assert keys.open("A", resealed) == b"one"
    keys.finish_rotation()
    assert keys.current_key()[0] == new_id
    assert keys.open("A", resealed) == b"one"
    with pytest.raises(Unavailable, match="not in"):
        keys.open("A", old)
