"""End to end: a bot that knows only the URL and its token gets a workspace, works in it, hands
out a narrower grant, and is cut off — against a real `warden serve` process on 127.0.0.1.

Then every token and secret value issued during the story is searched for, byte for byte, in
the whole $WARDEN_HOME (the SQLite database and its WAL included) and in everything the
server printed: none may be there.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import poll
from warden.client import Client
from warden.core.errors import Denied, NotFound

SECRET_VALUE = "sk-live-4f2c9d0e1b7a6c5d"




@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    base = tmp_path_factory.mktemp("protocol")
    home = base / "home"
    environ = warden_environ(home)
    cli_out(environ, "init")
    with ServeProcess(environ, base) as server:
        yield {"home": home, "environ": environ, "server": server, "tokens": [], "events": []}


def _uniform(response: httpx.Response) -> None:
    assert response.status_code == 403
    assert response.json() == {"error": {"code": "denied", "message": "permission denied"}}


def test_a_bot_gets_a_workspace_works_in_it_and_is_cut_off(story: dict[str, object]) -> None:
    environ: dict[str, str] = story["environ"]  # type: ignore[assignment]
    server: ServeProcess = story["server"]  # type: ignore[assignment]
    tokens: list[str] = story["tokens"]  # type: ignore[assignment]
    url = server.url

    # A person registers two bots and stores a secret (the value only ever goes through stdin).
    identity = cli_out(environ, "bot", "register", "scaffolder")
    helper_identity = cli_out(environ, "bot", "register", "helper")
    third_identity = cli_out(environ, "bot", "register", "third")  # grants need a registered bot
    tokens += [identity, helper_identity, third_identity]
    cli_out(environ, "secret", "set", "API_KEY", input=SECRET_VALUE.encode() + b"\n")

    # The bot asks for a workspace with seed 000's message, knowing only the URL and its token.
    raw = httpx.post(f"{url}/v1/workspaces", headers={"Authorization": f"Bearer {identity}"},
                     json={"bot": "scaffolder", "request": "workspace", "params": {"name": "proj"}}, timeout=120)
    assert raw.status_code == 201, raw.text
    body = raw.json()
    assert body["status"] == "created"
    assert set(body["workspace"]) >= {"path", "venv", "access_token", "expires"}
    # The first three as ever; then what the bot really gets (allowlist on or off, network, limits).
    assert set(body["sandbox"]) == {"allowed_commands", "blocked_paths", "max_file_size_mb", "allowlist",
                                    "network", "limits"}
    access = body["workspace"]["access_token"]
    tokens.append(access)
    assert Path(body["workspace"]["path"]).is_dir()

    bot = Client(url, identity)
    assert bot.whoami()["bot"] == "scaffolder"
    ws = Client(url, access).workspace("proj")

    # Files: write, read, list, stat, delete.
    assert ws.files.write("src/app.py", b"print('hi')\n") == 12
    assert ws.files.read("/src/app.py") == b"print('hi')\n"
    assert [e["name"] for e in ws.files.list("/src")] == ["app.py"]
    assert ws.files.stat("src/app.py")["type"] == "file"
    ws.files.write("tmp.txt", "x")
    ws.files.delete("tmp.txt")
    with pytest.raises(NotFound):
        ws.files.read("tmp.txt")

    # A command runs in the sandbox; the creator's grant names no secret, so none is injected.
    probe = ["python", "-c", "import hashlib, os; v = os.environ.get('API_KEY');"
             " print(hashlib.sha256(v.encode()).hexdigest() if v else 'none')"]
    assert ws.run(probe).stdout.strip() == "none"
    assert ws.run(["python", "src/app.py"]).stdout == "hi\n"

    # A person grants the secret; a run under that grant sees it in its environment.
    granted = json.loads(cli_out(environ, "grant", "proj", "scaffolder", "--permissions",
                              "read,write,execute,secrets", "--secrets", "API_KEY", "--ttl", "1h", "--json"))["data"]
    tokens.append(granted["token"])
    with_secret = Client(url, granted["token"]).workspace("proj")
    assert with_secret.run(probe).stdout.strip() == hashlib.sha256(SECRET_VALUE.encode()).hexdigest()

    # The bot hands a helper a narrower grant; it can read, not write, and cannot widen itself.
    child = ws.grant("helper", ["read"], ttl="1h", zones=["*"])  # a child declares what it gets
    tokens.append(child.token)
    assert child.permissions == ("read",)
    helper = Client(url, child.token).workspace("proj")
    assert helper.files.read("src/app.py") == b"print('hi')\n"
    with pytest.raises(Denied):
        helper.files.write("src/app.py", b"evil")
    with pytest.raises(Denied):
        helper.grant("third", ["read"])
    with pytest.raises(Denied, match="never wider"):
        ws.grant("helper", ["read", "secrets"], secrets=["API_KEY"])
    over = ws.grant("helper", ["read"], ttl="29d", zones=["*"])  # longer than the parent's 7 days: clamped
    tokens.append(over.token)
    assert over.expires <= body["workspace"]["expires"]

    # Expiry: a 2-second grant works, then stops.
    short = ws.grant("helper", ["read"], ttl="2s", zones=["*"])
    tokens.append(short.token)
    assert Client(url, short.token).workspace("proj").files.read("src/app.py")
    time.sleep(2.2)  # its 2 s pass by the server's clock: nothing to poll for, the expiry is the point
    expired = httpx.get(f"{url}/v1/workspaces/proj/files/content", params={"path": "src/app.py"},
                        headers={"Authorization": f"Bearer {short.token}"})
    _uniform(expired)

    # Revoking a parent revokes its children.
    middle = ws.grant("helper", ["read", "admin"], ttl="1h", zones=["*"])
    grandchild = Client(url, middle.token).workspace("proj").grant("third", ["read"], zones=["*"])
    tokens += [middle.token, grandchild.token]
    assert Client(url, grandchild.token).workspace("proj").files.read("src/app.py")
    assert set(ws.revoke(middle.accessor)) == {middle.accessor, grandchild.accessor}
    for gone in (middle.token, grandchild.token):
        _uniform(httpx.get(f"{url}/v1/workspaces/proj", headers={"Authorization": f"Bearer {gone}"}))
    with pytest.raises(Denied):  # a grant cannot revoke what it did not mint
        Client(url, child.token).workspace("proj").revoke(over.accessor)

    # Every kind of refusal looks the same from outside; a live grant on this very workspace is
    # told what it lacks (its own, as /v1/whoami says), and nothing of another workspace.
    _uniform(httpx.get(f"{url}/v1/workspaces/proj", headers={"Authorization": "Bearer wdn_" + "Z" * 43}))
    _uniform(httpx.get(f"{url}/v1/workspaces/proj", headers={"Authorization": "Bearer junk"}))
    lacking = httpx.put(f"{url}/v1/workspaces/proj/files/content", params={"path": "x"}, content=b"x",
                        headers={"Authorization": f"Bearer {child.token}"})
    assert lacking.status_code == 403 and lacking.json()["error"]["message"] == (
        "permission denied: this token's grant on workspace proj does not include `write`; a person widens it "
        "with `warden grant proj helper --permissions ...`"), lacking.json()
    _uniform(httpx.get(f"{url}/v1/workspaces/other", headers={"Authorization": f"Bearer {access}"}))

    # The person revokes the bot on the workspace: its grants and everything minted from them die.
    cli_out(environ, "revoke", "proj", "scaffolder")
    for gone in (access, granted["token"], child.token, over.token):
        _uniform(httpx.get(f"{url}/v1/workspaces/proj", headers={"Authorization": f"Bearer {gone}"}))

    # Removing the bot kills its identity too: it can ask for nothing more.
    cli_out(environ, "bot", "rm", "scaffolder")
    again = httpx.post(f"{url}/v1/workspaces", headers={"Authorization": f"Bearer {identity}"},
                       json={"bot": "scaffolder", "request": "workspace", "params": {"name": "proj2"}})
    _uniform(again)

    # Every step is in the audit log, with bot and accessor as the actor and never a token.
    audit = json.loads(cli_out(environ, "audit", "--limit", "1000", "--json"))["data"]
    story["events"] = audit
    text = json.dumps(audit)
    actions = {e["action"] for e in audit}
    assert {"api.workspace.create", "api.exec", "api.grant.create", "api.grant.revoke", "fs.write",
            "fs.read", "run", "grant.revoke", "bot.remove"} <= actions
    denied = [e for e in audit if e["decision"] == "deny"]
    assert {e["rule"] for e in denied} >= {"grant.expired", "grant.revoked", "grant.permission", "token.unknown"}
    assert any(e["actor"] == f"bot:helper@{short.accessor}" and e["rule"] == "grant.expired" for e in audit)
    assert any(e["actor"].startswith("bot:scaffolder@acc_") and e["action"] == "api.exec" for e in audit)
    exec_events = [e for e in audit if e["action"] == "api.exec"]
    assert any(e["detail"].get("secret_names") == ["API_KEY"] for e in exec_events)
    for token in tokens:
        assert token not in text
    assert SECRET_VALUE not in text


def test_no_token_or_secret_value_is_left_anywhere(story: dict[str, object]) -> None:
    tokens: list[str] = story["tokens"]  # type: ignore[assignment]
    if not tokens:
        pytest.skip("the story did not run")
    home: Path = story["home"]  # type: ignore[assignment]
    server: ServeProcess = story["server"]  # type: ignore[assignment]
    needles = [t.encode() for t in tokens] + [t[4:].encode() for t in tokens] + [SECRET_VALUE.encode()]
    files = [p for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "warden.db" for p in files)
    haystacks = {str(p): p.read_bytes() for p in files}
    haystacks["server output"] = server.output()
    assert b"listening on" in haystacks["server output"]
    for where, data in haystacks.items():
        for needle in needles:
            assert needle not in data, f"a token or secret value was found in {where}"


def test_serve_with_two_workers_shares_one_registry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    environ = warden_environ(home)
    token = cli_out(environ, "bot", "register", "pair-bot")
    with ServeProcess(environ, tmp_path, "--workers", "2", "--no-access-log") as server:
        created = Client(server.url, token).create_workspace("pair")
        written = [created.files.write(f"f{i}.txt", str(i)) for i in range(6)]  # spread over both workers
        assert written == [1] * 6
        assert sorted(e["name"] for e in created.files.list("/") if e["name"].startswith("f")) == [
            f"f{i}.txt" for i in range(6)]
        assert b"Started parent process" in server.output()  # uvicorn's supervisor of the workers
    for needle in (token, created.access_token):
        assert needle.encode() not in server.output()


def _workers_of(pid: int) -> list[int]:
    """The uvicorn worker processes `pid` spawned (multiprocessing's spawn_main children)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_end_with_a_server_killed_by_sigkill(tmp_path: Path) -> None:
    # A `kill -9` of the supervisor left its workers serving on, orphaned: no heartbeat (the
    # supervisor beats), so the other nodes said the node was down while its workers still ran
    # bots' commands, and a restarted `serve` found its port taken.
    environ = warden_environ(tmp_path / "home")
    with ServeProcess(environ, tmp_path, "--workers", "2", "--no-access-log") as server:
        assert server.proc is not None
        workers = _workers_of(server.proc.pid)
        assert len(workers) == 2
        server.proc.kill()
        server.proc.wait(10)
        try:
            assert poll(lambda: not any(_running(pid) for pid in workers), timeout=30, interval=0.1), \
                "workers still running after their server was killed"
            with pytest.raises(httpx.ConnectError):
                httpx.get(server.url + "/openapi.json", timeout=5)
        finally:
            for pid in workers:  # never leave them behind when this fails
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)


