"""How many API commands this server runs at once: a bound on its threads, not on the bots' rights.

The exec request itself (its checks, secrets and the run) is the bot-request service's
(services/bot_requests.py); the route hands it `ExecSlots.take` to hold around the run.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from warden.core.errors import Unavailable

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from warden.bootstrap import App


class SharedSlots(Protocol):
    """Slots every worker of the home sees (adapters/exec_slots.HeldSlots)."""

    def take(self, bot: str, admit: Callable[[int, int], None]) -> AbstractContextManager[None]: ...

    def counts(self, bot: str) -> tuple[int, int]: ...

    def counted(self, bot: str) -> AbstractContextManager[tuple[int, int]]: ...

__all__ = ["ExecSlots", "SharedSlots"]


class ExecSlots:
    """How many API commands run at once, in all and per bot.

    Each exec holds a server thread for as long as its command runs (up to sandbox.timeout);
    without a bound one bot could hold every thread and stall the API for all the others.
    A request over the bound is refused at once (503) rather than queued, so nothing piles up.
    The bot counted is the minter of the token (`Principal.minter`), not the bot it names: a
    bot holding tokens it minted for others shares its own slots among all of them.
    """

    @classmethod
    def from_settings(cls, app: App) -> ExecSlots:
        return cls(app.settings.get_int("api.max_execs"), app.settings.get_int("api.max_execs_per_bot"),
                   background=lambda bot: app.live.running_counts(bot), shared=app.exec_slots,
                   collect=lambda bot, everyone: app.live.collect_ended(bot=None if everyone else bot))

    def __init__(self, total: int, per_bot: int, *,
                 background: Callable[[str], tuple[int, int]] | None = None,
                 shared: SharedSlots | None = None, collect: Callable[[str, bool], None] | None = None) -> None:
        self.total = total
        self.per_bot = per_bot
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()
        # (all bots', this bot's) background processes running, kept in the registry so that they
        # count over every server worker; they hold exec slots as long as they run.
        self._background = background
        # The foreground commands of every worker of this home (adapters/exec_slots.py); without
        # it, this worker's alone.
        self._shared = shared
        # Records the ends of background processes that have ended: one counts as running until
        # a Warden process records its end, so quick background commands held slots long after.
        self._collect = collect

    def counts(self, bot: str) -> tuple[int, int]:
        """(all, `bot`'s) commands running in the foreground now: every worker's when they
        share their slots, else this one's."""
        if self._shared is not None:
            return self._shared.counts(bot)
        with self._lock:
            return self._running.total(), self._running[bot]

    @contextmanager
    def counted(self, bot: str) -> Iterator[tuple[int, int]]:
        """`counts`, with no foreground command admitted until the block ends: a background
        start (services/live.py) counts them and records its process in the registry inside it.
        A take counts the background processes under the same lock, so it sees that one; else a
        take and a start at once each counted the other's as not there yet, and both ran."""
        if self._shared is not None:
            with self._shared.counted(bot) as held:
                yield held
            return
        with self._lock:
            yield self._running.total(), self._running[bot]

    def _admit(self, running_all: int, running_mine: int) -> None:
        if running_mine >= self.per_bot:
            raise Unavailable(f"the bot this grant comes from already runs {self.per_bot} commands at once, "
                              "through its own grants and those it minted (api.max_execs_per_bot); "
                              "retry when one ends", rule="api.max_execs_per_bot")
        if running_all >= self.total:
            raise Unavailable(f"the server already runs {self.total} commands at once (api.max_execs); "
                              "retry when one ends", rule="api.max_execs")

    def _admit_with_background(self, bot: str, running_all: int, running_mine: int) -> None:
        """`_admit` with the background processes counted too; called under the lock a background
        start holds while it counts and records its own (`counted`)."""
        background_all, background_mine = self._background(bot) if self._background is not None else (0, 0)
        self._admit(running_all + background_all, running_mine + background_mine)

    @contextmanager
    def take(self, bot: str) -> Iterator[None]:
        """A slot held while the block runs; Unavailable (503) when none is free, counted again
        once after the ends of background processes that have ended are recorded."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._taken(bot))
            except Unavailable as exc:
                if not self._collected_now(bot, exc):
                    raise
                held.enter_context(self._taken(bot))
            yield

    def _collected_now(self, bot: str, refused: Unavailable) -> bool:
        """Whether the ends of background processes were recorded now, for a refusal they may
        have caused: not when none is counted. Asked of the sandboxes holding `bot`'s (its
        refusal), or any bot's (the server's): a bot's refused requests reach no other's."""
        if self._collect is None or refused.rule not in ("api.max_execs_per_bot", "api.max_execs"):
            return False
        everyone = refused.rule == "api.max_execs"
        counted = self._background(bot) if self._background is not None else (0, 0)
        if counted[0 if everyone else 1] == 0:
            return False
        self._collect(bot, everyone)
        return True

    @contextmanager
    def _taken(self, bot: str) -> Iterator[None]:
        with self._lock:
            if self._shared is None:
                self._admit_with_background(bot, self._running.total(), self._running[bot])
            self._running[bot] += 1
        try:
            if self._shared is None:
                yield
            else:
                # Every worker's foreground commands, counted and taken under the folder's lock.
                with self._shared.take(bot, lambda everyone, mine: self._admit_with_background(bot, everyone, mine)):
                    yield
        finally:
            with self._lock:
                self._running[bot] -= 1
                if self._running[bot] <= 0:
                    del self._running[bot]
