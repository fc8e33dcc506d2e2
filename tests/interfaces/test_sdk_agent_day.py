"""What an agent meets in a day through the SDK and a real `warden serve` (issue #11): a long
command without a timeout of its own, one whose client gave up, a background process that floods
its output while it is followed (the SDK, and `warden logs --follow` beside it), and what its logs
dropped."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.client import Client, RemoteWorkspace
from warden.core.errors import Unavailable

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

FLOOD = ["sh", "-c", "yes flood"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("agent-day")
    # Every piece of a followed process's output is sent, so the pace is the reader's.
    environ = {**warden_environ(tmp / "home"), "WARDEN_API_MAX_OUTPUT": "64M"}
    cli_out(environ, "init")
    cli_out(environ, "create", "day", "--template", "minimal")
    cli_out(environ, "bot", "register", "agent")
    token = cli_out(environ, "grant", "day", "agent", "--permissions", "read,write,execute")
    with ServeProcess(environ, tmp) as server:
        yield {"url": server.url, "token": token, "environ": environ, "folder": tmp / "home" / "workspaces" / "day"}


def _workspace(served: dict[str, Any], **options: Any) -> RemoteWorkspace:
    return Client(served["url"], served["token"], **options).workspace("day")


def test_a_command_without_a_timeout_runs_past_the_clients_own(served: dict[str, Any]) -> None:
    # The client's timeout is for calls; a command may run as long as the server lets it
    # (sandbox.timeout, 10 minutes). The SDK gave up 30 s past the client's timeout, while the
    # command ran on and its output was lost.
    ws = _workspace(served, timeout=1.0)
    started = time.monotonic()
    result = ws.run(["sh", "-c", "sleep 32; echo built"])
    assert (result.exit_code, result.stdout) == (0, "built\n")
    assert time.monotonic() - started >= 32


def test_a_command_whose_client_gave_up_is_killed(served: dict[str, Any]) -> None:
    # As a streamed exec's is: abandoned, a plain exec's command ran on to its timeout (10 minutes
    # by default) holding an exec slot, and a client that retried after its own timeout had two.
    folder = served["folder"]
    (folder / "after").unlink(missing_ok=True)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{served['url']}/v1/workspaces/day/exec", timeout=1.0,
                   headers={"Authorization": f"Bearer {served['token']}"},
                   json={"cmd": ["sh", "-c", "sleep 4; touch after"]})
    time.sleep(6)
    assert not (folder / "after").exists()
    assert _workspace(served).run(["sh", "-c", "sleep 1; touch after"]).exit_code == 0  # waited for: it runs
    assert (folder / "after").exists()


def test_a_follower_that_falls_behind_a_flood_is_told_so(served: dict[str, Any]) -> None:
    ws = _workspace(served)
    flood = ws.run(FLOOD, background=True)
    try:
        events = flood.follow()
        assert next(events).type == "stdout"
        time.sleep(3)  # not reading: the supervisor lets this follower go past 16 MiB behind
        with pytest.raises(Unavailable, match=f"stopped following process {flood.id}, which still runs"):
            for _ in events:
                pass
        assert flood.info().running
    finally:
        flood.kill("KILL")


def test_warden_logs_follow_that_falls_behind_fails_saying_so(served: dict[str, Any]) -> None:
    environ = served["environ"]
    process_id = cli_out(environ, "run", "day", "--detach", "--", *FLOOD)
    try:
        follower = subprocess.Popen([sys.executable, "-m", "warden", "logs", "day", process_id, "--follow"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ)
        time.sleep(3)  # its stdout not read: it stops reading the supervisor, which lets it go
        out, err = follower.communicate(timeout=120)
        assert out
        assert follower.returncode == 1, err.decode()
        assert f"stopped following process {process_id}, which still runs" in err.decode()
    finally:
        cli_out(environ, "kill", "day", process_id, "--signal", "KILL")


def test_logs_say_what_was_dropped_after_the_process_ended(served: dict[str, Any]) -> None:
    # A ring of 1 MiB per stream keeps the newest output; once the process ended its logs said
    # nothing had been dropped.
    ws = _workspace(served)
    chatty = ws.run(["python3", "-c", "import sys; sys.stdout.write('x' * (3 << 19))"], background=True)
    assert chatty.wait(timeout=60).exit_code == 0
    logs = chatty.logs()
    assert (len(logs.stdout), logs.dropped_stdout, logs.dropped_stderr) == (1 << 20, 1 << 19, 0)
