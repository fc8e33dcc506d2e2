"""Secrets: sealed at rest, never in the audit log, injected only by name, key rotation."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from warden.bootstrap import App, bootstrap
from warden.core.errors import InvalidInput, NotFound, Unavailable

VALUE = "sk-test-9f8e7d6c5b4a"


def _home_bytes(app: App) -> bytes:
    return b"".join(p.read_bytes() for p in Path(app.home.root).rglob("*") if p.is_file())


def test_set_list_and_inject(app: App) -> None:
    assert app.secrets.set("API_KEY", VALUE + "\n") is True  # the newline of `echo` is dropped
    assert app.secrets.set("API_KEY", VALUE) is False
    listed = [row.to_json() for row in app.secrets.list_secrets()]
    assert [s["name"] for s in listed] == ["API_KEY"]
    assert VALUE not in repr(listed)
    injection = app.secrets.environment(["API_KEY", "GONE"])
    assert injection.env == {"API_KEY": VALUE}
    assert injection.missing == ("GONE",)
    assert app.secrets.environment([]).env == {}


def test_values_are_not_stored_or_audited_in_plaintext(app: App) -> None:
    app.secrets.set("API_KEY", VALUE)
    app.secrets.set("OTHER", "x" * 40)
    app.close()
    assert VALUE.encode() not in _home_bytes(app)
    events = app.audit.list(limit=100)
    assert VALUE not in repr(events)
    assert any(e.action == "secret.set" and e.target == "secret:API_KEY" for e in events)


@pytest.mark.parametrize(("name", "value"), [("lower", "v"), ("PATH", "v"), ("A", ""), ("A", "\n"),
                                             ("A", "a\0b"), ("A", b"\xff\xfe"), ("A", "x" * 70000)])
def test_bad_names_and_values_change_nothing(app: App, name: str, value: str | bytes) -> None:
    with pytest.raises(InvalidInput):
        app.secrets.set(name, value)
    assert app.secrets.names() == []


def test_remove(app: App) -> None:
    app.secrets.set("A_KEY", "v")
    app.secrets.remove("A_KEY")
    assert app.secrets.names() == []
    with pytest.raises(NotFound):
        app.secrets.remove("A_KEY")


def test_rotate_key_reseals_everything_and_drops_the_old_key(app: App) -> None:
    app.secrets.set("ONE", "first")
    app.secrets.set("TWO", "second")
    old_key = (app.home.keys / "master.key").read_bytes()
    old_ids = {row.sealed.key_id for row in app.secrets.list_secrets()}
    new_id, count = app.secrets.rotate_key()
    assert count == 2
    assert {row.sealed.key_id for row in app.secrets.list_secrets()} == {new_id}
    assert new_id not in old_ids
    assert (app.home.keys / "master.key").read_bytes() != old_key
    assert not (app.home.keys / "master.key.next").exists()
    assert app.secrets.environment(["ONE", "TWO"]).env == {"ONE": "first", "TWO": "second"}
    assert any(e.action == "secret.rotate_key" for e in app.audit.list(limit=20))


def test_a_secret_set_while_the_key_rotates_is_not_lost(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`secret set` sealed its value under the current key; a rotation (another process) then
    re-sealed every stored secret and retired that key; the set stored its value after: sealed
    under a key no longer anywhere, the secret was lost, and every later rotation failed on it
    (found by a `secret set` and `keys rotate secrets` started together, 1 in 40). Now a rotation
    waits for the set, which it then re-seals."""
    app.secrets.set("ONE", "first")
    sealed, go = threading.Event(), threading.Event()
    seal = app.keystore.seal

    def seal_then_wait(name: str, plaintext: bytes, **kw: object) -> object:
        done = seal(name, plaintext, **kw)  # type: ignore[arg-type]
        if name == "RACED":
            sealed.set()
            go.wait(timeout=30)
        return done

    monkeypatch.setattr(app.keystore, "seal", seal_then_wait)
    _rotation_meanwhile(app, threading.Thread(target=app.secrets.set, args=("RACED", "second")), sealed, go)
    assert app.secrets.environment(["ONE", "RACED"]).env == {"ONE": "first", "RACED": "second"}
    app.secrets.rotate_key()  # and the next rotation is not stopped by it
    assert app.secrets.environment(["RACED"]).env == {"RACED": "second"}


