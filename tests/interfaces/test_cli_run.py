"""`warden run` end to end: streaming, statuses, refusals, network, audit (INTERFACES.md)."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module", params=["alone", "daemon"])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Every test twice: each `warden` running its command itself, and through the home's
    daemon (a forked child of it runs the command line: interfaces/cli/daemon.py)."""
    home = tmp_path_factory.mktemp("run-home")
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TERM", "TZ", "TMPDIR"}}
    through = {"WARDEN_DAEMON": "0"} if request.param == "alone" else {"WARDEN_DAEMON_IDLE": "60"}
    yield {**keep, "HOME": str(home.parent), "WARDEN_HOME": str(home), **through}
    from tests.interfaces.test_cli_daemon import stop_daemon

    stop_daemon(home)


@pytest.fixture(scope="module")
def cli(env: dict[str, str]) -> Cli:
    return Cli(env)


@pytest.fixture(scope="module")
def ws(cli: Cli) -> str:
    created = cli("create", "runner", "--json")
    assert created.code == 0, created.stderr
    return "runner"


def test_status_output_and_json_shape(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (r.code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    r = cli("run", ws, "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert r.code == 3
    data = r.json["data"]
    assert r.json["ok"] is True
    assert set(data) == {"exit_code", "stdout", "stderr", "duration_s", "timed_out", "signal"}
    assert (data["exit_code"], data["stdout"], data["stderr"], data["timed_out"], data["signal"]) == \
        (3, "out\n", "err\n", False, None)


def test_options_between_name_and_command(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--timeout", "30", "--memory", "256M", "--cpu", "20", "--pids", "64",
            "--env", "GREETING=hi there", "--json", "--", "sh", "-c", 'echo "$GREETING"; ulimit -t')
    assert r.json["data"]["stdout"] == "hi there\n20\n"


def test_timeout_is_124_and_says_which_limit_and_how_to_raise_it(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--timeout", "1", "--", "sleep", "30")
    assert r.code == 124
    assert r.stderr == ("warden: timed out after 1s; the command and its processes were killed; run it with "
                        "--timeout DURATION (e.g. 30m) or set sandbox.timeout\n"), r.stderr
    # A person who gave no --timeout met sandbox.timeout: the line names the value it had.
    assert cli("config", "set", "sandbox.timeout", "2s").code == 0
    try:
        r = cli("run", ws, "--", "sleep", "30")
    finally:
        assert cli("config", "set", "sandbox.timeout", "10m").code == 0
    assert r.code == 124 and "timed out after 2s;" in r.stderr and "sandbox.timeout" in r.stderr, r.stderr


def test_signal_is_128_plus_n(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--json", "--", "sh", "-c", "kill -KILL $$")
    assert r.code == 137 and r.json["data"]["signal"] == 9


def test_the_cpu_limit_stops_a_command_and_says_so(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--cpu", "1", "--", "python3", "-c", "while True: pass")
    assert r.code == 152 and "used up its CPU time (1 s)" in r.stderr, r.stderr


def test_stdin_passes_through(cli: Cli, ws: str) -> None:
    r = cli("run", ws, "--", "sh", "-c", "tr a-z A-Z", input="hello\n")
    assert r.stdout == "HELLO\n"


def test_output_is_streamed_live(env: dict[str, str], ws: str) -> None:
    go = Path(env["WARDEN_HOME"]) / "workspaces" / ws / "go"
    go.unlink(missing_ok=True)
    # The second line comes only once the test has read the first (and made "go"): held back
    # until the command ends, the first would never come, and the run would time out.
    proc = subprocess.Popen([sys.executable, "-m", "warden", "run", ws, "--timeout", "30", "--", "sh", "-c",
                             "echo first; while [ ! -e go ]; do sleep 0.05; done; echo second"],
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    go.touch()
    rest = proc.stdout.read()
    assert proc.wait() == 0
    assert first == b"first\n" and rest == b"second\n"


def test_refused_by_allowlist_is_126_and_nothing_runs(cli: Cli, ws: str, env: dict[str, str]) -> None:
    path = Path(env["WARDEN_HOME"]) / "workspaces" / ws
    (path / "victim").write_text("keep me")
    try:
        assert cli("config", "set", "sandbox.allowed_commands", "sh,ls,python").code == 0
        assert cli("config", "set", "sandbox.enabled", "true").code == 0
        for argv in (["/usr/bin/rm", "victim"], ["env", "rm", "victim"], ["sh", "-c", "ls; rm victim"]):
            r = cli("run", ws, "--", *argv)
            assert r.code == 126, (argv, r.stderr)
            assert r.stderr.count("\n") == 1 and "rm" in r.stderr and r.stdout == ""
            assert (path / "victim").exists()
        r = cli("run", ws, "--json", "--", "env", "rm", "victim")
        assert r.code == 126 and r.json["error"]["code"] == "denied"
        assert cli("run", ws, "--", "sh", "-c", "ls victim").code == 0
    finally:
        cli("config", "set", "sandbox.enabled", "false")


def test_unknown_workspace_and_bad_flags(cli: Cli, ws: str) -> None:
    unknown = cli("run", "nope", "--json", "--", "true")
    assert unknown.code == 126 and unknown.json["error"]["code"] == "not_found"
    assert cli("run", ws).code == 2
    assert cli("run", ws, "--memory", "lots", "--", "true").code == 2
    assert cli("run", ws, "--env", "NOEQUALS", "--", "true").code == 2
    assert cli("run", ws, "--net", "allow", "--", "true").code == 2
    assert cli("run", ws, "--allow-domain", "x.test", "--", "true").code == 2


def test_every_run_is_audited_without_env_values(cli: Cli, ws: str) -> None:
    cli("run", ws, "--env", "API_TOKEN=supersecret-value", "--", "sh", "-c", "exit 5")
    r = cli("audit", "--workspace", ws, "--limit", "5", "--json")
    events = [e for e in r.json["data"] if e["action"] == "run"]
    last = events[-1]
    assert last["detail"]["argv"] == ["sh", "-c", "exit 5"]
    assert last["detail"]["exit_code"] == 5 and "limits" in last["detail"]
    assert last["detail"]["network"] == "none" and last["detail"]["env_keys"] == ["API_TOKEN"]
    assert "supersecret-value" not in r.stdout


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_network_allowlist_end_to_end(cli: Cli, ws: str, server: int) -> None:
    ok = cli("run", ws, "--net", "allow", "--allow-domain", f"127.0.0.1:{server}", "--",
             "curl", "-sS", f"http://127.0.0.1:{server}/")
    assert (ok.code, ok.stdout) == (0, "hello")
    refused = cli("run", ws, "--net", "allow", "--allow-domain", "localhost", "--",
                  "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"http://localhost:{server}/")
    assert refused.stdout == "403"
    assert "warden: network refused" in refused.stderr and "loopback" in refused.stderr
    audit = cli("audit", "--workspace", ws, "--limit", "3", "--json").json["data"]
    assert any(e["action"] == "network.refused" and e["rule"] == "network.special_address" for e in audit)
    none = cli("run", ws, "--", "curl", "-sS", "-m", "5", f"http://127.0.0.1:{server}/")
    assert none.code != 0 and none.stdout == ""
    # A command that failed for it (a traceback below the refusal, shown as it came) ends with it.
    failed = cli("run", ws, "--net", "allow", "--allow-domain", "localhost", "--",
                 "curl", "-sSf", f"http://localhost:{server}/")
    assert failed.code != 0
    last = failed.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("warden: the sandbox's proxy refused this command's network request (GET localhost:")
    assert "loopback" in last


def test_a_command_asking_without_end_is_shown_and_audited_within_bounds(cli: Cli, ws: str) -> None:
    # Each refusal was a line on stderr, a decision in Warden's memory and an audit row: a command
    # asking thousands of times a second grew all three for as long as it was let run.
    flood = ("import os, socket\n"
             "port = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])\n"
             "for _ in range(1500):\n"
             "    with socket.create_connection(('127.0.0.1', port)) as s:\n"
             "        s.sendall(b'CONNECT flood.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
             "        while s.recv(4096): pass\n")
    run = cli("run", ws, "--net", "allow", "--allow-domain", "a.test", "--", "python3", "-c", flood)
    assert run.code == 0, run.stderr[-500:]
    assert run.stderr.count("warden: network refused CONNECT flood.test:443") == 100
    assert run.stderr.endswith("warden: more than 100 network refusals in this run; the rest are not shown\n")
    audit = cli("audit", "--workspace", ws, "--limit", "1100", "--json").json["data"]
    refused = [e for e in audit if e["action"] == "network.refused" and e["detail"]["host"] == "flood.test"]
    assert len(refused) == 1000
    last = [e for e in audit if e["action"] == "run"][-1]  # oldest first
    assert last["detail"]["network_events_dropped"] == 500


def test_python_api_run(env: dict[str, str], ws: str) -> None:
    from warden import Warden

    with Warden.open(env["WARDEN_HOME"], environ=env) as w:
        res = w.get(ws).run(["python", "-c", "import sys; print(sys.stdin.read().upper())"],
                            stdin="abc", timeout=30)
        assert (res.exit_code, res.stdout) == (0, "ABC\n")
        assert w.get(ws).run(["sleep", "10"], timeout=0.5).timed_out
