"""Attacks on a real API server: uploads without a token, listings past expiry, huge arguments.

Each test drives a uvicorn server on 127.0.0.1 (tests.support.servers.ThreadServer) the way
an attacker would: raw sockets where the attack is in how bytes arrive, httpx otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.clock import Clock
from tests.support.servers import ThreadServer
from warden.bootstrap import App, bootstrap
from warden.interfaces.http.limits import LimitsMiddleware, Refusal

MAX_FILE_MB = 8
UPLOAD = "/v1/workspaces/demo/files/content?path=up/big.bin"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("abuse") / "home"
    environ = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
               "WARDEN_API_MAX_BODY": "512k", "WARDEN_SANDBOX_MAX_FILE_SIZE_MB": str(MAX_FILE_MB)}
    clock = Clock()
    app = bootstrap(home, environ=environ, clock=clock)
    app.workspaces.create("demo")
    identity = app.grants.register_bot("uploader").token
    writer = app.grants.grant("demo", "uploader", "read,write,execute").token
    app.grants.register_bot("peeker")
    reader = app.grants.grant("demo", "peeker", "read").token
    with ThreadServer(app) as server:
        yield {"app": app, "url": server.url, "identity": identity, "writer": writer, "reader": reader,
               "clock": clock}
    app.close()


def _raw(url: str, head: str, body: bytes = b"", wait: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send `head` and the start of a body, then read the answer: until its Content-Length is
    in, or else until the server closes (a server keeping the connection open after answering
    would otherwise hold the test for its keep-alive time).

    Raises socket.timeout when the server instead waits for the rest of the body.
    """
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=wait) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            top, end, payload = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", top)
            if end and length and len(payload) >= int(length.group(1)):
                break
    top, _, payload = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, payload


