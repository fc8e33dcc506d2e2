"""A small progress bar on stderr for layer builds (no rich: builds are rare, imports are not)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["Progress", "Tally", "counted"]


def counted(n: int, one: str, many: str, verb: str) -> str:
    """`installing 1 package`, `installing 25 packages`, `installing no packages`."""
    return f"{verb} {'no' if n == 0 else n} {one if n == 1 else many}"


class Progress:
    """Steps of a long task: a redrawn bar on a terminal, one line per step otherwise."""

    def __init__(self, title: str, total: int, stream: TextIO | None = None, *, enabled: bool = True) -> None:
        self.title = title
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self._tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self._label = ""
        self._shown: tuple[str, float] = ("", 0.0)  # the figure last shown by update, and when

    def step(self, label: str) -> None:
        """Start the next step, named `label`."""
        self._label, self._shown = label, ("", 0.0)
        self._draw(label)
        self.done = min(self.done + 1, self.total)

    def count(self, of: int, what: str) -> Tally:
        """A count of `of` things (`what`: "installed") within the current step, moved by the
        caller as each one is done (a line of uv's output, a file archived); see `Tally`."""
        return Tally(self, of, what)

    def abandon(self) -> None:
        """End the bar's row where it stands (the task failed: its error goes on the next line)."""
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()

    @contextlib.contextmanager
    def watching(self, count: Callable[[], int], of: int, what: str, *, every: float = 0.2) -> Iterator[None]:
        """While the block runs (a step's one long command), show `count()` of `of` (`what`:
        "installed") in the current step's line, the bar moving within the step: a bar that sat
        still through "installing 25 packages" said nothing. Polled every `every` seconds, for a
        tool whose output says nothing per package (npm: folders appearing)."""
        if not self.enabled or of <= 0:
            yield
            return
        tally = self.count(of, what)
        stop = threading.Event()

        def show() -> None:
            with contextlib.suppress(OSError):
                tally.at(count())

        def watch() -> None:
            while not stop.wait(every):
                show()

        watcher = threading.Thread(target=watch, name="warden-progress", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()
        show()
        tally.close()

    def update(self, n: int, of: int, what: str, *, final: bool = False) -> None:
        """Show `n` of `of` done within the current step (`what`: "installed"), the bar moving
        with it; redrawn only when the shown figure changes, and off a terminal at most once a
        second (unless `final`), so a log gets a few lines, not one per file."""
        n, of = max(0, min(n, of)), max(of, 1)
        figure = f"{n}/{of}" if of < 10_000 else f"{n * 100 // of}%"
        now = time.monotonic()
        if figure == self._shown[0] or (not self._tty and not final and now - self._shown[1] < 1.0):
            return
        self._shown = (figure, now)
        self._draw(f"{self._label}: {figure} {what}", position=max(self.done - 1, 0) + n / of)

    def _draw(self, label: str, *, position: float | None = None) -> None:
        if not self.enabled:
            return
        width = 24
        at = self.done if position is None else position
        filled = int(width * at / self.total)
        bar = "#" * filled + "-" * (width - filled)
        line = f"{self.title} [{bar}] {self.done}/{self.total} {label}"
        if self._tty:
            # Within the terminal's width: a line that wraps cannot be redrawn by \r (each
            # redraw would start one row lower, a staircase). The title gives way first.
            room = self._columns() - 1
            if len(line) > room:
                short = 10  # a shorter bar, then a shortened title
                bar = "#" * int(short * at / self.total) + "-" * (short - int(short * at / self.total))
                tail = f" [{bar}] {self.done}/{self.total} {label}"
                head = self.title[: max(room - len(tail) - 1, 0)]
                line = (head + "…" if head else "") + tail
                line = line[:room]
            self.stream.write("\r\x1b[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _columns(self) -> int:
        import os

        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, ValueError, OSError):
            return 80

    def finish(self, label: str = "done") -> None:
        """Fill the bar and end the line."""
        self.done = self.total
        self._draw(f"{label} in {time.monotonic() - self.started:.1f}s")
        if self.enabled and self._tty:
            self.stream.write("\n")
            self.stream.flush()


class Tally:
    """How far a step has got: `n` of `of` (`what`), naming the thing last done.

    On a terminal the step's row is redrawn (at most every 50 ms: uv reports hundreds of
    packages in a second). Off a terminal (a log) a line when the count has moved a tenth of
    `of` since the last one, or after 5 s with a change, and the last count at `close`: a log
    of 500 packages gets about ten lines, not 500. Thread-safe: a watcher thread or a pipe
    reader may move it."""

    def __init__(self, progress: Progress, of: int, what: str) -> None:
        self.progress = progress
        self.of = max(of, 1)
        self.what = what
        self.n = 0
        self.name = ""
        self.phase = what  # `what` of the phase now running ("prepared", then "installed")
        self.share = (0.0, 1.0)  # the part of the step's bar this phase fills
        self._lock = threading.Lock()
        self._shown = (-1, "")  # the count and phase last drawn
        self._when = 0.0

    def at(self, n: int, name: str = "", *, phase: str | None = None, share: tuple[float, float] | None = None,
           final: bool = False) -> None:
        """Now `n` done, the last being `name`; `phase`/`share` when the step enters a new phase."""
        with self._lock:
            if phase is not None and phase != self.phase:
                self.phase, self.n, self._shown = phase, 0, (-1, "")
            if share is not None:
                self.share = share
            self.n = max(0, min(n, self.of))
            self.name = name or self.name
            self._maybe_draw(final)

    def close(self) -> None:
        """The step's last count, always shown."""
        self.at(self.n, final=True)

    def _maybe_draw(self, final: bool) -> None:
        progress = self.progress
        if not progress.enabled or (self.n, self.phase) == self._shown:
            return
        now = time.monotonic()
        last_n = max(self._shown[0], 0) if self._shown[1] == self.phase else -self.of
        if not final:
            if progress._tty:
                if now - self._when < 0.05 and self.n < self.of:
                    return
            elif self.n - last_n < self.of / 10 and now - self._when < 5.0:
                return
        self._shown, self._when = (self.n, self.phase), now
        start, size = self.share
        position = max(progress.done - 1, 0) + start + size * self.n / self.of
        named = f" ({self.name})" if self.name else ""
        progress._draw(f"{progress._label}: {self.n}/{self.of} {self.phase}{named}", position=position)