def test_a_server_killed_by_sigkill_has_its_workers_live_sandboxes_stopped_at_the_next_start(tmp_path: Path) -> None:
    # `serve --workers 2` registers one instance, its supervisor's; the live sandboxes its
    # workers started named no instance, so when the server was killed -9 nothing stopped them:
    # a bot's background process ran on unseen (one worker's sandboxes were stopped at the next
    # start, as the docs say of every Warden process that dies).
    environ = warden_environ(tmp_path / "home")
    token = cli_out(environ, "bot", "register", "kept-bot")
    with ServeProcess(environ, tmp_path, "--workers", "2", "--no-access-log") as server:
        assert server.proc is not None
        created = Client(server.url, token).create_workspace("kept")
        sleeper = created.run(["sleep", "600"], background=True)
        assert sleeper.info().running
        server.proc.kill()
        server.proc.wait(10)
    (tmp_path / "again").mkdir()
    with ServeProcess(environ, tmp_path / "again", "--no-access-log") as again:
        ended = Client(again.url, created.access_token).workspace("kept").processes.get(sleeper.id)
        assert ended.status == "killed", f"the sleeper of the killed server runs on: {ended}"
    listed = json.loads(cli_out(environ, "ps", "kept", "--json"))["data"]
    assert [p["status"] for p in listed if p["id"] == sleeper.id] == ["killed"]


