"""Live sandboxes and background processes through the real CLI (INTERFACES.md, "Live sandboxes
and processes"): `warden run --detach`, `ps`, `logs`, `kill`, `wait`; a detached server reached by
the person's next command; output kept between calls; statuses, timeouts and limits per command;
idle stop and transparent restart; death on destroy; the audit trail of each."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Cli, isolated_environ
from tests.support.launcher import build_launcher, noting_source
from tests.support.waiting import wait_until
from warden.adapters.processes import alive
from warden.adapters.sandbox.live import supervisor_source
from warden.bootstrap import bootstrap
from warden.core.live import MAX_BACKGROUND

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

PROBE = ("import sys, time, urllib.request\nfor i in range(150):\n    try:\n"
         "        print(urllib.request.urlopen(sys.argv[1], timeout=2).status); break\n"
         "    except OSError: time.sleep(0.05)\nelse:\n    print('unreachable')")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("processes") / "warden-home"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def cli(home: Path) -> Cli:
    return Cli({**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "60s"})


@pytest.fixture(scope="module")
def ws(cli: Cli) -> Iterator[str]:
    made = cli("create", "procs", "--template", "minimal", "--json")
    assert made.code == 0, made.stderr
    yield "procs"
    cli("destroy", "procs", "--yes", "--no-archive")  # its live sandboxes die with it


def _detach(cli: Cli, ws: str, *command: str, options: tuple[str, ...] = ()) -> str:
    started = cli("run", ws, "--detach", *options, "--json", "--", *command)
    assert started.code == 0, started.stdout + started.stderr
    process_id = started.json["data"]["id"]
    assert isinstance(process_id, str) and len(process_id) == 16
    return str(process_id)


def _ps(cli: Cli, ws: str) -> dict[str, dict[str, object]]:
    listed = cli("ps", ws, "--json")
    assert listed.code == 0, listed.stderr
    return {p["id"]: p for p in listed.json["data"]}


def _host_pid(home: Path, process_id: str) -> tuple[int, int]:
    app = bootstrap(home, environ=isolated_environ(home))
    try:
        with app.registry.transaction(write=False) as tx:
            process = tx.processes.get(process_id)
        assert process is not None
        return int(process.meta["host_pid"]), int(process.meta["host_start"])  # type: ignore[call-overload]
    finally:
        app.close()


def test_a_detached_server_is_reached_by_the_next_command(cli: Cli, ws: str) -> None:
    plain = cli("run", ws, "--detach", "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1")
    assert plain.code == 0 and len(plain.stdout.strip()) == 16, plain.stderr  # the id alone, for scripts
    server = plain.stdout.strip()
    reached = cli("run", ws, "--", "python3", "-c", PROBE, "http://127.0.0.1:8000/")
    assert (reached.code, reached.stdout) == (0, "200\n"), reached.stderr
    listed = _ps(cli, ws)
    assert set(listed[server]) >= {"id", "cmd", "status", "exit_code"}
    assert listed[server]["cmd"] == ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]
    assert (listed[server]["status"], listed[server]["exit_code"]) == ("running", None)
    human = cli("ps", ws)
    assert server in human.stdout and "running" in human.stdout
    # Its output is kept between calls (the request it served is in its log).
    wait_until(lambda: "GET / HTTP" in cli("logs", ws, server).stderr, message="the request was not logged")
    killed = cli("kill", ws, server, "--json")
    assert killed.code == 0 and killed.json["data"]["status"] == "killed"
    assert cli("wait", ws, server).code == 128 + 15
    # Still there once it has ended and been collected.
    assert "GET / HTTP" in cli("logs", ws, server).stderr
    assert cli("kill", ws, server).code == 5  # it has ended: nothing to signal (a conflict, not a policy)


def test_wait_gives_the_status_and_logs_follow_to_the_end(cli: Cli, ws: str) -> None:
    job = _detach(cli, ws, "sh", "-c", "echo one; sleep 1; echo two >&2; exit 7")
    followed = cli("logs", ws, job, "--follow")
    assert (followed.code, followed.stdout, followed.stderr) == (0, "one\n", "two\n")
    waited = cli("wait", ws, job, "--json")
    assert waited.code == 7 and waited.json["data"]["exit_code"] == 7
    assert _ps(cli, ws)[job]["status"] == "exited"
    logs = cli("logs", ws, job, "--json")
    assert (logs.json["data"]["stdout"], logs.json["data"]["stderr"]) == ("one\n", "two\n")
    sleeper = _detach(cli, ws, "sleep", "300")
    started = time.monotonic()
    early = cli("wait", ws, sleeper, "--timeout", "1")
    assert early.code == 1 and "still runs" in early.stderr and time.monotonic() - started < 30
    assert cli("kill", ws, sleeper, "--signal", "KILL").code == 0
    assert cli("wait", ws, sleeper).code == 137


def test_a_detached_python_servers_first_line_is_in_its_logs_while_it_runs(cli: Cli, ws: str) -> None:
    # A dev server prints one line and waits: Python buffered it in 8 KiB blocks to the pipe its
    # logs come from, and `warden logs` showed nothing until it exited. A command that asks for
    # buffering itself keeps it.
    server = _detach(cli, ws, "python3", "-c",
                     "print('Serving HTTP on 0.0.0.0 port 8000'); import time; time.sleep(60)")
    buffered = _detach(cli, ws, "env", "PYTHONUNBUFFERED=", "python3", "-c",
                       "print('held back'); import time; time.sleep(60)")
    try:
        wait_until(lambda: "Serving HTTP" in cli("logs", ws, server).stdout, timeout=30,
                   message="the server's first line in its logs")
        assert cli("logs", ws, buffered).stdout == ""
    finally:
        for job in (server, buffered):
            cli("kill", ws, job, "--signal", "KILL")


def test_a_person_at_a_terminal_is_told_what_a_detached_id_is(cli: Cli, ws: str) -> None:
    """`--detach` printed a bare id: a newcomer could not tell what it was. stdout stays the id
    alone (a script's `id=$(warden run --detach …)`), stderr on a terminal names what to do with it."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "warden", "run", ws, "--detach", "--", "sleep", "30"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower,
                              env=cli.environ, timeout=120, check=True)
        os.set_blocking(leader, False)
        told = os.read(leader, 65536).decode()
    finally:
        os.close(leader)
        os.close(follower)
    job = proc.stdout.decode().strip()
    assert job in _ps(cli, ws)
    assert f"warden logs {ws} {job} --follow" in told and f"warden kill {ws} {job}" in told, told
    piped = cli("run", ws, "--detach", "--", "true")
    assert piped.stderr == "" and piped.stdout.strip() in _ps(cli, ws)
    assert cli("kill", ws, job, "--signal", "KILL").code == 0


