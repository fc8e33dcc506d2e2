"""The API's edges on a real uvicorn server: error envelope and statuses, body limits, timeouts."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.servers import ThreadServer
from warden.bootstrap import App, bootstrap
from warden.core.errors import Conflict, Denied, InvalidInput, Locked, NotFound, TimedOut, TooLarge, Unavailable
from warden.interfaces.http.calls import Unauthenticated
from warden.interfaces.http.limits import LimitsMiddleware
from warden.interfaces.http.statuses import status_for


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("errors") / "home"
    environ = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home),
               "WARDEN_API_MAX_BODY": "4k", "WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "1"}
    app = bootstrap(home, environ=environ)
    app.workspaces.create("demo")
    identity = app.grants.register_bot("edgebot").token
    token = app.grants.grant("demo", "edgebot", "read,write,execute,admin").token
    with ThreadServer(app) as server:
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        yield {"app": app, "client": client, "identity": identity, "url": server.url}
        client.close()
    app.close()


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert "\n" not in message and "Traceback" not in message
    return message


def test_status_table() -> None:
    assert status_for(InvalidInput("x")) == 400
    assert status_for(Unauthenticated("x")) == 401
    assert status_for(Denied("x")) == 403
    assert status_for(NotFound("x")) == 404
    assert status_for(Conflict("x")) == 409
    assert status_for(TooLarge("x")) == 413
    assert status_for(Locked("x")) == 423
    assert status_for(Unavailable("x")) == 503
    assert status_for(TimedOut("x")) == 503


def test_missing_credentials_are_401(live: dict[str, Any]) -> None:
    response = httpx.get(live["url"] + "/v1/workspaces/demo")
    assert "Bearer" in _error(response, 401, "denied")
    assert response.headers["www-authenticate"] == "Bearer"


def test_health_needs_no_token(live: dict[str, Any]) -> None:
    assert httpx.get(live["url"] + "/v1/health").json()["status"] == "ok"


def test_unknown_route_and_method(live: dict[str, Any]) -> None:
    _error(live["client"].get("/v1/nothing"), 404, "not_found")
    _error(live["client"].patch("/v1/workspaces/demo"), 405, "invalid")


def test_malformed_bodies_are_422(live: dict[str, Any]) -> None:
    client = live["client"]
    _error(client.post("/v1/workspaces/demo/exec", json={"cmd": []}), 422, "invalid")
    _error(client.post("/v1/workspaces/demo/exec", content=b"{not json", headers={"content-type": "application/json"}),
           422, "invalid")
    _error(client.post("/v1/workspaces/demo/grants", json={"bot": "b", "permissions": ["root"]}), 422, "invalid")
    _error(client.get("/v1/workspaces/bad name!"), 422, "invalid")


def test_a_json_body_sent_as_a_form_is_told_to_say_json(live: dict[str, Any]) -> None:
    # `curl -d '{"cmd": …}'` sends a form's content type: the answer said only that the body was
    # not an object, which it plainly is.
    client = live["client"]
    form = {"content-type": "application/x-www-form-urlencoded"}
    message = _error(client.post("/v1/workspaces/demo/exec", content=b'{"cmd": ["true"]}', headers=form),
                     422, "invalid")
    assert "Content-Type: application/json" in message
    assert "Content-Type: application/json" in _error(
        client.post("/v1/workspaces/demo/exec", content=b'{"cmd": ["true"]}'), 422, "invalid")
    # A body said to be JSON is judged as it is.
    wrong = _error(client.post("/v1/workspaces/demo/exec", content=b'{"cmd": "true"}',
                               headers={"content-type": "application/json; charset=utf-8"}), 422, "invalid")
    assert "cmd: Input should be a valid list" in wrong and "Content-Type" not in wrong
    # A command line as one string, as a newcomer sends it first, is shown as a list.
    assert 'the program and its arguments each a string: ["ls", "-l"] (a shell line: ["sh", "-c", ' in wrong, wrong


def test_bad_values_are_400(live: dict[str, Any]) -> None:
    client = live["client"]
    message = _error(client.post("/v1/workspaces/demo/exec", json={"cmd": ["true"], "env": {"1BAD": "x"}}),
                     400, "invalid")
    assert "1BAD" in message
    _error(client.post("/v1/workspaces/demo/grants", json={"bot": "b", "permissions": ["read"], "zones": ["../x"]}),
           400, "invalid")


def test_not_found_and_conflict(live: dict[str, Any]) -> None:
    _error(live["client"].get("/v1/workspaces/demo/files/content", params={"path": "/missing.txt"}), 404, "not_found")
    response = httpx.post(live["url"] + "/v1/workspaces", headers={"Authorization": f"Bearer {live['identity']}"},
                          json={"bot": "edgebot", "request": "workspace", "params": {"name": "demo"}})
    _error(response, 409, "conflict")


def test_a_python_not_installed_is_told_in_the_apis_words(live: dict[str, Any]) -> None:
    # The message named only the CLI's --python, which a bot has no way to pass.
    def create(python: str) -> httpx.Response:
        return httpx.post(live["url"] + "/v1/workspaces", headers={"Authorization": f"Bearer {live['identity']}"},
                          json={"bot": "edgebot", "request": "workspace", "params": {"name": "py", "python": python}},
                          timeout=120)

    message = _error(create("3.97"), 400, "invalid")
    assert "bad Python version '3.97'" in message and '"python"' in message and "3.12" in message, message
    message = _error(create("3.15"), 404, "not_found")  # not released as this is written
    assert "Python 3.15 is not installed" in message and '"python": "X.Y"' in message, message


def test_child_grants_fit_their_limits(live: dict[str, Any]) -> None:
    app: App = live["app"]
    before = len(app.grants.list_grants("demo"))
    # Worded for this API too: the body's fields, no CLI flag syntax.
    for body in ({"ttl": "40d"}, {"ttl": "2h", "max_ttl": "1h"}, {"max_ttl": "90d"}):
        message = _error(live["client"].post("/v1/workspaces/demo/grants",
                                             json={"bot": "edgebot", "permissions": ["read"], **body}), 400, "invalid")
        assert "--" not in message and "ttl" in message, message
    assert len(app.grants.list_grants("demo")) == before


def test_minting_never_tells_which_bot_names_are_registered(live: dict[str, Any]) -> None:
    app: App = live["app"]
    app.grants.register_bot("known-bot")
    answers = {}
    for bot in ("known-bot", "nobody-by-this-name"):
        response = live["client"].post("/v1/workspaces/demo/grants", json={"bot": bot, "permissions": ["read"]})
        assert response.status_code == 201, response.text
        answers[bot] = response.json()
        # Refusals read the same whichever name is asked for.
        too_wide = live["client"].post("/v1/workspaces/demo/grants", json={"bot": bot, "permissions": ["secrets"]})
        assert _error(too_wide, 403, "denied") == ("the parent grant does not have secrets; "
                                                     "a child grant is never wider")
    known, unknown = answers["known-bot"], answers["nobody-by-this-name"]
    assert set(known) == set(unknown)
    assert {k: v for k, v in known.items() if k not in {"token", "accessor", "expires", "max_expires", "bot"}} == \
        {k: v for k, v in unknown.items() if k not in {"token", "accessor", "expires", "max_expires", "bot"}}
    # Only the person, who owns the registry, reads which one was registered (the audit).
    events = {e.detail["bot"]: e.detail for e in app.audit.list(limit=20) if e.action == "grant.create"}
    assert events["known-bot"]["bot_registered"] is True
    assert events["nobody-by-this-name"]["bot_registered"] is False
    # Such a grant is only ever its minter's: no wider, revoked with it.
    issued = app.grants.get(unknown["accessor"])
    assert issued.parent is not None and issued.permissions == frozenset({"read"})


def test_the_protocol_checks_who_asks(live: dict[str, Any]) -> None:
    body = {"bot": "someone-else", "request": "workspace", "params": {"name": "x1"}}
    response = httpx.post(live["url"] + "/v1/workspaces", headers={"Authorization": f"Bearer {live['identity']}"},
                          json=body)
    assert _error(response, 403, "denied") == "permission denied"
    body["bot"] = "edgebot"
    _error(live["client"].post("/v1/workspaces", json=body), 403, "denied")  # a grant token cannot ask
    # The seed's own message carries the token in `credentials`; that works too.
    body["params"] = {"name": "from-seed"}
    body["credentials"] = {"isaac_token": live["identity"]}
    response = httpx.post(live["url"] + "/v1/workspaces", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["workspace"]["path"].endswith("/from-seed")


def test_bodies_over_the_limit_are_413_before_anything_lands(live: dict[str, Any]) -> None:
    client = live["client"]
    big = b"x" * (1024 * 1024 + 1)
    _error(client.put("/v1/workspaces/demo/files/content", params={"path": "big.bin"}, content=big), 413, "invalid")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams
        for _ in range(17):
            yield b"y" * 65536

    _error(client.put("/v1/workspaces/demo/files/content", params={"path": "big2.bin"}, content=chunks()),
           413, "invalid")
    _error(client.post("/v1/workspaces/demo/exec", json={"cmd": ["echo", "z" * 5000]}), 413, "invalid")
    app: App = live["app"]
    assert not app.files("demo").exists("/big.bin")
    assert not app.files("demo").exists("/big2.bin")
    assert client.put("/v1/workspaces/demo/files/content", params={"path": "ok.bin"}, content=b"x" * 1000).json() == {
        "path": "ok.bin", "size": 1000}


def test_denials_name_the_actor_in_the_audit_log_not_the_token(live: dict[str, Any]) -> None:
    app: App = live["app"]
    httpx.get(live["url"] + "/v1/workspaces/demo", headers={"Authorization": "Bearer wdn_" + "Q" * 43})
    event = app.audit.list(limit=1)[0]
    assert (event.actor, event.action, event.decision, event.rule) == ("anonymous", "api.workspace.get", "deny",
                                                                         "token.unknown")
    assert "wdn_" not in repr(event)


async def _slow_app(scope: Any, receive: Any, send: Any) -> None:
    await asyncio.sleep(5)  # an app far slower than the middleware's timeout, which cancels it


async def _echo_app(scope: Any, receive: Any, send: Any) -> None:
    message = await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": message["body"]})


def _drive(app: Any, body: bytes = b"", method: str = "POST") -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/x", "headers": []}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_requests_past_their_timeout_get_503() -> None:
    middleware = LimitsMiddleware(_slow_app, limit_for=lambda s: 100, timeout_for=lambda s: 0.1)
    status, body = _drive(middleware)
    assert status == 503 and b'"timeout"' in body


def test_middleware_replays_the_body_it_counted() -> None:
    middleware = LimitsMiddleware(_echo_app, limit_for=lambda s: 100, timeout_for=lambda s: 5)
    assert _drive(middleware, b"hello") == (200, b"hello")
    status, _ = _drive(middleware, b"x" * 101)
    assert status == 413


def test_the_fast_read_path_answers_like_the_route(live: dict[str, Any]) -> None:
    client = live["client"]
    app: App = live["app"]
    app.files("demo").write_bytes("/fast/a.txt", b"same bytes")
    fast = client.get("/v1/workspaces/demo/files/content", params={"path": "fast/a.txt"})
    assert (fast.status_code, fast.content, fast.headers["content-type"]) == (
        200, b"same bytes", "application/octet-stream")
    # A repeated parameter is not the clean form: FastAPI answers (its last value wins), the same bytes.
    routed = client.get("/v1/workspaces/demo/files/content?path=nothing&path=fast/a.txt")
    assert (routed.status_code, routed.content) == (200, b"same bytes")
    event = app.audit.list(limit=1)[0]
    assert event.action == "fs.read" and event.actor.startswith("bot:edgebot@acc_")
    _error(client.get("/v1/workspaces/demo/files/content", params={"path": "fast/missing"}), 404, "not_found")
    _error(client.get("/v1/workspaces/demo/files/content", params={"path": "x\x00y"}), 400, "invalid")
    _error(client.get("/v1/workspaces/demo/files/content"), 422, "invalid")
    denied = httpx.get(live["url"] + "/v1/workspaces/demo/files/content", params={"path": "fast/a.txt"},
                       headers={"Authorization": "Bearer wdn_" + "R" * 43})
    assert _error(denied, 403, "denied") == "permission denied"
    assert client.head("/v1/workspaces/demo/files/content", params={"path": "fast/a.txt"}).status_code == 405


def test_exec_timeout_cannot_exceed_the_servers_limit(live: dict[str, Any]) -> None:
    limit = live["app"].settings.get_seconds("sandbox.timeout")
    message = _error(live["client"].post("/v1/workspaces/demo/exec", json={"cmd": ["true"], "timeout": limit + 1}),
                     400, "invalid")
    assert "sandbox.timeout" in message
