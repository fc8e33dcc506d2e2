"""`warden serve` stopped by a signal, for real: SIGTERM (a supervisor's stop) and SIGHUP (its
terminal closed) end it gracefully, its stop audited and its status 128 + the signal."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_ends_the_server_gracefully(tmp_path: Path, how: signal.Signals) -> None:
    # A SIGHUP used to raise the CLI's Terminated inside uvloop's signal callback, which logged
    # it with a traceback and served on; SIGTERM was passed over from then on.
    environ = warden_environ(tmp_path / "home")
    cli_out(environ, "init")
    with ServeProcess(environ, tmp_path) as server:
        assert server.proc is not None
        server.proc.send_signal(how)
        try:
            status = server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail(f"warden serve still serves after {how.name}: {server.output().decode(errors='replace')}")
        said = server.output()
    assert status == 128 + how, said
    assert b"Traceback" not in said and b"Terminated" not in said, said
    events = json.loads(cli_out(environ, "audit", "--limit", "5", "--json"))["data"]
    assert max(events, key=lambda e: e["seq"])["action"] == "serve.stop", events
