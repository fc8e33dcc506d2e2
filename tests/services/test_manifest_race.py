"""`warden install` records packages in files a bot controls: a bot swapping them in a race.

The bot's side runs where a bot runs, in the sandbox: a loop that exchanges pyproject.toml or
package.json with a link to a host file, a FIFO or a link to /dev/zero (renameat2
RENAME_EXCHANGE). Warden's side records a package again and again meanwhile; it must never copy
the host file into the workspace, hang on the FIFO or read /dev/zero without end.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tests.support.waiting import poll
from warden.adapters.safefs import SafeRoot
from warden.adapters.sandbox.host import build_spec, bwrap_path
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.errors import WardenError
from warden.core.limits import Limits
from warden.services.installs import MANIFEST_MAX, record_node, record_python

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")

# Exchanges NAME and "evil" for a few seconds (the bot's loop, inside the sandbox); "busy" says
# it has swapped 200 times.
SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
name, kind, target = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "fifo":
    os.mkfifo("evil")
else:
    os.symlink(target, "evil")
open("started", "w").close()
end = time.monotonic() + float(sys.argv[4])
swaps = 0
while time.monotonic() < end and not os.path.exists("stop"):
    if libc.renameat2(-100, name.encode(), -100, b"evil", 2) == 0:  # RENAME_EXCHANGE
        swaps += 1
        if swaps == 200:
            open("busy", "w").close()
print(swaps)
"""


@pytest.mark.parametrize("kind", ["link", "fifo", "zero"])
@pytest.mark.parametrize("manifest", ["pyproject.toml", "package.json"])
def test_swapped_manifest_never_leaks_hangs_or_floods(tmp_path: Path, kind: str, manifest: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    secret = tmp_path / ("host-secret.toml" if manifest.endswith(".toml") else "host-secret.json")
    secret.write_text('[project]\nname = "HOSTSECRET"\n' if manifest.endswith(".toml")
                      else '{"name": "HOSTSECRET", "dependencies": {}}\n')
    (ws / manifest).write_text('[project]\nname = "ws"\ndependencies = []\n' if manifest.endswith(".toml")
                               else '{"name": "ws", "dependencies": {}}\n')
    (ws / "swap.py").write_text(SWAPPER)
    target = {"link": str(secret), "zero": "/dev/zero", "fifo": ""}[kind]
    spec = build_spec(str(ws), ["python3", "swap.py", manifest, kind, target, "20"],
                      caller_env={}, env={})
    outcome: list[object] = []
    bot = threading.Thread(target=lambda: outcome.append(run_sandboxed(spec, Limits(timeout_s=60))))
    bot.start()
    try:
        poll((ws / "started").exists, timeout=5, interval=0.01)  # the loop is on (else: see swaps)
        # 300 times, and on until the bot's loop has swapped 200 times meanwhile (on a busy
        # machine it may get a core only now and then).
        recorded = refused = attempts = 0
        deadline = time.monotonic() + 20
        while attempts < 300 or (not (ws / "busy").exists() and time.monotonic() < deadline):
            attempt, attempts = attempts, attempts + 1
            try:
                with SafeRoot.open(ws, max_bytes=MANIFEST_MAX) as root:
                    if manifest == "package.json":
                        record_node(root, [f"pkg{attempt}@1.0.0"], {})
                    else:
                        record_python(root, [f"pkg{attempt}==1.0"])
                recorded += 1
            except WardenError:
                refused += 1
    finally:
        (ws / "stop").touch()
        bot.join(60)
    assert not bot.is_alive()
    swaps = int(outcome[0].stdout)  # type: ignore[attr-defined]
    assert swaps > 100, "the race loop did not run"
    assert recorded + refused == attempts
    for path in ws.iterdir():
        if path.is_file() and not path.is_symlink():
            assert "HOSTSECRET" not in path.read_text(errors="replace"), path.name
    assert "HOSTSECRET" in secret.read_text()  # the host file is untouched
    assert not [p for p in ws.iterdir() if p.name.endswith(".warden-tmp")]
    assert os.path.getsize(ws / manifest) < MANIFEST_MAX or os.path.islink(ws / manifest)


@pytest.mark.parametrize(("manifest", "content"), [
    ("pyproject.toml", "[project\nname = 1\n"),  # a typo
    ("pyproject.toml", "x = " + "[" * 3000 + "]" * 3000 + "\n"),  # nested past tomlkit's and the stack's depth
    ("package.json", '{"a":' * 5000 + "1" + "}" * 5000),
    ("pyproject.toml", "project = 3\n"),  # no table: was "internal error: AttributeError"
    ("pyproject.toml", '[project]\ndependencies = "gamma"\n'),  # no list
])
def test_a_manifest_that_cannot_be_read_is_refused_saying_how_not_an_internal_error(
        tmp_path: Path, manifest: str, content: str) -> None:
    """Found: `warden install` over a pyproject.toml a bot (or a typo) left invalid ended in
    "internal error: UnexpectedCharError" (RecursionError when nested deep), after the install."""
    (tmp_path / manifest).write_text(content)
    with SafeRoot.open(tmp_path, max_bytes=MANIFEST_MAX) as root, pytest.raises(WardenError) as refused:
        if manifest == "package.json":
            record_node(root, ["pkg@1.0.0"], {})
        else:
            record_python(root, ["pkg==1.0"])
    assert refused.value.code == "invalid" and "--no-persist" in refused.value.message
    assert (tmp_path / manifest).read_text() == content
