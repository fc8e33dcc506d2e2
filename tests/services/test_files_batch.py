"""Many reads as one audit event (a bot's search over a tree), per thread: another request of
the same bot through the same file service at the same time is audited as ever."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.bootstrap import App, bootstrap


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    home = tmp_path / "home"
    application = bootstrap(home, environ={"PATH": os.environ.get("PATH", ""), "WARDEN_HOME": str(home)})
    record = application.workspaces.create("demo", template="minimal")
    for i in range(30):
        (Path(record.path) / "src").mkdir(exist_ok=True)
        (Path(record.path) / "src" / f"{i}.txt").write_text("x")
    yield application
    application.close()


def test_a_search_is_one_event_and_other_threads_still_audit_each_read(app: App) -> None:
    files = app.files("demo", actor="bot:b@acc_x")
    before = len(app.audit.list(limit=1000))
    other_done = threading.Event()

    def other() -> None:
        files.read_bytes("/src/0.txt")  # meanwhile, in another thread: its own event
        other_done.set()

    with files.one_event("search", "/src"):
        for entry in files.list("/src"):
            files.read_bytes(f"/src/{entry.name}")
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    events = app.audit.list(limit=1000)[before:]  # oldest first: the new ones are at the end
    searches = [e for e in events if e.action == "fs.search"]
    assert len(searches) == 1 and searches[0].detail == {"reads": 31, "refused": 0}
    assert [e.action for e in events if e.action == "fs.read"] == ["fs.read"] and other_done.is_set()
