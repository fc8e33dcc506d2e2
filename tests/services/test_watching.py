"""services/watching.py with the fake watcher: who may open a watch, how many a bot holds, what a
zoned holder is shown, and when a watch ends (the folder goes, the workspace leaves `ready`)."""

from __future__ import annotations

import threading

import pytest

import warden.services.watching as watching
from tests.support.fakes import FakeWatcher
from warden.core.errors import Conflict, NotFound, Unavailable
from warden.core.workspaces import WorkspaceRecord
from warden.services.watching import WatchService, WatchSettings


class Workspaces:
    """The one method the service asks of WorkspaceService."""

    def __init__(self) -> None:
        self.records = {"w": WorkspaceRecord("id1", "w", "/ws/w", "project", "ready", "t", "t")}

    def get(self, name: str) -> WorkspaceRecord:
        if name not in self.records:
            raise NotFound(f"no workspace named {name!r}")
        return self.records[name]

    def set_status(self, name: str, status: str) -> None:
        import dataclasses

        self.records[name] = dataclasses.replace(self.records[name], status=status)


@pytest.fixture
def world() -> tuple[WatchService, FakeWatcher, Workspaces]:
    fake, spaces = FakeWatcher(), Workspaces()
    service = WatchService(workspaces=spaces, watcher=fake, settings=WatchSettings(max_per_bot=2, max_total=3))  # type: ignore[arg-type]
    return service, fake, spaces


def test_batches_reach_the_watch_and_a_zoned_holder_sees_its_zone_only(world: tuple) -> None:  # type: ignore[type-arg]
    service, fake, _ = world
    with service.open("w") as everything, service.open("w", shown=lambda p: p.startswith("/cache/")) as zoned:
        fake.change("/ws/w", "added", "/secret.txt")
        fake.change("/ws/w", "added", "/cache/a")
        batch = everything.next(1)
        assert batch is not None and [c.path for c in batch.changes] == ["/secret.txt", "/cache/a"]
        batch = zoned.next(1)
        assert batch is not None and [c.path for c in batch.changes] == ["/cache/a"]
        fake.change("/ws/w", "added", "/secret2.txt")
        assert zoned.next(0.2) is None  # nothing it may see: no batch at all


def test_notices_are_filtered_like_changes_and_later_ones_come_once(world: tuple) -> None:  # type: ignore[type-arg]
    from warden.core.watching import Notice

    service, fake, _ = world
    with service.open("w") as everything, service.open("w", shown=lambda p: p.startswith("/cache/")) as zoned:
        (feed,) = fake.feeds  # one feed for both: shared
        feed.notes += [Notice("/private/salary is not watched: no room", "/private/salary"),
                       Notice("/cache/big is not watched: no room", "/cache/big"),
                       Notice("more folders are not watched: no room")]
        assert [n.message for n in zoned.notes] == ["/cache/big is not watched: no room",
                                                    "more folders are not watched: no room"]
        assert [n.path for n in zoned.fresh_notes()] == ["/cache/big", None]
        assert zoned.fresh_notes() == []  # told once
        feed.notes.append(Notice("/private/later is not watched: no room", "/private/later"))
        assert zoned.fresh_notes() == []  # never a path the holder may not see
        assert len(everything.notes) == 4  # a holder without a filter is told everything


def test_watches_of_one_folder_share_one_feed_and_a_slow_one_gets_merged_batches(world: tuple) -> None:  # type: ignore[type-arg]
    service, fake, _ = world
    first, second = service.open("w"), service.open("w")
    assert len(fake.feeds) == 1
    for i in range(20):  # 20 batches nobody reads yet
        fake.change("/ws/w", "added", f"/f{i}")
        assert first.next(1) is not None
    got = []
    while (batch := second.next(0.1)) is not None:
        got.append(batch)
    assert len(got) <= watching._QUEUED and sum(b.count for b in got) == 20  # bounded, none lost
    first.close()
    assert len(fake.feeds) == 1  # the other still watches
    second.close()
    assert not fake.feeds


def test_a_bot_holds_at_most_its_share_and_a_closed_watch_frees_it(world: tuple) -> None:  # type: ignore[type-arg]
    service, fake, _ = world
    first, second = service.open("w", holder="bot"), service.open("w", holder="bot")
    with pytest.raises(Unavailable, match=r"api\.max_watches_per_bot"):
        service.open("w", holder="bot")
    third = service.open("w", holder="other-bot")  # another bot has its own share
    with pytest.raises(Unavailable, match=r"api\.max_watches\b"):  # but all together are bounded too
        service.open("w", holder="yet-another")
    third.close()
    first.close()
    first.close()  # twice is once
    assert service.held("bot") == 1
    service.open("w", holder="bot").close()
    second.close()
    assert service.held("bot") == 0 and not fake.feeds


def test_only_a_ready_or_suspended_workspace_with_its_folder_is_watched(world: tuple) -> None:  # type: ignore[type-arg]
    service, fake, spaces = world
    with pytest.raises(NotFound):
        service.open("nope")
    spaces.set_status("w", "archived")
    with pytest.raises(Conflict, match="unarchive"):
        service.open("w", holder="bot")
    spaces.set_status("w", "ready")
    fake.missing.add("/ws/w")
    with pytest.raises(Conflict, match="missing"):
        service.open("w", holder="bot")
    assert service.held("bot") == 0


def test_a_watch_ends_when_the_folder_goes_or_the_workspace_is_archived(world: tuple,  # type: ignore[type-arg]
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    service, fake, spaces = world
    with service.open("w") as watch:
        fake.remove("/ws/w")
        assert watch.next(1) is None and watch.ended == "gone"
    fake.missing.clear()
    monkeypatch.setattr(watching, "_CHECK_S", 0.05)
    with service.open("w") as watch:
        spaces.set_status("w", "archived")
        assert watch.next(2) is None and watch.ended == "archived"


def test_close_from_another_thread_ends_a_waiting_next(world: tuple) -> None:  # type: ignore[type-arg]
    service, _, _ = world
    watch = service.open("w", holder="bot")
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(watch.next(None)))
    waiter.start()
    watch.close()
    waiter.join(5)
    assert got == [None] and watch.ended == "closed" and service.held("bot") == 0


def test_the_policy_filter_shows_what_stat_allows_and_reads_the_policy_once_a_second() -> None:
    from warden.core.errors import InvalidInput
    from warden.services.watching import PolicyFilter

    class Decision:
        def __init__(self, allowed: bool) -> None:
            self.allowed = allowed

    class Policy:
        def decide(self, path: str, op: str) -> Decision:
            assert op == "stat"
            if "\\n" in path:
                raise InvalidInput("bad name")
            return Decision(not path.startswith("/private"))

    class Files:
        reads = 0

        def policy(self) -> Policy:
            Files.reads += 1
            return Policy()

    now = [0.0]
    shown = PolicyFilter(Files(), clock=lambda: now[0])  # type: ignore[arg-type]
    assert shown("/a.txt") and not shown("/private/x") and not shown("/bad\\nname")
    assert Files.reads == 1
    now[0] = 1.5
    assert shown("/b.txt") and Files.reads == 2
