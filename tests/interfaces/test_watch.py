"""File watching end to end: `warden watch`, `GET /v1/workspaces/{name}/events` on a real `warden
serve`, the SDK's `ws.files.watch()`, and the change summary in a run's audit event.

Batches are shown by order and count: a stream (or the CLI) is known to be watching from what it
sent first (the SSE comment `: watching`, the CLI's "watching" line), and only then are files
written; a burst of 50 quick writes is then the first event, whole.

A bot's attacks are made for real, at a modest size (2,000 folders): a rename storm costs the
server's CPU about what one stream over the same tree costs (measured from /proc/PID/stat in the
same test), the stream ends on its timeout, a client leaving mid-storm leaves no watch and no
work behind, streams of one workspace share its watches, and notices name no path the bot may
not see.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import at_a_terminal
from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until
from warden.client import Client
from warden.core.errors import Denied, Unavailable

MAX_WATCHES = 2


class World:
    def __init__(self, home: Path, environ: dict[str, str], server: ServeProcess, tokens: dict[str, str]) -> None:
        self.home, self.environ, self.server, self.tokens = home, environ, server, tokens

    def folder(self, name: str = "shared") -> Path:
        return self.home / "workspaces" / name

    def stream(self, bot: str, name: str = "shared", **params: Any) -> Any:
        return httpx.stream("GET", f"{self.server.url}/v1/workspaces/{name}/events", params=params, timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[bot]}"} if bot else {})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("watch")
    home = root / "home"
    environ = {**warden_environ(home), "WARDEN_API_MAX_WATCHES_PER_BOT": str(MAX_WATCHES)}
    cli_out(environ, "init")
    for name in ("shared", "other", "doomed", "storm"):
        cli_out(environ, "create", name, "--template", "minimal")
    tokens = {}
    for bot in ("reader", "zoned", "runner", "stranger", "doomer", "stormer", "revoked"):
        cli_out(environ, "bot", "register", bot)
    tokens["reader"] = cli_out(environ, "grant", "shared", "reader", "--permissions", "read")
    tokens["zoned"] = cli_out(environ, "grant", "shared", "zoned", "--permissions", "read", "--zones", "cache")
    tokens["runner"] = cli_out(environ, "grant", "shared", "runner", "--permissions", "execute")
    tokens["stranger"] = cli_out(environ, "grant", "other", "stranger", "--permissions", "read")
    tokens["doomer"] = cli_out(environ, "grant", "doomed", "doomer", "--permissions", "read")
    tokens["stormer"] = cli_out(environ, "grant", "storm", "stormer", "--permissions", "read")
    tokens["revoked"] = cli_out(environ, "grant", "shared", "revoked", "--permissions", "read")
    with ServeProcess(environ, root) as server:
        yield World(home, environ, server, tokens)


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """(event, data) of each event in an SSE stream; comments as ("comment", text)."""
    kind = ""
    for line in lines:
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            yield kind, json.loads(line[5:])
        elif not line:
            kind = ""


def _server_pids(server: ServeProcess) -> list[int]:
    """The server and its workers."""
    assert server.proc is not None
    pids, found = [server.proc.pid], []
    while pids:
        pid = pids.pop()
        found.append(pid)
        with contextlib.suppress(OSError):  # a process gone meanwhile
            for task in Path(f"/proc/{pid}/task").iterdir():
                pids += [int(p) for p in (task / "children").read_text().split()]
    return found


def _server_watches(server: ServeProcess) -> int:
    """Folders watched by inotify in the server and its workers (fdinfo: one line per watch)."""
    count = 0
    for pid in _server_pids(server):
        for info in _listed(Path(f"/proc/{pid}/fdinfo")):
            with contextlib.suppress(OSError):  # a descriptor closed meanwhile
                count += info.read_text().count("inotify wd:")
    return count


def _listed(folder: Path) -> list[Path]:
    """A process's /proc folder's entries; none for one that is not the server's to read (a
    bot's live sandbox under it, non-dumpable in its own namespaces) or that is gone."""
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _server_inotify_fds(server: ServeProcess) -> int:
    """inotify descriptors open in the server and its workers (watching or pooled, idle)."""
    count = 0
    for pid in _server_pids(server):
        for fd in _listed(Path(f"/proc/{pid}/fd")):
            with contextlib.suppress(OSError):
                count += os.readlink(fd) == "anon_inode:inotify"
    return count


