"""A sandboxed command on a pseudo-terminal: a session of its own, the terminal its controlling one.

`warden shell` and the PTY WebSocket give a command a terminal so that a shell has job control:
Ctrl-C (ISIG on the terminal) reaches its foreground job, not Warden, and a resize reaches it as
SIGWINCH. The kernel sends both to the foreground process group of the terminal's session, so
the command must lead a session whose controlling terminal is that pseudo-terminal.

bwrap's `--new-session` stays on for these runs too. It exists so that a sandboxed program has
no controlling terminal it could push input into with TIOCSTI (CVE-2017-5226): the caller's
terminal is never handed to the sandbox. Here the terminal is a fresh pseudo-terminal whose
master Warden alone holds, so what a command pushes into its input would only reach the sandbox
itself; the syscall filter refuses TIOCSTI and TIOCLINUX all the same (seccomp.py).

Under bwrap the command is pid 2 of the sandbox, in the session bwrap's init leads, and only a
session leader may take a controlling terminal (TIOCSCTTY, tty_ioctl(4)). So the command is
started through util-linux's `setsid --ctty`, which makes it the leader of a new session with
its stdin as controlling terminal, then through `sh -c` to point its stderr at the terminal
too: bwrap's own stderr stays a pipe, so a sandbox that fails to set up still says why.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from warden.core.errors import Unavailable

__all__ = ["on_terminal", "setsid_path"]

# Runs as `sh -c SCRIPT warden-tty COMMAND...` once the terminal is the session's.
_SCRIPT = 'exec 2>&0; exec "$@"'


def setsid_path() -> str | None:
    """util-linux's setsid where the sandbox sees it (it binds the host's /usr)."""
    for candidate in ("/usr/bin/setsid", "/bin/setsid"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def on_terminal(command: Sequence[str]) -> tuple[str, ...]:
    """`command` started as the leader of a new session whose controlling terminal is its stdin
    (`--wait`: should setsid have to fork, its status is still the command's)."""
    setsid = setsid_path()
    if setsid is None:
        raise Unavailable("an interactive terminal needs setsid (util-linux) on this machine: "
                          "apt-get install util-linux", rule="sandbox.no_setsid")
    return (setsid, "--ctty", "--wait", "/bin/sh", "-c", _SCRIPT, "warden-tty", *command)
