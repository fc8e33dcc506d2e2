"""The SDK (`warden.client.Client`) against a real server: the calls and the typed errors."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.packages import make_wheel
from tests.support.servers import ThreadServer
from warden.bootstrap import bootstrap
from warden.client import Client, error_from
from warden.core.errors import (
    Conflict,
    Denied,
    InvalidInput,
    Locked,
    NotFound,
    Pending,
    TimedOut,
    TooLarge,
    Unavailable,
    WardenError,
)
from warden.core.runs import RunResult


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("client")
    home = base / "home"
    wheels = base / "wheels"
    make_wheel(wheels, "tinypkg", "1.2")  # requirements install offline, from this folder only
    environ = {"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home), "WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "1",
               "WARDEN_ENVS_FIND_LINKS": str(wheels), "WARDEN_ENVS_NO_INDEX": "true"}
    app = bootstrap(home, environ=environ)
    identity = app.grants.register_bot("sdkbot").token
    app.grants.register_bot("other-bot")
    app.secrets.set("SDK_SECRET", "s3cr3t-value")
    with ThreadServer(app) as server:
        client = Client(server.url, identity)
        created = client.create_workspace("sdk-ws", requirements=[])
        yield {"app": app, "url": server.url, "client": client, "ws": created, "identity": identity}
        client.close()
    app.close()


def test_create_workspace_speaks_seed_000(live: dict[str, Any]) -> None:
    ws = live["ws"]
    assert ws.name == "sdk-ws" and ws.path.endswith("/sdk-ws")
    assert ws.access_token.startswith("wdn_") and ws.accessor.startswith("acc_")
    assert ws.sandbox["max_file_size_mb"] == 1
    assert ws.access_token not in repr(ws)
    assert ws.info()["permissions"] == ["read", "write", "execute", "admin"]
    assert [w["name"] for w in live["client"].list_workspaces()] == ["sdk-ws"]


def test_run_returns_a_run_result(live: dict[str, Any]) -> None:
    result = live["ws"].run(["python", "-c", "import sys; print(sys.stdin.read().upper()); sys.exit(3)"],
                            stdin="abc", timeout=30)
    assert isinstance(result, RunResult)
    assert (result.exit_code, result.stdout, result.timed_out) == (3, "ABC\n", False)
    with pytest.raises(InvalidInput):
        live["ws"].run("echo hi")  # type: ignore[arg-type]


def test_text_that_is_not_unicode_is_the_callers_bad_input(live: dict[str, Any]) -> None:
    # A lone surrogate (os.fsdecode of a name that is not UTF-8) cannot be sent as JSON: it was
    # httpx's UnicodeEncodeError, a traceback no Warden error catches.
    ws = live["ws"]
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        ws.run(["echo", "caf\udce9"])
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        list(ws.stream(["echo", "caf\udce9"]))
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        ws.run(["true"], env={"NAME": "caf\udce9"}, on_stdout=print)
    # What the caller's own loop raises is its own, not said to be the request's.
    with pytest.raises(UnicodeEncodeError), ws.client.streaming("POST", "/v1/workspaces/sdk-ws/exec",
                                                                 json={"cmd": ["true"], "stream": True}):
        "\udce9".encode()
    assert ws.run(["echo", "café"]).stdout == "café\n"


def test_files(live: dict[str, Any]) -> None:
    files = live["ws"].files
    assert files.write("docs/readme.md", "# hi") == 4
    assert files.read_text("docs/readme.md") == "# hi"
    assert files.exists("docs/readme.md") and not files.exists("docs/nope.md")
    assert files.stat("docs")["type"] == "directory"
    assert [e["name"] for e in files.list("docs")] == ["readme.md"]
    with pytest.raises(InvalidInput):
        files.list("docs/readme.md")
    files.delete("docs/readme.md")
    with pytest.raises(NotFound):
        files.read("docs/readme.md")
    with pytest.raises(TooLarge):
        files.write("big.bin", b"x" * (1024 * 1024 + 10))


def test_files_move_renames_and_waits_where_a_zone_asks(live: dict[str, Any]) -> None:
    """Found as a newcomer: the SDK had no `files.move`, which the HTTP API, `warden fs mv` and
    MCP's move_file have (AttributeError: 'RemoteFiles' object has no attribute 'move')."""
    from pathlib import Path

    files = live["ws"].files
    files.write("mv/a.txt", "a")
    files.write("mv/b.txt", "b")
    assert files.move("mv/a.txt", "mv/c.txt") == {"source": "mv/a.txt", "destination": "mv/c.txt", "type": "file"}
    assert files.read_text("mv/c.txt") == "a" and not files.exists("mv/a.txt")
    with pytest.raises(Conflict):
        files.move("mv/c.txt", "mv/b.txt")  # never over an existing entry
    zones = Path(live["ws"].path) / ".warden" / "zones.yaml"
    zones.parent.mkdir(exist_ok=True)
    zones.write_text("zones:\n  mv: {approval: {write: ask, delete: ask}}\n")
    try:
        with pytest.raises(Pending) as waiting:
            files.move("mv/c.txt", "mv/d.txt")
        assert waiting.value.approval_id.startswith("apr_") and files.exists("mv/c.txt")
    finally:
        zones.unlink()


