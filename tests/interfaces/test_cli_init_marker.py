"""A home that `warden init` set up knows it: a lost registry or key file is an error that says
how to restore it, never silently remade empty (README "Where state lives")."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

from tests.conftest import Cli


def test_init_writes_the_marker(cli: Cli, home: Path) -> None:
    first = cli("init", "--json")
    assert first.code == 0 and ".initialised" in first.json["data"]["created"]
    assert (home / ".initialised").is_file()
    assert ".initialised" not in cli("init", "--json").json["data"]["created"]


def test_a_deleted_or_emptied_registry_is_an_error_not_a_fresh_one(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    (home / "warden.db").unlink()
    for name in ("warden.db-wal", "warden.db-shm"):
        (home / name).unlink(missing_ok=True)
    result = cli("list", "--json")
    assert result.code == 1 and result.json["error"]["code"] == "unavailable"
    assert str(home / "warden.db") in result.json["error"]["message"]
    assert "backup" in result.json["error"]["message"]
    assert not (home / "warden.db").exists()  # nothing was recreated
    assert cli("init").code == 1
    (home / "warden.db").write_bytes(b"")
    emptied = cli("list", "--json")
    assert emptied.code == 1 and "empty" in emptied.json["error"]["message"]


def test_a_deleted_key_file_is_an_error_naming_it(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    for key in ("pepper", "master.key"):
        data = (home / "keys" / key).read_bytes()
        (home / "keys" / key).unlink()
        result = cli("bot", "register", "b1", "--json") if key == "pepper" else cli(
            "secret", "set", "S1", "--json", input="v")
        assert result.code == 1, result.stdout + result.stderr
        message = result.json["error"]["message"]
        assert str(home / "keys" / key) in message and "--reset-keys" in message and "backup" in message
        assert not (home / "keys" / key).exists()
        (home / "keys" / key).write_bytes(data)
        os.chmod(home / "keys" / key, 0o600)


def test_reset_keys_needs_yes_and_says_what_it_voids(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    old = (home / "keys" / "pepper").read_bytes()
    (home / "keys" / "pepper").unlink()
    refused = cli("init", "--reset-keys")
    assert refused.code == 2 and "every grant token" in refused.stderr and "every stored secret" in refused.stderr
    assert cli("init", "--reset-keys", "--yes").code == 0
    assert (home / "keys" / "pepper").read_bytes() != old
    assert list((home / "keys").glob("replaced-*/master.key"))  # the old key is kept, not destroyed
    assert cli("init").code == 0


def test_keys_from_the_environment_need_no_files(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    (home / "keys" / "pepper").unlink()
    (home / "keys" / "master.key").unlink()
    env = {"WARDEN_TOKEN_PEPPER": base64.b64encode(b"p" * 32).decode(),
           "WARDEN_MASTER_KEY": base64.b64encode(b"m" * 32).decode()}
    assert cli("init", env=env).code == 0
    assert cli("secret", "set", "S1", input="v", env=env).code == 0


def test_a_home_from_before_the_marker_keeps_working_and_is_marked(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    (home / ".initialised").unlink()  # as homes made by earlier versions
    assert cli("list").code == 0
    assert ".initialised" in cli("init", "--json").json["data"]["created"]


def test_a_home_from_before_the_marker_still_guards_its_state(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    assert cli("bot", "register", "b1").code == 0
    (home / ".initialised").unlink()
    (home / "keys" / "pepper").unlink()  # grants rows need it: not remade
    assert cli("bot", "register", "b2").code == 1
    with sqlite3.connect(home / "warden.db") as conn:
        conn.execute("DELETE FROM bots")
    assert cli("bot", "register", "b3").code == 0  # nothing depended on it: made on first use
    (home / "warden.db").unlink()
    assert cli("list").code == 1  # key files say this home was set up


def test_a_fresh_home_needs_no_init(cli: Cli, home: Path) -> None:
    assert cli("list").code == 0
    assert cli("bot", "register", "b1").code == 0


def test_inits_at_once_all_set_up_one_home(cli: Cli, tmp_path: Path) -> None:
    """Four `warden init` at once on a home not made yet: each asked whether a folder (the home,
    keys, layers...) was there and then made it, so the ones that lost the race ended with
    "internal error: FileExistsError"."""
    import concurrent.futures

    for attempt in range(3):
        fresh = tmp_path / f"home{attempt}"
        env = {"WARDEN_HOME": str(fresh)}
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            done = list(pool.map(lambda _, env=env: cli("init", env=env), range(4)))
        assert [d.code for d in done] == [0] * 4, [d.stderr for d in done]
        assert (fresh / ".initialised").is_file() and (fresh / "config.toml").read_text().strip()
        assert cli("audit", "verify", env={"WARDEN_HOME": str(fresh)}).code == 0
        assert not [p.name for p in fresh.iterdir() if p.name.endswith(".tmp")]
