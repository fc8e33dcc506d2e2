"""`python -m warden` pressed Ctrl-C as it starts: Warden's "interrupted", never a traceback.

The native client (`warden`) holds SIGINT across its exec of Python and entry.main() lets it in
(tests/interfaces/test_cli_native_client.py); `python -m warden` has no such client, and
__main__.py's import of the entry module ran before entry.main() took Ctrl-C. Python's own start
(`site`, `runpy`) stays out of reach: only the native client covers that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import at_a_terminal
from tests.support.waiting import wait_until

# A `sitecustomize` on PYTHONPATH (imported by `site`) that says in a file, then waits, as the
# module HELD_AT is looked for once AFTER is loaded: a Ctrl-C lands exactly there.
_HELD = ("import os, sys, time\n"
         "class Held:\n"
         "    def find_spec(self, name, path=None, target=None):\n"
         "        if name == os.environ['HELD_AT'] and os.environ['AFTER'] in sys.modules:\n"
         "            open(os.environ['HELD'], 'w').close()\n"
         "            time.sleep(5)\n"
         "        return None\n"
         "sys.meta_path.insert(0, Held())\n")


@pytest.mark.parametrize(("held_at", "after"), [
    ("warden.interfaces.cli.entry", "warden"),  # __main__.py's import, before entry.main()
    ("signal", "warden.interfaces.cli.main"),  # main() setting up its handlers (`import signal`)
])
def test_a_ctrl_c_as_python_m_warden_starts_is_interrupted_not_a_traceback(tmp_path: Path, held_at: str,
                                                                         after: str) -> None:
    """Both ended in a traceback (KeyboardInterrupt): now `warden: interrupted`, 130, nothing run."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_HELD)
    held = tmp_path / "held"
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "WARDEN_HOME": str(tmp_path / "home"),
               "WARDEN_DAEMON": "0", "PYTHONPATH": str(tmp_path / "site"), "HELD": str(held),
               "HELD_AT": held_at, "AFTER": after}
    proc = subprocess.Popen([sys.executable, "-m", "warden", "run", "dw", "--", "true"], env=environ,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=at_a_terminal)
    wait_until(held.exists, timeout=30, message=f"Python never looked for {held_at}")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, b"", b"warden: interrupted\n"), err.decode(errors="replace")
    assert not (tmp_path / "home").exists()
