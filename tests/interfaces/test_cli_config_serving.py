"""`warden config set` says when a running `warden serve` of the home keeps its old settings.

A server reads the settings once, as it starts; each CLI command reads them again. A person who
set `sandbox.allowed_commands` while the API served bots saw "sandbox.allowed_commands = echo"
and believed it in force, while the bots' commands ran under the old list until a restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.servers import served_home


def _set(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden", "config", "set", *args], env=environ,
                          capture_output=True, text=True, timeout=120, check=False)


def test_set_names_the_running_server_to_restart_and_only_while_it_runs(tmp_path: Path) -> None:
    with served_home(tmp_path) as served:
        done = _set(served.environ, "sandbox.pids", "96")
        assert done.returncode == 0, done.stderr
        pid = served.proc.pid if served.proc is not None else -1
        assert f"`warden serve` (pid {pid}) keeps the settings it started with" in done.stdout
        assert "restart it" in done.stdout
        as_json = _set(served.environ, "sandbox.pids", "97", "--json")
        restart = json.loads(as_json.stdout)["data"]["restart"]
        assert restart == [{"pid": pid, "url": served.url}]
        environ = served.environ
    # The server stopped: nothing to restart, nothing said.
    after = _set(environ, "sandbox.pids", "98")
    assert after.returncode == 0 and "warden serve" not in after.stdout, after.stdout
    assert "restart" not in json.loads(_set(environ, "sandbox.pids", "99", "--json").stdout)["data"]


def test_set_without_a_server_says_only_the_value(tmp_path: Path) -> None:
    from tests.support.servers import warden_environ

    environ = warden_environ(tmp_path / "home")
    subprocess.run([sys.executable, "-m", "warden", "init"], env=environ, capture_output=True, timeout=120, check=True)
    done = _set(environ, "sandbox.pids", "96")
    assert done.returncode == 0 and done.stdout == "sandbox.pids = 96\n", done.stdout
