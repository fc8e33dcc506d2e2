"""Background processes over a real `warden serve` and the SDK (INTERFACES.md, "Live sandboxes and
processes"): `"background": true` → 202 {"id"}, the /processes routes, `ws.processes`. A bot's
server is reached by its own next command and by nobody else's; a bot sees, follows and kills only
what its grant started, and cannot signal, read or reach another bot's processes or secrets from
inside its sandbox; background processes take exec slots; revoking a grant ends its processes; and
a supervisor answering what the protocol does not allow costs the server nothing but an error."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until
from warden.adapters.processes import alive
from warden.bootstrap import bootstrap
from warden.client import Client, RemoteWorkspace
from warden.core.errors import NotFound, Unavailable, WardenError

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PROBE = ("import sys, time, urllib.request\nfor i in range(int(sys.argv[2])):\n    try:\n"
         "        print(urllib.request.urlopen(sys.argv[1], timeout=2).status); break\n"
         "    except OSError: time.sleep(0.05)\nelse:\n    print('unreachable')")
SERVER = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]


class World:
    def __init__(self, home: Path, environ: dict[str, str], server: ServeProcess, tokens: dict[str, str]) -> None:
        self.home = home
        self.environ = environ
        self.server = server
        self.tokens = tokens

    def ws(self, bot: str) -> RemoteWorkspace:
        return Client(self.server.url, self.tokens[bot]).workspace("shared")

    def host_pid(self, process_id: str) -> tuple[int, int]:
        app = bootstrap(self.home, environ=self.environ)
        try:
            with app.registry.transaction(write=False) as tx:
                process = tx.processes.get(process_id)
            assert process is not None
            return int(process.meta["host_pid"]), int(process.meta["host_start"])  # type: ignore[call-overload]
        finally:
            app.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("http-processes")
    home = root / "home"
    environ = {**warden_environ(home), "WARDEN_API_MAX_EXECS_PER_BOT": "3", "WARDEN_WORKSPACE_SANDBOX_IDLE": "60s"}
    cli_out(environ, "init")
    cli_out(environ, "create", "shared", "--template", "minimal")
    cli_out(environ, "secret", "set", "ALICE_KEY", input=b"s3cr3t-of-alice")
    tokens = {}
    for bot in ("alice", "bob", "carol"):
        cli_out(environ, "bot", "register", bot)
    tokens["alice"] = cli_out(environ, "grant", "shared", "alice", "--permissions", "read,execute,secrets",
                              "--secrets", "ALICE_KEY", "--allow-domain", "example.com")
    tokens["bob"] = cli_out(environ, "grant", "shared", "bob", "--permissions", "read,execute")
    tokens["carol"] = cli_out(environ, "grant", "shared", "carol", "--permissions", "read,execute")
    with ServeProcess(environ, root) as server:
        yield World(home, environ, server, tokens)
        cli_out(environ, "destroy", "shared", "--yes", "--no-archive")


def test_a_bots_server_is_its_own(world: World) -> None:
    alice, bob = world.ws("alice"), world.ws("bob")
    server = alice.run(SERVER, background=True)
    assert len(server.id) == 16
    assert alice.run(["python3", "-c", PROBE, "http://127.0.0.1:8000/", "150"]).stdout == "200\n"
    # Bob's commands run in a sandbox of his own: another loopback, another pid namespace.
    assert bob.run(["python3", "-c", PROBE, "http://127.0.0.1:8000/", "10"]).stdout == "unreachable\n"
    # Alice's own command with network goes to another sandbox too: a process with one network
    # policy never shares a loopback with a command of another.
    networked = alice.run(["python3", "-c", PROBE, "http://127.0.0.1:8000/", "10"], network=["example.com:443"])
    assert networked.stdout == "unreachable\n"
    assert [p.id for p in alice.processes.list()] == [server.id]
    assert bob.processes.list() == []
    for attempt in (lambda: bob.processes.get(server.id), lambda: bob.processes.logs(server.id),
                    lambda: bob.processes.kill(server.id, "KILL"), lambda: list(bob.processes.follow(server.id))):
        with pytest.raises(NotFound):
            attempt()
    assert server.info().status == "running"
    wait_until(lambda: "GET / HTTP" in server.logs().stderr, message="the request was not logged")
    # Its stdout ("Serving HTTP on ...", unbuffered in a background process) comes first; the
    # request's line is its first on stderr.
    first = next(chunk for chunk in server.follow() if chunk.type == "stderr")
    assert "GET / HTTP" in first.data
    assert server.kill().status == "killed"
    ended = server.wait(30)
    assert (ended.status, ended.exit_code, ended.signal) == ("killed", 143, 15)
    # Killed again (a cleanup's `finally`), it is shown as it ended, as E2B's kill returns False.
    assert server.kill("KILL") == ended


def test_a_bots_execs_run_in_its_live_sandbox_from_the_first(world: World) -> None:
    # The first exec starts carol's live sandbox; the next ones are spawns in it: one pid
    # namespace whose pids go on counting, and a /tmp kept between her commands (not bob's).
    carol, bob = world.ws("carol"), world.ws("bob")
    first = carol.run(["sh", "-c", "echo $$; echo kept > /tmp/carol-note"])
    second = carol.run(["sh", "-c", "echo $$; cat /tmp/carol-note"])
    assert first.exit_code == 0 and second.exit_code == 0, first.stderr + second.stderr
    assert int(second.stdout.split()[0]) > int(first.stdout.split()[0])
    assert second.stdout.split()[1] == "kept"
    assert bob.run(["sh", "-c", "cat /tmp/carol-note 2>/dev/null || echo absent"]).stdout == "absent\n"
    # Still Warden's own limits and refusals per command: an argument list the kernel refuses is
    # bad input, as in a fresh sandbox (the supervisor's exec would have said E2BIG).
    with pytest.raises(WardenError) as too_long:
        carol.run(["echo", "x" * (200 * 1024)])
    assert too_long.value.code == "invalid" and "too long" in str(too_long.value)


ATTACK = """
import os, signal, sys
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
seen = []
for p in pids:
    for part in ('environ', 'cmdline'):
        try:
            with open(f'/proc/{p}/{part}', 'rb') as handle:
                if b'3cr' + b'3t' in handle.read():  # built here: this script's own argv must not hold it
                    seen.append(f'{p}/{part}')
        except OSError:
            pass
