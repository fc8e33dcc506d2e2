"""The cluster keyring adapter on a real SQLite registry (no server needed): wrapping, the
check value, compare-and-set, and a KEK rotation that crashed between commit and rename."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from warden.adapters.cluster_keys import CLUSTER_ENV, ClusterKeys
from warden.adapters.store.db import open_database
from warden.core.errors import Conflict, InvalidInput, KeysMismatch
from warden.services.keys import check_cluster_url


def _keys(tmp_path: Path, home: str = "a", environ: dict[str, str] | None = None) -> ClusterKeys:
    db = open_database(None, tmp_path)
    return ClusterKeys(db, tmp_path / home / "keys", environ or {}, clock=lambda: datetime.now(UTC))


def test_the_first_node_adopts_its_keys_and_a_second_reads_them_with_the_same_kek(tmp_path: Path) -> None:
    a = _keys(tmp_path)
    pepper = os.urandom(32)
    _, made = a.create(pepper=pepper)
    assert made and a.pepper() == pepper and a.peppers() == [pepper]
    assert oct((tmp_path / "a" / "keys" / "cluster.key").stat().st_mode & 0o777) == "0o600"
    b = _keys(tmp_path, "b")
    with pytest.raises(KeysMismatch, match="holds no cluster key"):
        b.check()
    kek = (tmp_path / "a" / "keys" / "cluster.key").read_bytes()
    import base64

    b_env = _keys(tmp_path, "b", {CLUSTER_ENV: base64.b64encode(kek).decode()})
    assert b_env.pepper() == pepper
    sealed = a.seal("API_KEY", b"v")
    assert b_env.open("API_KEY", sealed) == b"v"
    other = _keys(tmp_path, "c", {CLUSTER_ENV: base64.b64encode(os.urandom(32)).decode()})
    with pytest.raises(KeysMismatch, match="is not the cluster's"):
        other.pepper()


def test_rotations_compare_and_set_the_version(tmp_path: Path) -> None:
    a = _keys(tmp_path)
    a.create()
    old = a.pepper()
    assert a.rotate("pepper", expected=1)["version"] == 2
    assert a.peppers()[1] == old and a.pepper() != old
    with pytest.raises(Conflict, match="version 2, not 1"):
        a.rotate("secrets", expected=1)
    assert a.retire_peppers()["retired"] and a.peppers() == [a.pepper()]


def test_a_kek_rotation_whose_rename_was_lost_is_finished_by_the_next_reader(tmp_path: Path) -> None:
    a = _keys(tmp_path)
    a.create()
    sealed = a.seal("K", b"v")
    real_replace = os.replace
    calls: list[str] = []

    def crash_once(src: object, dst: object) -> None:
        if str(src).endswith("cluster.key.next") and not calls:
            calls.append("crashed")
            raise OSError("power cut")
        real_replace(src, dst)  # type: ignore[arg-type]

    os.replace = crash_once  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="power cut"):
            a.rotate_kek()
    finally:
        os.replace = real_replace
    assert (tmp_path / "a" / "keys" / "cluster.key.next").exists()  # the registry names this one now
    fresh = _keys(tmp_path)
    assert fresh.open("K", sealed) == b"v"
    assert not (tmp_path / "a" / "keys" / "cluster.key.next").exists()
    assert fresh.node_kek_id() == fresh.check().kek_id


def test_the_kek_from_the_environment_is_rotated_only_to_a_given_key(tmp_path: Path) -> None:
    import base64

    env = {CLUSTER_ENV: base64.b64encode(os.urandom(32)).decode()}
    a = _keys(tmp_path, environ=env)
    a.create()
    assert not (tmp_path / "a" / "keys" / "cluster.key").exists()
    with pytest.raises(InvalidInput, match="--key-file"):
        a.rotate_kek()


@pytest.mark.parametrize(("url", "ok"), [
    ("postgresql://u@h:5432/d", "postgresql+psycopg://u@h:5432/d"),
    ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
    ("sqlite:////tmp/x.db", None), ("mysql://u@h/d", None), ("postgresql://", None), ("postgresql://a b", None),
])
def test_a_cluster_url_is_postgresql(url: str, ok: str | None) -> None:
    if ok is None:
        with pytest.raises(InvalidInput):
            check_cluster_url(url)
    else:
        assert check_cluster_url(url) == ok


def test_two_inits_at_once_on_the_first_node_agree_on_one_cluster_key(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # B looked (no keyring, no cluster key) before A made both: the window of two `warden init` at once.
    a, b = _keys(tmp_path), _keys(tmp_path)
    looks: list[str] = []
    real_state = b.state
    monkeypatch.setattr(b, "state", lambda: real_state() if looks else looks.append("once"))
    monkeypatch.setattr(b, "_node_keks", dict)
    a.create()
    kek = (tmp_path / "a" / "keys" / "cluster.key").read_bytes()
    assert not b.create()[1]  # the keyring is A's, and B left A's cluster key in place
    assert (tmp_path / "a" / "keys" / "cluster.key").read_bytes() == kek
    _keys(tmp_path).check()


def test_a_kek_rotation_after_one_whose_rename_was_lost_keeps_the_registrys_key(tmp_path: Path) -> None:
    a = _keys(tmp_path)
    a.create()
    sealed = a.seal("K", b"v")
    real_replace = os.replace

    def crash(src: object, dst: object) -> None:
        if str(src).endswith("cluster.key.next"):
            raise OSError("power cut")
        real_replace(src, dst)  # type: ignore[arg-type]

    os.replace = crash  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="power cut"):
            a.rotate_kek()
    finally:
        os.replace = real_replace
    again = _keys(tmp_path)
    again.rotate_kek()  # the next rotation on this node: it must not write over the committed key
    fresh = _keys(tmp_path)
    assert fresh.open("K", sealed) == b"v"
    assert fresh.node_kek_id() == fresh.check().kek_id


def test_a_token_check_reads_the_cluster_key_file_once_not_at_every_use(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    a = _keys(tmp_path)
    a.create()
    pepper = a.pepper()
    reads: list[Path] = []
    monkeypatch.setattr("warden.adapters.cluster_keys.read_key_file", lambda path: reads.append(path))
    assert a.pepper() == pepper and a.peppers() == [pepper]
    assert reads == []
    a.rotate_kek()  # the rotating node holds the new KEK already
    assert a.pepper() == pepper and reads == []
    monkeypatch.undo()
    b = _keys(tmp_path)  # another process of the node: it reads the new key from the file
    assert b.pepper() == pepper


def test_a_kek_rotation_whose_commit_answer_was_lost_keeps_the_new_key(tmp_path: Path) -> None:
    """The registry committed the rotation but the answer never came back (a connection lost at
    COMMIT): `.next` is then the only copy of the key the registry names, and is kept."""
    import contextlib
    from collections.abc import Iterator

    a = _keys(tmp_path)
    a.create()
    sealed = a.seal("K", b"v")
    real = a._db.transaction

    @contextlib.contextmanager
    def committed_then_lost(*args: object, **kwargs: object) -> Iterator[object]:
        rotating = a.next_file.exists()  # the rotation's own transaction (.next is written before it)
        with real(*args, **kwargs) as sql:  # type: ignore[arg-type]
            yield sql
        if rotating:
            raise ConnectionError("server closed the connection after COMMIT")

    a._db.transaction = committed_then_lost  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        a.rotate_kek()
    fresh = _keys(tmp_path)  # the next reader puts the committed key in place
    assert fresh.open("K", sealed) == b"v"
    assert fresh.node_kek_id() == fresh.check().kek_id
