"""A token from Warden's secrets reaches a git server through Warden's credential helper only:
never in argv, the URL, `.git/config` or Warden's own state. The server is git's own smart HTTP
(`git http-backend`, as CGI) behind a small loopback server that asks for basic auth."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.services.test_git import Workspaces, git, record, remote  # noqa: F401 (fixtures)
from warden.adapters.git import HostGit
from warden.bootstrap import App
from warden.core.errors import Conflict
from warden.core.ports.git import Credential
from warden.core.workspaces import WorkspaceRecord
from warden.services.git import GitService

BACKEND = "/usr/lib/git-core/git-http-backend"
pytestmark = [pytest.mark.skipif(shutil.which("git") is None or not os.path.exists(BACKEND),
                                 reason="needs git and git-http-backend"),
              pytest.mark.initialised_home]
TOKEN = "wdn-test-token-5f0c1e"


def handler(root: Path, seen: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _serve(self) -> None:
            expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
            seen.append(self.headers.get("Authorization", ""))
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(root),
                   "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path, "QUERY_STRING": query,
                   "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                   "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1",
                   "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                   "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                   "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
            out = subprocess.run([BACKEND], input=body, env=env, capture_output=True, check=False,
                                 timeout=60).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.decode().split("\r\n"):
                key, _, value = line.partition(": ")
                if key.lower() == "status":
                    status = int(value.split()[0])
                elif key:
                    headers.append((key, value))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

    return Handler


@pytest.fixture
def server(remote: Path) -> Iterator[tuple[str, list[str]]]:  # noqa: F811
    git("config", "--file", str(remote / "config"), "http.receivepack", "true")
    seen: list[str] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(remote.parent, seen))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/{remote.name}", seen
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def service(app: App, record: WorkspaceRecord, tmp_path: Path) -> GitService:  # noqa: F811
    app.secrets.set("GIT_TOKEN", TOKEN)
    return GitService(workspaces=Workspaces(record), git=HostGit(app.environ), audit=app.audit,  # type: ignore[arg-type]
                      secrets=lambda: app.secrets, forbidden_roots=[str(tmp_path / "workspaces")])


def test_without_the_token_the_server_refuses_and_nobody_is_asked(
        service: GitService, server: tuple[str, list[str]]) -> None:
    url, _ = server
    with pytest.raises(Conflict, match="clone"):
        service.clone("demo", url)


def test_the_token_goes_through_the_helper_only(app: App, service: GitService, record: WorkspaceRecord,  # noqa: F811
                                                server: tuple[str, list[str]], remote: Path,  # noqa: F811
                                                tmp_path: Path) -> None:
    url, seen = server
    service.clone("demo", url, credential="GIT_TOKEN")
    ws = Path(record.path)
    assert (ws / "a.txt").read_text() == "hello\n"
    assert any(h.startswith("Basic ") for h in seen)
    # Later pulls and pushes find the secret by the name Warden remembered, never its value.
    # The helper runs isolated: a `warden` package a bot leaves in the workspace (git's working
    # folder) is not the one it imports.
    (ws / "warden" / "adapters").mkdir(parents=True)
    for init in ("warden/__init__.py", "warden/adapters/__init__.py", "warden/adapters/git_credential.py"):
        (ws / init).write_text(f"open({str(tmp_path / 'canary-ran')!r}, 'w').close()\n")
    (ws / "a.txt").write_text("over http\n")
    proposal = service.stage("demo", "over http")
    service.push("demo", proposal.id)
    assert git("rev-parse", "main", cwd=remote).strip() == proposal.commit
    assert service.pull("demo").files == 0
    for path in [ws / ".git" / "config", ws / ".warden" / "git-remote.json", *(ws / ".git").rglob("*")]:
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert "GIT_TOKEN" in (ws / ".warden" / "git-remote.json").read_text()
    assert not (tmp_path / "canary-ran").exists()
    assert TOKEN not in str([(e.detail, e.target) for e in app.audit.list(limit=50)])
    # git's own trace of every program it starts: the helper is one, the token in no argv.
    trace = tmp_path / "trace"
    credential = Credential("x-access-token", TOKEN, url.rsplit("/", 1)[0])
    HostGit(app.environ).run(str(ws), ["ls-remote", "origin"], credential=credential,
                             extra_env={"GIT_TRACE": str(trace)})
    traced = trace.read_text()
    assert "warden.adapters.git_credential" in traced and TOKEN not in traced
