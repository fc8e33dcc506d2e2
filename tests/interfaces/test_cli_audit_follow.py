"""`warden audit --since WHEN` and `warden audit --follow`: the recent part of the log, and new
events as they are recorded, through the real CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import Cli, at_a_terminal

pytestmark = pytest.mark.used_home


def test_since_keeps_only_events_from_then_on(cli: Cli) -> None:
    assert cli("bot", "register", "early").code == 0
    everything = cli("audit", "--json", "--since", "2000-01-01").json["data"]
    assert any(e["action"] == "bot.register" for e in everything)
    assert cli("audit", "--json", "--since", "1h").json["data"] == everything
    assert cli("audit", "--json", "--since", "2999-01-01T00:00").json["data"] == []
    bad = cli("audit", "--since", "soon")
    assert bad.code == 2
    assert bad.stderr.count("\n") == 1 and "bad --since 'soon'" in bad.stderr
    assert cli("audit", "verify", "--since", "1h").code == 2


def test_follow_prints_new_events_until_interrupted(cli: Cli) -> None:
    follower = subprocess.Popen([sys.executable, "-m", "warden", "audit", "--follow", "--json", "--limit", "1"],
                                env=cli.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=at_a_terminal)
    try:
        time.sleep(1.5)  # listing done, now polling
        assert cli("bot", "register", "late").code == 0
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = follower.stdout.readline()  # type: ignore[union-attr]
            if not line:
                break
            seen.append(json.loads(line))
            if seen[-1]["target"] == "bot:late":
                break
        assert seen and seen[-1]["action"] == "bot.register" and seen[-1]["target"] == "bot:late", seen
        follower.send_signal(signal.SIGINT)
        assert follower.wait(10) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