def test_grant_and_revoke(live: dict[str, Any]) -> None:
    client: Client = live["client"]
    ws = live["ws"]
    issued = client.with_token(ws.access_token).grant("sdk-ws", "other-bot", ["read"], ttl="10m")
    assert issued.permissions == ("read",) and issued.parent == ws.accessor
    assert issued.token not in repr(issued)
    reader = client.with_token(issued.token)
    assert reader.whoami()["permissions"] == ["read"]
    assert reader.workspace("sdk-ws").files.exists("/")
    with pytest.raises(Denied):
        reader.workspace("sdk-ws").run(["true"])
    assert ws.revoke(issued.accessor) == [issued.accessor]
    with pytest.raises(Denied):
        reader.whoami()


def test_secrets_follow_the_grant_not_the_request(live: dict[str, Any]) -> None:
    app = live["app"]
    token = app.grants.grant("sdk-ws", "sdkbot", "read,execute,secrets", secrets=["SDK_SECRET"]).token
    ws = live["client"].with_token(token).workspace("sdk-ws")
    probe = ["python", "-c", "import os; print(os.environ.get('SDK_SECRET') == 's3cr3t-value')"]
    assert ws.run(probe, env={"SDK_SECRET": "spoofed"}).stdout == "True\n"
    assert live["ws"].run(probe).stdout == "False\n"  # the creator's grant names no secret


def test_identity_token_is_needed_to_ask_for_workspaces(live: dict[str, Any]) -> None:
    with pytest.raises(Denied):
        live["client"].with_token(live["ws"].access_token).create_workspace("nope", bot="sdkbot")
    with pytest.raises(Denied):
        Client(live["url"], "wdn_" + "x" * 43).whoami()