def _server_cpu(server: ServeProcess) -> float:
    """CPU seconds (user and system) the server and its workers used so far."""
    total = 0
    for pid in _server_pids(server):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: proc(5) fields 14 and 15
    return total / os.sysconf("SC_CLK_TCK")


def _write_burst(folder: Path, prefix: str, n: int = 50) -> list[str]:
    for i in range(n):
        (folder / f"{prefix}{i:02}.txt").write_text("x")
    return [f"/{prefix}{i:02}.txt" for i in range(n)]


def test_stream_needs_a_token_with_read_on_that_workspace(world: World) -> None:
    url = f"{world.server.url}/v1/workspaces/shared/events"
    assert httpx.get(url, timeout=10).status_code == 401
    for bot in ("stranger", "runner"):  # another workspace's grant; a grant without read
        answer = httpx.get(url, headers={"Authorization": f"Bearer {world.tokens[bot]}"}, timeout=10)
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"]["code"] == "denied"


def test_a_burst_is_one_change_event_and_ignored_folders_say_nothing(world: World) -> None:
    folder = world.folder()
    (folder / "node_modules").mkdir(exist_ok=True)
    with world.stream("reader") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _sse(response.iter_lines())
        assert next(events) == ("comment", "watching")
        (folder / "node_modules" / "noise.js").write_text("x")
        (folder / ".venv" / "noise.py").write_text("x")
        expected = _write_burst(folder, "burst")
        kind, data = next(events)
        assert kind == "change"
        assert [c["path"] for c in data["changes"]] == expected  # the noise came first, and is not there
        assert data["count"] == 50 and {c["change"] for c in data["changes"]} == {"added"}
        (folder / "after.txt").write_text("x")
        kind, data = next(events)
        assert (kind, data["changes"]) == ("change", [{"change": "added", "path": "/after.txt"}])


def test_a_zoned_grant_sees_its_zones_only(world: World) -> None:
    folder = world.folder()
    (folder / "cache").mkdir(exist_ok=True)
    with world.stream("zoned") as response:
        events = _sse(response.iter_lines())
        assert next(events) == ("comment", "watching")
        (folder / "outside-zone.txt").write_text("x")
        (folder / "cache" / "in-zone.txt").write_text("x")
        kind, data = next(events)
        assert kind == "change" and [c["path"] for c in data["changes"]] == ["/cache/in-zone.txt"]


def test_a_denied_path_is_never_named_to_a_bot(world: World) -> None:
    folder = world.folder()
    (folder / "private").mkdir(exist_ok=True)
    cli_out(world.environ, "sandbox", "remove", str(folder / "private"), "--workspace", "shared")
    try:
        with world.stream("reader") as response:
            events = _sse(response.iter_lines())
            assert next(events) == ("comment", "watching")
            (folder / "private" / "salary.csv").write_text("x")
            (folder / "public.txt").write_text("x")
            kind, data = next(events)
            assert kind == "change" and [c["path"] for c in data["changes"]] == ["/public.txt"]
    finally:
        cli_out(world.environ, "sandbox", "add", str(folder / "private"), "--workspace", "shared")


def test_a_disconnect_closes_the_watch_and_frees_its_place(world: World) -> None:
    # The streams of earlier tests close as their clients left, a moment later: wait for none.
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    before = 0
    streams = [world.stream("reader") for _ in range(MAX_WATCHES)]
    # One iterator kept per stream: dropping httpx's line iterator would close the connection.
    readers = [_sse(stream.__enter__().iter_lines()) for stream in streams]
    for reader in readers:
        assert next(reader) == ("comment", "watching")
    assert _server_watches(world.server) > before
    ws = Client(world.server.url, world.tokens["reader"]).workspace("shared")
    with pytest.raises(Unavailable, match=r"api\.max_watches_per_bot"):
        list(ws.files.watch(timeout=1))
    for stream in streams:
        stream.__exit__(None, None, None)  # the client goes away mid-stream
    wait_until(lambda: _server_watches(world.server) == before, timeout=10)
    assert list(ws.files.watch(timeout=0.5)) == []  # the places are free again


