"""Two nodes (two homes) of one cluster on one throwaway PostgreSQL: the keys they share.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on
(as tests/adapters/test_postgres.py); each test gets a database of its own. Node A is set up
first (`WARDEN_DATABASE_URL=URL warden init`), node B joins with A's cluster key
(`warden init --join URL`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import Cli, isolated_environ
from tests.support.servers import ServeProcess

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not ADMIN_URL.startswith("postgresql"),
                                reason="set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")


def _admin(sql: str, database: str | None = None) -> list[tuple[object, ...]]:
    import psycopg

    url = ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    if database is not None:
        url = url.rpartition("/")[0] + "/" + database
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


@dataclass
class Cluster:
    url: str
    database: str
    a: Cli
    b: Cli
    a_home: Path
    b_home: Path

    def copy_key(self) -> None:
        """What the operator does: A's cluster key into B's home, mode 0600."""
        keys = self.b_home / "keys"
        keys.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(self.a_home / "keys" / "cluster.key", keys / "cluster.key")
        os.chmod(keys / "cluster.key", 0o600)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    name = "warden_keys_" + secrets.token_hex(6)
    _admin(f"CREATE DATABASE {name}")
    url = ADMIN_URL.rpartition("/")[0] + "/" + name
    a_home, b_home = tmp_path / "node-a", tmp_path / "node-b"
    try:
        yield Cluster(url, name, Cli({**isolated_environ(a_home), "WARDEN_DATABASE_URL": url}),
                      Cli(isolated_environ(b_home)), a_home, b_home)
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _joined(c: Cluster) -> None:
    first = c.a("init", "--json")
    assert first.code == 0, first.stderr
    assert "cluster keyring" in first.json["data"]["created"]
    c.copy_key()
    joined = c.b("init", "--join", c.url, "--json")
    assert joined.code == 0, joined.stderr
    assert joined.json["data"]["cluster"] is True


def _grant_with_secret(c: Cluster, value: str = "s3cr3t-value") -> str:
    assert c.a("create", "w1").code == 0
    assert c.a("bot", "register", "bot1").code == 0
    assert c.a("secret", "set", "API_KEY", input=value).code == 0
    granted = c.a("grant", "w1", "bot1", "--permissions", "read,execute,secrets", "--secrets", "API_KEY", "--json")
    assert granted.code == 0, granted.stderr
    return str(granted.json["data"]["token"])


PROBE = ["python3", "-c", "import os; print(os.environ.get('API_KEY'))"]


def _run_as(cli: Cli, token: str) -> tuple[int, str, str]:
    done = cli("run", "w1", "--as-token-env", "--json", "--", *PROBE, env={"WARDEN_TOKEN": token})
    out = done.json["data"]["stdout"] if done.code == 0 else ""
    return done.code, out, done.stderr


def test_a_joined_node_verifies_the_first_nodes_tokens_and_opens_its_secrets(cluster: Cluster) -> None:
    _joined(cluster)
    token = _grant_with_secret(cluster)
    assert _run_as(cluster.b, token)[:2] == (0, "s3cr3t-value\n")
    # B never made keys of its own: only the cluster key the operator copied
    assert sorted(p.name for p in (cluster.b_home / "keys").iterdir()) == ["cluster.key"]
    assert "url = " in (cluster.b_home / "config.toml").read_text()  # the registry recorded in its config
    # a secret set on B opens on A; a token minted on B verifies on A
    assert cluster.b("secret", "set", "API_KEY", input="from-b").code == 0
    token_b = cluster.b("grant", "w1", "bot1", "--permissions", "execute,secrets", "--secrets", "API_KEY",
                        "--json").json["data"]["token"]
    assert _run_as(cluster.a, token_b)[:2] == (0, "from-b\n")


def test_a_node_with_another_cluster_key_is_refused_at_join_and_at_start(cluster: Cluster) -> None:
    assert cluster.a("init").code == 0
    without = cluster.b("init", "--join", cluster.url, "--json")  # no cluster key at all: says what to copy
    assert without.code == 1 and without.json["error"]["code"] == "keys_mismatch"
    assert "copy keys/cluster.key" in without.json["error"]["message"]
    keys = cluster.b_home / "keys"
    keys.mkdir(parents=True, mode=0o700)
    (keys / "cluster.key").write_bytes(os.urandom(32))
    os.chmod(keys / "cluster.key", 0o600)
    refused = cluster.b("init", "--join", cluster.url, "--json")
    assert refused.code == 1
    assert refused.json["error"]["code"] == "keys_mismatch"
    assert "is not the cluster's" in refused.json["error"]["message"]
    assert not (cluster.b_home / "config.toml").exists()  # nothing recorded
    assert not (cluster.b_home / ".initialised").exists()
    # joined properly, then the key is swapped: start-up of serve and token commands are refused
    cluster.copy_key()
    assert cluster.b("init", "--join", cluster.url).code == 0
    token = _grant_with_secret(cluster)
    (keys / "cluster.key").write_bytes(os.urandom(32))
    serve = cluster.b("serve", "--port", "0", "--json", timeout=60)
    assert serve.code == 1 and serve.json["error"]["code"] == "keys_mismatch"
    ran = cluster.b("run", "w1", "--as-token-env", "--", *PROBE, env={"WARDEN_TOKEN": token})
    assert ran.code == 126 and "is not the cluster's" in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert ran.stdout == ""  # nothing ran
    assert cluster.b("bot", "register", "other", "--json").json["error"]["code"] == "keys_mismatch"
    assert cluster.b("init", "--json").json["error"]["code"] == "keys_mismatch"


def test_the_wrapped_keys_in_the_registry_are_not_the_keys(cluster: Cluster) -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    _joined(cluster)
    token = _grant_with_secret(cluster)
    kek = (cluster.a_home / "keys" / "cluster.key").read_bytes()
    rows = _admin("SELECT id, purpose, wrapped FROM cluster_keys", cluster.database)
    plain = {}
    for kid, purpose, wrapped in rows:
        raw = base64.b64decode(str(wrapped))
        plain[purpose] = AESGCM(kek).decrypt(raw[:12], raw[12:], f"warden-cluster-key:{purpose}:{kid}".encode())
    # the unwrapped pepper is the one tokens are hashed under
    stored = _admin("SELECT token_hash FROM grants", cluster.database)
    assert hmac.new(plain["pepper"], token.encode(), hashlib.sha256).hexdigest() in {r[0] for r in stored}
    # and no form of either key, nor the cluster key, is anywhere in the registry
    dump = subprocess.run(["pg_dump", "-h", "127.0.0.1", "-p", ADMIN_URL.rpartition(":")[2].split("/")[0],
                           "-U", "postgres", cluster.database], capture_output=True, check=True).stdout
    for key in (*plain.values(), kek):
        for form in (key, key.hex().encode(), base64.b64encode(key), base64.urlsafe_b64encode(key)):
            assert form not in dump


def test_rotations_while_both_nodes_serve(cluster: Cluster, tmp_path: Path) -> None:
    _joined(cluster)
    token = _grant_with_secret(cluster)
    (tmp_path / "a-log").mkdir()
    (tmp_path / "b-log").mkdir()

    def exec_on(url: str, bearer: str) -> httpx.Response:
        return httpx.post(f"{url}/v1/workspaces/w1/exec", json={"cmd": PROBE},
                          headers={"Authorization": f"Bearer {bearer}"}, timeout=60)

    with ServeProcess(cluster.a.environ, tmp_path / "a-log") as a, \
            ServeProcess(cluster.b.environ, tmp_path / "b-log") as b:
        assert exec_on(b.url, token).json()["stdout"] == "s3cr3t-value\n"
        # the pepper: old tokens still verify on both nodes; new ones too
        assert cluster.a("keys", "rotate", "pepper").code == 0
        assert exec_on(b.url, token).json()["stdout"] == "s3cr3t-value\n"
        new_token = cluster.b("grant", "w1", "bot1", "--permissions", "execute,secrets", "--secrets", "API_KEY",
                              "--json").json["data"]["token"]
        assert exec_on(a.url, new_token).json()["stdout"] == "s3cr3t-value\n"
        # the secrets key: every secret re-sealed in one transaction; both servers still open it
        rotated = cluster.b("keys", "rotate", "secrets", "--json")
        assert rotated.code == 0 and rotated.json["data"]["resealed"] == 1
        key_ids = {r[0] for r in _admin("SELECT key_id FROM secrets", cluster.database)}
        assert key_ids == {rotated.json["data"]["key_id"]}
        assert exec_on(a.url, token).json()["stdout"] == "s3cr3t-value\n"
        assert exec_on(b.url, token).json()["stdout"] == "s3cr3t-value\n"
        # the cluster key: rotated on A; B is refused until given the new one, then works again
        assert cluster.a("keys", "rotate", "kek").code == 0
        assert cluster.b("secret", "set", "OTHER", "--json", input="x").json["error"]["code"] == "keys_mismatch"
        cluster.copy_key()
        assert cluster.b("secret", "set", "OTHER", input="x").code == 0
        assert exec_on(b.url, new_token).json()["stdout"] == "s3cr3t-value\n"
        # retiring the old pepper: tokens minted before the rotation stop, newer ones go on
        assert cluster.b("keys", "retire-pepper", "--yes").code == 0
        assert exec_on(a.url, token).status_code == 403
        assert exec_on(b.url, new_token).status_code == 200


def test_two_rotations_at_once_one_wins(cluster: Cluster) -> None:
    _joined(cluster)
    _grant_with_secret(cluster)
    version = cluster.a("keys", "show", "--json").json["data"]["version"]

    def rotate(cli: Cli) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "warden", "keys", "rotate", "secrets", "--if-version",
                               str(version), "--json"], env=cli.environ, capture_output=True, timeout=120,
                              check=False)

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(rotate, [cluster.a, cluster.b]))
    assert sorted(p.returncode for p in done) == [0, 5]
    loser = next(p for p in done if p.returncode == 5)
    assert b'"conflict"' in loser.stdout
    shown = cluster.b("keys", "show", "--json").json["data"]
    assert shown["version"] == version + 1
    assert [k["state"] for k in shown["keys"] if k["purpose"] == "secrets"] == ["current", "previous"]
    token = cluster.a("grant", "w1", "bot1", "--permissions", "execute,secrets", "--secrets", "API_KEY",
                      "--json").json["data"]["token"]
    assert _run_as(cluster.b, token)[:2] == (0, "s3cr3t-value\n")  # the winner's key opens every secret


def test_join_refuses_a_home_with_a_registry_of_its_own_and_a_registry_without_a_cluster(cluster: Cluster) -> None:
    assert cluster.b("init").code == 0  # B set up alone first (SQLite)
    cluster.a("init")
    cluster.copy_key()
    assert cluster.b("init", "--join", cluster.url).code == 5
    empty = "warden_keys_empty_" + secrets.token_hex(4)
    _admin(f"CREATE DATABASE {empty}")
    try:
        fresh = Cli(isolated_environ(cluster.b_home.parent / "node-c"))
        out = fresh("init", "--join", cluster.url.rpartition("/")[0] + "/" + empty, "--json")
        assert out.code == 1 and "holds no cluster keys" in out.json["error"]["message"]
        assert fresh("init", "--join", "sqlite:////tmp/x.db").code == 2
    finally:
        _admin(f"DROP DATABASE IF EXISTS {empty} WITH (FORCE)")
