"""The person's terminal joined to a sandboxed command's pseudo-terminal (`warden shell`, `run --tty`).

Warden opens a fresh pseudo-terminal (adapters/pty.py), the command gets its slave as its
controlling terminal (adapters/sandbox/terminal.py), and a thread relays between the master
and Warden's own stdin and stdout. For the session the person's terminal is in raw mode, so
every key, Ctrl-C included, goes to the command's terminal, whose line discipline turns ^C into
SIGINT for the sandbox's foreground job: Warden itself never sees it. A resize of the person's
terminal (SIGWINCH) is copied onto the pseudo-terminal (TIOCSWINSZ), which signals the command
in turn. The person's terminal is restored however the session ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from warden.adapters.pty import Pty, terminal_size
from warden.core.errors import Locked, NotFound, Refused, Unavailable
from warden.core.terminal import DEFAULT_SIZE

if TYPE_CHECKING:
    from warden.core.runs import RunResult
    from warden.interfaces.cli.main import Context
    from warden.services.runs import RunRequest

__all__ = ["run_on_terminal"]

_EOF = b"\x04"  # VEOF: what the command's terminal reads as end of input once Warden's stdin ends


def run_on_terminal(ctx: Context, request: RunRequest) -> RunResult:
    """Run `request` on a pseudo-terminal joined to this process's stdin and stdout."""
    from warden.services.runs import RunOutput

    try:
        runs = ctx.app.runs  # opens the registry: a locked or lost one refuses the run as well
    except (Locked, NotFound, Unavailable) as exc:
        raise Refused.of(exc) from None
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout.flush()
    cols, rows = terminal_size(stdin) or terminal_size(stdout) or DEFAULT_SIZE
    with Pty(cols, rows) as pty, _raw(stdin) as raw, _resizes(stdin, pty):
        relay = _Relay(pty, stdin, stdout)
        relay.start()

        def notice(line: bytes) -> None:  # Warden's own lines, on a terminal in raw mode too
            os.write(sys.stderr.fileno(), line.replace(b"\n", b"\r\n") if raw else line)

        try:
            def started(_kill: object) -> None:
                pty.give_away()
                relay.started.set()

            output = RunOutput(on_notice=notice, capture=False, on_started=started)
            result = runs.execute(dataclasses.replace(request, terminal=pty.slave), output)
        finally:
            pty.give_away()
            relay.finish()
    if result.timed_out:  # said once the person's terminal is back to normal
        sys.stderr.write(timed_out_line(ctx, request) + "\n")
    return result


def timed_out_line(ctx: Context, request: RunRequest) -> str:
    """The line for a run its wall-clock limit killed (`warden run`, with --tty or not, and
    `warden shell`): this run's --timeout, else sandbox.timeout."""
    from warden.core.runs import timed_out_line as line

    timeout = request.timeout if request.timeout is not None else ctx.app.settings.get_seconds("sandbox.timeout")
    return line(timeout)


class _Relay(threading.Thread):
    """Copies the command's output to stdout and stdin to the command's input until the
    command's terminal is closed on its side (EIO: the sandbox is gone)."""

    def __init__(self, pty: Pty, stdin: int, stdout: int) -> None:
        super().__init__(name="warden-terminal", daemon=True)
        self.pty, self.stdin, self.stdout = pty, stdin, stdout
        self._halt = threading.Event()
        # Input is passed on once the command runs: before, the terminal it gets may not be set
        # up yet (a live sandbox's supervisor makes Warden's raw then), and what its line
        # discipline took in cooked mode came out echoed twice, an end of input as a NUL (^@).
        self.started = threading.Event()
        self._size = terminal_size(stdin)

    def _follow_size(self) -> None:
        # SIGWINCH is handled in the main thread, which may be blocked in a call until the run
        # ends (a live sandbox's), and so can apply a resize after keys typed later: `stty size`
        # would answer the old size. Checked here before each input is passed on, a resize
        # always reaches the command's terminal ahead of what was typed after it.
        size = terminal_size(self.stdin)
        if size is not None and size != self._size:
            self._size = size
            with contextlib.suppress(OSError):
                self.pty.resize(*size)

    def finish(self) -> None:
        """Wait for the last output (the sandbox has ended), then stop."""
        self.join(5.0)
        self._halt.set()
        self.join(1.0)

    def run(self) -> None:
        master, reading, pending = self.pty.master, True, b""
        while not self._halt.is_set():
            started = self.started.is_set()
            readable = [master, self.stdin] if reading and not pending and started else [master]
            try:
                ready, room, _ = select.select(readable, [master] if pending else [], [], 0.2 if started else 0.02)
            except (OSError, ValueError):
                return
            if master in ready:
                data = self.pty.read()
                if data is None:
                    return
                _write_all(self.stdout, data)
            if self.stdin in ready:
                self._follow_size()
                try:
                    data = os.read(self.stdin, 65536)
                except OSError:
                    data = b""
                reading = bool(data)
                pending += data or _EOF
            if master in room and pending:
                pending = pending[self.pty.write(pending):]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
        except OSError:  # stdout went away: the output has nowhere to go
            return


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[bool]:
    """`fd`'s terminal in raw mode for the block (nothing to do when it is not a terminal)."""
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield False
        return
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _resizes(fd: int, pty: Pty) -> Iterator[None]:
    """Copy the size of the terminal `fd` onto `pty` whenever it changes (SIGWINCH)."""
    if threading.current_thread() is not threading.main_thread() or terminal_size(fd) is None:
        yield
        return

    def resized(_signum: int, _frame: Any) -> None:
        size = terminal_size(fd)
        if size is not None:
            with contextlib.suppress(OSError):
                pty.resize(*size)

    previous: Callable[[int, Any], Any] | int | None = signal.signal(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)