def test_sdk_watch_yields_batches_then_ends(world: World) -> None:
    folder = world.folder()
    ws = Client(world.server.url, world.tokens["reader"]).workspace("shared")
    batches = ws.files.watch(timeout=20, count=1)
    # The generator opens the stream at its first step: write from another process once it
    # is open, i.e. keep writing until the first batch arrives.
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time, pathlib\n"
                               "for i in range(200):\n"
                               "    pathlib.Path(sys.argv[1], f'sdk{i}.txt').write_text('x'); time.sleep(0.05)",
                               str(folder)])
    try:
        got = list(batches)
    finally:
        writer.kill()
        writer.wait()
    assert len(got) == 1 and got[0].changes and got[0].changes[0].path.startswith("/sdk")


def test_the_stream_ends_when_the_workspace_is_destroyed(world: World) -> None:
    with world.stream("doomer", "doomed") as response:
        events = _sse(response.iter_lines())
        assert next(events) == ("comment", "watching")
        cli_out(world.environ, "destroy", "doomed", "--yes", "--no-archive")
        seen = list(events)
    assert seen[-1][0] == "end" and seen[-1][1]["reason"] in ("gone", "archived")


def test_a_revoked_grant_is_told_no_more_and_its_stream_ends(world: World) -> None:
    # Its token was good when the stream opened; the revoke comes from the person's CLI, another
    # process than the server. Another bot then changes the workspace: the revoked bot must not
    # learn of it (names of files are what a watch tells), and its stream must end, not linger.
    folder = world.folder()
    with world.stream("revoked") as response:
        events = _sse(response.iter_lines())
        assert next(events) == ("comment", "watching")
        cli_out(world.environ, "revoke", "shared", "revoked")
        (folder / "after-the-revoke.txt").write_text("x")
        started = time.monotonic()
        seen = []
        for event in events:  # the first event that is not a keep-alive; without the check, the change
            seen.append(event)
            if event[0] != "comment":
                break
    assert seen == [("end", {"reason": "denied"})]
    assert time.monotonic() - started < 10  # at the next batch, not at a heartbeat's end or never
    answer = httpx.get(f"{world.server.url}/v1/workspaces/shared/events", timeout=10,
                       headers={"Authorization": f"Bearer {world.tokens['revoked']}"})
    assert answer.status_code == 403


def test_the_sdk_says_denied_when_its_grant_is_revoked_while_it_watches(world: World) -> None:
    token = cli_out(world.environ, "grant", "shared", "revoked", "--permissions", "read")
    batches = Client(world.server.url, token).workspace("shared").files.watch(timeout=30)
    folder = world.folder()
    (folder / "before-the-revoke.txt").write_text("x")  # may come before the stream opens: written again below
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time, pathlib\n"
                               "for i in range(200):\n"
                               "    pathlib.Path(sys.argv[1], f'sdk-revoke{i}.txt').write_text('x'); time.sleep(0.05)",
                               str(folder)])
    try:
        next(batches)  # watching: now revoke it
        cli_out(world.environ, "revoke", "shared", "revoked")
        with pytest.raises(Denied, match="permission denied"):
            for _ in batches:
                pass
    finally:
        writer.kill()
        writer.wait()


def _cli(world: World, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "warden", *args], env=world.environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=at_a_terminal)


def test_cli_watch_json_count_one_gets_the_batch(world: World) -> None:
    folder = world.folder()
    proc = _cli(world, "watch", "shared", "--json", "--count", "1", "--timeout", "30")
    assert proc.stderr is not None and proc.stdout is not None
    assert proc.stderr.readline().startswith("watching shared")
    expected = _write_burst(folder, "cli")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    first, last = out.splitlines()
    assert [c["path"] for c in json.loads(first)["changes"]] == expected
    assert json.loads(last) == {"ok": True, "data": {"batches": 1, "changes": 50, "ended": None}}