target = int(sys.argv[1])
try:
    os.kill(target, signal.SIGKILL)
    print('signalled')
except OSError as exc:
    print('refused', exc.errno)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('ptrace', libc.ptrace(16, target, 0, 0), ctypes.get_errno())
print('seen', seen)
"""


def test_no_bot_signals_ptraces_or_reads_another_bots_processes(world: World) -> None:
    alice, bob = world.ws("alice"), world.ws("bob")
    holder = alice.run(["sh", "-c", 'echo "key is $ALICE_KEY" > /dev/null; sleep 300'], background=True)
    wait_until(lambda: holder.info().status == "running")
    assert alice.run(["sh", "-c", "echo ${ALICE_KEY#s3}"]).stdout == "cr3t-of-alice\n"  # she has it
    pid, start = world.host_pid(holder.id)
    attack = bob.run(["python3", "-c", ATTACK, str(pid)])
    lines = attack.stdout.splitlines()
    assert lines[0] == "refused 3", attack.stdout + attack.stderr  # ESRCH: not in his pid namespace
    assert lines[1].startswith("ptrace -1")
    assert lines[2] == "seen []"
    assert alive(pid, start) and holder.info().status == "running"
    holder.kill("KILL")
    assert holder.wait(30).exit_code == 137


def test_background_processes_take_exec_slots(world: World) -> None:
    carol = world.ws("carol")
    sleepers = [carol.run(["sleep", "300"], background=True) for _ in range(3)]  # api.max_execs_per_bot=3
    with pytest.raises(Unavailable, match="max_execs_per_bot"):
        carol.run(["sleep", "300"], background=True)
    with pytest.raises(Unavailable, match="max_execs_per_bot"):
        carol.run(["true"])
    assert world.ws("bob").run(["true"]).exit_code == 0  # another bot's slots
    sleepers[0].kill("KILL")
    assert sleepers[0].wait(30).status == "killed"
    assert carol.run(["true"]).exit_code == 0
    for sleeper in sleepers[1:]:
        sleeper.kill("KILL")
        sleeper.wait(30)
    # Quick ones end at once but counted as running until a Warden process recorded their end
    # (a list, a wait, the sweep every 15 s): they held her slots long after, and her next
    # commands were refused. Their ends are recorded when her slots are full.
    quick = [carol.run(["true"], background=True) for _ in range(3)]
    for process in quick:
        pid, start = world.host_pid(process.id)
        wait_until(lambda pid=pid, start=start: not alive(pid, start))
    assert carol.run(["true"]).exit_code == 0
    more = carol.run(["sleep", "300"], background=True)
    assert all(p.info().status == "exited" for p in quick)
    more.kill("KILL")


def test_raw_http_shapes(world: World) -> None:
    base = f"{world.server.url}/v1/workspaces/shared"
    headers = {"Authorization": f"Bearer {world.tokens['bob']}"}
    started = httpx.post(f"{base}/exec", json={"cmd": ["sh", "-c", "echo hi; exit 4"], "background": True},
                         headers=headers, timeout=60)
    assert started.status_code == 202 and set(started.json()) == {"id"}
    process_id = started.json()["id"]
    lines = []
    with httpx.stream("GET", f"{base}/processes/{process_id}/logs", params={"follow": "true"}, headers=headers,
                      timeout=60) as streamed:
        assert streamed.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in streamed.iter_lines() if line.strip()]
    assert lines[0] == {"type": "stdout", "data": "hi\n"}
    assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 4
    shown = httpx.get(f"{base}/processes/{process_id}", headers=headers, timeout=30).json()
    assert set(shown) >= {"id", "cmd", "status", "exit_code"} and shown["exit_code"] == 4
    assert httpx.get(f"{base}/processes/not-an-id", headers=headers, timeout=30).status_code == 422
    assert httpx.get(f"{base}/processes", timeout=30).status_code == 401
    assert httpx.delete(f"{base}/processes/{process_id}", params={"signal": "SEGV"}, headers=headers,
                        timeout=30).status_code == 400
    stdin = httpx.post(f"{base}/exec", json={"cmd": ["cat"], "background": True, "stdin": "x"}, headers=headers,
                       timeout=30)
    assert stdin.status_code == 400
    both = httpx.post(f"{base}/exec", json={"cmd": ["true"], "background": True, "stream": True}, headers=headers,
                      timeout=30)
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid"
    assert "logs?follow=true" in both.json()["error"]["message"]


def test_wait_is_a_long_poll(world: World) -> None:
    base = f"{world.server.url}/v1/workspaces/shared"
    headers = {"Authorization": f"Bearer {world.tokens['carol']}"}
    started = httpx.post(f"{base}/exec", json={"cmd": ["sh", "-c", "sleep 1.5; exit 6"], "background": True},
                         headers=headers, timeout=60).json()["id"]
    # Still running when its wait runs out: the view as it is, 200, `running`.
    before = time.monotonic()
    early = httpx.get(f"{base}/processes/{started}/wait", params={"timeout": "0.3"}, headers=headers, timeout=30)
    assert early.status_code == 200 and early.json()["status"] == "running"
    assert 0.25 <= time.monotonic() - before < 1.4
    # Answered as soon as it ends, not at the timeout's end.
    ended = httpx.get(f"{base}/processes/{started}/wait", params={"timeout": "30"}, headers=headers, timeout=60)
    assert ended.status_code == 200 and ended.json()["exit_code"] == 6
    assert time.monotonic() - before < 10
    for bad in ("0", "31", "x"):
        assert httpx.get(f"{base}/processes/{started}/wait", params={"timeout": bad}, headers=headers,
                         timeout=30).status_code in (400, 422)
    # Another bot's process is not found, as with every other process route.
    other = httpx.get(f"{base}/processes/{started}/wait", params={"timeout": "1"},
                      headers={"Authorization": f"Bearer {world.tokens['bob']}"}, timeout=30)
    assert other.status_code == 404
    # The SDK's wait uses it: it returns once the process ends.
    ws = world.ws("carol")
    process = ws.run(["sh", "-c", "sleep 0.5; exit 2"], background=True)
    assert ws.processes.wait(process.id, timeout=30).exit_code == 2


def test_one_bots_waits_and_follows_never_hold_the_servers_threads(world: World) -> None:
    # Each wait holds one of the server's threads for up to 30 s, each follow one a second at a
    # time: 60 waits of one bot on its own sleep took all 40 of Starlette's, and another bot's
    # file read waited 28 s; 200 follows, 8 s. Now a bot has at most api.max_execs_per_bot (3
    # here) at once, and the next is 503 with Retry-After (the SDK asks again).
    base = f"{world.server.url}/v1/workspaces/shared"
    headers = {"Authorization": f"Bearer {world.tokens['carol']}"}
    sleeper = httpx.post(f"{base}/exec", json={"cmd": ["sleep", "120"], "background": True},
                         headers=headers, timeout=60).json()["id"]
    answers: list[int] = []
    url = httpx.URL(world.server.url)

    def wait() -> None:
        answers.append(httpx.get(f"{base}/processes/{sleeper}/wait", params={"timeout": "8"}, headers=headers,
                                 timeout=60).status_code)

    waiters = [threading.Thread(target=wait) for _ in range(45)]
    follows: list[socket.socket] = []
    try:
        for waiter in waiters:
            waiter.start()
        for _ in range(60):
            follow = socket.create_connection((url.host, url.port), timeout=30)
            follow.sendall(f"GET /v1/workspaces/shared/processes/{sleeper}/logs?follow=true HTTP/1.1\r\n"
                           f"Host: x\r\nAuthorization: Bearer {world.tokens['carol']}\r\n\r\n".encode())
            follows.append(follow)
        time.sleep(1.5)
        before = time.monotonic()
        read = httpx.get(f"{base}/files", params={"path": "/"},
                         headers={"Authorization": f"Bearer {world.tokens['bob']}"}, timeout=60)
        assert read.status_code == 200, read.text
        assert time.monotonic() - before < 2, "another bot's request waited for a thread"
        refused = httpx.get(f"{base}/processes/{sleeper}/logs", params={"follow": "true"}, headers=headers, timeout=30)
        assert refused.status_code == 503 and refused.headers.get("retry-after") == "1"
        assert refused.json()["error"]["code"] == "unavailable" and "api.max_execs_per_bot" in refused.text
    finally:
        for follow in follows:
            follow.close()
        for waiter in waiters:
            waiter.join(60)
    assert answers.count(200) <= 3 and answers.count(503) >= 42, answers
    # The places come back once the waits and follows end: the SDK's own wait still works.
    ws = world.ws("carol")
    wait_until(lambda: httpx.get(f"{base}/processes/{sleeper}/wait", params={"timeout": "0.1"}, headers=headers,
                                 timeout=30).status_code == 200)
    ws.processes.kill(sleeper, "KILL")
    process = ws.run(["sh", "-c", "sleep 0.3; exit 3"], background=True)
    assert ws.processes.wait(process.id, timeout=30).exit_code == 3


def test_revoking_a_grant_ends_its_processes(world: World) -> None:
    environ = world.environ
    cli_out(environ, "bot", "register", "dave")
    token = cli_out(environ, "grant", "shared", "dave", "--permissions", "read,execute")
    dave = Client(world.server.url, token).workspace("shared")
    sleeper = dave.run(["sleep", "300"], background=True)
    pid, start = world.host_pid(sleeper.id)
    assert alive(pid, start)
    cli_out(environ, "revoke", "shared", "dave")
    wait_until(lambda: not alive(pid, start), message="the revoked grant's process outlived it")
    listed = {p["id"]: p for p in json.loads(cli_out(environ, "ps", "shared", "--json"))["data"]}
    assert listed[sleeper.id]["status"] == "killed"


def _hostile(path: Path, stop: threading.Event) -> threading.Thread:
    """A server at a supervisor's socket answering every request with a frame of 3 GiB, then junk."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    listener.settimeout(0.2)

    def serve() -> None:
        with listener:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    try:
                        conn.recv(65536)
                        conn.sendall(struct.pack(">I", 3 << 30) + b"\x00" * 65536)
                    except OSError:
                        pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_hostile_supervisor_answer_cannot_hurt_the_server(world: World) -> None:
    environ = world.environ
    cli_out(environ, "bot", "register", "erin")
    erin = Client(world.server.url, cli_out(environ, "grant", "shared", "erin", "--permissions",
                                            "read,execute")).workspace("shared")
    sleeper = erin.run(["sleep", "300"], background=True)
    pid, start = world.host_pid(sleeper.id)
    app = bootstrap(world.home, environ=environ)
    try:
        with app.registry.transaction(write=False) as tx:
            sandbox = next(s for s in tx.sandboxes.of_workspace("shared") if s.principal.startswith("bot:erin@"))
    finally:
        app.close()
    # What a compromised supervisor could say, put where Warden reaches its supervisor.
    socket_path = Path(sandbox.socket)
    os.rename(socket_path, socket_path.with_name("real.sock"))
    stop = threading.Event()
    thread = _hostile(socket_path, stop)
    try:
        started = time.monotonic()
        answered = httpx.get(f"{world.server.url}/v1/workspaces/shared/processes",
                             headers={"Authorization": f"Bearer {erin.client._token}"}, timeout=60)
        assert time.monotonic() - started < 30
        assert answered.status_code in (200, 503), answered.text
        # The server goes on serving everyone, and the sandbox that answered so is stopped.
        assert httpx.get(f"{world.server.url}/v1/health", timeout=10).status_code == 200
        assert world.ws("bob").run(["true"]).exit_code == 0
        wait_until(lambda: not alive(pid, start), message="the sandbox that answered badly was not stopped")
        assert erin.processes.get(sleeper.id).status == "killed"
    finally:
        stop.set()
        thread.join(5)
    assert b"Traceback" not in world.server.output()


