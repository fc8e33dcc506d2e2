"""Watch a workspace for file changes: `warden watch`, `GET /v1/workspaces/{name}/events`, the SDK.

The watches of one workspace folder in one process share one inotify feed (core/ports/watch.py):
one walk and one set of inotify watches however many streams follow it, each batch handed to
every watch (a watch that falls behind gets its waiting batches merged, never an unbounded
queue). The feed hands out one batch per debounced burst (core/watching.py: 100 ms of quiet,
ignored folders never watched, workspace-relative paths, at most BATCH_LIMIT paths a batch). A
bot's watch shows only the paths its file policy lets it see (PolicyFilter: its grant's zones,
never a denied path, and the same for notices), and one bot holds at most
`api.max_watches_per_bot` at once in one server process (`api.max_watches` for all bots
together). A watch ends when its workspace folder goes (destroyed, archived, moved) or the
workspace leaves `ready`/`suspended`; the caller then gets `ended`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from warden.core.errors import Conflict, Unavailable
from warden.core.watching import BATCH_LIMIT, DEBOUNCE_S, MAX_BATCH_WAIT_S, merged

if TYPE_CHECKING:
    from warden.core.policy import WorkspacePolicy
    from warden.core.ports import ChangeFeed, FileWatcher
    from warden.core.settings import Settings
    from warden.core.watching import Batch, Notice
    from warden.services.files import FileService
    from warden.services.workspaces import WorkspaceService

__all__ = ["PolicyFilter", "Watch", "WatchService", "WatchSettings"]

# How often a waiting watch looks at the registry: a workspace archived or destroyed by another
# process may keep its folder a moment (a lease, the trash), and the registry says so first.
_CHECK_S = 5.0
_WATCHABLE = ("ready", "suspended")
# Batches one watch may have waiting; past them the newest are merged into the last one.
_QUEUED = 8


@dataclass(frozen=True)
class WatchSettings:
    max_per_bot: int = 4  # api.max_watches_per_bot
    # api.max_watches: all holders together. Each watch holds one inotify instance, and the
    # quota's watcher of every run needs one too (fs.inotify.max_user_instances, often 128).
    max_total: int = 32
    debounce_s: float = DEBOUNCE_S
    max_wait_s: float = MAX_BATCH_WAIT_S
    limit: int = BATCH_LIMIT

    @classmethod
    def from_settings(cls, s: Settings) -> WatchSettings:
        return cls(max_per_bot=s.get_int("api.max_watches_per_bot"), max_total=s.get_int("api.max_watches"))


class Watch:
    """One open watch of a workspace: `next` blocks for the next batch the holder may see."""

    def __init__(self, name: str, feed: ChangeFeed, *, shown: Callable[[str], bool] | None,
                 status_of: Callable[[str], str | None], done: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._feed = feed
        self._shown = shown
        self._status_of = status_of
        self._done: Callable[[], None] | None = done
        self._lock = threading.Lock()
        self._clock = clock
        self._checked = clock()
        self.ended: str | None = None  # why no batch follows: "gone", "archived", …, "closed"
        self._told = 0  # the feed's notes handed out by `fresh_notes` so far

    @property
    def notes(self) -> list[Notice]:
        """Folders left unwatched and why (limits), to tell the watcher: like changes, only
        those naming a path the holder may see (or none)."""
        return [note for note in self._feed.notes if self._may_see(note)]

    def fresh_notes(self) -> list[Notice]:
        """The notes that came since the last call (the holder's view, as `notes`)."""
        notes = list(self._feed.notes)
        fresh, self._told = notes[self._told:], len(notes)
        return [note for note in fresh if self._may_see(note)]

    def _may_see(self, note: Notice) -> bool:
        return note.path is None or self._shown is None or self._shown(note.path)

    def next(self, timeout: float | None = None) -> Batch | None:
        """The next batch, or None after `timeout` seconds without one (or once `ended`)."""
        deadline = None if timeout is None else self._clock() + timeout
        while self.ended is None:
            left = None if deadline is None else deadline - self._clock()
            if left is not None and left <= 0:
                return None
            wait = _CHECK_S if left is None else min(left, _CHECK_S)
            batch = self._feed.next(wait)
            if self._feed.gone:
                self.ended = "gone"
            elif self._clock() - self._checked >= _CHECK_S:
                self._checked = self._clock()
                status = self._status_of(self.name)
                if status not in _WATCHABLE:
                    self.ended = status or "gone"
            if batch is not None and self._shown is not None:
                batch = batch.visible(self._shown)
            if batch is not None:
                return batch
        return None

    def close(self) -> None:
        """Stop watching (from any thread); the holder's count goes down once."""
        with self._lock:
            done, self._done = self._done, None
        if self.ended is None:
            self.ended = "closed"
        self._feed.close()
        if done is not None:
            done()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PolicyFilter:
    """Which changed paths a caller may be told of: those its file policy lets it `stat` (the
    grant's zones, the denied and protected paths), so a watch never names what the file API
    would refuse to show. The policy is read again at most once a second (its files may change)."""

    def __init__(self, files: FileService, clock: Callable[[], float] = time.monotonic) -> None:
        self._files = files
        self._clock = clock
        self._policy: WorkspacePolicy | None = None
        self._at = 0.0

    def __call__(self, path: str) -> bool:
        from warden.core.errors import WardenError
        from warden.core.paths import canonical

        now = self._clock()
        if self._policy is None or now - self._at >= 1.0:
            self._policy, self._at = self._files.policy(), now
        try:
            return self._policy.decide(canonical(path), "stat").allowed
        except WardenError:
            return False  # a name the policy cannot even judge is not shown


class _Shared:
    """One feed of a folder, shared by the watches of it: a thread waits on the feed and hands
    each batch to every subscriber; the last one to leave closes the feed."""

    def __init__(self, feed: ChangeFeed, limit: int, idle: Callable[[_Shared], None]) -> None:
        self.feed = feed
        self._limit = limit
        self._idle = idle
        self.cond = threading.Condition()
        self.subscribers: list[_Subscription] = []
        self.gone = False  # the folder went (or the feed failed): no batch follows
        self.stopped = False  # the thread ended (gone, or the feed closed)
        self._pump = threading.Thread(target=self._run, name="warden-watch", daemon=True)
        self._pump.start()

    def subscribe(self) -> _Subscription:
        sub = _Subscription(self)
        with self.cond:
            self.subscribers.append(sub)
        return sub

    def leave(self, sub: _Subscription) -> None:
        with self.cond:
            if sub in self.subscribers:
                self.subscribers.remove(sub)
            last = not self.subscribers
        if last:
            self._idle(self)

    def _run(self) -> None:
        try:
            while True:
                batch = self.feed.next(None)
                with self.cond:
                    if batch is not None:
                        for sub in self.subscribers:
                            sub.put(batch, self._limit)
                    if batch is None or self.feed.gone:
                        self.gone = self.feed.gone  # else closed: its last watch left
                        self.stopped = True
                        self.cond.notify_all()
                        return
                    self.cond.notify_all()
        except Exception:  # the feed failed (its folder went wrong meanwhile): its watches end
            with self.cond:
                self.gone = self.stopped = True
                self.cond.notify_all()


class _Subscription:
    """One watch's view of a shared feed (core.ports.ChangeFeed)."""

    def __init__(self, shared: _Shared) -> None:
        self._shared = shared
        self._batches: deque[Batch] = deque()
        self._closed = False

    @property
    def gone(self) -> bool:
        return self._shared.gone and not self._batches  # what came before it went is handed out first

    @property
    def notes(self) -> list[Notice]:
        return self._shared.feed.notes

    def put(self, batch: Batch, limit: int) -> None:
        """(Under the shared lock.) Queue `batch`, merging it into the last when too many wait."""
        if len(self._batches) >= _QUEUED:
            self._batches.append(merged(self._batches.pop(), batch, limit))
        else:
            self._batches.append(batch)

    def next(self, timeout: float | None) -> Batch | None:
        cond = self._shared.cond
        with cond:
            cond.wait_for(lambda: self._batches or self._shared.stopped or self._closed, timeout)
            if self._batches and not self._closed:
                return self._batches.popleft()
            return None

    def close(self) -> None:
        with self._shared.cond:
            if self._closed:
                return
            self._closed = True
            self._batches.clear()
            self._shared.cond.notify_all()
        self._shared.leave(self)


class WatchService:
    """Opens watches on workspaces and bounds how many each bot holds."""

    def __init__(self, *, workspaces: WorkspaceService, watcher: FileWatcher, settings: WatchSettings) -> None:
        self._workspaces = workspaces
        self._watcher = watcher
        self.settings = settings
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()
        self._shared: dict[str, _Shared] = {}  # by folder: one feed however many watch it

    def held(self, holder: str) -> int:
        """How many watches `holder` has open in this process."""
        with self._lock:
            return self._held[holder]

    def open(self, name: str, *, holder: str | None = None, shown: Callable[[str], bool] | None = None) -> Watch:
        """A watch of workspace `name`; `holder` (a bot) counts against api.max_watches_per_bot,
        `shown` keeps only the paths it accepts (a grant's zones)."""
        record = self._workspaces.get(name)
        if record.status not in _WATCHABLE:
            raise Conflict(f"workspace {name!r} is {record.status}: only a ready or suspended workspace can be "
                           "watched" + (f" (`warden unarchive {name}` first)" if record.status == "archived" else ""),
                           rule="watch.status")
        if holder is not None:
            with self._lock:
                if self._held[holder] >= self.settings.max_per_bot:
                    raise Unavailable(f"{holder} already watches {self.settings.max_per_bot} times at once "
                                      "(api.max_watches_per_bot); close a watch first", rule="api.max_watches_per_bot")
                if self._held.total() >= self.settings.max_total:
                    raise Unavailable(f"{self.settings.max_total} watches are open in this server already "
                                      "(api.max_watches); retry when one closes", rule="api.max_watches")
                self._held[holder] += 1
        try:
            feed = self._subscribe(os.path.realpath(record.path))
        except BaseException as exc:
            if holder is not None:
                self._release(holder)
            if isinstance(exc, FileNotFoundError | NotADirectoryError):
                raise Conflict(f"the folder of workspace {name!r} is missing: `warden health {name}` says more",
                               rule="watch.folder") from None
            raise
        return Watch(name, feed, shown=shown, status_of=self._status_of,
                     done=(lambda: self._release(holder)) if holder is not None else (lambda: None))

    def _subscribe(self, root: str) -> _Subscription:
        """A view of the shared feed of `root`, started if none is running."""
        with self._lock:
            shared = self._shared.get(root)
            if shared is None or shared.stopped:
                feed = self._watcher.watch(root, debounce_s=self.settings.debounce_s,
                                           max_wait_s=self.settings.max_wait_s, limit=self.settings.limit)
                shared = self._shared[root] = _Shared(feed, self.settings.limit,
                                                      lambda done: self._idle(root, done))
            return shared.subscribe()

    def _idle(self, root: str, shared: _Shared) -> None:
        """The last watch of `shared` left: close its feed (unless another joined meanwhile)."""
        with self._lock, shared.cond:
            if shared.subscribers:
                return
            if self._shared.get(root) is shared:
                del self._shared[root]
        shared.feed.close()

    def _release(self, holder: str) -> None:
        with self._lock:
            self._held[holder] -= 1
            if self._held[holder] <= 0:
                del self._held[holder]

    def _status_of(self, name: str) -> str | None:
        from warden.core.errors import NotFound

        try:
            return self._workspaces.get(name).status
        except NotFound:
            return None
