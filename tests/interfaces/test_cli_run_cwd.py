"""`warden run --cwd`, the person's TLS trust in networked runs, and the no-network hint, through
the real CLI and bubblewrap (the HTTP side is tests/interfaces/test_http_exec_options.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("cwd-home")
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TERM", "TZ", "TMPDIR"}}
    return {**keep, "HOME": str(home.parent), "WARDEN_HOME": str(home)}


@pytest.fixture(scope="module")
def cli(env: dict[str, str]) -> Cli:
    return Cli(env)


@pytest.fixture(scope="module")
def ws(cli: Cli, env: dict[str, str]) -> Path:
    created = cli("create", "cwd-ws", "--json")
    assert created.code == 0, created.stderr
    folder = Path(created.json["data"]["path"])
    (folder / "src" / "pkg").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a folder")
    (folder / "up").symlink_to("/")
    (folder / "sideways").symlink_to(folder.parent)  # the other workspaces
    other = cli("create", "cwd-other", "--json")
    assert other.code == 0, other.stderr
    return folder


def test_a_command_starts_in_the_folder_it_names(cli: Cli, ws: Path) -> None:
    for cwd in ("src/pkg", f"{ws}/src/pkg", "./src//pkg/", "src/../src/pkg"):
        r = cli("run", "cwd-ws", "--cwd", cwd, "--", "sh", "-c", "pwd; touch here")
        assert (r.code, r.stdout) == (0, f"{ws}/src/pkg\n"), (cwd, r.stderr)
    assert (ws / "src" / "pkg" / "here").is_file()
    # HOME stays the workspace; without --cwd the command starts there too.
    r = cli("run", "cwd-ws", "--cwd", "src", "--", "sh", "-c", 'echo "$HOME"; cd; pwd')
    assert r.stdout == f"{ws}\n{ws}\n"
    assert cli("run", "cwd-ws", "--", "pwd").stdout == f"{ws}\n"


@pytest.mark.parametrize(("cwd", "why"), [
    ("..", "climbs out of the workspace"), ("src/../..", "climbs out of the workspace"),
    ("../cwd-other", "climbs out of the workspace"), ("/etc", "is outside the workspace"),
    ("/", "is outside the workspace"), ("{ws}-evil", "is outside the workspace"),
    ("{ws}/../cwd-other", "is outside the workspace"),
    ("up", "is a symbolic link, not a folder"), ("up/etc", "goes through a symbolic link"),
    ("sideways/cwd-other", "goes through a symbolic link"),
    ("notes.txt", "is a file, not a folder"), ("missing", "is not a folder of the workspace")])
def test_every_escape_is_refused_with_one_line_and_126(cli: Cli, ws: Path, cwd: str, why: str) -> None:
    cwd = cwd.format(ws=ws)
    r = cli("run", "cwd-ws", "--cwd", cwd, "--", "sh", "-c", "touch ran; pwd")
    assert r.code == 126 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and why in r.stderr and r.stderr.startswith("warden: "), r.stderr
    assert not (ws / "ran").exists() and not Path("/ran").exists()
    refused = cli("run", "cwd-ws", "--json", "--cwd", cwd, "--", "true")
    assert refused.code == 126 and refused.json["error"]["code"] == "invalid"


def test_a_refused_cwd_is_audited(cli: Cli, ws: Path) -> None:
    cli("run", "cwd-ws", "--cwd", "/etc", "--", "true")
    events = cli("audit", "--workspace", "cwd-ws", "--limit", "3", "--json").json["data"]
    last = [e for e in events if e["action"] == "run"][-1]
    assert (last["decision"], last["rule"], last["detail"]["cwd"]) == ("deny", "run.cwd", "/etc")


def test_the_python_api_takes_cwd(env: dict[str, str], ws: Path) -> None:
    from warden import Warden
    from warden.core.errors import InvalidInput, Refused

    with Warden.open(env["WARDEN_HOME"], environ=env) as w:
        assert w.get("cwd-ws").run(["pwd"], cwd="src").stdout == f"{ws}/src\n"
        with pytest.raises(InvalidInput) as caught:
            w.get("cwd-ws").run(["pwd"], cwd="up")
        assert isinstance(caught.value, Refused)


# -- TLS trust and the network hint ----------------------------------------------------------------
_PROBE = ('for v in SSL_CERT_FILE SSL_CERT_DIR PIP_CERT REQUESTS_CA_BUNDLE NODE_EXTRA_CA_CERTS UV_SYSTEM_CERTS '
          'UV_NATIVE_TLS; do eval "echo $v=\\${$v:-}"; done; cat "$CA" 2>/dev/null || echo unreadable; '
          'ls "$CADIR" 2>/dev/null || echo no-dir; echo "retries=${PIP_RETRIES:-}"')


def test_tls_trust_reaches_networked_runs_read_only_and_no_other(cli: Cli, ws: Path, tmp_path: Path) -> None:
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\ncorp\n-----END CERTIFICATE-----\n")
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "corp.0").write_text("x")
    trust = {"SSL_CERT_FILE": str(ca), "SSL_CERT_DIR": str(certs), "PIP_CERT": str(ca),
             "REQUESTS_CA_BUNDLE": str(ca), "NODE_EXTRA_CA_CERTS": str(ca)}
    probe = ["sh", "-c", _PROBE.replace('"$CA"', f'"{ca}"').replace('"$CADIR"', f'"{certs}"')]
    net = cli("run", "cwd-ws", "--net", "allow", "--allow-domain", "127.0.0.1:9", "--", *probe, env=trust)
    assert net.code == 0, net.stderr
    lines = net.stdout.splitlines()
    assert lines[:7] == [f"SSL_CERT_FILE={ca}", f"SSL_CERT_DIR={certs}", f"PIP_CERT={ca}",
                         f"REQUESTS_CA_BUNDLE={ca}", f"NODE_EXTRA_CA_CERTS={ca}", "UV_SYSTEM_CERTS=1",
                         "UV_NATIVE_TLS=1"]
    assert "corp" in net.stdout and "corp.0" in net.stdout and "retries=" in lines
    # Read-only: the command cannot change what the person's tools trust.
    write = cli("run", "cwd-ws", "--net", "allow", "--allow-domain", "127.0.0.1:9", "--", "sh", "-c",
                f"echo evil >> {ca}", env=trust)
    assert write.code != 0 and "evil" not in ca.read_text()
    none = cli("run", "cwd-ws", "--", *probe, env=trust)
    assert none.code == 0, none.stderr
    assert none.stdout.splitlines() == ["SSL_CERT_FILE=", "SSL_CERT_DIR=", "PIP_CERT=", "REQUESTS_CA_BUNDLE=",
                                        "NODE_EXTRA_CA_CERTS=", "UV_SYSTEM_CERTS=", "UV_NATIVE_TLS=",
                                        "unreadable", "no-dir", "retries=0"]


def test_a_name_lookup_without_network_ends_with_one_line_from_warden(cli: Cli, ws: Path) -> None:
    lookup = ["python3", "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"]
    r = cli("run", "cwd-ws", "--", *lookup)
    assert r.code == 1
    hints = [line for line in r.stderr.splitlines() if line.startswith("warden:")]
    assert hints == ["warden: the sandbox has no network; run with --net allow --allow-domain HOST "
                     "(or `warden install` for packages)"]
    assert r.stderr.rstrip().endswith(hints[0])
    as_json = cli("run", "cwd-ws", "--json", "--", *lookup)
    assert hints[0] in as_json.json["data"]["stderr"]