def test_cli_watch_text_and_ctrl_c(world: World) -> None:
    proc = _cli(world, "watch", "shared")
    assert proc.stderr is not None and proc.stdout is not None
    assert proc.stderr.readline().startswith("watching shared")
    (world.folder() / "text.txt").write_text("x")
    assert proc.stdout.readline() == "added /text.txt\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and "interrupted" in err


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_runs_audit_event_sums_up_what_it_changed(world: World) -> None:
    (world.folder() / "doomed-by-run.txt").write_text("x")
    cli_out(world.environ, "run", "shared", "--", "sh", "-c",
            "mkdir -p out && echo hi > out/made-by-run.txt && rm doomed-by-run.txt && mkdir -p .git && touch .git/x")
    events = json.loads(cli_out(world.environ, "audit", "--json", "--limit", "20"))["data"]
    run = [e for e in events if e["action"] == "run"][-1]
    assert run["detail"]["changes"] == {"added": 2, "modified": 0, "deleted": 1,
                                        "paths": ["/out", "/out/made-by-run.txt", "/doomed-by-run.txt"]}
    cli_out(world.environ, "run", "shared", "--", "true")
    events = json.loads(cli_out(world.environ, "audit", "--json", "--limit", "5"))["data"]
    assert "changes" not in [e for e in events if e["action"] == "run"][-1]["detail"]
    # A bot's exec over HTTP is audited the same way.
    ws = Client(world.server.url, world.tokens["runner"]).workspace("shared")
    assert ws.run(["sh", "-c", "echo hi > via-http.txt"]).exit_code == 0
    events = json.loads(cli_out(world.environ, "audit", "--json", "--limit", "10"))["data"]
    run = [e for e in events if e["action"] == "run"][-1]
    assert run["actor"].startswith("bot:runner") and run["detail"]["changes"]["paths"] == ["/via-http.txt"]


def test_a_rename_storm_costs_the_server_about_one_walk_and_the_stream_ends_on_time(world: World) -> None:
    # The bot's `mkdir -p d/{0..19}/{0..99}`: 2,000 folders (the attack had 5,000 and 20,000).
    folder = world.folder("storm")
    for i in range(20):
        for j in range(100):
            (folder / "d" / str(i) / str(j)).mkdir(parents=True)
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    fds = _server_inotify_fds(world.server)
    # The baseline: a stream over the same tree while nothing changes (a walk, an idle second).
    cpu = _server_cpu(world.server)
    with world.stream("stormer", "storm", timeout=1) as response:
        assert list(_sse(response.iter_lines()))[-1] == ("end", {"reason": "timeout"})
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    base = _server_cpu(world.server) - cpu
    cpu = _server_cpu(world.server)
    with world.stream("stormer", "storm", timeout=3) as response:
        opened = time.monotonic()
        events = _sse(response.iter_lines())
        assert next(events) == ("comment", "watching")
        for _ in range(250):  # 500 renames in ~10 ms; the old server walked 2,000 folders for each
            (folder / "d").rename(folder / "e")
            (folder / "e").rename(folder / "d")
        seen = list(events)
        took = time.monotonic() - opened
    assert seen[-1] == ("end", {"reason": "timeout"}) and took < 3 + 2  # on time, storm or not
    assert ("change", "/d") in [(k, c["path"]) for k, d in seen if k == "change" for c in d["changes"]]
    # Given back on disconnect: no watch left, no inotify descriptor but the one kept pooled.
    wait_until(lambda: _server_watches(world.server) == 0, timeout=5)
    assert _server_inotify_fds(world.server) <= max(fds, 1)
    spent = _server_cpu(world.server) - cpu
    assert spent < 4 * base + 0.5, (spent, base)
    # And nothing goes on working after the stream: the server idles.
    cpu = _server_cpu(world.server)
    time.sleep(1)
    assert _server_cpu(world.server) - cpu < 0.2


_RENAMER = """
import os, sys, time
os.chdir(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    os.rename("d", "e"); os.rename("e", "d")
"""


