"""Which terminal this is: `WARDEN_TERMINAL` when set, else its session.

Standard library only, and `os` alone on the common path: the thin client
(interfaces/cli/entry.py) names its terminal to the home's daemon, whose own session differs.
"""

from __future__ import annotations

import os

# Not `from typing import TYPE_CHECKING` nor collections.abc at run time: the thin client pays
# each import on every `warden run` (collections alone: 2 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["session_terminal", "terminal_id", "vouch_for_session"]

# The session name the home's daemon found its client in (from the client's pid, not from what
# it said), set in the daemon's child that runs that client's command: the one `sid…` name a
# WARDEN_TERMINAL may carry and be taken as it is.
_vouched: str | None = None


def vouch_for_session(name: str) -> None:
    """In the daemon's child: `name` is the client's own session (the daemon read it from /proc)."""
    global _vouched  # one forked child per client, set once before its command runs
    _vouched = name


def session_terminal(pid: int = 0) -> str:
    """The session of process `pid` (0: this one) as a terminal name. The session id alone is
    reused once its shell ends, so the session leader's start time goes with it."""
    sid = os.getsid(pid)
    try:
        with open(f"/proc/{sid}/stat", "rb") as stat:
            started = stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        started = "0"
    return f"sid{sid}-{started}"


def terminal_id(environ: Mapping[str, str]) -> str:
    """A name for this terminal, safe as a file name (an unusual WARDEN_TERMINAL is hashed)."""
    given = environ.get("WARDEN_TERMINAL")
    if not given:
        return session_terminal()
    if given == _vouched:  # the thin client's own session, as the daemon saw it: not a chosen name
        return given
    import re

    # The session form (`sid…-…`) is Warden's own: a chosen name never passes for a shell
    # session's, whose lock lapses when that session ends (core/locks.py).
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}", given) and not re.match(r"sid\d", given):
        return given
    import hashlib

    return "h" + hashlib.sha256(given.encode("utf-8", "surrogateescape")).hexdigest()[:24]
