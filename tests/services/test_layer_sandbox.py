"""A template dependency that runs code while it is built (an sdist) runs it in the sandbox.

The sdist's build backend attacks from inside `warden snapshot build`: it writes and reads
host files, lists Warden's keys, looks for a secret in the environment and connects to a
server on the host's loopback. Each result is baked into the wheel it builds, so the test
reads what the build saw from the finished layer; run on the host, every attempt succeeds.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.envs import PYTHON
from tests.support.packages import make_sdist

BUILD = r"""
import os, socket
seen = {}
def attempt(label, fn):
    try:
        seen[label] = fn()
    except OSError as exc:
        seen[label] = "refused: " + (exc.strerror or type(exc).__name__)
def write_mark():
    with open(HOST_MARK, "w") as f:
        f.write("built on the host")
    return "written"
def read_secret():
    with open(HOST_SECRET) as f:
        return f.read()
def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=2)
    s.close()
    return "connected"
attempt("host_write", write_mark)
attempt("host_read", read_secret)
attempt("warden_keys", lambda: sorted(os.listdir(WARDEN_KEYS)))
attempt("loopback", connect)
seen["env_secret"] = os.environ.get("WARDEN_TEST_SECRET")
seen["home"] = os.environ.get("HOME")
return seen
"""

TEMPLATE = f"""\
name: buildtime
description: "an sdist that attacks while it is built"
python:
  version: "{PYTHON}"
  dependencies:
    - evil
"""


def test_sdist_build_code_runs_in_the_sandbox(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path / "home"
    (home / "templates").mkdir(parents=True)
    (home / "templates" / "buildtime.yaml").write_text(TEMPLATE)
    keys = home / "keys"
    keys.mkdir()
    (keys / "master.key").write_text("not for builds")
    # A folder beside the test's own: not a parent of the build folder, so not even its name
    # exists inside the sandbox (the build folder's parents do, as empty mount points).
    outside = tmp_path_factory.mktemp("outside")
    secret = outside / "secret.txt"
    secret.write_text("host secret")
    mark = outside / "built-on-host"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    code = (BUILD.replace("HOST_MARK", repr(str(mark))).replace("HOST_SECRET", repr(str(secret)))
            .replace("WARDEN_KEYS", repr(str(keys))).replace("PORT", str(port)))
    make_sdist(tmp_path / "wheels", "evil", "1.0", code)
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG", "TERM", "PYENV_ROOT"}}
    env.update({"HOME": str(tmp_path), "WARDEN_HOME": str(home), "WARDEN_TEST_SECRET": "s3cret",
                "WARDEN_ENVS_FIND_LINKS": str(tmp_path / "wheels"), "WARDEN_ENVS_NO_INDEX": "1"})
    try:
        proc = subprocess.run([sys.executable, "-m", "warden", "snapshot", "build", "buildtime", "--json"],
                              capture_output=True, text=True, env=env, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        try:
            accepted = listener.accept()[0]
            accepted.close()
            reached = True
        except TimeoutError:
            reached = False
    finally:
        listener.close()
    assert json.loads(proc.stdout)["ok"] is True
    [init] = home.glob("layers/*/venv/lib/python*/site-packages/evil/__init__.py")
    seen = ast.literal_eval(init.read_text().split("=", 1)[1].strip())

    assert not mark.exists(), "the build wrote a host file"
    assert not reached, "the build reached a server on the host's loopback"
    assert seen["host_write"].startswith("refused"), seen
    assert seen["host_read"].startswith("refused"), seen
    assert seen["warden_keys"].startswith("refused"), seen
    assert seen["loopback"].startswith("refused"), seen
    assert seen["env_secret"] is None, seen
    assert seen["home"] != str(tmp_path), seen