def test_a_run_reading_its_secrets_while_the_key_rotates_gets_them(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run read its secrets' rows, a rotation re-sealed them and retired the key they were
    sealed with, and the run then opened what it had read: "was sealed with key mk_…, which is
    not in keys/", the run refused. Found by reading the code; now the rotation waits."""
    app.secrets.set("TOKEN", "value")
    read, go = threading.Event(), threading.Event()
    opened = app.keystore.open
    got: list[dict[str, str]] = []

    def open_after_a_pause(name: str, sealed: object) -> bytes:
        read.set()
        go.wait(timeout=30)
        return opened(name, sealed)  # type: ignore[arg-type]

    monkeypatch.setattr(app.keystore, "open", open_after_a_pause)
    worker = threading.Thread(target=lambda: got.append(app.secrets.environment(["TOKEN"]).env))
    _rotation_meanwhile(app, worker, read, go)
    assert got == [{"TOKEN": "value"}]


def _rotation_meanwhile(app: App, worker: threading.Thread, paused: threading.Event, go: threading.Event) -> None:
    """Start `worker`; once it has `paused` half way, a rotation of the master key (in an App of
    its own, as another process) gets its chance to run to its end before `go` lets the worker
    finish. Without the rotation waiting for the worker, it does."""
    worker.start()
    assert paused.wait(timeout=30)
    other = bootstrap(app.home.root, environ=dict(app.environ))
    try:
        rotator = threading.Thread(target=other.secrets.rotate_key)
        rotator.start()
        rotator.join(timeout=1)  # its chance to finish first: it must wait for the worker instead
        go.set()
        worker.join(timeout=30)
        rotator.join(timeout=30)
        assert not worker.is_alive() and not rotator.is_alive()
    finally:
        go.set()
        other.close()


def test_a_rotation_that_crashed_before_the_rename_is_still_readable(app: App) -> None:
    app.secrets.set("ONE", "first")
    app.keystore.begin_rotation()  # the next key is on disk, no row re-sealed yet
    reopened = bootstrap(app.home.root, environ=dict(app.environ))
    try:
        assert reopened.secrets.environment(["ONE"]).env == {"ONE": "first"}
        reopened.secrets.rotate_key()  # finishing later works
        assert reopened.secrets.environment(["ONE"]).env == {"ONE": "first"}
    finally:
        reopened.close()


def test_a_lost_master_key_is_reported_not_guessed(app: App) -> None:
    app.secrets.set("ONE", "first")
    (app.home.keys / "master.key").unlink()
    with pytest.raises(Unavailable, match="restore it from a backup"):  # not silently remade
        app.keystore.ensure()
    app.keystore.reset("test")  # `warden init --reset-keys --yes`: a new, different key
    with pytest.raises(Unavailable, match="restore that key"):
        app.secrets.environment(["ONE"])


def test_a_secret_stored_under_a_name_now_refused_is_never_injected(app: App) -> None:
    """An older Warden accepted RES_OPTIONS as a secret name: it must not reach a sandbox now."""

    sealed = app.keystore.seal("RES_OPTIONS", b"ndots:1")
    with app.registry.transaction() as tx:
        tx.secrets.upsert("RES_OPTIONS", sealed, "2026-01-01T00:00:00+00:00")
    injected = app.secrets.environment(["RES_OPTIONS"])
    assert injected.env == {} and injected.missing == ("RES_OPTIONS",)


def test_a_backup_taken_while_the_key_rotates_holds_the_key_of_its_secrets(
        app: App, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`warden backup` copied the registry (secrets sealed under the current key), a rotation
    then re-sealed them and retired that key, and the backup copied the keys after it: restored,
    its secrets were sealed under a key it did not hold. The rotation now waits for the copy."""
    import tarfile

    from warden.adapters.backup import backup_home, restore_home

    app.secrets.set("ONE", "first")
    copied, go = threading.Event(), threading.Event()
    add = tarfile.TarFile.add

    def add_then_wait(self: tarfile.TarFile, name: object, arcname: object = None, *a: object, **kw: object) -> None:
        add(self, name, arcname, *a, **kw)  # type: ignore[arg-type]
        if arcname == "warden.db":
            copied.set()
            go.wait(timeout=30)

    monkeypatch.setattr(tarfile.TarFile, "add", add_then_wait)
    target = tmp_path / "home.tgz"
    backup = threading.Thread(target=backup_home, args=(app.home.root, app.home.root / "warden.db", target),
                              kwargs={"workspaces_root": app.root_dir, "include_workspaces": False,
                                      "keys_steady": app.keystore.sealing()})
    _rotation_meanwhile(app, backup, copied, go)  # between the registry's copy and the keys'
    elsewhere = tmp_path / "restored"
    restore_home(target, elsewhere, replace=False)
    restored = bootstrap(elsewhere, environ={**app.environ, "WARDEN_HOME": str(elsewhere)})
    try:
        assert restored.secrets.environment(["ONE"]).env == {"ONE": "first"}
    finally:
        restored.close()
