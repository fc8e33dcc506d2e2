"""Colour only for a person at a terminal: on a TTY a table's header is bold, status words and
the `warden:` of an error are coloured; through a pipe, with NO_COLOR or on TERM=dumb, the
output is plain text."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.used_home


def _on_terminal(cli: Cli, *args: str, env: dict[str, str] | None = None) -> str:
    """What `warden ARGS` writes to a terminal (stdout and stderr both on one pty)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "warden", *args], stdin=subprocess.DEVNULL, stdout=follower,
                                stderr=follower, env={**cli.environ, "TERM": "xterm", "COLUMNS": "200", **(env or {})})
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the last writer closed the pty
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(60)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return b"".join(chunks).decode()


def test_a_terminal_gets_colour(cli: Cli) -> None:
    listing = _on_terminal(cli, "sandbox", "list")
    assert "\x1b[1mPath\x1b[0m" in listing or "\x1b[1m" in listing.splitlines()[0], listing
    error = _on_terminal(cli, "info", "nothere")
    assert error.startswith("\x1b[1;31mwarden:\x1b[0m no workspace named 'nothere'"), error


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_colour_when_asked_or_on_a_dumb_terminal(cli: Cli, env: dict[str, str]) -> None:
    assert "\x1b[" not in _on_terminal(cli, "sandbox", "list", env=env)
    assert "\x1b[" not in _on_terminal(cli, "info", "nothere", env=env)


def test_no_colour_through_a_pipe(cli: Cli) -> None:
    for args in (("sandbox", "list"), ("info", "nothere")):
        result = cli(*args, env={"TERM": "xterm"})
        assert "\x1b[" not in result.stdout + result.stderr


def test_data_cannot_bring_its_own_colour() -> None:
    from warden.interfaces.cli.output import Output, table

    forged = "\ue001bold\ue000 \x1b[31mred"  # the marks Warden styles with, and a raw escape
    shown = Output([forged], render=lambda d: table(["Name"], [[d[0]]])).human()
    assert "\x1b" not in shown and "\ue001" not in shown
    assert "\\ue001bold\\ue000" in shown and "\\x1b[31mred" in shown
