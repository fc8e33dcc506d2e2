"""`warden forward NAME PORT` through the real CLI, real bubblewrap and real servers: a dev server
detached in a live sandbox is fetched from the host; a port nobody listens on is a clean refusal;
a bot's sandbox is reached only as that bot; the forward stops when its workspace is archived; and
the refusals before anything listens keep INTERFACES.md's exit statuses."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli, isolated_environ

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    home = tmp_path_factory.mktemp("forward") / "warden-home"
    home.mkdir()
    return Cli({**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "120s"})


@pytest.fixture(scope="module")
def ws(cli: Cli) -> Iterator[str]:
    assert cli("create", "site", "--template", "minimal").code == 0
    Path(cli("info", "site", "--json").json["data"]["path"], "hello.txt").write_text("hello from the sandbox\n")
    yield "site"
    cli("destroy", "site", "--yes", "--no-archive")


class Forward:
    """A `warden forward` running in the background, and the address it printed."""

    def __init__(self, cli: Cli, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "warden", "forward", *args, "--listen", "0"],
                                     env=cli.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()
        assert first.startswith("forwarding http://"), first + self.finish()[1]
        self.url = first.split()[1]

    def get(self, path: str = "/hello.txt") -> str:
        with urllib.request.urlopen(self.url + path, timeout=15) as answer:
            return str(answer.read().decode())

    def finish(self, sig: int | None = signal.SIGTERM) -> tuple[int, str]:
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


def _server(cli: Cli, ws: str, port: int, *, env: dict[str, str] | None = None, bot: bool = False) -> str:
    started = cli("run", ws, *(("--as-token-env",) if bot else ()), "--detach", "--json", "--",
                  "python3", "-m", "http.server", str(port), "--bind", "127.0.0.1", env=env)
    assert started.code == 0, started.stdout + started.stderr
    return str(started.json["data"]["id"])


def _retry(forward: Forward, path: str = "/hello.txt") -> str:
    """The server's answer once it listens (`--detach` returns before it does)."""
    import time

    for _ in range(100):
        try:
            return forward.get(path)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    return forward.get(path)


def _retry_refused(forward: Forward) -> bool:
    """True once a connection through `forward` is refused."""
    try:
        forward.get()
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


def _closes(cli: Cli, ws: str) -> list[dict[str, object]]:
    events = cli("audit", "--workspace", ws, "--limit", "50", "--json").json["data"]
    events = events["events"] if isinstance(events, dict) else events
    return [e["detail"] for e in events if e["action"] == "forward.close"]


def test_a_detached_server_is_fetched_from_the_host_and_the_forward_is_audited(cli: Cli, ws: str) -> None:
    server = _server(cli, ws, 8100)
    forward = Forward(cli, ws, "8100")
    try:
        assert _retry(forward) == "hello from the sandbox\n"
        assert forward.get() == "hello from the sandbox\n"  # each connection relayed on its own
    finally:
        code, err = forward.finish()
        cli("kill", ws, server)
    assert code in (128 + signal.SIGTERM, -signal.SIGTERM), err
    last = _closes(cli, ws)[-1]
    assert last["port"] == 8100 and last["relayed"] >= 2 and last["refused"] == last["connections"] - last["relayed"]
    assert isinstance(last["bytes_out"], int) and last["bytes_out"] > 2 * len("hello from the sandbox\n")


def test_a_port_nobody_listens_on_is_refused_cleanly_and_the_forward_goes_on(cli: Cli, ws: str) -> None:
    server = _server(cli, ws, 8101)  # a live sandbox runs, but nothing on 8102
    forward = Forward(cli, ws, "8102")
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            forward.get()
        assert forward.proc.poll() is None  # one refused connection does not end the forward
    finally:
        _, err = forward.finish()
        cli("kill", ws, server)
    assert "nothing listens on port 8102 in the live sandbox of yours in 'site'" in err
    assert _closes(cli, ws)[-1]["refused"] == 1


def test_a_server_that_ended_at_its_timeout_is_named_as_the_likely_cause(cli: Cli, ws: str) -> None:
    """README's dev server, detached without --timeout, ends after sandbox.timeout (10 minutes):
    the forward's line then says where to look and why, not only that nothing listens."""
    started = cli("run", ws, "--detach", "--timeout", "3", "--json", "--",
                  "python3", "-m", "http.server", "8108", "--bind", "127.0.0.1")
    assert started.code == 0, started.stderr
    forward = Forward(cli, ws, "8108")
    try:
        assert _retry(forward) == "hello from the sandbox\n"
        assert cli("wait", ws, str(started.json["data"]["id"]), "--timeout", "30").code == 124  # timed out
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            forward.get()
    finally:
        _, err = forward.finish()
    assert ("nothing listens on port 8108 in the live sandbox of yours in 'site'; `warden ps site` shows whether "
            "the server still runs (a detached one ends at its --timeout, sandbox.timeout by default)") in err