def test_a_background_process_keeps_its_own_timeout_and_limits(cli: Cli, ws: str, home: Path) -> None:
    timed = _detach(cli, ws, "sleep", "60", options=("--timeout", "1"))
    done = cli("wait", ws, timed, "--json")
    assert done.code == 124 and done.json["data"]["timed_out"] is True and done.json["data"]["status"] == "killed"
    # Said as such, with the limit and how to give a longer one (ps said only `killed 124`).
    said = "warden: timed out after 1s; the command and its processes were killed; start it with --timeout"
    assert said in cli("wait", ws, timed).stderr and said in cli("logs", ws, timed).stderr
    assert "timed out" in cli("ps", ws).stdout
    spinner = _detach(cli, ws, "python3", "-c", "while True: pass", options=("--cpu", "1"))
    spun = cli("wait", ws, spinner, "--json", "--timeout", "60")
    assert spun.json["data"]["signal"] in (9, 24), spun.stdout  # SIGXCPU, then SIGKILL at the hard limit
    # A foreground command in the live sandbox has its own limits too, whatever runs beside it.
    beside = _detach(cli, ws, "sleep", "300")
    hog = cli("run", ws, "--memory", "64M", "--", "python3", "-c", "x = bytearray(300 << 20); print('got it')")
    assert hog.code != 0 and "got it" not in hog.stdout
    ok = cli("run", ws, "--", "sh", "-c", "ulimit -t")
    assert ok.stdout.strip() == "300"
    cli("kill", ws, beside, "--signal", "KILL")
    app = bootstrap(home, environ=isolated_environ(home))
    try:
        events = [e for e in app.audit.list(target=ws, limit=500) if e.detail.get("run_id") == timed]
        assert [e.action for e in events] == ["run.start", "run"]
        assert events[0].detail["background"] is True and events[1].detail["timed_out"] is True
    finally:
        app.close()


def test_refusals_exit_126_and_name_what_to_do(cli: Cli, ws: str) -> None:
    assert cli("run", "no-such-ws", "--detach", "--", "true").code == 126
    tty = cli("run", ws, "--detach", "--tty", "--", "sh")
    assert tty.code == 2 and "--detach and --tty" in tty.stderr  # a usage error
    assert cli("logs", ws, "not-an-id").code == 2
    assert cli("logs", ws, "0123456789abcdef").code == 4
    assert cli("ps", "no-such-ws").code == 4
    assert cli("kill", ws, "0123456789abcdef", "--signal", "SEGV").code == 2


def test_a_program_that_cannot_start_in_the_live_sandbox_is_explained(cli: Cli, ws: str, home: Path) -> None:
    """A binary whose loader is not in the sandbox (one built for musl, say) fails in the words of
    the prlimit that starts it there; Warden's line follows, as in a fresh sandbox."""
    _detach(cli, ws, "sleep", "30")  # the next command runs in the live sandbox
    true = Path("/bin/true").read_bytes()
    loader = b"/lib64/ld-linux-x86-64.so.2"
    if loader not in true:
        pytest.skip("not an x86-64 glibc system")
    tool = home / "workspaces" / ws / "tool"
    tool.write_bytes(true.replace(loader, b"/lib64/ld-linux-x86-64.so.9"))  # same length: still an ELF
    tool.chmod(0o755)
    try:
        ran = cli("run", ws, "--", "./tool")
        assert ran.code == 127, ran.stderr
        assert ran.stderr.splitlines()[-1].startswith("warden: ./tool is not in the sandbox"), ran.stderr
    finally:
        tool.unlink()


