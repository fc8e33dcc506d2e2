"""Which terminal this is: `WARDEN_TERMINAL` when set, else its session.

Standard library only, and `os` alone on the common path: the thin client
(interfaces/cli/entry.py) names its terminal to the home's daemon, whose own session differs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["session_terminal", "terminal_id"]


def session_terminal() -> str:
    """This process's session as a terminal name. The session id alone is reused once its shell
    ends, so the session leader's start time goes with it."""
    sid = os.getsid(0)
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
    import re

    # The session form (`sid…-…`) is Warden's own: a chosen name never passes for a shell
    # session's, whose lock lapses when that session ends (core/locks.py).
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}", given) and not re.match(r"sid\d", given):
        return given
    import hashlib

    return "h" + hashlib.sha256(given.encode("utf-8", "surrogateescape")).hexdigest()[:24]
