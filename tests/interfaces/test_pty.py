"""Interactive terminals in the sandbox: the real `warden shell` (and `run --tty`) under a
pseudo-terminal the test holds, and the PTY WebSocket of a real `warden serve`.

Each checks what a person at the keyboard sees: what is typed echoes and runs, `stty size`
inside follows a resize, Ctrl-C interrupts `sleep 100` and the shell goes on, and `exit 3`
ends the session with status 3. Every wait polls for the expected text up to a deadline.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until

PROMPT = b"# " if os.geteuid() == 0 else b"$ "
# A foreground job that says once it runs (the quotes keep the typed line's echo from saying it).
SLEEP = b"sh -c 'echo sleep\"\"ing; exec sleep 100'\n"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pty")
    environ = {**warden_environ(tmp / "home"), "TERM": "xterm"}
    cli_out(environ, "init")
    cli_out(environ, "create", "term")
    cli_out(environ, "bot", "register", "typist")
    token = cli_out(environ, "grant", "term", "typist", "--permissions", "read,execute")
    return {"environ": environ, "token": token, "tmp": tmp}


class Screen:
    """Everything a terminal showed, read from its master as it comes."""

    def __init__(self) -> None:
        self.seen = b""

    def more(self) -> bytes:
        raise NotImplementedError

    def wait_for(self, text: bytes, *, timeout: float = 30.0) -> None:
        """Until `text` has been shown since the last wait (what came before it is consumed)."""
        def shown() -> bool:
            self.seen += self.more()
            return text in self.seen

        wait_until(shown, timeout=timeout, interval=0.0,
                   message=lambda: f"{text!r} on the terminal (it shows {self.seen[-300:]!r})")
        self.seen = self.seen[self.seen.index(text) + len(text):]


class CliScreen(Screen):
    def __init__(self, master: int) -> None:
        super().__init__()
        self.master = master

    def more(self) -> bytes:
        ready, _, _ = select.select([self.master], [], [], 0.05)
        if not ready:
            return b""
        try:
            return os.read(self.master, 65536)
        except OSError:  # EIO: the CLI has exited
            return b""


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _controlling_terminal() -> None:  # in the child: stdin, the test's pty, as its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.fixture
def warden_on_a_terminal(home: dict[str, Any]) -> Iterator[Any]:
    """Start `warden ARGS` as a person would, on a terminal (the test's pseudo-terminal, of
    which it leads the session): returns (process, master, screen)."""
    started: list[tuple[subprocess.Popen[bytes], int]] = []

    def start(*args: str) -> tuple[subprocess.Popen[bytes], int, CliScreen]:
        master, slave = os.openpty()
        _set_size(master, 100, 30)
        proc = subprocess.Popen([sys.executable, "-m", "warden", *args], stdin=slave, stdout=slave, stderr=slave,
                                env=home["environ"], start_new_session=True, preexec_fn=_controlling_terminal)
        os.close(slave)
        started.append((proc, master))
        return proc, master, CliScreen(master)

    yield start
    for proc, master in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)


def test_warden_shell_echoes_resizes_interrupts_and_exits_with_the_shells_status(warden_on_a_terminal: Any) -> None:
    proc, master, screen = warden_on_a_terminal("shell", "term")
    screen.wait_for(PROMPT)
    os.write(master, b"echo hel''lo; stty size; tty\n")
    screen.wait_for(b"hello\r\n30 100\r\n")  # the person's terminal size, copied at the start
    _set_size(master, 132, 50)  # SIGWINCH to warden, which resizes the sandbox's terminal
    os.write(master, b"stty size\n")
    screen.wait_for(b"50 132\r\n")
    os.write(master, SLEEP)
    screen.wait_for(b"sleeping\r\n")  # the job runs in the foreground (its echo of the line says less)
    os.write(master, b"\x03")  # Ctrl-C: to the shell's foreground job, not to warden
    os.write(master, b"echo alive-$?\n")
    screen.wait_for(b"alive-130\r\n", timeout=20)
    assert proc.poll() is None
    os.write(master, b"exit 3\n")
    assert proc.wait(30) == 3


def test_warden_shell_opens_in_the_live_sandbox_of_a_detached_server(warden_on_a_terminal: Any,
                                                                     home: dict[str, Any]) -> None:
    # The shell once got a fresh sandbox: a server started with --detach was out of its reach.
    # A live sandbox's /tmp is its own and kept between its commands: the shell sees the file.
    server = cli_out(home["environ"], "run", "term", "--detach", "--", "sh", "-c",
                     "echo from-the-server > /tmp/flag; exec sleep 300")
    try:
        proc, master, screen = warden_on_a_terminal("shell", "term")
        screen.wait_for(PROMPT)
        os.write(master, b"cat /tmp/fl''ag; stty size\n")
        screen.wait_for(b"from-the-server\r\n30 100\r\n")
        # The terminal is one of the sandbox's own devpts: its name is there to be found (it was
        # the host's /dev/pts/N, absent inside: `tty` said "not a tty", os.ttyname failed).
        os.write(master, b"tty; python3 -c 'import os; print(\"name\", os.ttyname(0) == os.ttyname(2))'\n")
        screen.wait_for(b"/dev/pts/")
        screen.wait_for(b"name True\r\n")
        _set_size(master, 120, 40)
        os.write(master, b"stty size\n")
        screen.wait_for(b"40 120\r\n")
        os.write(master, SLEEP)
        screen.wait_for(b"sleeping\r\n")
        os.write(master, b"\x03")  # Ctrl-C reaches the job in the live sandbox
        os.write(master, b"echo alive-$?\n")
        screen.wait_for(b"alive-130\r\n", timeout=20)
        os.write(master, b"exit 4\n")
        assert proc.wait(30) == 4
        # The server lives on after the shell.
        listed = cli_out(home["environ"], "ps", "term")
        assert server in listed and "running" in listed
    finally:
        cli_out(home["environ"], "kill", "term", server, "--signal", "KILL")


def test_warden_run_tty_gives_the_command_a_terminal(warden_on_a_terminal: Any) -> None:
    script = "test -t 0 && test -t 1 && stty size; read line; echo got-$line; exit 7"
    proc, master, screen = warden_on_a_terminal("run", "term", "--tty", "--", "sh", "-c", script)
    screen.wait_for(b"30 100\r\n")
    os.write(master, b"typed\n")
    screen.wait_for(b"got-typed\r\n")
    assert proc.wait(30) == 7


@pytest.mark.parametrize("live", [False, True], ids=["fresh", "live"])
def test_run_tty_with_input_at_its_end_gives_the_command_the_end_of_input(home: dict[str, Any], live: bool) -> None:
    # stdin at its end (a file, /dev/null), stdout a terminal. The end of input reached the
    # command's terminal before the command ran: its line discipline took it in cooked mode, and
    # the live sandbox's terminal gave it as a NUL (`^@` shown, `read` waiting until the timeout).
    server = cli_out(home["environ"], "run", "term", "--detach", "--", "sleep", "300") if live else None
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "warden", "run", "term", "--tty", "--timeout", "20", "--",
                                 "sh", "-c", "read x; echo got-$x-$?"], stdin=subprocess.DEVNULL, stdout=slave,
                                stderr=slave, env=home["environ"], start_new_session=True)
        os.close(slave)
        screen = CliScreen(master)
        screen.wait_for(b"got--1")
        assert proc.wait(30) == 0
        assert b"^@" not in screen.seen
    finally:
        os.close(master)
        if server is not None:
            cli_out(home["environ"], "kill", "term", server, "--signal", "KILL")


def test_commands_piped_into_warden_shell_run_without_a_terminal_and_end_with_their_input(
        home: dict[str, Any]) -> None:
    """`echo … | warden shell NAME`: the shell read them on a terminal, so its prompt and line
    editing came back with the output, and the end of the input was lost (Warden waited until the
    shell's timeout). Without a terminal, as `docker exec -i`: the output alone, and its status."""
    piped = subprocess.run([sys.executable, "-m", "warden", "shell", "term", "--timeout", "20"],
                           input=b"echo one; cd /tmp && pwd\nexit 3\n", capture_output=True, env=home["environ"],
                           timeout=60, check=False)
    assert (piped.returncode, piped.stdout) == (3, b"one\n/tmp\n"), piped.stderr
    assert b"\x1b" not in piped.stdout + piped.stderr  # no prompt, no bracketed-paste mode
    ended = subprocess.run([sys.executable, "-m", "warden", "shell", "term", "--timeout", "20"],
                           stdin=subprocess.DEVNULL, capture_output=True, env=home["environ"], timeout=60, check=False)
    assert (ended.returncode, ended.stdout) == (0, b"")  # no input: the shell ends at once


def test_a_command_on_the_terminal_cannot_push_input_into_it(warden_on_a_terminal: Any) -> None:
    # TIOCSTI would queue bytes as if typed (CVE-2017-5226). The terminal is a fresh one only the
    # sandbox reads, and the syscall filter refuses the ioctl all the same.
    push = "import fcntl, termios\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('PUSHED')\n" \
           "except OSError as e: print('refused', e.errno)"
    proc, _master, screen = warden_on_a_terminal("run", "term", "--tty", "--", "python3", "-c", push)
    screen.wait_for(b"refused 1\r\n")
    assert proc.wait(30) == 0 and b"PUSHED" not in screen.seen


# A process of the live sandbox that holds the session's terminal open without reading it, and
# reports when that terminal is hung up (its relay ended): only then does poll() see POLLHUP.
HOLDER = """
import os, select, time
while not [n for n in os.listdir("/dev/pts") if n.isdigit()]:
    time.sleep(0.05)
fd = os.open("/dev/pts/" + min(n for n in os.listdir("/dev/pts") if n.isdigit()), os.O_RDWR | os.O_NOCTTY)
print("holding", flush=True)
watch = select.poll()
watch.register(fd, 0)
watch.poll(300000)
print("hung up", flush=True)
"""


def test_a_session_whose_warden_is_gone_ends_though_its_terminal_is_held_and_full(
        warden_on_a_terminal: Any, home: dict[str, Any]) -> None:
    # The supervisor's relay looked for Warden's side closing only when reading it, and stopped
    # reading once what was typed filled its buffer (a command that does not read). With a
    # process of the sandbox holding the terminal open (no end of it then), a `warden` killed
    # (a closed terminal window, a PTY client gone) left the relay, its two terminals and the
    # whole sandbox (a relay keeps it from idling out) for as long as that process lived.
    environ = home["environ"]
    cli_out(environ, "create", "held")
    holder = cli_out(environ, "run", "held", "--detach", "--", "python3", "-c", HOLDER)
    try:
        proc, master, screen = warden_on_a_terminal("shell", "held")
        screen.wait_for(PROMPT)
        wait_until(lambda: "holding" in cli_out(environ, "logs", "held", holder), timeout=30,
                   message="the holder opening the session's terminal")
        os.write(master, b"echo rea''dy; exec sleep 300\n")  # a foreground command that reads nothing
        screen.wait_for(b"ready\r\n")
        os.set_blocking(master, False)

        def full() -> bool:  # typed until nothing more is taken for a while
            quiet = time.monotonic() + 1.0
            while time.monotonic() < quiet:
                screen.seen = screen.more()[-100:]
                try:
                    if os.write(master, b"x" * 999 + b"\n"):
                        return False
                except BlockingIOError:
                    time.sleep(0.05)
            return True

        wait_until(full, timeout=60, interval=0.0, message="the session's input filling up")
        proc.kill()
        proc.wait(10)
        wait_until(lambda: "hung up" in cli_out(environ, "logs", "held", holder), timeout=20,
                   message="the session's terminal hung up once its warden was gone")
    finally:  # ended by itself once it saw the hang-up; else killed
        subprocess.run([sys.executable, "-m", "warden", "kill", "held", holder, "--signal", "KILL"], env=environ,
                       capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def server(home: dict[str, Any]) -> Iterator[ServeProcess]:
    with ServeProcess(home["environ"], home["tmp"]) as served:
        yield served


class SocketScreen(Screen):
    def __init__(self, ws: ClientConnection) -> None:
        super().__init__()
        self.ws = ws
        self.texts: list[dict[str, Any]] = []

    def more(self) -> bytes:
        try:
            message = self.ws.recv(timeout=0.05)
        except TimeoutError:
            return b""
        if isinstance(message, str):
            self.texts.append(json.loads(message))
            return b""
        return message


def _pty_url(server: ServeProcess, query: str = "cols=100&rows=30") -> str:
    return server.url.replace("http://", "ws://") + f"/v1/workspaces/term/pty?{query}"


def test_the_pty_websocket_echoes_resizes_interrupts_and_ends_with_the_exit_status(
        server: ServeProcess, home: dict[str, Any]) -> None:
    with connect(_pty_url(server), additional_headers={"Authorization": f"Bearer {home['token']}"}) as ws:
        shell_session(ws)


def test_the_pty_websocket_takes_the_token_of_a_grants_sdk_handle(server: ServeProcess, home: dict[str, Any]) -> None:
    # docs/bots-and-api.md: `ws = Client(url, grant_token).workspace(name)`, then the PTY with
    # `ws.access_token`, which only a handle from create_workspace had (AttributeError).
    from warden.client import Client

    handle = Client(server.url, home["token"]).workspace("term")
    with connect(_pty_url(server), additional_headers={"Authorization": f"Bearer {handle.access_token}"}) as ws:
        shell_session(ws)


def shell_session(ws: ClientConnection, *, also: bytes = b"") -> None:
    """A person's session over a PTY WebSocket (`also`: more to run with the first line): what is
    typed echoes and runs, a resize (a text frame) reaches `stty size`, Ctrl-C interrupts the
    foreground job and the shell goes on, `exit 3` ends it with the exit frame and close 1000."""
    screen = SocketScreen(ws)
    screen.wait_for(PROMPT)
    ws.send(b"echo hel''lo; stty size" + (b"; " + also if also else b"") + b"\n")
    screen.wait_for(b"hello\r\n30 100\r\n")
    ws.send(json.dumps({"type": "resize", "cols": 132, "rows": 50}))
    ws.send(b"stty size\n")
    screen.wait_for(b"50 132\r\n")
    ws.send(SLEEP)
    screen.wait_for(b"sleeping\r\n")
    ws.send(b"\x03")
    ws.send(b"echo alive-$?\n")
    screen.wait_for(b"alive-130\r\n", timeout=20)
    ws.send(b"exit 3\n")
    wait_until(lambda: screen.more() == b"" and screen.texts, timeout=30, message="the exit frame")
    assert {k: v for k, v in screen.texts[-1].items() if k != "duration_s"} == {
        "type": "exit", "exit_code": 3, "timed_out": False, "signal": None}
    wait_until(lambda: _closed(ws), timeout=10, message="the server closing the socket")
    assert ws.close_code == 1000


def test_a_control_frame_nested_past_the_stack_is_refused_and_the_session_goes_on(
        server: ServeProcess, home: dict[str, Any]) -> None:
    """A text frame of `[[[[…` (within the 4 KiB a control message may be) was a RecursionError in
    the session's task: a traceback in the server log, the session deaf from then on, and its shell
    left running after the client went."""
    with connect(_pty_url(server), additional_headers={"Authorization": f"Bearer {home['token']}"}) as ws:
        screen = SocketScreen(ws)
        screen.wait_for(PROMPT)
        ws.send("[" * 2000 + "]" * 2000)
        ws.send(b"echo still-he''re\n")
        screen.wait_for(b"still-here\r\n")
        assert screen.texts and screen.texts[0]["type"] == "error" and screen.texts[0]["error"]["code"] == "invalid"
        ws.send(b"exit 4\n")
        wait_until(lambda: screen.more() == b"" and screen.texts[-1]["type"] == "exit", timeout=30,
                   message="the exit frame")
        assert screen.texts[-1]["exit_code"] == 4
    assert b"Traceback" not in server.output()


def _closed(ws: ClientConnection) -> bool:
    try:
        ws.recv(timeout=0.05)
    except TimeoutError:
        return False
    except Exception:  # ConnectionClosed
        return True
    return False


def test_the_pty_websocket_refuses_before_upgrading(server: ServeProcess, home: dict[str, Any]) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(_pty_url(server), additional_headers={"Authorization": "Bearer wdn_not_a_token"})
    assert refused.value.response.status_code == 403
    assert json.loads(bytes(refused.value.response.body or b""))["error"]["code"] == "denied"
    with pytest.raises(InvalidStatus) as unnamed:
        connect(_pty_url(server))
    assert unnamed.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as huge:
        connect(_pty_url(server, "cols=0&rows=30"), additional_headers={"Authorization": "Bearer x"})
    assert huge.value.response.status_code == 400
    for odd in ("%C2%B2", "%EF%BC%91"):  # "²" and "１": digits to str.isdigit, not to a terminal size
        with pytest.raises(InvalidStatus) as unicode_digit:
            connect(_pty_url(server, f"cols={odd}&rows=30"))
        assert unicode_digit.value.response.status_code == 400  # "²" was a 500 and a traceback
    with pytest.raises(InvalidStatus) as too_long:  # over sandbox.timeout (10 minutes here)
        connect(_pty_url(server, "timeout=3600"), additional_headers={"Authorization": f"Bearer {home['token']}"})
    assert too_long.value.response.status_code == 400
    # A browser's client cannot set headers on a WebSocket and may put its token in the URL:
    # refused, and never written to the server's log (uvicorn logs a path with its query).
    with pytest.raises(InvalidStatus) as in_url:
        connect(_pty_url(server, f"token={home['token']}"))
    assert in_url.value.response.status_code == 401
    wait_until(lambda: b"token=wdn_" in server.output(), timeout=10, message="the refusal's log line")
    assert home["token"].encode() not in server.output() and b"token=wdn_\xe2\x80\xa6" in server.output()
    # A client's mistake is not a server fault: no ERROR line in the server's log for any of these.
    assert b"without completing handshake" not in server.output() and b"ERROR" not in server.output()


def test_a_pty_client_that_leaves_has_its_shell_killed_and_audited(server: ServeProcess, home: dict[str, Any]) -> None:
    marker = Path(home["tmp"]) / "home" / "workspaces" / "term" / "left"
    with connect(_pty_url(server), additional_headers={"Authorization": f"Bearer {home['token']}"}) as ws:
        screen = SocketScreen(ws)
        screen.wait_for(PROMPT)
        ws.send(b"sleep 120; touch left\n")
        screen.wait_for(b"sleep 120; touch left\r\n")
    started = time.monotonic()

    def audited() -> dict[str, Any] | None:
        log = json.loads(cli_out(home["environ"], "audit", "--workspace", "term", "--limit", "10", "--json"))["data"]
        gone = [e for e in log if e["action"] == "api.pty" and e["detail"].get("client_gone")]
        return gone[-1] if gone else None

    event = wait_until(audited, timeout=60, message="the PTY of the client that left was never audited")
    assert event["detail"]["exit_code"] == 137 and time.monotonic() - started < 60
    assert not marker.exists()


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) >> 10 for line in status if line.startswith("VmRSS:"))