def test_a_background_program_that_cannot_start_is_explained_by_wait_and_logs(cli: Cli, ws: str) -> None:
    # Its own stderr said only `bwrap: execvp nosuchtool: ...`: `warden run` in the foreground
    # adds Warden's line, and a detached one's `wait` and `logs` now do too.
    missing = _detach(cli, ws, "nosuchtool")
    waited = cli("wait", ws, missing)
    line = "warden: nosuchtool is not in the sandbox"
    assert waited.code == 127 and line in waited.stderr, waited.stderr
    for args in ((), ("--follow",)):
        logs = cli("logs", ws, missing, *args)
        assert logs.code == 0 and logs.stderr.splitlines()[-1].startswith(line), logs.stderr
    # A command that ends 127 by itself gets no such line, nor one that prints the exec's words
    # about another program first: Warden would vouch for the command's own text.
    ended = _detach(cli, ws, "sh", "-c", "exit 127")
    waited = cli("wait", ws, ended)
    assert waited.code == 127 and "warden:" not in waited.stderr, waited.stderr
    # A PATH given that hides a program the sandbox's own PATH has: said so, as a foreground run
    # says it, rather than "not in the sandbox"; a typo gets the nearest name.
    hidden = _detach(cli, ws, "sh", "-c", "true", options=("--env", "PATH=/nowhere"))
    waited = cli("wait", ws, hidden)
    assert waited.code == 127, waited.stderr
    assert "warden: sh is not on the PATH the command was given (PATH=/nowhere)" in waited.stderr, waited.stderr
    typo = _detach(cli, ws, "pyhton", "-V")
    waited = cli("wait", ws, typo)
    assert "warden: pyhton is not in the sandbox: did you mean python" in waited.stderr, waited.stderr
    forged = _detach(cli, ws, "sh", "-c", "echo 'bwrap: execvp nosuchtool: No such file or directory' >&2; exit 127")
    for args in (("wait", ws, forged), ("logs", ws, forged)):
        said = cli(*args)
        assert "warden:" not in said.stderr, said.stderr


def test_a_start_past_the_most_a_live_sandbox_keeps_is_refused_saying_so(cli: Cli, home: Path) -> None:
    """Its supervisor keeps 64 background processes; a 65th was its refusal read as a broken
    sandbox ("answered what Warden does not accept ...; it is stopped", nothing stopped). It is
    refused before that, with the way out, and the 64 and the sandbox go on."""
    assert f"\nMAX_PROCS = {MAX_BACKGROUND} " in supervisor_source()  # the supervisor's own count, kept alike
    assert cli("create", "full", "--template", "minimal").code == 0
    try:
        for _ in range(MAX_BACKGROUND):
            _detach(cli, "full", "sleep", "300")
        refused = cli("run", "full", "--detach", "--", "sleep", "300")
        assert refused.code == 126, refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"warden: the live sandbox of 'full' already runs {MAX_BACKGROUND} background processes, the most one "
            "keeps; `warden ps full` lists them and `warden kill full ID` ends one")
        assert sum(p["status"] == "running" for p in _ps(cli, "full").values()) == MAX_BACKGROUND
        assert cli("run", "full", "--", "echo", "still").stdout == "still\n"
        # Warden's count is the registry's; its supervisor's includes the ended processes it keeps
        # until told to forget them. One whose end a Warden process recorded, killed before it
        # told the supervisor (or unanswered), made the supervisor refuse a start the registry
        # admitted, and that refusal read as a broken sandbox. It is forgotten and the start goes on.
        ended, drifted = sorted(_ps(cli, "full"))[:2]
        pid, start = _host_pid(home, ended)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not alive(pid, start), message="the killed process is still there")
        _record_ended(home, ended)
        started = cli("run", "full", "--detach", "--json", "--", "sleep", "300")
        assert started.code == 0, started.stderr
        assert sum(p["status"] == "running" for p in _ps(cli, "full").values()) == MAX_BACKGROUND
        # A registry that counts one less than run (a row ended while its process runs) is met by
        # the supervisor's refusal, said the same way, and the sandbox goes on.
        _record_ended(home, drifted)
        refused = cli("run", "full", "--detach", "--", "sleep", "300")
        assert refused.code == 126, refused.stderr
        assert refused.stderr.strip().splitlines()[-1].startswith(
            f"warden: the live sandbox of 'full' already runs {MAX_BACKGROUND} background processes"), refused.stderr
        assert cli("run", "full", "--", "echo", "still").stdout == "still\n"
        assert sum(p["status"] == "running" for p in _ps(cli, "full").values()) == MAX_BACKGROUND - 1
    finally:
        cli("destroy", "full", "--yes", "--no-archive")


def test_quick_background_commands_do_not_fill_the_sandbox(cli: Cli, home: Path) -> None:
    """A process counted as running until a Warden process recorded its end (`ps`, `wait`, the
    sweep): 64 quick `run --detach` in a row, nothing looked at, and every start after them was
    refused as if 64 ran. Their ends are recorded when the count is full, and the start goes on."""
    assert cli("create", "quick", "--template", "minimal").code == 0
    try:
        ids = [_detach(cli, "quick", "true") for _ in range(MAX_BACKGROUND)]
        last = _host_pid(home, ids[-1])
        wait_until(lambda: not alive(*last), message="the last quick process is still there")
        started = cli("run", "quick", "--detach", "--json", "--", "sleep", "300")
        assert started.code == 0, started.stdout + started.stderr
        listed = _ps(cli, "quick")
        assert listed[started.json["data"]["id"]]["status"] == "running", listed
        assert not any(listed[i]["status"] == "running" for i in ids if i in listed), listed
    finally:
        cli("destroy", "quick", "--yes", "--no-archive")


