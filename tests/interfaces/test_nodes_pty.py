"""The PTY WebSocket of node A's workspace, opened on node B: two homes with two WARDEN_NODE names,
two real `warden serve` processes on 127.0.0.1 sharing one throwaway PostgreSQL database.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.interfaces.test_pty import PROMPT, SocketScreen, shell_session
from tests.support.nodes import Node, needs_postgres, node_fixtures
from tests.support.servers import ServeProcess
from tests.support.waiting import wait_until

pytestmark = needs_postgres


database, pair, token = node_fixtures("warden_nodes_pty_", window_s=3)


def _url(server: ServeProcess, query: str = "cols=100&rows=30") -> str:
    return server.url.replace("http://", "ws://") + f"/v1/workspaces/wsa/pty?{query}"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _ptys(node: Node) -> list[dict[str, Any]]:
    events = json.loads(node.cli("audit", "--workspace", "wsa", "--limit", "200", "--json").stdout)["data"]
    return [e for e in events if e["action"] == "api.pty"]


def _folder(node: Node) -> Path:
    """Where `wsa`'s folder would be in `node`'s home (it is only in A's)."""
    path = Path(json.loads(node.cli("info", "wsa", "--json").stdout)["data"]["path"])
    return Path(node.environ["WARDEN_HOME"]) / path.relative_to(path.parents[1])


def test_a_shell_through_b_runs_on_a_resizes_interrupts_and_ends_with_its_status(
        pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    marker = "pty-" + secrets.token_hex(4)
    before = len(_ptys(a))
    with b.serve() as server_b, a.serve(), connect(_url(server_b), additional_headers=_bearer(token)) as ws:
        shell_session(ws, also=f"touch {marker}".encode())  # a resize is a text frame, relayed as one
    # It ran on A: A's folder has the file (B's has none), and A's server recorded the session.
    assert (_folder(a) / marker).exists() and not (_folder(b) / marker).exists()
    ended = wait_until(lambda: len(_ptys(a)) > before and _ptys(a), timeout=20, message="A's api.pty event")
    assert ended[0]["detail"]["exit_code"] == 3 and ended[0]["actor"].startswith("bot:tester@")


def test_a_client_that_leaves_b_has_its_shell_on_a_killed(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    marker = "left-" + secrets.token_hex(4)
    with b.serve() as server_b, a.serve():
        with connect(_url(server_b), additional_headers=_bearer(token)) as ws:
            screen = SocketScreen(ws)
            screen.wait_for(PROMPT)
            ws.send(f"sleep 120; touch {marker}\n".encode())
            screen.wait_for(f"sleep 120; touch {marker}\r\n".encode())
        started = time.monotonic()

        def gone() -> dict[str, Any] | None:
            found = [e for e in _ptys(a) if e["detail"].get("client_gone")]
            return found[0] if found else None

        event = wait_until(gone, timeout=60, message="A never ended the shell of the client that left B")
        assert event["detail"]["exit_code"] == 137 and time.monotonic() - started < 60
    assert not (_folder(a) / marker).exists()


def test_refusals_come_before_the_upgrade_and_name_the_node(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    with b.serve() as server_b:
        with a.serve():
            with pytest.raises(InvalidStatus) as unnamed:  # refused by B itself, no hop
                connect(_url(server_b))
            assert unnamed.value.response.status_code == 401
            with pytest.raises(InvalidStatus) as bad:  # A's refusal, relayed
                connect(_url(server_b), additional_headers=_bearer("wdn_not_a_token"))
            assert bad.value.response.status_code == 403
            assert json.loads(bytes(bad.value.response.body or b""))["error"]["code"] == "denied"
            with pytest.raises(InvalidStatus) as huge:
                connect(_url(server_b, "cols=0&rows=30"), additional_headers=_bearer(token))
            assert huge.value.response.status_code == 400
        # A is down: refused (503) before upgrading, naming A; nothing started anywhere.
        before = len(_ptys(a))
        with pytest.raises(InvalidStatus) as down:
            connect(_url(server_b), additional_headers=_bearer(token))
        assert down.value.response.status_code == 503
        error = json.loads(bytes(down.value.response.body or b""))["error"]
        assert error["code"] == "unavailable" and "node-a" in error["message"]
        assert len(_ptys(a)) == before
        assert b"ERROR" not in server_b.output()


def _signed(a: Node, *, nonce: str, key_pepper: bytes | None = None, method: str = "WEBSOCKET",
            target: str = "node-a", query: str = "cols=100&rows=30") -> dict[str, str]:
    from warden.core import nodes

    pepper = key_pepper or base64.urlsafe_b64decode(a.environ["WARDEN_TOKEN_PEPPER"] + "==")
    return nodes.sign(nodes.node_key(pepper), method=method, path="/v1/workspaces/wsa/pty", query=query,
                      body=b"", origin="node-b", target=target, timestamp=int(time.time()), nonce=nonce).headers()


def _opens(url: str, headers: dict[str, str]) -> int:
    """101 when the upgrade was accepted (the shell then left at once), else the refusal's status."""
    try:
        with connect(url, additional_headers=headers):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def test_forged_and_replayed_signed_upgrades_are_refused(pair: tuple[Node, Node], token: str) -> None:
    a, b = pair
    with a.serve() as server_a, b.serve() as server_b:
        url = _url(server_a)
        nonce = secrets.token_hex(16)
        assert _opens(url, {**_signed(a, nonce=nonce), **_bearer(token)}) == 101
        assert _opens(url, {**_signed(a, nonce=nonce), **_bearer(token)}) == 403  # replayed
        forged = _signed(a, nonce=secrets.token_hex(16), key_pepper=b"another cluster's pepper")
        assert _opens(url, {**forged, **_bearer(token)}) == 403
        as_http = _signed(a, nonce=secrets.token_hex(16), method="GET")  # an HTTP signature opens no shell
        assert _opens(url, {**as_http, **_bearer(token)}) == 403
        other_query = _signed(a, nonce=secrets.token_hex(16), query="cols=100&rows=31")
        assert _opens(url, {**other_query, **_bearer(token)}) == 403
        # A signed upgrade is never forwarded again: B, asked for A's workspace, refuses it.
        to_b = _signed(a, nonce=secrets.token_hex(16), target="node-b")
        with pytest.raises(InvalidStatus) as again:
            connect(_url(server_b), additional_headers={**to_b, **_bearer(token)})
        assert again.value.response.status_code == 503
        assert "goes no further" in json.loads(bytes(again.value.response.body or b""))["error"]["message"]
    refusals = [e for e in json.loads(a.cli("audit", "--limit", "100", "--json").stdout)["data"]
                if e["action"] == "node.request"]
    assert {e["rule"] for e in refusals} >= {"node.replay", "node.mac"}
