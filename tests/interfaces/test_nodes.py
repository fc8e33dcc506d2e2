"""Two nodes, one Warden: two homes with two WARDEN_NODE names and two real `warden serve`
processes on 127.0.0.1 sharing one throwaway PostgreSQL database.

Runs when WARDEN_TEST_DATABASE_URL names a PostgreSQL server the tests may create databases on.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time

import httpx

from tests.support.nodes import Node, needs_postgres, node_fixtures
from tests.support.waiting import poll

pytestmark = needs_postgres

WINDOW_S = 3  # node.heartbeat_window: short, so a down node is seen within the test


database, pair, _ = node_fixtures("warden_nodes_", window_s=WINDOW_S)


def _exec(url: str, token: str, cmd: list[str]) -> httpx.Response:
    return httpx.post(f"{url}/v1/workspaces/wsa/exec", json={"cmd": cmd},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _runs_of(node: Node, marker: str) -> list[dict[str, object]]:
    events = json.loads(node.cli("audit", "--workspace", "wsa", "--limit", "200", "--json").stdout)["data"]
    return [e for e in events if e.get("action") == "run" and marker in json.dumps(e.get("detail"))]


def test_settings_and_names(pair: tuple[Node, Node]) -> None:
    a, b = pair
    bad = subprocess.run([sys.executable, "-m", "warden", "list"], capture_output=True, text=True,
                         env={**a.environ, "WARDEN_NODE": "../evil\nnode"}, timeout=60, check=False)
    assert bad.returncode != 0
    assert "bad WARDEN_NODE" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    info = json.loads(b.cli("info", "wsa", "--json").stdout)["data"]
    assert info["node"] == "node-a"
    # No node touches another node's workspace folder: node B's CLI refuses A's workspace.
    refused = b.cli("run", "wsa", "--json", "--", "true", check=False)
    assert refused.returncode == 126
    assert json.loads(refused.stdout)["error"]["code"] == "unavailable"
    assert "node-a" in json.loads(refused.stdout)["error"]["message"]


def test_exec_sent_to_b_runs_on_a_then_unavailable_then_back(pair: tuple[Node, Node]) -> None:
    a, b = pair
    token = a.token()
    with b.serve() as server_b:
        with a.serve() as server_a:
            marker = "fwd-" + secrets.token_hex(4)
            direct = _exec(server_a.url, token, ["echo", marker])
            assert direct.status_code == 200, direct.text
            forwarded = _exec(server_b.url, token, ["sh", "-c", f"echo {marker}; cat /etc/hostname >/dev/null; pwd"])
            assert forwarded.status_code == 200, forwarded.text
            assert forwarded.json()["stdout"].startswith(marker)
            # A's audit shows both runs: the forwarded one ran on A, under A's grants and audit.
            assert len(_runs_of(a, marker)) == 2
            listed = httpx.get(f"{server_b.url}/v1/workspaces", headers={"Authorization": f"Bearer {token}"},
                               timeout=10).json()
            assert [(w["name"], w["node"], w["status"]) for w in listed] == [("wsa", "node-a", "ready")]
            nodes = json.loads(b.cli("nodes", "--json").stdout)["data"]["nodes"]
            assert {n["node"]: n["live"] for n in nodes} == {"node-a": True, "node-b": True}
        # A's server stopped cleanly: it left the instances.
        instances = json.loads(b.cli("nodes", "--instances", "--json").stdout)["data"]
        assert [i for i in instances if i["node"] == "node-a"] == []
        # A's server is stopped: the same exec through B is unavailable, naming A, and nothing runs.
        marker2 = "down-" + secrets.token_hex(4)
        down = _exec(server_b.url, token, ["echo", marker2])
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "unavailable" and "node-a" in down.json()["error"]["message"]
        assert "try again" in down.json()["error"]["message"]  # it never reached A: safe to ask again
        assert _runs_of(a, marker2) == []
        # A's workspaces become unreachable within the heartbeat window (no instance of A beats).
        started = time.monotonic()
        assert poll(lambda: json.loads(b.cli("info", "wsa", "--json").stdout)["data"]["status"] == "unreachable",
                    timeout=WINDOW_S + 5, interval=0.2)
        assert time.monotonic() - started <= WINDOW_S + 2
        listed = httpx.get(f"{server_b.url}/v1/workspaces", headers={"Authorization": f"Bearer {token}"},
                           timeout=10).json()
        assert listed[0]["status"] == "unreachable"
        # A comes back: ready again, and the forwarded exec runs there.
        with a.serve():
            assert json.loads(b.cli("info", "wsa", "--json").stdout)["data"]["status"] == "ready"
            again = _exec(server_b.url, token, ["echo", marker2])
            assert again.status_code == 200, again.text
            assert len(_runs_of(a, marker2)) == 1


def test_forged_and_replayed_node_requests_refused(pair: tuple[Node, Node]) -> None:
    from warden.core import nodes

    a, _ = pair
    token = a.token()
    pepper = base64.urlsafe_b64decode(a.environ["WARDEN_TOKEN_PEPPER"] + "==")
    with a.serve() as server_a:
        body = json.dumps({"cmd": ["echo", "signed"]}).encode()

        def signed(key: bytes, nonce: str, **overrides: object) -> httpx.Response:
            parts: dict[str, object] = {"method": "POST", "path": "/v1/workspaces/wsa/exec", "query": "",
                                        "body": body, "origin": "node-b", "target": "node-a",
                                        "timestamp": int(time.time()), "nonce": nonce, **overrides}
            headers = nodes.sign(key, **parts).headers()  # type: ignore[arg-type]
            return httpx.post(f"{server_a.url}/v1/workspaces/wsa/exec", content=body, timeout=60,
                              headers={**headers, "Authorization": f"Bearer {token}",
                                       "content-type": "application/json"})

        key = nodes.node_key(pepper)
        nonce = secrets.token_hex(16)
        first = signed(key, nonce)
        assert first.status_code == 200, first.text
        replayed = signed(key, nonce)
        assert replayed.status_code == 403 and "replayed" in replayed.json()["error"]["message"]
        forged = signed(nodes.node_key(b"another cluster's pepper"), secrets.token_hex(16))
        assert forged.status_code == 403 and forged.json()["error"]["code"] == "denied"
        stale = signed(key, secrets.token_hex(16), timestamp=int(time.time()) - 3600)
        assert stale.status_code == 403
        # The body is bound into the signature: another command under the same headers is refused.
        headers = nodes.sign(key, method="POST", path="/v1/workspaces/wsa/exec", query="", body=body,
                             origin="node-b", target="node-a", timestamp=int(time.time()),
                             nonce=secrets.token_hex(16)).headers()
        swapped = httpx.post(f"{server_a.url}/v1/workspaces/wsa/exec", json={"cmd": ["echo", "swapped"]},
                             headers={**headers, "Authorization": f"Bearer {token}"}, timeout=60)
        assert swapped.status_code == 403
        assert _runs_of(a, "swapped") == []


def test_killed_serve_found_dead_and_released(pair: tuple[Node, Node]) -> None:
    a, _ = pair
    server = a.serve()
    server.__enter__()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        instances = json.loads(a.cli("nodes", "--instances", "--json").stdout)["data"]
        mine = [i for i in instances if i["pid"] == pid]
        assert mine and mine[0]["kind"] == "serve" and mine[0]["url"] == server.url
        # A live sandbox started by that server, and a lease it holds on the workspace.
        token = a.token()
        started = httpx.post(f"{server.url}/v1/workspaces/wsa/exec", json={"cmd": ["sleep", "300"],
                             "background": True}, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert started.status_code == 202, started.text
        os.kill(pid, signal.SIGKILL)
        server.proc.wait(10)
    finally:
        server.__exit__(None, None, None)

    # A's janitor finds its server dead (its pid is gone) and releases what it held; the
    # live sandbox is stopped on A, by A (B would only forget it once all of A is down).
    def reaped() -> bool:
        report = json.loads(a.cli("janitor", "--once", "--json").stdout)["data"]
        return mine[0]["id"] in report["instances_dead"]

    assert poll(reaped, timeout=WINDOW_S * 5, interval=0.5)
    events = json.loads(a.cli("audit", "--limit", "50", "--json").stdout)["data"]
    dead = [e for e in events if e["action"] == "instance.dead" and e["detail"].get("id") == mine[0]["id"]]
    assert dead
    stops = [e for e in events if e["action"] == "sandbox.stop" and e["target"] == "wsa"]
    assert stops, "the killed server's live sandbox was not released"
    ps = json.loads(a.cli("ps", "wsa", "--json").stdout)["data"]
    assert all(p["status"] != "running" for p in ps)


def test_a_pepper_rotated_on_one_node_reaches_forwarding_without_a_restart(pair: tuple[Node, Node]) -> None:
    """A's server keeps running across a pepper rotation made on B; B's next server signs with the
    new pepper, and A takes it once it has read the cluster's keys again (no restart of A)."""
    from warden.interfaces.http.nodes import PLACES_S

    a, b = pair
    token = a.token()
    with a.serve() as server_a:
        with b.serve() as server_b:
            assert _exec(server_b.url, token, ["true"]).status_code == 200  # A has its node keys now
        b.cli("keys", "rotate", "pepper")
        time.sleep(PLACES_S + 0.5)
        with b.serve() as server_b:
            marker = "rotated-" + secrets.token_hex(4)
            forwarded = _exec(server_b.url, token, ["echo", marker])  # a token minted before still works
            assert forwarded.status_code == 200, forwarded.text
            assert len(_runs_of(a, marker)) == 1
        assert _exec(server_a.url, token, ["true"]).status_code == 200