def _record_ended(home: Path, process_id: str) -> None:
    """`process_id`'s end recorded in the registry alone, as a Warden process that recorded it and
    was killed before it told the supervisor to forget it."""
    app = bootstrap(home, environ=isolated_environ(home))
    try:
        with app.registry.transaction() as tx:
            assert tx.processes.finish(process_id, status="killed", exit_code=None, signal=9, timed_out=False,
                                       ended_at="2026-01-01T00:00:00+00:00")
    finally:
        app.close()


def test_death_on_destroy(cli: Cli, home: Path) -> None:
    assert cli("create", "doomed", "--template", "minimal").code == 0
    sleeper = _detach(cli, "doomed", "sleep", "300")
    pid, start = _host_pid(home, sleeper)
    assert alive(pid, start)
    assert cli("destroy", "doomed", "--yes", "--no-archive").code == 0
    wait_until(lambda: not alive(pid, start), message="the background process outlived its workspace")
    # The sweep records how it ended (and leaves no live sandbox row behind).
    assert cli("doctor", "--fix").code in (0, 1)
    app = bootstrap(home, environ=isolated_environ(home))
    try:
        with app.registry.transaction(write=False) as tx:
            process = tx.processes.get(sleeper)
            assert tx.sandboxes.of_workspace("doomed") == []
        assert process is not None and process.status == "killed"
    finally:
        app.close()


def test_idle_stop_and_transparent_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cli = Cli({**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "2s"})
    assert cli("create", "idle", "--template", "minimal").code == 0
    try:
        first = _detach(cli, "idle", "true")
        assert cli("wait", "idle", first).code == 0

        def sandboxes() -> list[str]:
            app = bootstrap(home, environ=isolated_environ(home))
            try:
                app.live.sweep()  # what a running server's sweep, or any ps, would find
                with app.registry.transaction(write=False) as tx:
                    return [s.id for s in tx.sandboxes.of_workspace("idle")]
            finally:
                app.close()

        before = sandboxes()
        assert len(before) == 1
        wait_until(lambda: not sandboxes(), timeout=30, message="the idle live sandbox did not stop")
        again = _detach(cli, "idle", "sh", "-c", "echo back")
        assert cli("wait", "idle", again).code == 0
        assert cli("logs", "idle", again).stdout == "back\n"
        after = sandboxes()
        assert len(after) == 1 and after != before
        audit = cli("audit", "--workspace", "idle", "--limit", "100", "--json")
        actions = [e["action"] for e in audit.json["data"]["events"]] if isinstance(audit.json["data"], dict) \
            else [e["action"] for e in audit.json["data"]]
        assert actions.count("sandbox.start") == 2 and actions.count("sandbox.stop") >= 1
    finally:
        cli("destroy", "idle", "--yes", "--no-archive")


def test_a_waited_on_process_s_end_starts_its_sandbox_s_idle_period(tmp_path: Path) -> None:
    """A process running longer than workspace.sandbox_idle, waited on (`warden wait` asks the
    sandbox nothing while it runs): the sweep that recorded its end stopped the sandbox as idle
    at once, the period counted from the process's start, and what it left in /tmp was gone
    for the next command (found by detaching, waiting, then `warden doctor --fix`)."""
    home = tmp_path / "home"
    home.mkdir()
    environ = {**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "4s"}
    cli = Cli(environ)
    assert cli("create", "waited", "--template", "minimal").code == 0
    try:
        folder = home / "workspaces" / "waited"
        job = _detach(cli, "waited", "sh", "-c",
                      "echo kept > /tmp/result; while [ ! -e go ]; do sleep 0.05; done")
        started = time.monotonic()
        wait_until(lambda: time.monotonic() - started > 5, timeout=10, message="")  # past the idle period
        (folder / "go").write_text("")
        assert cli("wait", "waited", job, "--timeout", "30").code == 0
        app = bootstrap(home, environ=environ)
        try:
            assert app.live.sweep() == []  # what a running server's sweep would find: just used
        finally:
            app.close()
        assert cli("run", "waited", "--", "cat", "/tmp/result").stdout == "kept\n"
    finally:
        cli("destroy", "waited", "--yes", "--no-archive")


