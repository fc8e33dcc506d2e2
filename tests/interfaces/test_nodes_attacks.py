"""A hostile bot (and a hostile client of a node) against forwarding between two nodes: two
homes, two real `warden serve` processes on 127.0.0.1 sharing one throwaway PostgreSQL database.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from urllib.parse import urlsplit

import httpx

from tests.support.nodes import Node, needs_postgres, node_fixtures

pytestmark = needs_postgres


database, pair, _ = node_fixtures("warden_node_attacks_", window_s=3)


def _audit(node: Node) -> list[dict[str, object]]:
    return list(json.loads(node.cli("audit", "--limit", "500", "--json").stdout)["data"])


def _raw(url: str, head: bytes, *, wait: float) -> bytes:
    """Send `head` (a request line and headers, no body) and return what comes back within `wait` s."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=wait) as sock:
        sock.sendall(head)
        try:
            return sock.recv(65536)
        except TimeoutError:
            return b""


def test_upload_to_another_nodes_workspace_needs_a_token_before_its_body(pair: tuple[Node, Node]) -> None:
    """Finding: B's upload screen let a PUT for A's workspace through unchecked, so anyone without
    a token could make B hold a file-sized body (100 MiB by default) per connection."""
    a, b = pair
    token = a.token()
    with b.serve() as server_b, a.serve() as server_a:
        head = (b"PUT /v1/workspaces/wsa/files/content?path=/big.bin HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/octet-stream\r\nContent-Length: 90000000\r\n\r\n")
        answer = _raw(server_b.url, head, wait=5)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        # A wrong token is refused as early, and audited once, on B, with the path it named.
        answer = _raw(server_b.url, head.replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer wdn_nope\r\n\r\n"), wait=5)
        assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
        # The bot's own upload still goes through B to A, and is audited once (on A).
        marker = secrets.token_hex(4)
        put = httpx.put(f"{server_b.url}/v1/workspaces/wsa/files/content", params={"path": f"/{marker}.txt"},
                        content=b"hello", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert put.status_code in (200, 201), put.text
        got = httpx.get(f"{server_a.url}/v1/workspaces/wsa/files/content", params={"path": f"/{marker}.txt"},
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert got.content == b"hello"
        writes = [e for e in _audit(a) if marker in str(e.get("target")) and "write" in str(e.get("action"))]
        assert len(writes) == 1, writes


def test_dot_segments_are_not_forwarded_to_another_path(pair: tuple[Node, Node]) -> None:
    """Finding: B matched `/v1/workspaces/wsa/%2e%2e/%2e%2e/%2e%2e/mcp` as a request for A's
    workspace and sent it on; the client library resolved the dot segments, so A received a POST
    to /mcp (any path of A's API, through B)."""
    a, b = pair
    token = a.token()
    marker = "dots-" + secrets.token_hex(4)
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "exec", "arguments": {"workspace": "wsa", "cmd": ["echo", marker]}}})
    with b.serve() as server_b, a.serve():
        for path in ("/v1/workspaces/wsa/%2e%2e/%2e%2e/%2e%2e/mcp", "/v1/workspaces/wsa/%2E%2E/wsa/exec",
                     "/v1/workspaces/wsa/exec%3Fx=1", "/v1/workspaces/wsa/%2e/exec"):
            with httpx.Client(base_url=server_b.url, timeout=60) as client:
                request = client.build_request("POST", "/", content=call.encode(),
                                               headers={"Authorization": f"Bearer {token}",
                                                        "content-type": "application/json",
                                                        "accept": "application/json, text/event-stream",
                                                        "mcp-protocol-version": "2025-06-18"})
                request.url = request.url.copy_with(raw_path=path.encode())
                answer = client.send(request)
            assert answer.status_code == 400, (path, answer.status_code, answer.text[:300])
            assert answer.json()["error"]["code"] == "invalid"
        events = _audit(a)
        assert not [e for e in events if marker in json.dumps(e)], "the command ran on A"
        assert not [e for e in events if e.get("action") == "node.request"], "B's requests reached A mangled"


def test_bot_sent_node_headers_are_replaced_not_relayed(pair: tuple[Node, Node]) -> None:
    """Held: a bot's own X-Warden-Node-* headers (no MAC) sent to B for A's workspace are dropped and
    B's signature sent instead; with a forged MAC, B refuses them itself and nothing reaches A."""
    a, b = pair
    token = a.token()
    marker = "hdr-" + secrets.token_hex(4)
    with b.serve() as server_b, a.serve():
        smuggled = {"Authorization": f"Bearer {token}", "X-Warden-Node-To": "node-b",
                    "X-Warden-Node-Time": str(int(time.time())), "X-Warden-Node-Nonce": "0" * 32,
                    "Connection": "keep-alive, X-Warden-Node-Nonce"}
        ran = httpx.post(f"{server_b.url}/v1/workspaces/wsa/exec", json={"cmd": ["echo", marker]},
                         headers=smuggled, timeout=60)
        assert ran.status_code == 200, ran.text
        assert ran.json()["stdout"].strip() == marker
        forged = httpx.post(f"{server_b.url}/v1/workspaces/wsa/exec", json={"cmd": ["echo", marker + "x"]},
                            headers={**smuggled, "X-Warden-Node": "node-a", "X-Warden-Node-Mac": "f" * 64},
                            timeout=60)
        assert forged.status_code == 403 and forged.json()["error"]["code"] == "denied"
        assert not [e for e in _audit(a) if marker + "x" in json.dumps(e)]
