"""TLS between nodes: node A serves HTTPS (`warden serve --tls-cert --tls-key`) with a certificate
a throwaway CA made in the test signed for 127.0.0.1 (an IP SAN); A registers its https:// URL;
node B forwards to it verifying with `node.ca_file` = that CA; without the CA, B answers
`unavailable` naming A and saying the certificate was not trusted.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import secrets
import ssl
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, warden_environ

ADMIN_URL = os.environ.get("WARDEN_TEST_DATABASE_URL", "")
pytestmark = pytest.mark.skipif(not ADMIN_URL.startswith("postgresql"),
                                reason="set WARDEN_TEST_DATABASE_URL=postgresql+psycopg://… to test PostgreSQL")


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA, and a server certificate it signed for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "warden test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
          .not_valid_after(now + timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-a")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return paths


class Node:
    def __init__(self, name: str, environ: dict[str, str], logs: Path) -> None:
        self.name, self.environ, self.logs = name, environ, logs

    def cli(self, *args: str, check: bool = True,
            extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "warden", *args], capture_output=True, text=True,
                              env={**self.environ, **(extra or {})}, timeout=120, check=False)
        if check:
            assert proc.returncode == 0, proc.stderr
        return proc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, Node, tuple[Path, Path, Path], str]]:
    """Nodes A and B on one fresh database, the certificates, and a token for A's workspace `tls`."""
    name = "warden_tls_" + secrets.token_hex(6)
    _admin(f"CREATE DATABASE {name}")
    database = f"{ADMIN_URL.rpartition('/')[0]}/{name}"
    try:
        shared = {"WARDEN_DATABASE_URL": database,
                  "WARDEN_TOKEN_PEPPER": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                  "WARDEN_MASTER_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
                  "WARDEN_CLUSTER_KEY": base64.b64encode(os.urandom(32)).decode(),
                  "WARDEN_NODE_HEARTBEAT_INTERVAL": "1s", "WARDEN_JANITOR_INTERVAL": "0s"}
        nodes = []
        for node_name in ("node-a", "node-b"):
            root = tmp_path_factory.mktemp(node_name)
            node = Node(node_name, {**warden_environ(root / "home"), **shared, "WARDEN_NODE": node_name}, root)
            node.cli("init")
            nodes.append(node)
        a, b = nodes
        certs = make_certificates(tmp_path_factory.mktemp("certs"))
        a.cli("create", "tls", "--template", "minimal")
        a.cli("bot", "register", "tester")
        granted = a.cli("grant", "tls", "tester", "--permissions", "read,write,execute", "--ttl", "1h", "--json")
        yield a, b, certs, json.loads(granted.stdout)["data"]["token"]
    finally:
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _exec(url: str, token: str, cmd: list[str]) -> httpx.Response:
    return httpx.post(f"{url}/v1/workspaces/tls/exec", json={"cmd": cmd},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)


def test_b_forwards_to_a_over_https_verified_by_node_ca_file(
        cluster: tuple[Node, Node, tuple[Path, Path, Path], str]) -> None:
    a, b, (ca, cert, key), token = cluster
    trusting = ssl.create_default_context(cafile=str(ca))
    with ServeProcess(a.environ, a.logs, "--tls-cert", str(cert), "--tls-key", str(key), verify=trusting) as server_a:
        assert server_a.url.startswith("https://127.0.0.1:")
        # A registered its https:// URL: that is where the other nodes forward to.
        nodes = json.loads(b.cli("nodes", "--json").stdout)["data"]["nodes"]
        assert {n["node"]: n["url"] for n in nodes}["node-a"] == server_a.url
        # Plain HTTP to A's port is no way in.
        with pytest.raises(httpx.HTTPError):
            httpx.get(server_a.url.replace("https://", "http://") + "/v1/health", timeout=5).raise_for_status()

        b_env = {**b.environ, "WARDEN_NODE_CA_FILE": str(ca)}
        with ServeProcess(b_env, b.logs) as server_b:
            marker = "tls-" + secrets.token_hex(4)
            forwarded = _exec(server_b.url, token, ["echo", marker])
            assert forwarded.status_code == 200, forwarded.text
            assert forwarded.json()["stdout"].strip() == marker
        events = json.loads(a.cli("audit", "--workspace", "tls", "--limit", "50", "--json").stdout)["data"]
        assert any(e["action"] == "run" and marker in json.dumps(e["detail"]) for e in events)

        # B without the CA: the system's CAs do not know A's; the request is refused, saying why.
        with ServeProcess(b.environ, b.logs) as server_b:
            marker = "untrusted-" + secrets.token_hex(4)
            refused = _exec(server_b.url, token, ["echo", marker])
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["code"] == "unavailable"
            assert "node-a" in error["message"] and "certificate" in error["message"] \
                and "not trusted" in error["message"]
            assert "Traceback" not in server_b.output().decode(errors="replace")
        events = json.loads(a.cli("audit", "--workspace", "tls", "--limit", "50", "--json").stdout)["data"]
        assert not any(marker in json.dumps(e["detail"]) for e in events)  # nothing ran on A

        # A ca_file that is no CA file: unavailable too, one line, no traceback.
        with ServeProcess({**b.environ, "WARDEN_NODE_CA_FILE": str(b.logs / "missing.pem")}, b.logs) as server_b:
            broken = _exec(server_b.url, token, ["true"])
            assert broken.status_code == 503 and "node.ca_file" in broken.json()["error"]["message"]


def test_serve_refuses_half_or_bad_tls_settings_in_one_line(
        cluster: tuple[Node, Node, tuple[Path, Path, Path], str]) -> None:
    a, _, (ca, cert, key), _ = cluster
    for args in (("--tls-cert", str(cert)), ("--tls-key", str(key)),
                 ("--tls-cert", str(cert), "--tls-key", str(ca)),  # a certificate is no key
                 ("--tls-cert", str(cert), "--tls-key", str(a.logs / "nope.pem"))):
        refused = a.cli("serve", "--port", "0", *args, check=False)
        assert refused.returncode == 2, (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and "tls" in refused.stderr, refused.stderr
    # The settings do the same as the flags.
    refused = a.cli("serve", "--port", "0", check=False, extra={"WARDEN_API_TLS_CERT": str(cert)})
    assert refused.returncode == 2 and "--tls-key" in refused.stderr
