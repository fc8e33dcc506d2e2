"""A streamed exec (`"stream": true`) through a real `warden serve`, over plain HTTP and the SDK.

Streaming is shown by order, not by a clock: the command prints, then waits for a file that the
test creates only once it has received that first output. Were the output held back until the
end, the command would wait for its timeout and the test would fail on its status.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until
from warden.client import Client, RunEvent
from warden.core.errors import Denied

# Prints, waits (at most its timeout) for the file `go` the test makes, then prints again.
WAIT_FOR_GO = "echo first; while [ ! -e go ]; do sleep 0.02; done; echo second >&2; exit 3"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("stream")
    environ = {**warden_environ(tmp / "home"), "WARDEN_API_MAX_OUTPUT": "64K"}
    cli_out(environ, "init")
    cli_out(environ, "create", "live")
    cli_out(environ, "bot", "register", "streamer")
    token = cli_out(environ, "grant", "live", "streamer", "--permissions", "read,execute")
    with ServeProcess(environ, tmp) as server:
        yield {"url": server.url, "token": token, "environ": environ,
               "folder": tmp / "home" / "workspaces" / "live", "server": server}


def _reset(folder: Path) -> Path:
    go = folder / "go"
    go.unlink(missing_ok=True)
    return go


def test_output_arrives_while_the_command_runs_then_its_exit_line(served: dict[str, Any]) -> None:
    go = _reset(served["folder"])
    lines: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{served['url']}/v1/workspaces/live/exec", timeout=60,
                      headers={"Authorization": f"Bearer {served['token']}"},
                      json={"cmd": ["sh", "-c", WAIT_FOR_GO], "timeout": 30, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        for line in response.iter_lines():
            lines.append(json.loads(line))
            if lines[-1] == {"type": "stdout", "data": "first\n"}:
                assert not go.exists()
                go.touch()  # only now may the command go on
    assert lines[0] == {"type": "stdout", "data": "first\n"}
    assert lines[1] == {"type": "stderr", "data": "second\n"}
    assert lines[-1]["type"] == "exit" and len(lines) == 3
    assert {k: v for k, v in lines[-1].items() if k != "duration_s"} == {
        "type": "exit", "exit_code": 3, "timed_out": False, "signal": None}


def test_the_sdk_streams_as_an_iterator_and_through_callbacks(served: dict[str, Any]) -> None:
    go = _reset(served["folder"])
    ws = Client(served["url"], served["token"]).workspace("live")
    events: list[RunEvent] = []
    for event in ws.stream(["sh", "-c", WAIT_FOR_GO], timeout=30):
        events.append(event)
        if event.data == "first\n":
            go.touch()
    assert [(e.type, e.data) for e in events[:2]] == [("stdout", "first\n"), ("stderr", "second\n")]
    assert events[-1].type == "exit" and events[-1].exit_code == 3 and not events[-1].timed_out

    go = _reset(served["folder"])
    seen: list[tuple[str, str]] = []

    def on_stdout(text: str) -> None:
        seen.append(("out", text))
        go.touch()

    result = ws.run(["sh", "-c", WAIT_FOR_GO], timeout=30, on_stdout=on_stdout,
                    on_stderr=lambda text: seen.append(("err", text)))
    assert seen == [("out", "first\n"), ("err", "second\n")]
    assert (result.exit_code, result.stdout, result.stderr) == (3, "first\n", "second\n")


def test_streamed_output_keeps_the_cap_and_says_what_it_dropped(served: dict[str, Any]) -> None:
    ws = Client(served["url"], served["token"]).workspace("live")
    big = "import sys; sys.stdout.write('x' * (1 << 20)); sys.stdout.flush(); sys.stderr.write('done\\n')"
    events = list(ws.stream(["python3", "-c", big], timeout=60))
    out = [e.data for e in events if e.type == "stdout"]
    assert sum(map(len, out)) == 64 * 1024 and all(len(piece) <= 64 * 1024 for piece in out)
    # The command's stderr, then Warden's note (one event or two: chunks that come together may
    # travel together).
    errors = "".join(e.data for e in events if e.type == "stderr")
    assert errors == ("done\nwarden: output beyond 65536 bytes per stream was dropped (stdout 983040 bytes; "
                      "api.max_output)\n")
    assert events[-1].type == "exit" and events[-1].exit_code == 0


def test_a_refused_stream_is_an_ordinary_error_response(served: dict[str, Any]) -> None:
    response = httpx.post(f"{served['url']}/v1/workspaces/live/exec", json={"cmd": ["true"], "stream": True},
                          headers={"Authorization": "Bearer wdn_not_a_token"}, timeout=30)
    assert response.status_code == 403 and response.json()["error"]["code"] == "denied"
    with pytest.raises(Denied):
        next(Client(served["url"], "wdn_not_a_token").workspace("live").stream(["true"]))


def _audit(environ: dict[str, str]) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(cli_out(environ, "audit", "--workspace", "live", "--limit", "20",
                                                    "--json"))["data"]
    return data


def test_a_client_that_leaves_has_its_command_killed_and_the_run_audited(served: dict[str, Any]) -> None:
    ws = Client(served["url"], served["token"]).workspace("live")
    events = ws.stream(["sh", "-c", "echo started; exec sleep 120"], timeout=300)
    assert next(events) == RunEvent("stdout", "started\n")
    events.close()  # drops the connection mid-stream

    def gone() -> tuple[dict[str, Any], dict[str, Any]] | None:
        log = _audit(served["environ"])
        api = [e for e in log if e["action"] == "api.exec" and e["detail"].get("client_gone")]
        runs = [e for e in log if e["action"] == "run" and e["detail"]["argv"][-1] == "echo started; exec sleep 120"]
        return (api[-1], runs[-1]) if api and runs else None

    api, run = wait_until(gone, timeout=60, message="the exec of the client that left was never audited")
    assert run["detail"]["exit_code"] == 137 and run["detail"]["signal"] == 9  # killed, long before 120 s
    assert run["detail"]["duration_s"] < 60
    assert api["decision"] == "allow" and api["detail"]["stream"] is True and api["detail"]["exit_code"] == 137
