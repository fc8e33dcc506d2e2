"""The filtering proxy on its own (a Unix-socket client) and through a real sandbox."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from warden.adapters.sandbox.proxy import FilteringProxy
from warden.adapters.sandbox.runner import RunOutcome
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello {self.path} via {self.headers.get('Connection')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 (the only address these tests reach)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def proxy_for(tmp_path: Path) -> Iterator[Callable[[NetworkPolicy], FilteringProxy]]:
    started: list[FilteringProxy] = []

    def make(policy: NetworkPolicy) -> FilteringProxy:
        proxy = FilteringProxy(policy, str(tmp_path / f"p{len(started)}.sock"))
        proxy.start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


def _ask(proxy: FilteringProxy, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(proxy.socket_path)
        s.sendall(request)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
            if request.startswith(b"CONNECT") and b"\r\n\r\n" in b"".join(chunks):
                break
        return b"".join(chunks)


def test_plain_http_to_a_listed_loopback_port(proxy_for: Callable[..., FilteringProxy], server: int) -> None:
    proxy = proxy_for(NetworkPolicy.parse([f"127.0.0.1:{server}"]))
    reply = _ask(proxy, f"GET http://127.0.0.1:{server}/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Proxy-Connection: keep-alive\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.0 200") or reply.startswith(b"HTTP/1.1 200")
    assert reply.endswith(b"hello /x?y=1 via close")  # one request per connection
    assert proxy.events[-1].allowed


def test_connect_tunnel_and_refusals(proxy_for: Callable[..., FilteringProxy], server: int) -> None:
    proxy = proxy_for(NetworkPolicy.parse([f"127.0.0.1:{server}", "localhost"], ["blocked.localhost"]))
    assert _ask(proxy, f"CONNECT 127.0.0.1:{server} HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 200")
    # An IP literal without its port, a name that resolves to loopback without a port, a
    # denied name and an unlisted one are all refused before any connection is made.
    for target in (f"127.0.0.1:{server + 1}", f"localhost:{server}", "blocked.localhost:443", "example.com:443"):
        reply = _ask(proxy, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.1 403"), (target, reply)
    rules = [e.rule for e in proxy.events if not e.allowed]
    assert rules == ["network.ip_literal", "network.special_address", "network.denied:blocked.localhost",
                     "network.not_allowed"]


def test_bad_requests(proxy_for: Callable[..., FilteringProxy]) -> None:
    proxy = proxy_for(NetworkPolicy.parse(["a.test"]))
    assert _ask(proxy, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _ask(proxy, b"CONNECT nohost HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _ask(proxy, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_sandbox_reaches_only_listed_targets(sandbox: Callable[..., RunOutcome], server: int) -> None:
    policy = NetworkPolicy.parse([f"127.0.0.1:{server}"])
    refused: list[object] = []
    url = f"http://127.0.0.1:{server}/in"
    out = sandbox(["sh", "-c", f"curl -sS {url}; echo; curl -sS -p {url}; echo; "
                   f"curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{server + 1}/; echo; "
                   f"curl -sS --noproxy '*' -m 5 {url} || echo direct-failed; echo $HTTPS_PROXY"],
                  spec_kw={"network": True}, network=policy, on_net_event=refused.append,
                  limits=Limits(timeout_s=60))
    lines = out.stdout.decode().splitlines()
    assert lines[0].startswith("hello /in")  # plain HTTP through the proxy
    assert lines[1].startswith("hello /in")  # CONNECT tunnel (curl -p)
    assert lines[2] == "403"
    assert lines[3] == "direct-failed"  # no route around the proxy
    assert lines[4].startswith("http://127.0.0.1:")
    assert [getattr(e, "allowed", None) for e in refused].count(False) == 1


def test_no_network_by_default(sandbox: Callable[..., RunOutcome], server: int) -> None:
    out = sandbox(["/usr/bin/python3", "-c",
                   f"import socket, os\nprint(os.environ.get('HTTP_PROXY'))\n"
                   f"try:\n socket.create_connection(('127.0.0.1', {server}), 3); print('CONNECTED')\n"
                   "except OSError: print('no route')\n"
                   "print(os.path.exists('/sys/class/net'))"])
    assert out.stdout.decode().split("\n")[:2] == ["None", "no route"]


def test_proxy_socket_is_private(proxy_for: Callable[..., FilteringProxy]) -> None:
    proxy = proxy_for(NetworkPolicy.parse(["a.test"]))
    assert os.stat(proxy.socket_path).st_mode & 0o777 == 0o600