def test_a_start_of_an_id_names_only_the_bots_own_process(world: World) -> None:
    """A process may be named by the start of its id (as docker names a container), over HTTP and
    the SDK too; the start is matched against the asking bot's own processes alone, so another
    bot's is neither acted on nor said to exist."""
    alice, bob = world.ws("alice"), world.ws("bob")
    hers = alice.run(["sleep", "300"], background=True)
    his = bob.run(["sleep", "300"], background=True)
    start = next(hers.id[:n] for n in range(4, 17) if not his.id.startswith(hers.id[:n]))
    for attempt in (lambda: bob.processes.get(start), lambda: bob.processes.logs(start),
                    lambda: bob.processes.kill(start, "KILL")):
        with pytest.raises(NotFound):
            attempt()
    assert hers.info().status == "running"
    assert alice.processes.get(start).id == hers.id
    said = httpx.get(f"{world.server.url}/v1/workspaces/shared/processes/{start}/logs",
                     headers={"Authorization": f"Bearer {world.tokens['alice']}"}, timeout=30)
    assert said.status_code == 200 and said.json()["id"] == hers.id, said.text
    assert alice.processes.kill(start, "KILL").id == hers.id
    assert hers.wait(30).status == "killed"
    assert his.kill("KILL").status == "killed"