def _fetch_as_nobody(url: str) -> str:
    """What another account of this host gets from `url` (the first line of its answer, or the error)."""
    probe = "\n".join(["import urllib.request", "try:",
                       f"    print(urllib.request.urlopen({url!r}, timeout=15).read().decode().strip())",
                       "except Exception as exc:", "    print('refused', type(exc).__name__)"])
    out = subprocess.run([str(shutil.which("runuser")), "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c", probe],
                         capture_output=True, text=True, timeout=60, check=False)
    return out.stdout.strip() or out.stderr.strip()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/usr/bin/python3").exists(),
                    reason="needs root to act as another account")
def test_another_accounts_connection_is_not_relayed_unless_asked(cli: Cli, ws: str) -> None:
    # A loopback port is open to every account of the host: another one fetched the person's (or
    # a bot's) dev server, and 32 idle connections of its own blocked the person's browser.
    server = _server(cli, ws, 8104)
    forward = Forward(cli, ws, "8104")
    try:
        assert _retry(forward) == "hello from the sandbox\n"  # the person's own
        assert _fetch_as_nobody(forward.url + "/hello.txt").startswith("refused")
    finally:
        _, err = forward.finish()
    assert "a connection from account 65534 was closed: only your own are relayed" in err, err
    assert _closes(cli, ws)[-1]["refused"] >= 1
    anyone = Forward(cli, ws, "8104", "--any-user")
    try:
        assert _retry(anyone) == "hello from the sandbox\n"
        assert _fetch_as_nobody(anyone.url + "/hello.txt") == "hello from the sandbox"
    finally:
        anyone.finish()
        cli("kill", ws, server)


_RECORDER = """
import socket
with socket.create_server(("127.0.0.1", 8107)) as server:
    while True:
        conn, _ = server.accept()
        with conn, open("received.txt", "ab") as out:
            while chunk := conn.recv(4096):
                out.write(chunk)
"""