def _doctor_node(node: Node) -> tuple[dict[str, object], dict[str, object]]:
    data = json.loads(node.cli("doctor", "--json", check=False).stdout)["data"]
    return data["node"], next(c for c in data["checks"] if c["name"] == "node")


def test_doctor_counts_the_nodes_up_and_down(pair: tuple[Node, Node]) -> None:
    a, b = pair
    with a.serve():
        node, check = _doctor_node(b)
        assert node["name"] == "node-b" and node["clustered"] is True
        assert node["up"] == ["node-a"] and node["down"] == ["node-b"]  # B runs no server: down, and says so
        assert check["ok"] is True and "1 node(s) up (node-a), 1 down" in str(check["detail"])
        assert "single-node" not in str(check["detail"]) and "this one" in str(check["detail"])
        with b.serve():
            node, check = _doctor_node(b)
            assert node["up"] == ["node-a", "node-b"] and node["down"] == []
            assert "2 node(s) up" in b.cli("doctor", check=False).stdout
    # A stopped: once past the window B's doctor warns that A's workspaces are unreachable.
    def a_down() -> bool:
        return _doctor_node(b)[0]["down"] == ["node-a", "node-b"]

    assert poll(a_down, timeout=WINDOW_S + 10, interval=0.5)
    _, check = _doctor_node(b)
    assert check["ok"] is False and "node-a are unreachable" in str(check["detail"])