def test_the_person_and_a_bot_never_share_a_sandbox(cli: Cli, ws: str, home: Path) -> None:
    server = _detach(cli, ws, "python3", "-m", "http.server", "8001", "--bind", "127.0.0.1")
    assert cli("run", ws, "--", "python3", "-c", PROBE, "http://127.0.0.1:8001/").stdout == "200\n"
    assert cli("bot", "register", "intruder").code == 0
    token = cli("grant", ws, "intruder", "--permissions", "read,execute").stdout.strip()
    pid, _ = _host_pid(home, server)
    attack = ("import os, signal\nmine = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
              f"try:\n    os.kill({pid}, signal.SIGKILL); print('killed')\n"
              "except OSError as e:\n    print('no', e.errno)\n"
              # Built at run time: the attacker's own argv must not hold the name it looks for.
              "print(any('http.' + 'server' in open(f'/proc/{p}/cmdline').read() for p in mine))")
    as_bot = cli("run", ws, "--as-token-env", "--", "python3", "-c", attack, env={"WARDEN_TOKEN": token})
    assert as_bot.code == 0, as_bot.stderr
    assert as_bot.stdout.splitlines() == ["no 3", "False"]  # ESRCH: not in its pid namespace
    unreached = cli("run", ws, "--as-token-env", "--", "python3", "-c", PROBE.replace("150", "10"),
                    "http://127.0.0.1:8001/", env={"WARDEN_TOKEN": token})
    assert unreached.stdout == "unreachable\n"
    assert _ps(cli, ws)[server]["status"] == "running"
    cli("kill", ws, server)
    assert json.loads(cli("wait", ws, server, "--json").stdout)["data"]["status"] == "killed"
    # The bot's commands ran in its own live sandbox, which its grant's end stops (while it stood,
    # a new .git in the workspace could have been the bot's: see the test below).
    assert cli("revoke", ws, "intruder").code == 0
    assert os.path.isdir(home / "run")
    assert (home / "run").stat().st_mode & 0o077 == 0  # the sockets' folder is Warden's alone


NO_PROXY_PROBE = PROBE.replace(  # straight to 127.0.0.1, never through a sandbox's proxy
    "urllib.request.urlopen(sys.argv[1], timeout=2)",
    "urllib.request.build_opener(urllib.request.ProxyHandler({})).open(sys.argv[1], timeout=2)")


