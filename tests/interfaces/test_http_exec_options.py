"""A bot's exec over HTTP with a working folder and network for one command, within its grant;
the create answer stating the sandbox a bot really gets — against a real `warden serve`.

A bot that knows only the URL and its token: `"cwd"` runs a command in a folder of the workspace
(every escape refused, 400), `"network": {"allow": [...]}` reaches exactly what the person's
`warden grant … --allow-domain` allows (anything else 403, audited, nothing started), and the
person's TLS trust and Warden's no-network hint reach the bot's runs as they reach the CLI's.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, ThreadServer, cli_out, warden_environ
from warden.bootstrap import bootstrap
from warden.client import Client, RemoteWorkspace
from warden.core.errors import Denied

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve_hello() -> http.server.ThreadingHTTPServer:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("exec-options")
    ca = base / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\ncorp\n-----END CERTIFICATE-----\n")
    environ = {**warden_environ(base / "home"), "SSL_CERT_FILE": str(ca)}
    cli_out(environ, "init")
    granted, other = _serve_hello(), _serve_hello()
    try:
        with ServeProcess(environ, base) as server:
            identity = cli_out(environ, "bot", "register", "agent")
            created = Client(server.url, identity).create_workspace("web")
            yield {"environ": environ, "url": server.url, "identity": identity, "created": created, "ca": ca,
                   "port": granted.server_address[1], "other": other.server_address[1]}
    finally:
        for httpd in (granted, other):
            httpd.shutdown()
            httpd.server_close()


def _exec(world: dict[str, Any], token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{world['url']}/v1/workspaces/web/exec", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {token}"})


def _audit(world: dict[str, Any], limit: int = 20) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(cli_out(world["environ"], "audit", "--workspace", "web",
                                                      "--limit", str(limit), "--json"))["data"]
    return events


def _person_grant(world: dict[str, Any], *extra: str) -> str:
    out = cli_out(world["environ"], "grant", "web", "agent", "--permissions", "read,write,execute,admin",
                  *extra, "--json")
    token: str = json.loads(out)["data"]["token"]
    return token


# -- what the create answer says -------------------------------------------------------------------
def test_the_create_answer_states_the_sandbox_the_bot_really_gets(world: dict[str, Any]) -> None:
    sandbox = world["created"].sandbox
    assert set(sandbox) >= {"allowed_commands", "blocked_paths", "max_file_size_mb"}  # as before
    # The allowlist is off by default: no list of commands pretends to bind the bot.
    assert sandbox["allowlist"] is False and sandbox["allowed_commands"] == []
    assert sandbox["network"] == {"default": "none", "domains": []}
    limits = sandbox["limits"]
    assert set(limits) == {"timeout_s", "memory_bytes", "cpu_seconds", "pids", "max_output_bytes"}
    assert all(isinstance(v, int | float) and v > 0 for v in limits.values())


def test_with_the_allowlist_on_the_answer_lists_it_and_network_enabled_gives_a_bot_none(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    environ = {**warden_environ(home), "WARDEN_SANDBOX_ENABLED": "true",
               "WARDEN_SANDBOX_ALLOWED_COMMANDS": "sh,python,curl", "WARDEN_SANDBOX_TIMEOUT": "45s",
               "WARDEN_NETWORK_ENABLED": "true", "WARDEN_NETWORK_ALLOWED_DOMAINS": "127.0.0.1:9"}
    app = bootstrap(home, environ=environ)
    try:
        identity = app.grants.register_bot("strict").token
        with ThreadServer(app) as server:
            made = Client(server.url, identity).create_workspace("strict-ws")
            assert made.sandbox["allowlist"] is True and made.sandbox["allowed_commands"] == ["sh", "python", "curl"]
            assert made.sandbox["limits"]["timeout_s"] == 45
            # network.enabled is the person's default for `warden run`; a bot's command has none
            # unless it asks, within its grant.
            probe = made.run(["sh", "-c", 'echo "${HTTP_PROXY:-none}"'])
            assert probe.stdout == "none\n"
    finally:
        app.close()


# -- cwd -------------------------------------------------------------------------------------------
def test_cwd_runs_a_command_in_a_folder_of_the_workspace(world: dict[str, Any]) -> None:
    ws: RemoteWorkspace = world["created"]
    ws.files.write("app/src/main.py", "print('in src')\n")
    result = ws.run(["sh", "-c", "pwd; python main.py"], cwd="app/src")
    assert result.stdout == f"{world['created'].path}/app/src\nin src\n"
    assert ws.run(["pwd"], cwd=f"{world['created'].path}/app").stdout == f"{world['created'].path}/app\n"


@pytest.mark.parametrize("cwd", ["..", "app/../..", "/", "/etc", "{path}/../other", "{path}-evil", "up", "up/etc",
                                 "app/src/main.py", "nope", "a\0b", ""])
def test_every_cwd_escape_is_a_400_and_nothing_runs(world: dict[str, Any], cwd: str) -> None:
    ws: RemoteWorkspace = world["created"]
    ws.files.write("app/src/main.py", "print('in src')\n")
    if not ws.files.exists("up"):
        assert ws.run(["ln", "-s", "/", "up"]).exit_code == 0
    response = _exec(world, world["created"].access_token,
                     {"cmd": ["sh", "-c", "touch ran"], "cwd": cwd.format(path=world["created"].path)})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid" and "cwd" in error["message"] and "\n" not in error["message"]
    assert not ws.files.exists("ran")


# -- network for one command, within the grant -----------------------------------------------------
def test_a_grant_without_domains_gets_403_for_network_and_nothing_starts(world: dict[str, Any]) -> None:
    token = world["created"].access_token
    response = _exec(world, token, {"cmd": ["sh", "-c", "touch started"],
                                    "network": {"allow": [f"127.0.0.1:{world['port']}"]}})
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "denied" and "allows no network" in error["message"]
    assert "--allow-domain" in error["message"]
    assert not world["created"].files.exists("started")
    last = [e for e in _audit(world, 5) if e["action"] == "api.exec"][-1]
    assert (last["decision"], last["rule"]) == ("deny", "grant.network")
    assert last["detail"]["network"] == [f"127.0.0.1:{world['port']}"]
    # A bad entry is invalid input, not a denial.
    bad = _exec(world, token, {"cmd": ["true"], "network": {"allow": ["not a host"]}})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid"
    empty = _exec(world, token, {"cmd": ["true"], "network": {"allow": []}})
    assert empty.status_code == 400


@needs_curl
def test_a_grant_with_a_domain_reaches_that_one_only(world: dict[str, Any]) -> None:
    port, other = world["port"], world["other"]
    token = _person_grant(world, "--allow-domain", f"127.0.0.1:{port}")
    ws = Client(world["url"], token).workspace("web")
    assert ws.client.whoami()["domains"] == [f"127.0.0.1:{port}"]
    fetch = ["curl", "-sS", "-m", "10", f"http://127.0.0.1:{port}/"]
    ok = ws.run(fetch, network=[f"127.0.0.1:{port}"])
    assert (ok.exit_code, ok.stdout) == (0, f"hello from {port}"), ok.stderr
    # Without asking, the same command has no network at all.
    assert ws.run(fetch).exit_code != 0
    # Inside a networked command, another port of the same host is refused by the proxy.
    refused = ws.run(["curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}",
                      f"http://127.0.0.1:{other}/"], network=[f"127.0.0.1:{port}"])
    assert refused.stdout == "403" and f"warden: network refused GET 127.0.0.1:{other}" in refused.stderr
    # Asking for more than the grant allows is refused before anything runs.
    for beyond in ([f"127.0.0.1:{other}"], ["127.0.0.1"], ["example.com:443"]):
        with pytest.raises(Denied, match="does not allow network"):
            ws.run(["true"], network=beyond)
    # A host the grant names with a port, asked for without one (every port): the bot's fix is the
    # port, which the answer names; "a person adds domains" sent it to the person for nothing.
    with pytest.raises(Denied) as caught:
        ws.run(["true"], network=["127.0.0.1"])
    assert f"ask for 127.0.0.1:{port}, with the port" in str(caught.value), caught.value
    assert "a person adds" not in str(caught.value)


@needs_curl
def test_a_grant_without_a_port_never_lets_a_bot_pick_a_port_on_the_hosts_loopback(
        world: dict[str, Any]) -> None:
    # The bot's commands run in its live sandbox, whose proxy is a process of its own that is
    # handed the policy as JSON: it must keep which entries the grant named with their port.
    port = world["port"]
    ws = Client(world["url"], _person_grant(world, "--allow-domain", "localhost",
                                            "--allow-domain", "127.0.0.1")).workspace("web")
    for host, rule in (("localhost", "loopback"), ("127.0.0.1", "is an IP address")):
        asked = ws.run(["curl", "-sS", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}",
                        f"http://{host}:{port}/"], network=[f"{host}:{port}"])
        assert asked.stdout == "403", (host, asked.stdout, asked.stderr)
        assert f"warden: network refused GET {host}:{port}" in asked.stderr and rule in asked.stderr


def test_a_child_grant_never_reaches_more_than_its_parent(world: dict[str, Any]) -> None:
    port, other = world["port"], world["other"]
    parent = Client(world["url"], _person_grant(world, "--allow-domain", f"127.0.0.1:{port}")).workspace("web")
    with pytest.raises(Denied, match="never wider"):
        parent.grant("helper", ["execute"], domains=[f"127.0.0.1:{other}"], zones=["*"])
    child = parent.grant("helper", ["execute"], domains=[f"127.0.0.1:{port}"], zones=["*"])
    assert child.domains == (f"127.0.0.1:{port}",)
    assert parent.grant("helper", ["execute"], zones=["*"]).domains == ()  # none unless named
    # The creator's own grant (no domains) can mint none either.
    with pytest.raises(Denied, match="never wider"):
        world["created"].grant("helper", ["execute"], domains=[f"127.0.0.1:{port}"], zones=["*"])


# -- TLS trust and the hint ----------------------------------------------------------------------
def test_tls_trust_reaches_a_bots_networked_command_only(world: dict[str, Any]) -> None:
    port, ca = world["port"], world["ca"]
    ws = Client(world["url"], _person_grant(world, "--allow-domain", f"127.0.0.1:{port}")).workspace("web")
    probe = ["sh", "-c", f'echo "${{SSL_CERT_FILE:-unset}}"; cat {ca} 2>/dev/null || echo unreadable']
    networked = ws.run(probe, network=[f"127.0.0.1:{port}"])
    assert networked.stdout == f"{ca}\n{ca.read_text()}"
    assert ws.run(probe).stdout == "unset\nunreadable\n"


def test_a_lookup_without_network_gets_the_hint_in_the_http_stderr(world: dict[str, Any]) -> None:
    result = world["created"].run(["python3", "-c", "import socket; socket.getaddrinfo('pypi.org', 443)"])
    assert result.exit_code == 1
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("warden: the sandbox has no network") and '"network": {"allow"' in last
    assert "/install" in last


def test_a_silent_curl_without_network_gets_the_hint_too(world: dict[str, Any]) -> None:
    # `curl -s` says nothing when the name does not resolve: its status 6 alone had no line from
    # Warden, and the bot saw an empty stderr.
    result = world["created"].run(["curl", "-s", "https://pypi.org/"])
    assert result.exit_code == 6
    assert result.stderr.startswith("warden: the sandbox has no network") and "/install" in result.stderr, result.stderr