def test_a_client_without_a_token_is_told_where_to_give_one(live: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARDEN_TOKEN", raising=False)
    with pytest.raises(Denied) as info:
        Client(live["url"]).create_workspace("nope")
    assert "Client(url, token)" in info.value.message and "WARDEN_TOKEN" in info.value.message
    with pytest.raises(Denied) as info:  # a streamed call says the same
        list(Client(live["url"]).workspace("sdk-ws").stream(["true"]))
    assert "WARDEN_TOKEN" in info.value.message
    # A token that was given but is wrong is not told to give one.
    with pytest.raises(Denied) as info:
        Client(live["url"], "wdn_" + "x" * 43).whoami()
    assert "WARDEN_TOKEN" not in info.value.message


def test_a_workspace_call_with_an_identity_token_says_which_token_it_needs(live: dict[str, Any]) -> None:
    # `warden bot register` prints the identity token; Client(url, it).workspace(name) looks like the
    # way in, and a workspace's calls refused it with only "permission denied".
    with pytest.raises(Denied) as info:
        Client(live["url"], live["identity"]).workspace("sdk-ws").run(["true"])
    assert "identity token" in info.value.message and "create_workspace returned" in info.value.message
    with pytest.raises(Denied) as info:  # streamed calls say the same
        list(Client(live["url"], live["identity"]).workspace("sdk-ws").stream(["true"]))
    assert "identity token" in info.value.message
    # A grant token refused, or a token that is no token, is answered as the server answers it:
    # the grant's own limit named, nothing said of a token that is none.
    reader = live["app"].grants.grant("sdk-ws", "other-bot", "read").token
    with pytest.raises(Denied) as info:
        Client(live["url"], reader).workspace("sdk-ws").run(["true"])
    assert info.value.message.startswith("permission denied: this token's grant on workspace sdk-ws does not "
                                         "include `execute`"), info.value.message
    with pytest.raises(Denied) as info:
        Client(live["url"], "wdn_" + "x" * 43).workspace("sdk-ws").run(["true"])
    assert info.value.message == "permission denied", info.value.message


def test_token_defaults_to_warden_token(live: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_TOKEN", live["identity"])
    assert Client(live["url"]).whoami()["bot"] == "sdkbot"


def test_an_unreachable_server_is_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(Unavailable, match="warden serve"):
        Client(f"http://127.0.0.1:{port}", "wdn_x").health()


@pytest.mark.parametrize(("status", "code", "kind"), [
    (400, "invalid", InvalidInput), (413, "invalid", TooLarge), (403, "denied", Denied),
    (401, "denied", Denied), (404, "not_found", NotFound), (409, "conflict", Conflict),
    (423, "locked", Locked), (503, "unavailable", Unavailable), (503, "timeout", TimedOut),
    (500, "internal", WardenError)])
def test_error_codes_map_back_to_warden_errors(status: int, code: str, kind: type[WardenError]) -> None:
    response = httpx.Response(status, json={"error": {"code": code, "message": "what happened"}})
    error = error_from(response)
    assert type(error) is kind
    assert error.message == "what happened"


def test_a_non_json_error_still_maps() -> None:
    error = error_from(httpx.Response(502, text="bad gateway"))
    assert type(error) is WardenError and "502" in error.message


def test_requirements_and_project_blob_of_the_protocol(live: dict[str, Any]) -> None:
    import io
    import tarfile

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        data = b"print('from the blob')\n"
        info = tarfile.TarInfo("app/main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    ws = live["client"].create_workspace("with-reqs", requirements=["tinypkg==1.2"], project_blob=archive.getvalue())
    assert ws.run(["python", "-c", "import tinypkg; print(tinypkg.VERSION)"]).stdout == "1.2\n"
    assert ws.run(["python", "app/main.py"]).stdout == "from the blob\n"
    assert "tinypkg" in ws.files.read_text("pyproject.toml")


def test_a_failed_request_leaves_no_workspace(live: dict[str, Any]) -> None:
    client: Client = live["client"]
    with pytest.raises(InvalidInput, match="bad package"):
        client.create_workspace("bad-reqs", requirements=["--index-url=http://evil"])
    with pytest.raises(InvalidInput, match="bad package 'six; import os'"):
        client.create_workspace("bad-marker", requirements=["six; import os"])
    with pytest.raises(InvalidInput, match=r"failed .*the index holds no such package"):  # 400: not to be retried
        client.create_workspace("missing-reqs", requirements=["not-a-local-package"])
    with pytest.raises(InvalidInput, match="base64"):
        client.create_workspace("bad-blob", project_blob="!!!not base64!!!")
    names = [w.name for w in live["app"].workspaces.list()]
    assert not {"bad-reqs", "missing-reqs", "bad-blob"} & set(names)


def _streaming(body: bytes) -> Client:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/workspaces/w/exec"
        return httpx.Response(200, content=body, headers={"content-type": "application/x-ndjson"})

    return Client("http://warden.test", "wdn_x", transport=httpx.MockTransport(answer))


def test_a_stream_skips_unknown_lines_and_raises_an_error_line() -> None:
    ws = _streaming(b'{"type":"stdout","data":"a"}\n{"type":"progress","n":1}\n\n'
                    b'{"type":"exit","exit_code":0,"timed_out":false,"signal":null,"duration_s":0.5}\n').workspace("w")
    assert [(e.type, e.data, e.exit_code) for e in ws.stream(["true"])] == [("stdout", "a", None), ("exit", "", 0)]
    broken = _streaming(b'{"type":"stderr","data":"x"}\n'
                        b'{"type":"error","error":{"code":"unavailable","message":"the sandbox failed"}}\n')
    with pytest.raises(Unavailable, match="the sandbox failed"):
        broken.workspace("w").run(["true"], on_stderr=lambda _: None)
    cut = _streaming(b'{"type":"stdout","data":"a"}\n').workspace("w")
    with pytest.raises(WardenError, match="ended before the command's exit status"):
        list(cut.stream(["true"]))
    with pytest.raises(WardenError, match="not an event"):
        list(_streaming(b"<html>\n").workspace("w").stream(["true"]))