def test_a_disconnect_stops_the_servers_work_while_the_storm_goes_on(world: World) -> None:
    folder = world.folder("storm")
    for i in range(20):
        for j in range(100):
            (folder / "d" / str(i) / str(j)).mkdir(parents=True, exist_ok=True)
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    renamer = None
    try:
        with world.stream("stormer", "storm") as response:
            events = _sse(response.iter_lines())
            assert next(events) == ("comment", "watching")
            renamer = subprocess.Popen([sys.executable, "-c", _RENAMER, str(folder), "10"])
            assert next(kind for kind, _ in events if kind != "comment") == "change"  # the server works on it
        left = time.monotonic()  # the client went, the storm goes on
        wait_until(lambda: _server_watches(world.server) == 0, timeout=3)
        assert time.monotonic() - left < 2
        time.sleep(0.3)
        cpu = _server_cpu(world.server)
        time.sleep(1)
        assert renamer.poll() is None  # still renaming: yet the server does nothing about it
        assert _server_cpu(world.server) - cpu < 0.2
    finally:
        if renamer is not None:
            renamer.kill()
            renamer.wait()


def test_streams_of_one_workspace_share_its_watches(world: World) -> None:
    folder = world.folder("storm")
    for i in range(5):
        (folder / "shared-tree" / str(i)).mkdir(parents=True, exist_ok=True)
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    with world.stream("stormer", "storm", timeout=20) as one:
        first = _sse(one.iter_lines())
        assert next(first) == ("comment", "watching")
        alone = _server_watches(world.server)
        assert alone > 5
        with world.stream("stormer", "storm", timeout=20) as two:
            second = _sse(two.iter_lines())
            assert next(second) == ("comment", "watching")
            assert _server_watches(world.server) == alone  # one feed, not one per stream
            (folder / "shared-tree" / "both.txt").write_text("x")
            for events in (first, second):
                kind, data = next(events)
                assert kind == "change" and [c["path"] for c in data["changes"]] == ["/shared-tree/both.txt"]
        (folder / "shared-tree" / "one.txt").write_text("x")  # the first still watches
        kind, data = next(first)
        assert kind == "change" and [c["path"] for c in data["changes"]] == ["/shared-tree/one.txt"]
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)


def test_notices_name_only_what_the_bot_may_see(tmp_path: Path) -> None:
    # A server whose watches hold 5 folders: the rest is noted, folder by folder.
    home = tmp_path / "home"
    environ = {**warden_environ(home), "WARDEN_WATCH_MAX_FOLDERS": "5"}
    cli_out(environ, "init")
    cli_out(environ, "create", "small", "--template", "minimal")
    cli_out(environ, "bot", "register", "zoned")
    token = cli_out(environ, "grant", "small", "zoned", "--permissions", "read", "--zones", "cache")
    folder = home / "workspaces" / "small"
    for i in range(10):
        (folder / "cache" / f"c{i}").mkdir(parents=True)
        (folder / "outside" / f"o{i}").mkdir(parents=True)
    with ServeProcess(environ, tmp_path) as server, httpx.stream(
            "GET", f"{server.url}/v1/workspaces/small/events", params={"timeout": 1}, timeout=30,
            headers={"Authorization": f"Bearer {token}"}) as response:
        seen = list(_sse(response.iter_lines()))
    notices = [data["message"] for kind, data in seen if kind == "notice"]
    assert notices and any(n.startswith("/cache") for n in notices), seen
    assert not [n for n in notices if "/outside" in n], notices  # the zoned bot may not see /outside


def test_no_watcher_outlives_the_tests(world: World) -> None:
    wait_until(lambda: _server_watches(world.server) == 0, timeout=10)
    assert os.path.isdir(world.folder())


def test_the_route_is_in_the_api_description(world: World) -> None:
    doc = httpx.get(world.server.url + "/openapi.json", timeout=10).json()
    route = doc["paths"]["/v1/workspaces/{name}/events"]["get"]
    assert "text/event-stream" in route["responses"]["200"]["content"]
    assert [p["name"] for p in route["parameters"]] == ["name", "timeout"]
