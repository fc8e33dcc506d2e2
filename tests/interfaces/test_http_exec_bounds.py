"""One bot cannot hold the API's threads or its memory through exec."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from tests.support.waiting import wait_until
from warden.client import Client
from warden.core.errors import Unavailable
from warden.interfaces.http.running import ExecSlots


def test_exec_slots_bound_all_and_each_bot() -> None:
    slots = ExecSlots(total=3, per_bot=2)
    with slots.take("a"), slots.take("a"):
        with pytest.raises(Unavailable, match="max_execs_per_bot"), slots.take("a"):
            pass
        with slots.take("b"), pytest.raises(Unavailable, match=r"api\.max_execs\)"), slots.take("c"):
            pass
    with slots.take("a"), slots.take("a"), slots.take("b"):  # all released
        pass




def test_held_slots_are_counted_over_processes_and_freed_by_a_death(tmp_path: Path) -> None:
    import subprocess
    import sys

    from warden.adapters.exec_slots import HeldSlots

    folder = tmp_path / "slots"
    slots = ExecSlots(total=3, per_bot=2, shared=HeldSlots(folder))
    # Another process (a second server worker) holds one of bot a's slots.
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from warden.adapters.exec_slots import HeldSlots\n"
        f"with HeldSlots(__import__('pathlib').Path({str(folder)!r})).take('a', lambda e, m: None):\n"
        "    print('held', flush=True); time.sleep(60)")], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        theirs = {p.name for p in folder.iterdir()} - {".lock"}
        with slots.take("a"):
            with pytest.raises(Unavailable, match="max_execs_per_bot"), slots.take("a"):
                pass
            with slots.take("b"), pytest.raises(Unavailable, match=r"api\.max_execs\)"), slots.take("c"):
                pass
    finally:
        holder.kill()
        holder.wait()
    # Its worker died mid-command: its slot is free again, and its file goes (this worker's
    # own stay, idle, for its next commands).
    with slots.take("a"), slots.take("a"):
        pass
    assert len(theirs) == 1 and not theirs & {p.name for p in folder.iterdir()}
    assert slots.counts("a") == (0, 0)


def test_a_worker_reuses_its_idle_slot_files_and_they_count_for_nobody(tmp_path: Path) -> None:
    # Each exec made a file and removed it: a journaled change of the folder, 0.1-0.7 ms a command.
    import subprocess
    import sys

    from warden.adapters.exec_slots import HeldSlots

    folder = tmp_path / "slots"
    slots = ExecSlots(total=2, per_bot=1, shared=HeldSlots(folder))
    with slots.take("a"):
        pass
    kept = [p for p in folder.iterdir() if p.name != ".lock"]
    assert len(kept) == 1
    inode = kept[0].stat().st_ino
    for _ in range(5):
        with slots.take("a"):
            assert slots.counts("a") == (1, 1) and slots.counts("b") == (1, 0)
        assert slots.counts("a") == (0, 0)
    assert [(p.name, p.stat().st_ino) for p in folder.iterdir() if p.name != ".lock"] == [(kept[0].name, inode)]
    # Another worker's idle file holds nothing; its running one holds a slot of its bot only.
    other = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from warden.adapters.exec_slots import HeldSlots\n"
        f"slots = HeldSlots(__import__('pathlib').Path({str(folder)!r}))\n"
        "with slots.take('b', lambda e, m: None):\n"
        "    print('running', flush=True); sys.stdin.readline()\n"
        "print('idle', flush=True); time.sleep(60)")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert other.stdin is not None and other.stdout is not None
        assert other.stdout.readline() == b"running\n"
        theirs = {p.name for p in folder.iterdir()} - {".lock", kept[0].name}
        assert slots.counts("b") == (1, 1) and slots.counts("a") == (1, 0)
        with pytest.raises(Unavailable, match="max_execs_per_bot"), slots.take("b"):
            pass
        other.stdin.write(b"go\n")
        other.stdin.flush()
        assert other.stdout.readline() == b"idle\n"
        assert len([p for p in folder.iterdir() if p.name != ".lock"]) == 2  # its file kept, idle
        assert slots.counts("b") == (0, 0)
        with slots.take("b"), slots.take("a"):
            pass
    finally:
        other.kill()
        other.wait()
    assert slots.counts("a") == (0, 0)  # its file goes with it; this worker's two stay
    left = {p.name for p in folder.iterdir()} - {".lock"}
    assert len(theirs) == 1 and not theirs & left and kept[0].name in left and len(left) == 2


def test_a_busy_bot_is_refused_by_every_worker(tmp_path: Path, initialised_home: Path) -> None:
    # The foreground slots were counted per worker: with two, a bot ran twice its share.
    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_EXECS_PER_BOT": "1"}
    cli_out(environ, "init")
    cli_out(environ, "create", "busy2")
    cli_out(environ, "bot", "register", "hog")
    hog = cli_out(environ, "grant", "busy2", "hog", "--permissions", "read,execute")
    with ServeProcess(environ, tmp_path, "--workers", "2", "--no-access-log") as server:
        url = f"{server.url}/v1/workspaces/busy2/exec"
        headers = {"Authorization": f"Bearer {hog}"}
        folder = initialised_home / "workspaces" / "busy2"
        hold = "touch started; while [ ! -e release ]; do sleep 0.05; done"
        holder = threading.Thread(target=lambda: httpx.post(url, json={"cmd": ["sh", "-c", hold]}, headers=headers,
                                                            timeout=60))
        holder.start()
        try:
            wait_until((folder / "started").exists, timeout=60, message="the first command never started")
            # New connections each: the requests spread over both workers.
            refused = [httpx.post(url, json={"cmd": ["true"]}, headers=headers, timeout=60).status_code
                       for _ in range(6)]
            assert refused == [503] * 6
        finally:
            (folder / "release").touch()
            holder.join(60)
        assert httpx.post(url, json={"cmd": ["true"]}, headers=headers, timeout=60).status_code == 200


def test_a_busy_bot_is_refused_others_are_served_and_output_is_capped(tmp_path: Path,
                                                                      initialised_home: Path) -> None:
    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_EXECS_PER_BOT": "1",
               "WARDEN_API_MAX_OUTPUT": "64K"}
    cli_out(environ, "init")
    cli_out(environ, "create", "busy")
    for bot in ("hog", "calm"):
        cli_out(environ, "bot", "register", bot)
    hog = cli_out(environ, "grant", "busy", "hog", "--permissions", "read,execute")
    calm = cli_out(environ, "grant", "busy", "calm", "--permissions", "read,execute")
    with ServeProcess(environ, tmp_path) as server:
        url = f"{server.url}/v1/workspaces/busy/exec"

        def exec_as(token: str, cmd: list[str]) -> httpx.Response:
            return httpx.post(url, json={"cmd": cmd}, headers={"Authorization": f"Bearer {token}"}, timeout=60)

        folder = initialised_home / "workspaces" / "busy"
        # The hog's first command holds its slot until the test lets it go.
        hold = "touch started; while [ ! -e release ]; do sleep 0.05; done"
        holder = threading.Thread(target=exec_as, args=(hog, ["sh", "-c", hold]))
        holder.start()
        try:
            wait_until((folder / "started").exists, timeout=60, message="the first command never started")
            started = time.monotonic()
            second = exec_as(hog, ["true"])
            assert second.status_code == 503 and "max_execs_per_bot" in second.json()["error"]["message"]
            assert time.monotonic() - started < 5, "refused at once, not queued behind the held command"
            other = exec_as(calm, ["true"])
            assert other.status_code == 200 and other.json()["exit_code"] == 0
        finally:
            (folder / "release").touch()
            holder.join(60)
        big = exec_as(calm, ["python3", "-c", "import sys; sys.stdout.write('x' * (1 << 20))"])
        assert big.status_code == 200
        assert len(big.json()["stdout"]) == 64 * 1024
        assert "output beyond 65536 bytes per stream was dropped" in big.json()["stderr"]
        assert (big.json()["truncated"], other.json()["truncated"]) == (True, False)
        # The SDK's result says so too (it said truncated=False whatever was dropped).
        sdk = Client(server.url, calm).workspace("busy")
        assert sdk.run(["python3", "-c", "import sys; sys.stdout.write('x' * (1 << 20))"]).truncated
        assert not sdk.run(["true"]).truncated


def test_the_sdk_waits_for_a_free_slot_and_a_fan_out_gets_every_answer(tmp_path: Path,
                                                                       initialised_home: Path) -> None:
    """Six runs at once from a bot allowed two: the server refuses the rest (503, Retry-After: the
    command never started) and the SDK asks again as slots free up. It raised the refusals, so an
    E2B-style fan-out of more calls than the bot's slots failed some of them."""
    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_EXECS_PER_BOT": "2"}
    cli_out(environ, "init")
    cli_out(environ, "create", "fan")
    cli_out(environ, "bot", "register", "fanner")
    token = cli_out(environ, "grant", "fan", "fanner", "--permissions", "read,execute")
    with ServeProcess(environ, tmp_path) as server:
        first = httpx.post(f"{server.url}/v1/workspaces/fan/exec", headers={"Authorization": f"Bearer {token}"},
                           json={"cmd": ["true"]}, timeout=60)
        assert first.status_code == 200 and "retry-after" not in first.headers
        results: list[object] = []

        def one(i: int, streamed: bool) -> None:
            ws = Client(server.url, token).workspace("fan")
            try:
                cmd = ["sh", "-c", f"sleep 0.5; echo {i}"]
                results.append(ws.run(cmd, on_stdout=lambda _: None) if streamed else ws.run(cmd))
            except Exception as exc:  # what the test reports
                results.append(exc)

        threads = [threading.Thread(target=one, args=(i, i % 2 == 0)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(r.stdout for r in results if hasattr(r, "stdout")) == [f"{i}\n" for i in range(6)], results
        # Asked not to wait, the SDK says the refusal at once, and the server said it is safe to ask again.
        # Both slots held by commands seen running (a fixed pause lost the race on a loaded machine).
        folder = Path(Client(server.url, token).workspace("fan").info()["path"])

        def hold(i: int) -> None:
            Client(server.url, token).workspace("fan").run(["sh", "-c", f"touch held-{i}; sleep 8"])

        holder = threading.Thread(target=hold, args=(9,))
        holder.start()
        other = threading.Thread(target=hold, args=(8,))
        other.start()
        wait_until(lambda: (folder / "held-9").exists() and (folder / "held-8").exists(), timeout=60,
                   message="the two commands holding the slots did not start")
        with pytest.raises(Unavailable, match="max_execs_per_bot"):
            Client(server.url, token, slot_wait=0).workspace("fan").run(["true"])
        busy = httpx.post(f"{server.url}/v1/workspaces/fan/exec", headers={"Authorization": f"Bearer {token}"},
                          json={"cmd": ["true"]}, timeout=60)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        holder.join(60)
        other.join(60)


def test_a_bot_holds_at_most_its_quota_of_workspaces(tmp_path: Path, initialised_home: Path) -> None:
    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_WORKSPACES_PER_BOT": "2"}
    cli_out(environ, "init")
    token = cli_out(environ, "bot", "register", "hoarder")
    with ServeProcess(environ, tmp_path) as server:
        def create(name: str) -> httpx.Response:
            return httpx.post(f"{server.url}/v1/workspaces", headers={"Authorization": f"Bearer {token}"},
                              json={"bot": "hoarder", "request": "workspace", "params": {"name": name}},
                              timeout=120)

        assert [create(n).status_code for n in ("h1", "h2")] == [201, 201]
        third = create("h3")
        assert third.status_code == 409 and "max_workspaces_per_bot" in third.json()["error"]["message"]
        names = {w["name"] for w in httpx.get(f"{server.url}/v1/workspaces",
                                              headers={"Authorization": f"Bearer {token}"}).json()}
        assert "h3" not in names


def test_a_trickled_body_is_cut_off_at_the_request_timeout(tmp_path: Path, initialised_home: Path) -> None:
    import select
    import socket
    from urllib.parse import urlsplit

    environ = {**warden_environ(initialised_home), "WARDEN_API_REQUEST_TIMEOUT": "2s"}
    cli_out(environ, "init")
    with ServeProcess(environ, tmp_path) as server:
        parts = urlsplit(server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/workspaces/x/exec HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"cmd\":")
            started = time.monotonic()
            # A byte every 0.3 s for 1.8 s, never the whole body: the connection is never idle for
            # the 2 s timeout, so only a bound on the whole request can cut it off, at ~2 s (an
            # idle timeout would answer at ~3.8 s). Then nothing more is sent: a byte that meets
            # the closed connection brings a reset, which drops the answer.
            while time.monotonic() - started < 1.8 and not select.select([sock], [], [], 0.3)[0]:
                sock.sendall(b" ")
            assert select.select([sock], [], [], 20)[0], "the trickle was never cut off"
            answered = time.monotonic() - started
            answer = b""
            while chunk := sock.recv(65536):  # the whole answer, until the server closes
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert answered < 3.5, f"answered after {answered:.1f} s: an idle timeout, not one on the whole request"
        assert b'"code":"timeout"' in answer.replace(b" ", b"")
        assert httpx.get(f"{server.url}/v1/health", timeout=10).status_code == 200


def test_tokens_a_bot_minted_for_others_share_its_exec_slots(tmp_path: Path, initialised_home: Path) -> None:
    from warden.bootstrap import bootstrap

    environ = {**warden_environ(initialised_home), "WARDEN_API_MAX_EXECS_PER_BOT": "2"}
    cli_out(environ, "init")
    cli_out(environ, "create", "shared")
    for bot in ("minter", "b", "c", "d"):
        cli_out(environ, "bot", "register", bot)
    minter = cli_out(environ, "grant", "shared", "minter", "--permissions", "read,execute,admin")
    d = cli_out(environ, "grant", "shared", "d", "--permissions", "read,execute")
    folder = initialised_home / "workspaces" / "shared"
    with ServeProcess(environ, tmp_path) as server:
        base = f"{server.url}/v1/workspaces/shared"

        def as_(token: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}"}

        minted = {}
        for bot in ("b", "c"):  # the minter keeps the tokens it mints for b and c
            wanted = {"bot": bot, "permissions": ["read", "execute"], "zones": ["*"]}
            response = httpx.post(f"{base}/grants", json=wanted,
                                  headers=as_(minter), timeout=30)
            assert response.status_code == 201, response.text
            minted[bot] = response.json()["token"]

        def exec_as(token: str, cmd: list[str]) -> httpx.Response:
            return httpx.post(f"{base}/exec", json={"cmd": cmd, "timeout": 30}, headers=as_(token), timeout=60)

        # Its own two slots, held until the test releases them (at most 30 s, the exec timeout).
        hold = "touch started-$0; while [ ! -e release ]; do sleep 0.05; done"
        holders = [threading.Thread(target=exec_as, args=(minter, ["sh", "-c", hold, str(i)])) for i in range(2)]
        for holder in holders:
            holder.start()
        try:
            wait_until(lambda: all((folder / f"started-{i}").exists() for i in range(2)), timeout=60,
                       message="the minter's commands never started")
            for bot in ("b", "c"):
                refused = exec_as(minted[bot], ["true"])
                assert refused.status_code == 503, refused.text
                assert "max_execs_per_bot" in refused.json()["error"]["message"]
            other = exec_as(d, ["true"])  # a bot the person granted: its own slots
            assert other.status_code == 200 and other.json()["exit_code"] == 0
        finally:
            (folder / "release").touch()
            for holder in holders:
                holder.join(60)
        served = exec_as(minted["b"], ["true"])
        assert served.status_code == 200 and served.json()["exit_code"] == 0
        assert httpx.get(base, headers=as_(minted["c"]), timeout=30).status_code == 200
    app = bootstrap(initialised_home, environ=environ)
    try:
        execs = sorted((e for e in app.audit.list(limit=100) if e.action == "api.exec"), key=lambda e: e.seq)
        by_b = [e for e in execs if e.actor.startswith("bot:b@")]
        assert [e.rule for e in by_b] == ["api.max_execs_per_bot", "grant.allow"]
        assert all(e.detail["bot"] == "b" and e.detail["minted_by"] == "minter" for e in by_b)
        read = next(e for e in app.audit.list(limit=100) if e.action == "api.workspace.get")
        assert read.actor.startswith("bot:c@") and read.detail["minted_by"] == "minter"  # any call says so
        by_d = [e for e in execs if e.actor.startswith("bot:d@")]
        assert [(e.detail["bot"], e.detail["minted_by"]) for e in by_d] == [("d", "d")]
    finally:
        app.close()


def test_every_workers_foreground_commands_count_for_a_background_start(tmp_path: Path) -> None:
    # A background start was admitted against this worker's foreground commands only.
    from warden.adapters.exec_slots import HeldSlots

    shared = HeldSlots(tmp_path / "slots")
    mine, other_worker = ExecSlots(total=3, per_bot=2, shared=shared), ExecSlots(total=3, per_bot=2, shared=shared)
    with other_worker.take("a"):
        assert mine.counts("a") == (1, 1) and mine.counts("b") == (1, 0)
    assert mine.counts("a") == (0, 0)