def _upload_head(length: int | None, authorization: str | None = None, path: str = UPLOAD) -> str:
    lines = [f"PUT {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if authorization is not None:
        lines.append(f"Authorization: {authorization}")
    return "\r\n".join(lines) + "\r\n"


def _error(status: int, payload: bytes) -> tuple[int, str, str]:
    body = json.loads(payload)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return status, body["error"]["code"], body["error"]["message"]


# -- 1. uploads are screened before their body is read ----------------------------------------
def test_an_upload_without_a_token_is_refused_before_its_body_is_sent(live: dict[str, Any]) -> None:
    declared = (MAX_FILE_MB - 1) * 1024 * 1024  # within the file limit, far over api.max_body
    for authorization in (None, "Basic dXNlcjpwYXNz", "Bearer", "Bearer    "):
        started = time.monotonic()
        # Only 10 bytes of the promised megabytes: the answer must not wait for the rest.
        status, headers, payload = _raw(live["url"], _upload_head(declared, authorization), b"x" * 10)
        assert _error(status, payload)[:2] == (401, "denied"), authorization
        assert "Bearer" in _error(status, payload)[2]
        assert headers["www-authenticate"] == "Bearer"
        assert headers["connection"] == "close"
        assert time.monotonic() - started < 5
    # A chunked upload (no Content-Length) is screened the same way.
    status, _, payload = _raw(live["url"], _upload_head(None), b"a\r\n0123456789\r\n")
    assert _error(status, payload)[:2] == (401, "denied")
    app: App = live["app"]
    event = app.audit.list(limit=1)[0]
    assert (event.actor, event.action, event.target, event.decision, event.rule) == (
        "anonymous", "api.files.write", "demo:up/big.bin", "deny", "token.missing")
    assert not app.files("demo").exists("/up/big.bin")


def test_an_upload_with_a_bad_or_weak_token_is_refused_before_its_body_is_sent(live: dict[str, Any]) -> None:
    declared = (MAX_FILE_MB - 1) * 1024 * 1024
    app: App = live["app"]
    for token, rule in (("wdn_" + "Q" * 43, "token.unknown"), ("junk", "token.unknown"),
                        (live["identity"], "token.identity"), (live["reader"], "grant.permission")):
        status, headers, payload = _raw(live["url"], _upload_head(declared, f"Bearer {token}"), b"y" * 10)
        said = "permission denied" + (": this token's grant on workspace demo does not include `write`"
                                      if rule == "grant.permission" else "")
        assert _error(status, payload)[:2] == (403, "denied") and _error(status, payload)[2].startswith(said)
        assert headers["connection"] == "close"
        event = app.audit.list(limit=1)[0]
        assert (event.action, event.decision, event.rule) == ("api.files.write", "deny", rule)
        assert token not in repr(event)
    assert app.audit.list(limit=1)[0].actor.startswith("bot:peeker@acc_")
    assert not app.files("demo").exists("/up/big.bin")


def test_an_authorised_upload_still_works_and_is_audited_once(live: dict[str, Any]) -> None:
    app: App = live["app"]
    data = os.urandom(3 * 1024 * 1024)  # well over api.max_body: screened, then read
    before = app.audit.list(limit=1)[0].seq
    response = httpx.put(live["url"] + "/v1/workspaces/demo/files/content", params={"path": "up/ok.bin"},
                         content=data, headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == {"path": "up/ok.bin", "size": len(data)}
    events = [e for e in app.audit.list(limit=20) if e.seq > before]
    assert [e.action for e in events] == ["fs.write"]  # the screen adds no event of its own
    assert app.files("demo").read_bytes("/up/ok.bin") == data

    def pieces() -> Iterator[bytes]:  # chunked, and read in many small messages
        for _ in range(64):
            yield b"z" * 4096

    response = httpx.put(live["url"] + "/v1/workspaces/demo/files/content", params={"path": "up/chunked.bin"},
                         content=pieces(), headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    assert response.status_code == 200, response.text
    assert app.files("demo").read_bytes("/up/chunked.bin") == b"z" * 4096 * 64


def test_limits_still_come_first_for_uploads(live: dict[str, Any]) -> None:
    too_big = MAX_FILE_MB * 1024 * 1024 + 1
    status, _, payload = _raw(live["url"], _upload_head(too_big), b"x" * 10)  # no token: still 413
    assert _error(status, payload)[:2] == (413, "invalid")
    status, _, payload = _raw(live["url"], _upload_head(too_big, f"Bearer {live['writer']}"), b"x" * 10)
    assert _error(status, payload)[:2] == (413, "invalid")

    def stream() -> Iterator[bytes]:
        for _ in range(MAX_FILE_MB * 16 + 1):
            yield b"w" * 65536

    response = httpx.put(live["url"] + "/v1/workspaces/demo/files/content", params={"path": "up/huge.bin"},
                         content=stream(), headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    assert response.status_code == 413 and response.json()["error"]["code"] == "invalid"
    assert not live["app"].files("demo").exists("/up/huge.bin")


def test_json_routes_keep_the_small_limit_and_reads_are_not_screened(live: dict[str, Any]) -> None:
    app: App = live["app"]
    big_json = json.dumps({"cmd": ["echo", "x" * (520 * 1024)]})
    response = httpx.post(live["url"] + "/v1/workspaces/demo/exec", content=big_json,
                          headers={"Authorization": f"Bearer {live['writer']}", "content-type": "application/json"})
    assert response.status_code == 413
    # A GET of a file's content is no upload: it is allowed no more body than any JSON route.
    status, _, payload = _raw(live["url"], "GET /v1/workspaces/demo/files/content?path=x HTTP/1.1\r\n"
                              "Host: 127.0.0.1\r\nConnection: close\r\nContent-Length: 600000\r\n", b"")
    assert _error(status, payload)[:2] == (413, "invalid")
    app.files("demo").write_bytes("/up/read.txt", b"read me")
    response = httpx.get(live["url"] + "/v1/workspaces/demo/files/content", params={"path": "up/read.txt"},
                         headers={"Authorization": f"Bearer {live['reader']}"})
    assert (response.status_code, response.content) == (200, b"read me")


def _json_head(length: int | None, authorization: str | None = None,
               path: str = "/v1/workspaces/demo/exec") -> str:
    head = _upload_head(length, authorization, path).replace("PUT ", "POST ", 1)
    return head.replace("\r\n", "\r\nContent-Type: application/json\r\n", 1)


def test_a_large_json_body_without_a_token_is_refused_before_it_is_held(live: dict[str, Any]) -> None:
    # FastAPI parses a JSON body before the route authenticates: without this door, a client with
    # no token made the server hold api.max_body per connection for two minutes, and parse it.
    declared = 400 * 1024  # under api.max_body (512k here), over what is held without a token
    app: App = live["app"]
    for path in ("/v1/workspaces/demo/exec", "/v1/workspaces", "/mcp"):
        started = time.monotonic()
        status, headers, payload = _raw(live["url"], _json_head(declared, path=path), b"[" * 10)
        assert _error(status, payload)[:2] == (401, "denied"), path
        assert headers["connection"] == "close" and headers["www-authenticate"] == "Bearer"
        assert time.monotonic() - started < 5
    event = app.audit.list(limit=1)[0]
    assert (event.actor, event.action, event.target, event.decision, event.rule) == (
        "anonymous", "api.request", "/mcp", "deny", "token.missing")
    # Chunked (no length declared): refused once what came is past the door, the rest unread.
    status, headers, payload = _raw(live["url"], _json_head(None), b"10000\r\n" + b"[" * 0x10000 + b"\r\n"
                                    + b"10\r\n" + b"[" * 16 + b"\r\n")
    assert _error(status, payload)[:2] == (401, "denied") and headers["connection"] == "close"
    status, _, payload = _raw(live["url"], _json_head(declared, "Bearer wdn_" + "Q" * 43), b"[" * 10)
    assert _error(status, payload) == (403, "denied", "permission denied")
    assert app.audit.list(limit=1)[0].rule == "token.unknown"
    # A small body is read as before: the route answers it (here: 401 after parsing it).
    small = json.dumps({"cmd": ["true"]}).encode()
    status, _, payload = _raw(live["url"], _json_head(len(small)) + "Connection: close\r\n", small)
    assert _error(status, payload)[:2] == (401, "denied")


def test_a_large_json_body_with_a_valid_token_is_read_and_answered(live: dict[str, Any]) -> None:
    app: App = live["app"]
    before = app.audit.list(limit=1)[0].seq
    text = "x" * (100 * 1024)  # two arguments, each under the kernel's bound: 200 KiB of JSON
    response = httpx.post(live["url"] + "/v1/workspaces/demo/exec", json={"cmd": ["printf", "%s", text, text]},
                          headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["stdout"] == text * 2
    events = [e for e in app.audit.list(limit=20) if e.seq > before]
    assert "api.request" not in [e.action for e in events]  # the door adds no event of its own
    assert [e.action for e in events].count("api.exec") == 1


def test_a_json_body_of_too_many_values_is_refused_before_it_is_parsed(live: dict[str, Any]) -> None:
    # 16 MiB of `[],` is five million lists: json.loads built them for 47 s of the event loop (and
    # 540 MiB) before the model said `cmd` takes 4096 strings. Counted first now, never parsed.
    app: App = live["app"]
    headers = {"Authorization": f"Bearer {live['writer']}", "Content-Type": "application/json"}
    before = app.audit.list(limit=1)[0].seq
    with httpx.Client(base_url=live["url"], headers=headers, timeout=60) as client:
        for body in (b'{"cmd": [' + b",".join([b"[]"] * 120_000) + b"]}",
                     b'{"cmd": ["true"], "env": {' + b",".join(b'"K%d": ""' % i for i in range(40_000)) + b"}}",
                     # UTF-16, which json.loads takes: U+0122 is 22 01, a quote to a count of bytes,
                     # so the lists between two of them passed as one string and were parsed.
                     ('{"cmd": ["\u0122"' + ",[]" * 60_000 + ',"\u0122"]}').encode("utf-16-le")):
            assert len(body) < 512 * 1024  # within api.max_body: only its count refuses it
            response = client.post("/v1/workspaces/demo/exec", content=body)
            status, code, message = _error(response.status_code, response.content)
            assert (status, code) == (413, "invalid"), response.text
            assert "JSON values" in message and "over the limit of 100000" in message and "\n" not in message
        # Nothing ran: the route never saw it.
        assert "api.exec" not in [e.action for e in app.audit.list(limit=20) if e.seq > before]
        # The same punctuation inside one string is data: 300 KiB of stdin runs.
        stdin = "[],{}" * 60_000
        response = client.post("/v1/workspaces/demo/exec", json={"cmd": ["wc", "-c"], "stdin": stdin})
        assert response.status_code == 200, response.text
        assert response.json()["stdout"].strip() == str(len(stdin))
        # MCP over HTTP goes through the same count.
        response = client.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ['
                               + b",".join([b"0"] * 120_000) + b"]}}",
                               headers={"Accept": "application/json, text/event-stream"})
        assert response.status_code == 413, response.text
    # An upload is bytes, not JSON: a file of commas is written whole.
    commas = b"," * (300 * 1024)
    response = httpx.put(live["url"] + "/v1/workspaces/demo/files/content?path=commas.txt", content=commas,
                         headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    assert response.status_code == 200, response.text


def _drive(app: Any, messages: list[dict[str, Any]], method: str = "PUT") -> tuple[int, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app({"type": "http", "method": method, "path": "/x", "headers": []}, receive, send))
    return sent[0]["status"], sent


def test_the_middleware_hands_the_body_on_in_pieces_without_a_joined_copy() -> None:
    seen: list[dict[str, Any]] = []

    async def collect(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = LimitsMiddleware(collect, limit_for=lambda s: 8 << 20, timeout_for=lambda s: 5)
    # 3000 messages of 1000 bytes (a trickle) arrive as a few pieces of a megabyte or so.
    trickle = [{"type": "http.request", "body": bytes([i % 256]) * 1000, "more_body": True} for i in range(3000)]
    trickle.append({"type": "http.request", "body": b"", "more_body": False})
    expected = b"".join(m["body"] for m in trickle)
    assert _drive(middleware, trickle)[0] == 200
    assert b"".join(m["body"] for m in seen) == expected
    assert len(seen) <= 3 and all(len(m["body"]) >= 1 << 20 for m in seen[:-1])
    assert [m["more_body"] for m in seen] == [True] * (len(seen) - 1) + [False]
    # One message stays one message, the very bytes object (Starlette's join keeps it as is).
    seen.clear()
    body = b"q" * (2 << 20)
    assert _drive(middleware, [{"type": "http.request", "body": body, "more_body": False}])[0] == 200
    assert len(seen) == 1 and seen[0]["body"] is body


def test_the_screen_runs_before_any_body_is_received() -> None:
    received: list[str] = []

    async def never(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the application must not be reached")

    def screen(scope: Any) -> Refusal:
        return Refusal(401, "denied", "authentication required", ((b"www-authenticate", b"Bearer"),))

    middleware = LimitsMiddleware(never, limit_for=lambda s: 100, timeout_for=lambda s: 5,
                                  screen=screen, screen_above=10)

    async def receive() -> dict[str, Any]:
        received.append("body")
        return {"type": "http.request", "body": b"x", "more_body": False}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(middleware({"type": "http", "method": "PUT", "path": "/x", "headers": []}, receive, send))
    assert received == []
    assert sent[0]["status"] == 401 and (b"connection", b"close") in sent[0]["headers"]
    # At or under screen_above the screen is not asked (a JSON route reads its small body first).
    small = LimitsMiddleware(never, limit_for=lambda s: 10, timeout_for=lambda s: 5,
                             screen=screen, screen_above=10)
    status, _ = _drive(small, [{"type": "http.request", "body": b"x" * 11, "more_body": False}])
    assert status == 413


# -- 3. a bot's listing never outlasts its grants ------------------------------------------------
def test_a_workspace_leaves_the_bots_listing_when_its_grant_expires(live: dict[str, Any]) -> None:
    app: App = live["app"]
    clock: Clock = live["clock"]
    app.workspaces.create("brief")
    identity = app.grants.register_bot("visitor").token
    grant = app.grants.grant("brief", "visitor", "read", ttl=timedelta(seconds=30)).token

    def listing(token: str) -> httpx.Response:
        return httpx.get(live["url"] + "/v1/workspaces", headers={"Authorization": f"Bearer {token}"})

    assert [w["name"] for w in listing(identity).json()] == ["brief"]
    assert [w["name"] for w in listing(grant).json()] == ["brief"]
    clock.now += timedelta(seconds=31)
    assert listing(identity).json() == []
    denied = httpx.get(live["url"] + "/v1/workspaces/brief", headers={"Authorization": f"Bearer {grant}"})
    assert denied.status_code == 403
    assert listing(grant).status_code == 403
    # The other bots' long grants are unaffected by the clock moving on.
    assert [w["name"] for w in listing(live["identity"]).json()] == ["demo"]


# -- 4. an argument list the kernel cannot take is bad input, not a crash ------------------------
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_an_exec_argument_too_long_for_the_kernel_is_invalid_input(live: dict[str, Any]) -> None:
    client = httpx.Client(base_url=live["url"], headers={"Authorization": f"Bearer {live['writer']}"}, timeout=60)
    app: App = live["app"]
    with client:
        response = client.post("/v1/workspaces/demo/exec", json={"cmd": ["echo", "x" * (200 * 1024)]})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert "too long" in error["message"] and "stdin or a file" in error["message"]
        assert "\n" not in error["message"]
        event = app.audit.list(limit=1)[0]
        assert (event.action, event.result) == ("api.exec", "invalid")
        # The server is fine afterwards, and a long argument under the limit still runs.
        response = client.post("/v1/workspaces/demo/exec", json={"cmd": ["sh", "-c", 'echo "${#1}"', "_",
                                                                         "y" * 60000]})
        assert response.status_code == 200, response.text
        assert response.json()["stdout"].strip() == "60000"
