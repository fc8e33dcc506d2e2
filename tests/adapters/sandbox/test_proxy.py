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

from tests.support.waiting import wait_until
from warden.adapters.sandbox.proxy import FilteringProxy
from warden.core.limits import Limits
from warden.core.network import NetworkPolicy
from warden.core.runs import RunResult


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
def test_sandbox_reaches_only_listed_targets(sandbox: Callable[..., RunResult], server: int) -> None:
    policy = NetworkPolicy.parse([f"127.0.0.1:{server}"])
    refused: list[object] = []
    url = f"http://127.0.0.1:{server}/in"
    out = sandbox(["sh", "-c", f"curl -sS {url}; echo; curl -sS -p {url}; echo; "
                   f"curl -sS -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{server + 1}/; echo; "
                   f"curl -sS --noproxy '*' -m 5 {url} || echo direct-failed; echo $HTTPS_PROXY"],
                  spec_kw={"network": True}, network=policy, on_net_event=refused.append,
                  limits=Limits(timeout_s=60))
    lines = out.stdout.splitlines()
    assert lines[0].startswith("hello /in")  # plain HTTP through the proxy
    assert lines[1].startswith("hello /in")  # CONNECT tunnel (curl -p)
    assert lines[2] == "403"
    assert lines[3] == "direct-failed"  # no route around the proxy
    assert lines[4].startswith("http://127.0.0.1:")
    assert [getattr(e, "allowed", None) for e in refused].count(False) == 1


def test_no_network_by_default(sandbox: Callable[..., RunResult], server: int) -> None:
    out = sandbox(["/usr/bin/python3", "-c",
                   f"import socket, os\nprint(os.environ.get('HTTP_PROXY'))\n"
                   f"try:\n socket.create_connection(('127.0.0.1', {server}), 3); print('CONNECTED')\n"
                   "except OSError: print('no route')\n"
                   "print(os.path.exists('/sys/class/net'))"])
    assert out.stdout.split("\n")[:2] == ["None", "no route"]


def test_proxy_socket_is_private(proxy_for: Callable[..., FilteringProxy]) -> None:
    proxy = proxy_for(NetworkPolicy.parse(["a.test"]))
    assert os.stat(proxy.socket_path).st_mode & 0o777 == 0o600


@pytest.fixture
def recorder() -> Iterator[tuple[int, list[bytes]]]:
    """A raw TCP server on 127.0.0.1 that records every byte a connection brings, then answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.5)
                data = b""
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except OSError:
                    pass
                seen.append(data)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    stop.set()
    thread.join()
    listener.close()


def test_plain_http_sends_the_decided_host_and_only_one_request(
        proxy_for: Callable[..., FilteringProxy], recorder: tuple[int, list[bytes]]) -> None:
    # A CDN routes by Host: a request for an allowed URL with `Host: other.site` (or a second,
    # pipelined request) would reach a site that was never allowed.
    port, seen = recorder
    proxy = proxy_for(NetworkPolicy.parse([f"127.0.0.1:{port}"]))
    first = (f"POST http://127.0.0.1:{port}/up HTTP/1.1\r\nHost: exfil.example\r\nHOST: x.example\r\n"
             "Content-Length: 5\r\n\r\nhello").encode()
    second = b"GET /steal HTTP/1.1\r\nHost: exfil.example\r\n\r\n"
    reply = _ask(proxy, first + second)
    assert reply.endswith(b"ok")
    assert len(seen) == 1
    head, _, body = seen[0].partition(b"\r\n\r\n")
    hosts = [line for line in head.split(b"\r\n") if line.lower().startswith(b"host:")]
    assert hosts == [f"Host: 127.0.0.1:{port}".encode()]
    assert body == b"hello"  # exactly the body, nothing of the second request
    assert b"exfil" not in seen[0] and b"/steal" not in seen[0]


def test_heads_that_servers_split_differently_are_refused(
        proxy_for: Callable[..., FilteringProxy], recorder: tuple[int, list[bytes]]) -> None:
    port, seen = recorder
    proxy = proxy_for(NetworkPolicy.parse([f"127.0.0.1:{port}"]))
    url = f"http://127.0.0.1:{port}/"
    for head in (f"GET {url} HTTP/1.1\r\nX-A: 1\nHost: exfil.example\r\n\r\n",  # bare LF
                 f"GET {url} HTTP/1.1\r\nX-A: 1\r\n Host: exfil.example\r\n\r\n",  # folded line
                 f"GET {url} HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 f"GET {url} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                 f"GET {url} HTTP/9\r\n\r\n"):
        reply = _ask(proxy, head.encode())
        assert reply.startswith((b"HTTP/1.1 400", b"HTTP/1.1 411")), (head, reply)
    assert seen == []


def test_connections_over_the_cap_are_closed_at_once(tmp_path: Path) -> None:
    # Idle connections from inside would otherwise hold Warden's descriptors for 30 s each.
    proxy = FilteringProxy(NetworkPolicy.parse(["a.test"]), str(tmp_path / "cap.sock"), max_connections=4)
    proxy.start()
    held: list[socket.socket] = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_UNIX)
            s.connect(proxy.socket_path)
            held.append(s)
        # The held ones are being served (nothing arrives, the proxy waits for a head) ...
        held[0].settimeout(0.3)
        with pytest.raises(TimeoutError):
            held[0].recv(1)
        # ... and the one over the cap is closed without waiting.
        with socket.socket(socket.AF_UNIX) as extra:
            extra.settimeout(5)
            extra.connect(proxy.socket_path)
            assert extra.recv(1) == b""
        for s in held:
            s.close()
        held.clear()
        # Once they are gone, new connections are served again.
        wait_until(lambda: _ask(proxy, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400"), interval=0.05,
                   message="the proxy did not serve again")
    finally:
        for s in held:
            s.close()
        proxy.stop()


def test_decisions_kept_in_memory_are_capped_and_each_is_still_told(tmp_path: Path) -> None:
    # A command asking again and again grew the list (~1 KiB a decision) for as long as it ran:
    # in a live sandbox's proxy, for hours.
    told: list[str] = []
    proxy = FilteringProxy(NetworkPolicy.parse(["a.test"]), str(tmp_path / "ev.sock"), max_events=5,
                           on_event=lambda event: told.append(event.host))
    proxy.start()
    try:
        for n in range(20):
            assert _ask(proxy, f"CONNECT n{n}.test:443 HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 403")
    finally:
        proxy.stop()
    assert [e.host for e in proxy.events] == [f"n{n}.test" for n in range(5)] and proxy.dropped == 15
    assert told == [f"n{n}.test" for n in range(20)]