def test_a_grant_token_asking_for_a_workspace_is_told_which_token_does(story: dict[str, object]) -> None:
    """Found as a newcomer: the README's grant token given to the SDK's create_workspace (the
    docs' first SDK line) was answered a bare "permission denied", as a wrong token is."""
    environ: dict[str, str] = story["environ"]  # type: ignore[assignment]
    server: ServeProcess = story["server"]  # type: ignore[assignment]
    identity = cli_out(environ, "bot", "register", "newcomer")
    made = Client(server.url, identity).create_workspace("newcomers")
    with pytest.raises(Denied) as refused:
        Client(server.url, made.access_token).create_workspace("another")
    said = refused.value.message
    assert said.startswith("permission denied: a grant's token acts on its one workspace")
    assert ".workspace(NAME)" in said and "`warden bot register NAME`" in said
    raw = httpx.post(f"{server.url}/v1/workspaces", headers={"Authorization": f"Bearer {made.access_token}"},
                     json={"bot": "newcomer", "request": "workspace", "params": {"name": "another"}}, timeout=60)
    assert raw.status_code == 403 and raw.json()["error"] == {"code": "denied", "message": said}
    assert "another" not in cli_out(environ, "list")
    _uniform(httpx.post(f"{server.url}/v1/workspaces", headers={"Authorization": "Bearer wdn_" + "Z" * 43},
                        json={"bot": "newcomer", "request": "workspace", "params": {"name": "another"}}, timeout=60))