@pytest.fixture
def upstream() -> Iterator[int]:
    """A web server of the host on a loopback port: what an allowed domain stands for here."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join(5)


def test_a_command_without_network_never_reaches_a_networked_process(cli: Cli, ws: str, upstream: int) -> None:
    allow = ("--net", "allow", "--allow-domain", f"127.0.0.1:{upstream}")
    fetch = f"import urllib.request; print('upstream', urllib.request.urlopen('http://127.0.0.1:{upstream}/').status)"
    server = _detach(cli, ws, "sh", "-c", f'python3 -c "{fetch}" && exec python3 -m http.server 8010 --bind 127.0.0.1',
                     options=allow)
    wait_until(lambda: "upstream 200" in cli("logs", ws, server).stdout, timeout=30,
               message="the networked process did not reach its allowed domain")
    # The same principal with the same network policy shares its sandbox (and reaches it) …
    same = cli("run", ws, *allow, "--", "python3", "-c", NO_PROXY_PROBE, "http://127.0.0.1:8010/")
    assert same.stdout == "200\n", same.stderr
    # … a command without network, or with another policy, runs elsewhere and never reaches it.
    for options in ((), ("--net", "allow", "--allow-domain", "127.0.0.1:1")):
        other = cli("run", ws, *options, "--", "python3", "-c", NO_PROXY_PROBE.replace("150", "10"),
                    "http://127.0.0.1:8010/")
        assert other.stdout == "unreachable\n", other.stderr
    # The proxy of a live sandbox holds like a fresh one's: another host is refused, and audited.
    refused = _detach(cli, ws, "python3", "-c", "import urllib.request; urllib.request.urlopen('http://example.org/')",
                      options=allow)
    assert cli("wait", ws, refused).code == 1
    audit = cli("audit", "--workspace", ws, "--limit", "200", "--json").stdout
    assert '"network.refused"' in audit and "example.org" in audit
    cli("kill", ws, server)
    assert cli("wait", ws, server).code == 143


def test_the_persons_repository_is_theirs_while_their_server_runs(cli: Cli, ws: str, home: Path) -> None:
    # With a live sandbox up, any new .git was taken for a bot's and moved aside, even when the
    # only sandbox was the person's own.
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    import subprocess

    server = _detach(cli, ws, "sleep", "300")
    folder = home / "workspaces" / ws / "mine"
    try:
        folder.mkdir()
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
        ran = cli("run", ws, "--", "true")
        assert ran.code == 0 and "quarantine" not in ran.stderr, ran.stderr
        assert (folder / ".git").is_dir() and not list(folder.glob(".git.warden-quarantined-*"))
    finally:
        cli("kill", ws, server, "--signal", "KILL")
        shutil.rmtree(folder, ignore_errors=True)


def test_suspend_counts_the_commands_it_stopped_not_the_sandbox_around_them(cli: Cli) -> None:
    assert cli("create", "susp", "--template", "minimal").code == 0
    try:
        _detach(cli, "susp", "sleep", "300")  # in the live sandbox: bwrap, its pid 1, the supervisor, sleep
        suspended = cli("suspend", "susp", "--json")
        assert suspended.code == 0, suspended.stderr
        assert len(suspended.json["data"]["stopped"]) == 1, suspended.json
        assert cli("resume", "susp").code == 0
        _detach(cli, "susp", "sleep", "300")
        assert cli("suspend", "susp").stdout.strip() == "suspended susp (stopped 1 process)"
    finally:
        cli("destroy", "susp", "--yes", "--no-archive")


def test_commands_in_a_live_sandbox_start_through_wardens_launcher_with_their_own_limits(tmp_path: Path) -> None:
    """Warden from a venv whose libexec holds the launcher scripts/setup builds (here a copy that
    notes each start it makes): each `warden run` in the live sandbox starts through it, sealed
    in, with that command's own limits in place; `warden doctor` names it."""
    home = tmp_path / "home"
    home.mkdir()
    workspace = home / "workspaces" / "fast"
    note = workspace / ".launcher-starts"
    prefix = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120)
    site = Path(subprocess.run([prefix / "bin" / "python", "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # This venv's Python imports Warden and its dependencies from the test's own venv.
    (site / "warden-tests.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    launcher = build_launcher(prefix / "libexec" / "warden-rlimit-exec", noting_source(note))

    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(prefix / "bin" / "python"), "-m", "warden", *args], capture_output=True, text=True,
                              env={**isolated_environ(home), "WARDEN_WORKSPACE_SANDBOX_IDLE": "60s", **(env or {})},
                              timeout=120, check=False)

    doctor = cli("doctor")
    assert f"commands start through Warden's sealed launcher ({launcher})" in doctor.stdout, doctor.stdout
    assert cli("create", "fast", "--template", "minimal").returncode == 0
    try:
        detached = cli("run", "fast", "--detach", "--", "sleep", "60")  # the next commands run in its live sandbox
        assert detached.returncode == 0, detached.stderr
        note.unlink(missing_ok=True)  # the build's own check that it runs
        show = "ulimit -t; ulimit -Ht; ulimit -n; ulimit -Hn; grep 'Max file size' /proc/self/limits"
        first = cli("run", "fast", "--cpu", "7", "--", "sh", "-c", show)
        second = cli("run", "fast", "--cpu", "3", "--", "sh", "-c", show, env={"WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "2"})
        assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
        assert first.stdout.splitlines()[:4] == ["7", "8", "1024", "1024"], first.stdout
        assert second.stdout.splitlines()[:4] == ["3", "4", "1024", "1024"], second.stdout
        assert second.stdout.split()[-3:] == ["2097152", "2097152", "bytes"], second.stdout
        assert first.stdout.split()[-3] != "2097152", first.stdout
        # The loader's variables are nothing to it (it has none): such a command starts through it too.
        preloaded = cli("run", "fast", "--env", "LD_BIND_NOW=1", "--", "sh", "-c", "echo $LD_BIND_NOW")
        assert (preloaded.returncode, preloaded.stdout) == (0, "1\n"), preloaded.stderr
        assert note.read_text() == "started\n" * 3
        # A binary whose loader is not in the sandbox: the launcher's words, then Warden's line.
        true, loader = Path("/bin/true").read_bytes(), b"/lib64/ld-linux-x86-64.so.2"
        if loader in true:
            tool = workspace / "tool"
            tool.write_bytes(true.replace(loader, b"/lib64/ld-linux-x86-64.so.9"))  # same length: still an ELF
            tool.chmod(0o755)
            missing = cli("run", "fast", "--", "./tool")
            assert missing.returncode == 127, missing.stderr
            assert missing.stderr.splitlines() == [
                "warden-rlimit-exec: failed to execute ./tool: No such file or directory",
                "warden: ./tool is not in the sandbox (it sees /usr, /bin and the workspace's .venv/bin and "
                "node_modules/.bin); `warden install` adds Python or Node packages"], missing.stderr
            assert note.read_text() == "started\n" * 4
    finally:
        cli("destroy", "fast", "--yes", "--no-archive")


def test_a_command_that_cannot_start_exits_alike_in_a_fresh_and_a_live_sandbox(cli: Cli, ws: str, home: Path) -> None:
    """A link loop cannot run (126, as the live sandbox's launcher and forked commands say); an
    empty command name is not found (127), with bwrap's words, in both."""
    folder = home / "workspaces" / ws
    (folder / "loop1").symlink_to("loop2")
    (folder / "loop2").symlink_to("loop1")
    try:
        fresh = {name: cli("run", ws, "--", name) for name in ("./loop1", "")}
        _detach(cli, ws, "sleep", "30")  # the next commands run in the live sandbox
        live = {name: cli("run", ws, "--", name) for name in ("./loop1", "")}
        for name, code in (("./loop1", 126), ("", 127)):
            assert (fresh[name].code, live[name].code) == (code, code), (fresh[name].stderr, live[name].stderr)
            assert fresh[name].stderr == live[name].stderr and fresh[name].stderr.startswith(f"bwrap: execvp {name}:")
    finally:
        (folder / "loop1").unlink()
        (folder / "loop2").unlink()


def test_a_workspace_folder_replaced_under_its_live_sandbox_gets_a_fresh_one(cli: Cli, tmp_path: Path) -> None:
    """The folder moved away (a person's backup, say) and another put in its place: the live
    sandbox still held the old one, so the next command wrote into the moved-away copy, outside
    the workspace, and said nothing (exit 0). Deleted and made again, the command found no
    folder at all. The next command now stops that sandbox and runs in a fresh one."""
    made = cli("create", "moved", "--template", "minimal", "--json")
    assert made.code == 0, made.stderr
    folder = Path(made.json["data"]["path"])
    try:
        first = _detach(cli, "moved", "sleep", "600")
        old = tmp_path / "moved-away"
        folder.rename(old)
        shutil.copytree(old, folder, symlinks=True)
        wrote = cli("run", "moved", "--", "sh", "-c", "echo here > written.txt")
        assert wrote.code == 0, wrote.stdout + wrote.stderr
        assert (folder / "written.txt").read_text() == "here\n"
        assert not (old / "written.txt").exists()
        assert _ps(cli, "moved")[first]["status"] == "killed"
        events = cli("audit", "--workspace", "moved", "--json", "--limit", "20").json["data"]
        stops = [e for e in events if e["action"] == "sandbox.stop"]
        assert stops and "replaced" in json.dumps(stops[-1]["detail"]), stops
    finally:
        cli("destroy", "moved", "--yes", "--no-archive")


def _shortest_unique_start(process_id: str, others: list[str]) -> str:
    return next(process_id[:n] for n in range(1, 17) if not any(o.startswith(process_id[:n]) for o in others))


def test_a_process_is_named_by_the_start_of_its_id_as_docker_names_a_container(cli: Cli, ws: str) -> None:
    """`warden logs ws 9d3b`: the whole id was required. A unique start names its process in logs,
    kill and wait (answered with the whole id); one several ids begin is one line naming them,
    exit 2, acting on none; one none begins is not found."""
    ids: list[str] = []
    pair: list[str] = []
    while len(pair) < 2:  # until two ids share a first digit: 17 at most
        ids.append(_detach(cli, ws, "sleep", "300"))
        pair = [i for i in ids if i[0] == ids[-1][0]]
    try:
        # The workspace's other processes (earlier tests' ones, ended ones it still lists) are
        # named by starts too: the starts below are told apart from all of them.
        _named_by_their_start(cli, ws, sorted(set(ids) | set(_ps(cli, ws))), pair[0], pair[1])
    finally:
        for other in ids:
            cli("kill", ws, other, "--signal", "KILL")


def _named_by_their_start(cli: Cli, ws: str, ids: list[str], first: str, second: str) -> None:
    common = next(first[:n] for n in range(16, 0, -1) if second.startswith(first[:n]))
    # The line names five of the ids that begin so, and how many more: with the module's other
    # processes one first digit may begin six (CI met it), the pair then not both among the five.
    begun = [i for i in ids if i.startswith(common)]
    for command in ("logs", "kill", "wait"):
        ambiguous = cli(command, ws, common)
        assert ambiguous.code == 2 and len(ambiguous.stderr.splitlines()) == 1, ambiguous.stderr
        assert "ambiguous" in ambiguous.stderr
        named = [i for i in begun if i in ambiguous.stderr]
        if len(begun) <= 5:
            assert first in named and second in named, ambiguous.stderr
        else:
            assert len(named) == 5 and f"and {len(begun) - 5} more" in ambiguous.stderr, ambiguous.stderr
    assert _ps(cli, ws)[first]["status"] == _ps(cli, ws)[second]["status"] == "running"  # neither touched
    start = _shortest_unique_start(first, [i for i in ids if i != first])
    logs = cli("logs", ws, start, "--json")
    assert logs.code == 0 and logs.json["data"]["id"] == first, logs.stdout + logs.stderr
    killed = cli("kill", ws, start, "--signal", "KILL")
    assert killed.code == 0 and killed.stdout.startswith(f"{first} killed"), killed.stdout + killed.stderr
    waited = cli("wait", ws, start, "--json")
    assert waited.code == 137 and waited.json["data"]["id"] == first
    assert _ps(cli, ws)[second]["status"] == "running"
    absent = next(a + b for a in "0123456789abcdef" for b in "0123456789abcdef"
                  if not any(i.startswith(a + b) for i in ids))
    assert cli("logs", ws, absent).code == 4  # not found
    assert cli("logs", ws, "xyz").code == 2  # not an id's start at all


def test_a_server_stopped_by_a_policy_change_says_why_in_ps(cli: Cli, tmp_path: Path) -> None:
    """A newcomer allowed a folder (`sandbox add … --workspace`) while a dev server ran: the next
    command stopped the live sandbox (it no longer mounts what the policy says) and `ps` showed
    only "killed 137", the reason in the audit log alone."""
    assert cli("create", "policed", "--template", "minimal").code == 0
    try:
        server = _detach(cli, "policed", "sleep", "600")
        extra = tmp_path / "extra"
        extra.mkdir()
        assert cli("sandbox", "add", str(extra), "--workspace", "policed").code == 0
        assert cli("run", "policed", "--", "true").code == 0  # the sandbox is stopped for this one
        seen = _ps(cli, "policed")[server]
        assert seen["status"] == "killed" and "policy" in seen["stopped_by"], seen
        shown = cli("ps", "policed").stdout
        assert f"{server} was killed: " in shown and "policy" in shown, shown
        again = _detach(cli, "policed", "sleep", "600")
        assert "stopped_by" not in _ps(cli, "policed")[again]  # a running one has no such line
    finally:
        cli("destroy", "policed", "--yes", "--no-archive")


def test_ps_says_whose_each_process_is(cli: Cli) -> None:
    """The person's `ps` lists a bot's background processes beside their own: which is whose (the
    name `warden forward --as` takes) was not shown."""
    assert cli("create", "shared", "--template", "minimal").code == 0
    try:
        assert cli("bot", "register", "lister").code == 0
        token = cli("grant", "shared", "lister", "--permissions", "read,execute").stdout.strip()
        mine = _detach(cli, "shared", "sleep", "600")
        started = cli("run", "shared", "--as-token-env", "--detach", "--json", "--", "sleep", "601",
                      env={"WARDEN_TOKEN": token})
        assert started.code == 0, started.stderr
        theirs = started.json["data"]["id"]
        listed = _ps(cli, "shared")
        assert (listed[mine]["by"], listed[theirs]["by"]) == ("you", "bot lister")
        lines = cli("ps", "shared").stdout.splitlines()
        assert lines[0].split() == ["ID", "STATUS", "EXIT", "CPU", "STARTED", "BY", "COMMAND"]
        assert any(line.startswith(theirs) and " bot lister " in line for line in lines), lines
    finally:
        cli("destroy", "shared", "--yes", "--no-archive")


# A bot's background process printing to whoever reads its logs: an OSC 52 (the clipboard of
# the person's terminal), a line rewritten by `\x1b[2K\r`, a title; and text with a tab and a
# character split across its two writes.
_HOSTILE_OUTPUT = ("import sys, time\n"
                   "sys.stdout.buffer.write(b'\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b]0;title\\x07one\\ttwo \\xc3')\n"
                   "sys.stdout.flush(); time.sleep(0.3)\n"
                   "sys.stdout.buffer.write(b'\\xa9\\n\\x1b[2K\\rall good\\n'); sys.stdout.flush()\n"
                   "sys.stderr.write('\\x1b[31merr\\n')\n")


def test_a_bots_process_output_reaches_the_persons_terminal_escaped(cli: Cli, ws: str) -> None:
    """`warden logs` wrote a bot's process output to the person's terminal byte for byte: its
    escape sequences set their clipboard and forged lines. On a terminal it is escaped now (line
    breaks and tabs kept), whole or followed; through a pipe it stays byte for byte."""
    import pty

    assert cli("bot", "register", "printer").code == 0
    token = cli("grant", ws, "printer", "--permissions", "read,execute").stdout.strip()
    started = cli("run", ws, "--as-token-env", "--detach", "--json", "--", "python3", "-c", _HOSTILE_OUTPUT,
                  env={"WARDEN_TOKEN": token})
    assert started.code == 0, started.stderr
    job = started.json["data"]["id"]
    assert cli("wait", ws, job).code == 0
    piped = cli("logs", ws, job)
    assert piped.stdout.startswith("\x1b]52;c;") and piped.stderr == "\x1b[31merr\n"
    for follow in ((), ("--follow",)):
        leader, follower = pty.openpty()
        try:
            proc = subprocess.run([sys.executable, "-m", "warden", "logs", ws, job, *follow], stdin=subprocess.DEVNULL,
                                  stdout=follower, stderr=follower, env=cli.environ, timeout=120, check=False)
            os.close(follower)
            follower = -1
            shown = b""
            with contextlib.suppress(OSError):  # EIO once all is read
                while chunk := os.read(leader, 65536):
                    shown += chunk
        finally:
            os.close(leader)
            if follower >= 0:
                os.close(follower)
        assert proc.returncode == 0, shown
        text = shown.decode()
        assert "\x1b" not in text and "\x07" not in text, text
        assert "\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b]0;title\\x07one\ttwo é\r\n\\x1b[2K\\rall good\r\n" in text, text
        assert "\\x1b[31merr" in text, text


def test_a_denied_file_an_editor_saves_over_is_never_read_by_the_bots_later_commands(cli: Cli) -> None:
    """A deny of a workspace file masks it with a mount; an editor's save (a new file renamed over
    the old) made the kernel drop that mount in the running live sandbox, and every later command
    in it (a background reader too) read the new content until the sandbox stopped when idle."""
    assert cli("create", "edited", "--template", "minimal").code == 0
    try:
        folder = Path(cli("list", "--json").json["data"][0]["path"]).parent / "edited"
        secret = folder / "secret.txt"
        secret.write_text("old")
        assert cli("sandbox", "remove", str(secret), "--workspace", "edited").code == 0
        reader = _detach(cli, "edited", "sh", "-c", "while sleep 0.05; do cat secret.txt; done 2>/dev/null")
        new = folder / "secret.new"
        new.write_text("SAVED-BY-THE-EDITOR")
        new.rename(secret)
        # The background reader is stopped by the CLI's daemon within about a second, no command asked.
        wait_until(lambda: _ps(cli, "edited")[reader]["status"] == "killed", timeout=30,
                   message="the reader of the saved-over file ran on")
        assert "changed on the host" in str(_ps(cli, "edited")[reader]["stopped_by"])
        again = cli("run", "edited", "--", "cat", "secret.txt")
        assert again.code != 0 and "SAVED-BY-THE-EDITOR" not in again.stdout
        (folder / "later.txt").write_text("the person's own")  # denied before it existed
        assert cli("sandbox", "remove", str(folder / "later.txt"), "--workspace", "edited").code == 0
        assert cli("run", "edited", "--", "true").code == 0
        (folder / "later.txt").unlink()
        assert cli("run", "edited", "--", "true").code == 0  # the sandbox that hides nothing there
        (folder / "later.txt").write_text("made while it runs")
        late = cli("run", "edited", "--", "cat", "later.txt")
        assert late.code != 0 and "made while it runs" not in late.stdout
        assert cli("audit", "verify").code == 0
    finally:
        cli("destroy", "edited", "--yes", "--no-archive")