def test_a_forwarded_exec_whose_client_gave_up_is_killed_on_its_node(pair: tuple[Node, Node]) -> None:
    """The client of an exec forwarded by B to A goes away: A's command is killed, as for A's own
    client. B kept its link to A open and the command ran on to its timeout, holding a slot."""
    a, b = pair
    token = a.token()
    marker = "gone-" + secrets.token_hex(4)
    with a.serve(), b.serve() as server_b:
        try:
            httpx.post(f"{server_b.url}/v1/workspaces/wsa/exec", json={"cmd": ["sh", "-c", f"sleep 4; touch {marker}"]},
                       headers={"Authorization": f"Bearer {token}"}, timeout=1.5)
            raise AssertionError("the exec answered before the client gave up")
        except httpx.ReadTimeout:
            pass
        time.sleep(5)  # past the command's own end
    # Its outcome on A: killed by a signal (the client gone), and it never got to its `touch`.
    outcomes = [r for r in _runs_of(a, marker) if "exit_code" in (r.get("detail") or {})]
    assert [(r["detail"]["exit_code"], r["detail"]["signal"]) for r in outcomes] == [(137, 9)], outcomes
    looked = a.cli("run", "wsa", "--", "sh", "-c", f"test -e {marker} && echo there || echo absent")
    assert looked.stdout.strip() == "absent"


def test_a_streamed_exec_forwarded_to_a_node_that_dies_ends_with_an_error_line(pair: tuple[Node, Node]) -> None:
    """A streamed exec sent to B runs on A, and A is killed -9 while it streams: B's answer ends
    with whole lines and, last, an `error` line `unavailable` naming A (as a sandbox failing
    mid-run does). It was cut off mid-body, and the SDK said B was lost ("is `warden serve`
    running?"), though B served on."""
    a, b = pair
    token = a.token()
    lines: list[dict[str, object]] = []
    with b.serve() as server_b:
        server_a = a.serve()
        server_a.__enter__()
        try:
            assert server_a.proc is not None
            cmd = ["sh", "-c", "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.01; done"]
            with httpx.stream("POST", f"{server_b.url}/v1/workspaces/wsa/exec", json={"cmd": cmd, "stream": True},
                              headers={"Authorization": f"Bearer {token}"}, timeout=30) as answer:
                assert answer.status_code == 200
                for line in answer.iter_lines():
                    lines.append(json.loads(line))  # every line whole: a cut one would not parse
                    if len(lines) == 20:
                        os.kill(server_a.proc.pid, signal.SIGKILL)
        finally:
            server_a.__exit__(None, None, None)
        assert httpx.get(f"{server_b.url}/openapi.json", timeout=10).status_code == 200  # B serves on
    last = lines[-1]
    assert last["type"] == "error", lines[-3:]
    error = last["error"]
    assert isinstance(error, dict) and error["code"] == "unavailable" and "'node-a'" in error["message"]
    printed = "".join(str(e["data"]) for e in lines[:-1] if e["type"] == "stdout").split()
    assert printed == [f"line{i}" for i in range(len(printed))] and len(printed) >= 19


def test_an_exec_whose_node_dies_while_it_runs_is_not_said_safe_to_send_again(pair: tuple[Node, Node]) -> None:
    """A is killed -9 while an exec sent through B runs there. B answered "unavailable … try again
    when it is back", though the command had run (its first step done): a bot doing so runs it twice."""
    a, b = pair
    token = a.token()
    marker = "lost-" + secrets.token_hex(4)
    with b.serve() as server_b, a.killed_once(marker):
        lost = _exec(server_b.url, token, ["sh", "-c", f"touch {marker}; sleep 20"])
    assert lost.status_code == 503, lost.text
    error = lost.json()["error"]
    assert error["code"] == "unavailable" and "'node-a'" in error["message"], error
    assert "try again" not in error["message"] and "may have been done" in error["message"], error
