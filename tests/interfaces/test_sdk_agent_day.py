"""What an agent meets in a day through the SDK and a real `warden serve` (issue #11): a long
command without a timeout of its own."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.client import Client, RemoteWorkspace

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("agent-day")
    environ = warden_environ(tmp / "home")
    cli_out(environ, "init")
    cli_out(environ, "create", "day", "--template", "minimal")
    cli_out(environ, "bot", "register", "agent")
    token = cli_out(environ, "grant", "day", "agent", "--permissions", "read,write,execute")
    with ServeProcess(environ, tmp) as server:
        yield {"url": server.url, "token": token, "environ": environ}


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
