"""What requests hold of the server while they are answered, shared out among the bots.

A wait on a process or a followed log holds a server thread; a file's answer of more than one
piece holds a connection and a piece of memory until its client reads it. Each is bounded twice:
a number at once for one bot (its grants' root, as exec slots count: `Principal.minter`), so one
bot cannot take what every other needs, and an amount for all bots together, so the server's
threads or memory stay within what it has. Over either: Unavailable (503 with Retry-After; the
SDK asks again).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from warden.core.errors import Unavailable

__all__ = ["Shares"]


class Shares:
    """At most `per_bot` holds at once for one bot and `total` units (one a hold, or its size)
    for all; `bot_full(per_bot)` and `all_full(total)` say why a hold is refused."""

    def __init__(self, per_bot: int, total: int, *, bot_full: Callable[[int], str],
                 all_full: Callable[[int], str]) -> None:
        self.per_bot = per_bot
        self.total = total
        self._bot_full = bot_full
        self._all_full = all_full
        self._lock = threading.Lock()
        self._holds: Counter[str] = Counter()
        self._used = 0

    def take(self, bot: str, amount: int = 1) -> Callable[[], None]:
        """A hold of `amount` for `bot`, or Unavailable; the function returned gives it back
        (once, however often it is called: a response's close and its error path both call it)."""
        with self._lock:
            if self._holds[bot] >= self.per_bot:
                raise Unavailable(self._bot_full(self.per_bot), rule="api.max_execs_per_bot")
            if self._used + amount > self.total:
                raise Unavailable(self._all_full(self.total), rule="api.max_execs")
            self._holds[bot] += 1
            self._used += amount
        given = threading.Event()

        def give_back() -> None:
            with self._lock:
                if given.is_set():
                    return
                given.set()
                self._holds[bot] -= 1
                self._used -= amount
                if not self._holds[bot]:
                    del self._holds[bot]
        return give_back

    @contextlib.contextmanager
    def held(self, bot: str, amount: int = 1) -> Iterator[None]:
        give_back = self.take(bot, amount)
        try:
            yield
        finally:
            give_back()