def test_a_pty_client_flooding_pings_and_reading_nothing_is_cut_off_holding_no_memory(
        home: dict[str, Any], tmp_path: Path) -> None:
    """uvicorn answers each ping with a pong written straight to the connection's buffer, which has
    no bound, and reads on: a bot sending pings on its PTY WebSocket and reading nothing made the
    server hold ~12 MB more each second (~400 MB when the keepalive gave up at 40 s, and still
    held while the bot kept its socket open). Now nothing is read while that buffer is full, and
    a connection whose buffer has not drained for api.request_timeout (2 s here) is aborted."""
    environ = {**home["environ"], "WARDEN_API_REQUEST_TIMEOUT": "2s"}
    with ServeProcess(environ, tmp_path) as served:
        assert served.proc is not None
        parts = urlsplit(served.url)
        sock = socket.create_connection((parts.hostname, parts.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(f"GET /v1/workspaces/term/pty HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
                     f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                     f"Authorization: Bearer {home['token']}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101 ")
        before = _rss_mib(served.proc.pid)
        pings = (bytes([0x89, 0x80 | 125]) + b"\0\0\0\0" + b"p" * 125) * 500  # masked, as a client's are
        sock.settimeout(0.2)
        started, cut_off = time.monotonic(), False
        while time.monotonic() - started < 15 and not cut_off:
            try:
                sock.send(pings)
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                cut_off = True
        grown = _rss_mib(served.proc.pid) - before
        sock.close()
        assert grown < 48, f"the server grew by {grown} MiB for a client that read nothing"
        assert cut_off, "the connection of a client that read nothing was never cut off"
        assert b"read nothing of it for 2 s" in served.output()
