"""A plain `POST …/exec` is answered ahead of FastAPI's routing (http/fastpath.FastExecs), with
the answer, checks and audit event the FastAPI route gives; every other form still reaches the
route. Against a real uvicorn server running commands in real bwrap sandboxes.

The same request with a query string added (FastAPI ignores one the route does not declare;
the fast path leaves every request with one to FastAPI) is the route's answer to compare with.
"""

from __future__ import annotations

import functools
import http.client
import itertools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.servers import ThreadServer
from tests.support.waiting import wait_until
from warden.adapters.store.audit import SqlAudit
from warden.bootstrap import bootstrap
from warden.interfaces.http import routes

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

EXEC = "/v1/workspaces/demo/exec"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("fastexec") / "home"
    app = bootstrap(home, environ={"PATH": "/usr/bin:/bin", "WARDEN_HOME": str(home)})
    app.workspaces.create("demo")
    app.grants.register_bot("runner")
    runner = app.grants.grant("demo", "runner", "read,write,execute").token
    app.grants.register_bot("reader")
    reader = app.grants.grant("demo", "reader", "read").token
    routed: list[str] = []
    through_route = routes.BotRoutes.exec_or_stream

    @functools.wraps(through_route)  # FastAPI reads the route's parameters from its signature
    async def counted(self: routes.BotRoutes, name: str, *args: Any, **kwargs: Any) -> Any:
        routed.append(name)
        return await through_route(self, name, *args, **kwargs)

    # Patched before the server builds its routes: FastAPI's route calls this, the fast path does not.
    routes.BotRoutes.exec_or_stream = counted  # type: ignore[method-assign]
    try:
        with ThreadServer(app) as server:
            yield {"app": app, "url": server.url, "runner": runner, "reader": reader, "routed": routed}
    finally:
        routes.BotRoutes.exec_or_stream = through_route  # type: ignore[method-assign]
        app.close()


def _post(world: dict[str, Any], token: str, content: bytes, *, query: str = "", name: str = "demo",
          kind: str = "application/json") -> httpx.Response:
    return httpx.post(f"{world['url']}/v1/workspaces/{name}/exec{query}", content=content, timeout=60,
                      headers={"Authorization": f"Bearer {token}", "Content-Type": kind})


def _exec_events(world: dict[str, Any]) -> list[dict[str, Any]]:
    return [e.detail | {"decision": e.decision, "rule": e.rule, "result": e.result, "actor": e.actor}
            for e in world["app"].audit.list(limit=500) if e.action == "api.exec"]


def _same(fast: httpx.Response, routed: httpx.Response) -> None:
    assert fast.status_code == routed.status_code, (fast.text, routed.text)
    assert fast.headers.get("content-type") == routed.headers.get("content-type")
    assert fast.headers.get("www-authenticate") == routed.headers.get("www-authenticate")
    fast_body, routed_body = fast.json(), routed.json()
    for body in (fast_body, routed_body):
        if "duration_s" in body:
            body["duration_s"] = "…"
            body["usage"] = sorted(body["usage"] or {})  # measured: the same fields, other numbers
    assert fast_body == routed_body


def test_a_plain_exec_is_answered_without_the_route_and_as_the_route_answers(world: dict[str, Any]) -> None:
    command = b'{"cmd": ["sh", "-c", "printf \'caf\\u00e9\'; echo oops >&2; exit 3"], "env": {"A": "1"}}'
    before = len(world["routed"])
    fast = _post(world, world["runner"], command)
    assert fast.status_code == 200 and fast.json()["exit_code"] == 3, fast.text
    assert fast.json()["stdout"] == "café" and fast.json()["stderr"] == "oops\n"
    assert len(world["routed"]) == before  # the fast path answered it
    routed = _post(world, world["runner"], command, query="?via=route")
    assert len(world["routed"]) == before + 1
    _same(fast, routed)
    fast_event, routed_event = _exec_events(world)[-2:]
    assert fast_event.keys() == routed_event.keys()
    assert fast_event["program"] == "sh" and fast_event["exit_code"] == 3 and fast_event["env_names"] == ["A"]
    assert {k: v for k, v in fast_event.items() if k != "run_id"} == \
           {k: v for k, v in routed_event.items() if k != "run_id"}