def test_a_bot_asking_again_for_a_name_that_is_taken_is_told_what_it_can_do(story: dict[str, object]) -> None:
    """A bot that restarted asked again for its workspace: the 409 said "`warden destroy` it first",
    a command only the person has."""
    environ: dict[str, str] = story["environ"]  # type: ignore[assignment]
    server: ServeProcess = story["server"]  # type: ignore[assignment]
    identity = cli_out(environ, "bot", "register", "restarter")
    headers = {"Authorization": f"Bearer {identity}"}
    body = {"bot": "restarter", "request": "workspace", "params": {"name": "again"}}
    assert httpx.post(f"{server.url}/v1/workspaces", headers=headers, json=body, timeout=120).status_code == 201
    taken = httpx.post(f"{server.url}/v1/workspaces", headers=headers, json=body, timeout=120)
    assert taken.status_code == 409, taken.text
    said = taken.json()["error"]["message"]
    assert said.startswith("workspace 'again' already exists; pick another name") and "GET /v1/workspaces" in said
    assert "warden destroy" not in said
    person = subprocess.run([sys.executable, "-m", "warden", "create", "again"], env=environ, capture_output=True,
                            text=True, check=False)
    assert person.returncode == 5 and "`warden destroy` it first" in person.stderr  # the person's own hint stays
