"""An interactive terminal in the sandbox: what its shell runs and what its client may say (pure).

`warden shell NAME` and the PTY WebSocket (`/v1/workspaces/{name}/pty`) run `SHELL_ARGV` on a
pseudo-terminal (adapters/sandbox/terminal.py gives it a session and makes the terminal its
controlling one). Over the WebSocket, binary frames are the terminal's bytes both ways; a text
frame from the client is a small JSON control message, `{"type": "resize", "cols", "rows"}`; the
server's last text frame is the exit status (core/run_stream.exit_event), then it closes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from warden.core.errors import InvalidInput

__all__ = ["DEFAULT_SIZE", "DEFAULT_TERM", "MAX_CONTROL", "PIPED_SHELL_ARGV", "SHELL_ARGV", "Resize", "check_term",
           "parse_control", "size_of"]

# bash when the sandbox has it (interactive: it reads the workspace's ~/.bashrc, which only the
# person may change), else the POSIX sh. The allowlist, when on, refuses interactive shells.
SHELL_ARGV = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i")
# The same shell reading commands from a pipe or a file (`echo ls | warden shell NAME`): no
# terminal, no prompt, and it ends at the end of its input.
PIPED_SHELL_ARGV = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -s; fi; exec sh -s")
DEFAULT_TERM = "xterm-256color"
DEFAULT_SIZE = (80, 24)  # columns, rows
MAX_CONTROL = 4096  # bytes of one control message; a larger one is refused unread
_MAX_SIDE = 9999  # columns or rows (the kernel keeps them as unsigned shorts)
_TERM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


@dataclass(frozen=True)
class Resize:
    """The terminal's new size, in character cells."""

    cols: int
    rows: int


def _side(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_SIDE:
        raise InvalidInput(f"{what} must be a whole number from 1 to {_MAX_SIDE}")
    return value


def size_of(cols: object, rows: object) -> Resize:
    """A terminal size from a client's numbers (InvalidInput unless both are 1-9999)."""
    return Resize(_side(cols, "cols"), _side(rows, "rows"))


def parse_control(text: str) -> Resize:
    """The control message a client sent in a text frame (InvalidInput for anything else)."""
    if len(text) > MAX_CONTROL:
        raise InvalidInput(f"a control message is at most {MAX_CONTROL} bytes")
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: `[[[[…` nested past the stack, 4 KiB is enough
        raise InvalidInput('a text frame is a JSON control message: {"type": "resize", "cols": 120, '
                           '"rows": 40}; send the terminal\'s input as binary frames') from None
    if not isinstance(message, dict) or message.get("type") != "resize":
        raise InvalidInput('the only control message is {"type": "resize", "cols": C, "rows": R}')
    return size_of(message.get("cols"), message.get("rows"))


def check_term(term: str) -> str:
    """A TERM name a client asked for (letters, digits and ._+-, at most 64)."""
    if not _TERM.fullmatch(term):
        raise InvalidInput(f"bad term {term[:80]!r}: give a terminal type such as xterm-256color")
    return term