@pytest.mark.parametrize(("token", "content", "name"), [
    ("wdn_no_such_token", b'{"cmd": ["true"]}', "demo"),  # unknown token: 403, as the route says it
    ("reader", b'{"cmd": ["true"]}', "demo"),  # no `execute`
    ("runner", b'{"cmd": ["true"]}', "other"),  # a workspace the grant is not for
    ("runner", b'{"cmd": ["true"], "cwd": "../../etc"}', "demo"),  # a folder outside the workspace: 400
    ("runner", b'{"cmd": ["true"], "timeout": 0}', "demo"),  # the model refuses it: FastAPI's 422
    ("runner", b'{"cmd": []}', "demo"),
    ("runner", b'{"cmd": ["true"], "shell": true}', "demo"),  # an unknown field
    ("runner", b'[{"cmd": ["true"]}]', "demo"),  # not an object
    ("runner", b'{"cmd": ["true"]', "demo"),  # not JSON
    ("runner", b"", "demo"),  # no body
])
def test_a_refusal_reads_as_the_routes(world: dict[str, Any], token: str, content: bytes, name: str) -> None:
    presented = world.get(token, token)
    events = len(_exec_events(world))
    fast = _post(world, presented, content, name=name)
    routed = _post(world, presented, content, name=name, query="?via=route")
    assert fast.status_code in (400, 403, 422), fast.text
    _same(fast, routed)
    # A refusal by a check is audited once either way; one FastAPI refuses before the route, never.
    audited = len(_exec_events(world)) - events
    assert audited in (0, 2)
    if audited:
        fast_event, routed_event = _exec_events(world)[-2:]
        assert (fast_event["decision"], fast_event["rule"]) == (routed_event["decision"], routed_event["rule"])


def test_other_forms_of_exec_reach_the_route(world: dict[str, Any]) -> None:
    before = len(world["routed"])
    streamed = _post(world, world["runner"], b'{"cmd": ["echo", "hi"], "stream": true}')
    assert streamed.status_code == 200 and streamed.headers["content-type"] == "application/x-ndjson"
    assert '"hi\\n"' in streamed.text
    form = _post(world, world["runner"], b'{"cmd": ["true"]}', kind="application/x-www-form-urlencoded")
    assert form.status_code == 422 and "Content-Type: application/json" in form.json()["error"]["message"]
    assert len(world["routed"]) == before + 1  # the form's body never reached the route: FastAPI refused it


def test_a_plain_execs_event_is_written_with_its_runs_outcome(world: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The call's event had a write transaction of its own after the run's: one commit more an exec.
    numbers = itertools.count()
    appended: list[tuple[int, str]] = []  # (the transaction, the event's action)
    append = SqlAudit.append

    def noted(self: SqlAudit, event: Any) -> Any:
        appended.append((self.__dict__.setdefault("_test_tx", next(numbers)), event.action))
        return append(self, event)

    monkeypatch.setattr(SqlAudit, "append", noted)
    fast = _post(world, world["runner"], b'{"cmd": ["sh", "-c", "exit 4"], "env": {"B": "2"}}')
    assert fast.status_code == 200 and fast.json()["exit_code"] == 4, fast.text
    # (The server's thread may still be writing the event after the answer: wait for it.)
    wait_until(lambda: any(action == "api.exec" for _, action in appended), timeout=10, message="no api.exec event")
    ran = [tx for tx, action in appended if action == "run"]
    called = [tx for tx, action in appended if action == "api.exec"]
    assert len(ran) == 1 and called == ran, appended
    # The same event as the streamed exec's, written on its own as before (its `stream` note aside).
    streamed = _post(world, world["runner"], b'{"cmd": ["sh", "-c", "exit 4"], "env": {"B": "2"}, "stream": true}')
    assert streamed.status_code == 200 and json.loads(streamed.text.splitlines()[-1])["exit_code"] == 4
    plain_event, streamed_event = _exec_events(world)[-2:]
    assert streamed_event.pop("stream") is True
    assert {k: v for k, v in plain_event.items() if k != "run_id"} == \
           {k: v for k, v in streamed_event.items() if k != "run_id"}
    assert plain_event["exit_code"] == 4 and plain_event["env_names"] == ["B"] and plain_event["rule"] == "grant.allow"


def test_a_plain_exec_whose_client_left_says_so(world: dict[str, Any]) -> None:
    parts = urlsplit(world["url"])
    folder = world["app"].workspaces.get("demo").path
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    hold = "touch left-started; sleep 30"
    conn.request("POST", EXEC, body=json.dumps({"cmd": ["sh", "-c", hold]}).encode(),
                 headers={"Authorization": f"Bearer {world['runner']}", "Content-Type": "application/json"})
    wait_until((Path(folder) / "left-started").exists, timeout=30, message="the command never started")
    conn.close()  # the client goes away: the command is killed, and the call's event says so

    def said() -> bool:  # (none yet when this test runs first, alone or on a worker of its own)
        events = _exec_events(world)
        return bool(events) and events[-1]["program"] == "sh" and events[-1].get("client_gone") is True

    wait_until(said, timeout=30, message="no api.exec event with client_gone")
    assert _exec_events(world)[-1]["exit_code"] != 0