_SEND_AND_CLOSE = """
import socket, sys
own = socket.create_server(("127.0.0.1", 0), backlog=4096)  # rows of its own make each table read slower
rows = [socket.create_connection(own.getsockname()) for _ in range(900)]
burst = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(30)]
for n, s in enumerate(burst):  # the forward looks the first few up; the rest wait in its backlog
    s.sendall(b"from nobody %d\\n" % n)
for s in burst:
    s.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/usr/bin/python3").exists(),
                    reason="needs root to act as another account")
def test_another_accounts_connection_closed_before_it_is_looked_up_is_not_relayed(cli: Cli, ws: str) -> None:
    # A socket closed by its process leaves the kernel's table as root's (uid 0, no inode) while it
    # finishes closing: another account that sent its bytes and closed at once was relayed as root,
    # one way, to whatever listens in the sandbox.
    import socket
    import time

    started = cli("run", ws, "--detach", "--json", "--", "python3", "-c", _RECORDER)
    assert started.code == 0, started.stdout + started.stderr
    received = Path(cli("info", ws, "--json").json["data"]["path"], "received.txt")
    forward = Forward(cli, ws, "8107")
    try:
        host, port = forward.url.removeprefix("http://").rsplit(":", 1)
        for _ in range(100):  # the person's own, once the recorder listens (--detach returns before)
            with socket.create_connection((host, int(port))) as own:
                own.sendall(b"from the person\n")
                own.shutdown(socket.SHUT_WR)
                own.recv(1)
            if received.exists() and b"from the person" in received.read_bytes():
                break
            time.sleep(0.1)
        subprocess.run([str(shutil.which("runuser")), "-u", "nobody", "--", "/usr/bin/python3", "-I", "-c",
                        _SEND_AND_CLOSE, port], timeout=60, check=True)
        time.sleep(1)
    finally:
        _, err = forward.finish()
        cli("kill", ws, str(started.json["data"]["id"]))
    assert b"from the person" in received.read_bytes()
    assert b"from nobody" not in received.read_bytes(), received.read_bytes()
    # A line for nobody's (looked up open), one for the unknown (closed), not one a connection.
    assert 1 <= err.count("was closed: only your own are relayed") <= 2, err


def test_a_bots_server_is_reached_only_as_that_bot(cli: Cli, ws: str) -> None:
    assert cli("bot", "register", "builder").code == 0
    assert cli("bot", "register", "other").code == 0
    token = cli("grant", ws, "builder", "--permissions", "read,execute").stdout.strip()
    other = cli("grant", ws, "other", "--permissions", "read,execute").stdout.strip()
    server = _server(cli, ws, 8103, env={"WARDEN_TOKEN": token}, bot=True)
    as_bot = Forward(cli, ws, "8103", "--as", "builder")
    try:
        assert _retry(as_bot) == "hello from the sandbox\n"
    finally:
        as_bot.finish()
    # The other bot's sandbox (it runs a server of its own) is another network namespace: its
    # 8103 is nobody's, and the person's forward reaches the person's sandbox alone.
    other_server = _server(cli, ws, 8104, env={"WARDEN_TOKEN": other}, bot=True)
    as_other = Forward(cli, ws, "8103", "--as", "other")
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            as_other.get()
    finally:
        _, err = as_other.finish()
    assert "nothing listens on port 8103 in the live sandbox of bot 'other'" in err
    # The person's sandbox (a server of the person's on 8106) is another one again.
    own_server = _server(cli, ws, 8106)
    mine = Forward(cli, ws, "8103")
    try:
        assert _retry_refused(mine)
    finally:
        _, err = mine.finish()
    assert "nothing listens on port 8103 in the live sandbox of yours" in err
    cli("kill", ws, own_server)
    cli("kill", ws, server)
    cli("kill", ws, other_server)


def test_a_forward_to_a_bots_server_without_as_names_the_flag(cli: Cli) -> None:
    """A newcomer's bot started `npm run dev` in its workspace; `warden forward W 5173` said only
    "no live sandbox of yours: start the server first". It now names the `--as` that reaches it."""
    assert cli("create", "botsite", "--template", "minimal").code == 0
    try:
        assert cli("bot", "register", "devbot").code == 0
        token = cli("grant", "botsite", "devbot", "--permissions", "read,execute").stdout.strip()
        server = _server(cli, "botsite", 8107, env={"WARDEN_TOKEN": token}, bot=True)
        refused = cli("forward", "botsite", "8107")
        assert refused.code == 4, refused.stderr
        assert "no live sandbox of yours runs in 'botsite': one runs for `--as devbot`" in refused.stderr
        assert "`--as user`" not in refused.stderr
        del server
    finally:
        cli("destroy", "botsite", "--yes", "--no-archive")


def test_the_forward_stops_when_its_workspace_is_archived(cli: Cli) -> None:
    assert cli("create", "gone", "--template", "minimal").code == 0
    try:
        server = _server(cli, "gone", 8105)
        forward = Forward(cli, "gone", "8105")
        assert _retry(forward, "/").startswith("<!DOCTYPE")
        assert cli("archive", "gone").code == 0
        code, err = forward.finish(None)
        assert code == 1, err
        assert "stopped forwarding: workspace gone is archived" in err
        assert _closes(cli, "gone")[-1]["reason"] == "the workspace was archived"
        # And an archived workspace is refused before anything listens (conflict: 5).
        refused = cli("forward", "gone", "8105")
        assert refused.code == 5 and "is archived" in refused.stderr, refused.stderr
        del server
    finally:
        cli("unarchive", "gone")
        cli("destroy", "gone", "--yes", "--no-archive")


def test_refusals_before_listening(cli: Cli, ws: str) -> None:
    assert cli("forward", "nosuch", "8000").code == 4
    low = cli("forward", ws, "80")
    assert low.code == 3 and "sandbox.forward_ports" in low.stderr
    wide = cli("forward", ws, "8000", "--listen", "0.0.0.0:8000")
    assert wide.code == 3 and "loopback" in wide.stderr
    assert cli("forward", ws, "http").code == 2


def test_a_forward_as_a_bot_with_no_grant_there_says_so(cli: Cli) -> None:
    """Found as a newcomer: `warden forward notes 8000 --as nobody` (a typo of the bot's name) said
    "no live sandbox of bot 'nobody' runs in 'notes': start the server first", which that bot
    never could. It now says the bot holds no grant there, naming `warden grants`."""
    assert cli("create", "grantless", "--template", "minimal").code == 0
    try:
        assert cli("bot", "register", "realbot").code == 0
        token = cli("grant", "grantless", "realbot", "--permissions", "read,execute").stdout.strip()
        unknown = "acc_0123456789abcdef01234567"
        for who, said in (("nobody", "bot 'nobody'"), (unknown, f"grant {unknown}")):
            refused = cli("forward", "grantless", "8108", "--as", who)
            assert refused.code == 4, refused.stderr
            assert refused.stderr == (f"warden: {said} holds no grant on 'grantless', so it has no live sandbox "
                                      "there: `warden grants grantless` lists who does (`--as BOT` or `--as acc_…`)\n")
        # A bot that holds one and runs nothing yet is still told to start its server.
        idle = cli("forward", "grantless", "8108", "--as", "realbot")
        assert idle.code == 4 and "start the server first" in idle.stderr, idle.stderr
        assert token
    finally:
        cli("destroy", "grantless", "--yes", "--no-archive")
