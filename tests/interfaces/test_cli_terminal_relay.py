"""The relay between the person's terminal and the command's (interfaces/cli/terminal.py), on two
real pseudo-terminals and no SIGWINCH handler: a resize made before keys are typed reaches the
command's terminal before those keys do.

`warden shell` into a live sandbox once answered `stty size` with the old size: SIGWINCH is
handled in the main thread, which sits in a call until the run ends there, so the resize came
after the line typed behind it.
"""

from __future__ import annotations

import contextlib
import os

from tests.support.waiting import wait_until
from warden.adapters.pty import Pty, terminal_size
from warden.interfaces.cli.terminal import _Relay


def test_a_resize_reaches_the_command_before_the_keys_typed_after_it() -> None:
    with Pty(100, 30) as person, Pty(100, 30) as command:
        stdout_r, stdout_w = os.pipe()
        relay = _Relay(command, person.slave, stdout_w)
        relay.start()
        relay.started.set()  # the command runs: what is typed is passed on
        try:
            for cols, rows in ((132, 50), (80, 24), (200, 60)):
                person.resize(cols, rows)  # the person's window changes, then they type
                os.write(person.master, b"x\n")  # a line: both terminals are in canonical mode
                got = b""

                def typed() -> bool:
                    nonlocal got
                    with contextlib.suppress(BlockingIOError):
                        got += os.read(command.slave, 64)
                    return b"x" in got

                os.set_blocking(command.slave, False)
                wait_until(typed, timeout=10, message="the key on the command's terminal")
                assert terminal_size(command.slave) == (cols, rows)
        finally:
            relay._halt.set()
            relay.join(5)
            os.close(stdout_r)
            os.close(stdout_w)
