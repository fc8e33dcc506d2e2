"""The home's daemon and long `warden run`s as instances of their node (services/instances.py),
through the real CLI: the daemon registers and beats from its own loop; killed with -9, the
janitor's pass finds it dead and stops the live sandboxes its children started. A `warden run` in
its own process registers once it has run one heartbeat interval; killed, its lease is released
and its run marked lost."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import poll, wait_until

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WARDEN = [sys.executable, "-m", "warden"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("instances-home") / "warden-home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TZ", "TMPDIR"}}
    environ = {**keep, "HOME": str(home.parent), "WARDEN_HOME": str(home), "WARDEN_DAEMON_IDLE": "120",
               "WARDEN_TERMINAL": "term-1", "WARDEN_NODE": "node-i",
               # Short, so the tests see beats; the window stays long: death here is by pid.
               "WARDEN_NODE_HEARTBEAT_INTERVAL": "1s"}
    created = subprocess.run([*WARDEN, "create", "iw", "--json"], env=environ, capture_output=True, timeout=120,
                             check=False)
    assert created.returncode == 0, created.stderr
    yield environ
    for instance in instances(environ):
        if instance["kind"] == "daemon":
            with contextlib.suppress(OSError):
                os.kill(instance["pid"], signal.SIGTERM)


def warden(env: dict[str, str], *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # stdin not a terminal: a `warden run` goes through the home's daemon (unless WARDEN_DAEMON=0).
    return subprocess.run([*WARDEN, *args], env={**env, **(extra or {})}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)


def data(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["data"]


def instances(env: dict[str, str]) -> list[dict[str, Any]]:
    return list(data(warden(env, "nodes", "--instances", "--json")))


def daemon_of(env: dict[str, str]) -> dict[str, Any]:
    """The daemon's instance, once the first run has started the daemon and it registered."""
    warden(env, "run", "iw", "--", "true")

    def registered() -> list[dict[str, Any]]:
        return [i for i in instances(env) if i["kind"] == "daemon"]

    found = wait_until(registered, timeout=30, message="the daemon did not register")
    assert len(found) == 1
    return found[0]


def events(env: dict[str, str]) -> list[dict[str, Any]]:
    return list(data(warden(env, "audit", "--limit", "100", "--json")))


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_daemon_registers_beats_and_killed_is_released_by_the_janitor(env: dict[str, str]) -> None:
    daemon = daemon_of(env)
    assert daemon["node"] == "node-i" and daemon["url"] is None
    assert b"warden.interfaces.cli.daemon" in cmdline(daemon["pid"])  # the row is the daemon's own pid
    # Its heartbeat moves on (interval 1 s) while it sits idle.
    wait_until(lambda: any(i["id"] == daemon["id"] and i["heartbeat_at"] > daemon["heartbeat_at"]
                           for i in instances(env)), timeout=10, message="the daemon's heartbeat did not move")
    shown = data(warden(env, "nodes", "--json"))
    assert shown["node"] == "node-i" and [n["node"] for n in shown["nodes"] if n["live"]] == ["node-i"]

    # A background process started through the daemon: its live sandbox is the daemon's.
    started = data(warden(env, "run", "iw", "--detach", "--json", "--", "sleep", "300"))
    assert [p["status"] for p in data(warden(env, "ps", "iw", "--json")) if p["id"] == started["id"]] == ["running"]

    os.kill(daemon["pid"], signal.SIGKILL)
    wait_until(lambda: not cmdline(daemon["pid"]), timeout=10, message="the daemon did not die")
    report = data(warden(env, "janitor", "--once", "--json"))
    assert report["instances_dead"] == [daemon["id"]]
    assert all(i["id"] != daemon["id"] for i in instances(env))
    dead = [e for e in events(env) if e["action"] == "instance.dead" and e["detail"].get("id") == daemon["id"]]
    assert dead and dead[0]["detail"]["kind"] == "daemon"
    ps = {p["id"]: p for p in data(warden(env, "ps", "iw", "--json"))}
    assert ps[started["id"]]["status"] != "running", "the dead daemon's live sandbox was not stopped"
    # A second pass finds nothing more.
    assert data(warden(env, "janitor", "--once", "--json"))["instances_dead"] == []


def test_a_clean_end_unregisters_the_daemon(env: dict[str, str]) -> None:
    daemon = daemon_of(env)
    os.kill(daemon["pid"], signal.SIGTERM)
    wait_until(lambda: not cmdline(daemon["pid"]), timeout=20, message="the daemon did not end")
    assert all(i["id"] != daemon["id"] for i in instances(env))


def test_a_long_run_in_its_own_process_registers_and_killed_is_released(env: dict[str, str]) -> None:
    alone = {"WARDEN_DAEMON": "0"}
    proc = subprocess.Popen([*WARDEN, "run", "iw", "--", "sleep", "300"], env={**env, **alone},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def mine() -> list[dict[str, Any]]:
            return [i for i in instances(env) if i["pid"] == proc.pid]

        found = wait_until(mine, timeout=30, message="the long run did not register")
        # Its own pid, as a command of this node; not its terminal's (the terminal outlives it).
        assert found[0]["kind"] == "command" and found[0]["terminal"] is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    report = data(warden(env, "janitor", "--once", "--json"))
    assert found[0]["id"] in report["instances_dead"]
    dead = [e for e in events(env) if e["action"] == "instance.dead" and e["detail"].get("id") == found[0]["id"]]
    assert dead and dead[0]["detail"]["leases_released"] == ["iw"] and len(dead[0]["detail"]["runs_lost"]) == 1
    assert any(e["action"] == "run.lost" and e["target"] == "iw" for e in events(env))
    # The workspace is free again: a change that needs it alone goes through.
    assert warden(env, "run", "iw", "--", "true", extra=alone).returncode == 0


def test_a_run_that_ends_cleanly_leaves_no_instance(env: dict[str, str]) -> None:
    alone = {"WARDEN_DAEMON": "0"}
    # Longer than the interval (registered), then a clean end (unregistered).
    assert warden(env, "run", "iw", "--", "sleep", "2.5", extra=alone).returncode == 0
    assert poll(lambda: [i for i in instances(env) if i["kind"] == "command"], timeout=2, want=False) == []
