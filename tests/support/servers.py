"""Real API servers for tests: uvicorn in a thread of the test process, or `warden serve` as a
subprocess (its output captured), both on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import re
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import httpx
import uvicorn

from tests.support.waiting import poll
from warden.bootstrap import App
from warden.interfaces.http import create_app
from warden.interfaces.http.protocol import BoundedHttpToolsProtocol


class ThreadServer:
    """uvicorn serving `create_app(app)` from a thread; `url` once started."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(app), log_level="warning", access_log=False, lifespan="off",
                                http=BoundedHttpToolsProtocol)  # as `warden serve` runs it
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        poll(lambda: self.server.started or not self.thread.is_alive(), timeout=20, interval=0.01)
        if not self.server.started:
            raise RuntimeError("the API server did not start")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def _healthy(url: str, verify: ssl.SSLContext | bool = True) -> bool:
    try:
        return httpx.get(url + "/v1/health", timeout=2, verify=verify).status_code == 200
    except httpx.HTTPError:
        return False


class ServeProcess:
    """`python -m warden serve --port 0` with stdout and stderr captured to files."""

    def __init__(self, environ: dict[str, str], log_dir: Path, *extra: str,
                 verify: ssl.SSLContext | bool = True) -> None:
        self.environ = environ
        self.extra = extra
        self.verify = verify  # how its health is checked when it serves https:// (--tls-cert)
        self.out_path = log_dir / "serve.out"
        self.err_path = log_dir / "serve.err"
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServeProcess:
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "warden", "serve", "--port", "0", *self.extra],
                                     stdout=self._out, stderr=self._err, env=self.environ,
                                     stdin=subprocess.DEVNULL)
        proc = self.proc

        def serving() -> str | bool:
            """The URL once it answers; False while it starts, True once the process ended."""
            match = re.search(rb"listening on (https?://127\.0\.0\.1:\d+)", self.out_path.read_bytes())
            if match and _healthy(match.group(1).decode(), self.verify):
                return match.group(1).decode()
            return proc.poll() is not None

        # A loaded CI machine once gave up after 30 s on a server with two workers (three
        # Pythons importing the whole stack); quiet, it takes about 5 s.
        answer = poll(serving, timeout=90, interval=0.05)
        if not isinstance(answer, str):
            raise RuntimeError("warden serve did not start: " + self.output().decode(errors="replace"))
        self.url = answer
        return self

    def output(self) -> bytes:
        """Everything the server printed so far."""
        return self.out_path.read_bytes() + self.err_path.read_bytes()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()
        self._err.close()


def warden_environ(home: Path) -> dict[str, str]:
    """A minimal environment for a Warden process on `home` (the one CLI calls in tests get)."""
    from tests.conftest import isolated_environ

    return isolated_environ(home)


@contextmanager
def served_home(base: Path, **settings: str) -> Iterator[ServeProcess]:
    """`warden serve` (no access log) on a home made under `base` with `warden init`, its
    environment adding `settings` (WARDEN_… variables)."""
    environ = {**warden_environ(base / "home"), **settings}
    subprocess.run([sys.executable, "-m", "warden", "init"], env=environ, capture_output=True, timeout=120,
                   check=True)
    with ServeProcess(environ, base, "--no-access-log") as served:
        yield served


def cli_out(environ: dict[str, str], *args: str, input: bytes | None = None) -> str:
    """Run `warden ARGS` for a test's set-up; it must succeed: its stdout, stripped."""
    proc = subprocess.run([sys.executable, "-m", "warden", *args], input=input, capture_output=True,
                          env=environ, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()
