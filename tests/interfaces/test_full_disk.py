"""A really full disk under Warden's home: a small tmpfs in a private mount namespace (the host's
mounts untouched), filled to a few KB of free space, where Warden's own writes fail half way.

A background start into a live sandbox then fails as its registry writes do: it is refused (126,
one line saying the disk is full), never exit 1 as if the command had run and failed, and after
space is freed everything works again with the audit log intact.
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

import pytest

from tests.conftest import CliResult, isolated_environ

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root"),
    pytest.mark.skipif(shutil.which("unshare") is None or shutil.which("nsenter") is None,
                       reason="needs unshare and nsenter (util-linux) for a private mount namespace"),
]


class Disk:
    """A 64 MiB tmpfs at `path`, seen only by the commands run through `inside`."""

    def __init__(self, holder: subprocess.Popen[bytes], path: Path) -> None:
        self.holder, self.path = holder, path
        self.environ = isolated_environ(path / "home")
        # A terminal of its own name: a lock taken here is then not tied to the liveness of
        # whichever session leader the suite happens to run under (CI's may come and go).
        self.environ["WARDEN_TERMINAL"] = "full-disk"
        self.filler = path / "filler"

    def inside(self, *argv: str, input: bytes | None = None) -> CliResult:
        proc = subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv], input=input,
                              capture_output=True, timeout=120, env=self.environ, check=False)
        return CliResult(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))

    def warden(self, *args: str) -> CliResult:
        return self.inside(sys.executable, "-m", "warden", *args)

    def fill(self, leave_kb: int) -> None:
        """Leave `leave_kb` KB free: one file takes the rest (truncated by `free`). Measured again
        when what was free shrank between `df` and `fallocate` (a janitor running beside the test
        wrote its heartbeat): tmpfs allocates all of it or none."""
        for _ in range(5):
            self.free()
            avail = int(self.inside("df", "-k", "--output=avail", str(self.path)).stdout.split()[-1])
            if avail <= leave_kb:
                return
            done = self.inside("fallocate", "-l", f"{avail - leave_kb}K", str(self.filler))
            if done.code == 0 or "No space left" not in done.stderr:
                break
        assert done.code == 0, done.stderr

    def find(self, under: str, *test: str) -> str:
        """`find` in the home on the tmpfs (only commands run inside see it)."""
        return self.inside("find", str(self.path / "home" / under), "-mindepth", "1", *test).stdout

    def free(self) -> None:
        self.inside("truncate", "-s", "0", str(self.filler))

    def set_up(self, *, workspace: bool = True, data: bool = False) -> None:
        """A home whose only limit is the disk itself (workspace.min_free 0), with workspace W
        (`data`: 256 KB in it that zstd cannot shrink, so packing it needs that much room)."""
        assert self.warden("init").code == 0
        assert self.warden("config", "set", "workspace.min_free", "0").code == 0
        if workspace:
            created = self.warden("create", "W", "--template", "minimal")
            assert created.code == 0, created.stderr
        if data:
            wrote = self.warden("run", "W", "--", "sh", "-c", "head -c 262144 /dev/urandom > data.bin")
            assert wrote.code == 0, wrote.stderr


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    path = tmp_path / "disk"
    path.mkdir()
    holder = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size=64m tmpfs '{path}' && echo ready && exec sleep 600"],
        stdout=subprocess.PIPE)
    assert holder.stdout is not None
    if holder.stdout.readline().strip() != b"ready":
        holder.kill()
        pytest.skip("cannot mount a tmpfs in a private mount namespace here")
    disk = Disk(holder, path)
    try:
        yield disk
    finally:
        disk.free()
        disk.warden("suspend", "W")  # its live sandbox would keep the namespace (and the tmpfs)
        holder.kill()
        holder.wait()


def test_a_background_start_on_a_full_disk_is_refused_and_all_works_once_freed(disk: Disk) -> None:
    disk.set_up()  # the disk itself refuses
    first = disk.warden("run", "--detach", "W", "--", "sleep", "600")
    assert first.code == 0, first.stderr
    refused = 0
    try:
        # Which write fails first (the live sandbox's touch, the refusal's audit row, the lease
        # given back) depends on what SQLite's files still hold: a few levels, a few tries each.
        for leave_kb in range(0, 68, 4):
            disk.fill(leave_kb)
            for _ in range(2):
                started = disk.warden("run", "--detach", "W", "--", "sleep", "600")
                assert started.code in (0, 126), (leave_kb, started.code, started.stderr)
                if started.code == 126:
                    refused += 1
                    assert started.stderr.count("\n") == 1, started.stderr
                    assert "no space left" in started.stderr and "free some space" in started.stderr
    finally:
        disk.free()
    assert refused, "the disk was never full enough to refuse a start"
    verified = disk.warden("audit", "verify")
    assert verified.code == 0, verified.stderr
    ran = disk.warden("run", "W", "--", "echo", "ok")
    assert (ran.code, ran.stdout) == (0, "ok\n"), ran.stderr
    archived = disk.warden("archive", "W")
    assert archived.code == 0, archived.stderr
    assert disk.warden("unarchive", "W").code == 0
    assert disk.find(".", "-name", "*.tmp*") == ""



def test_a_create_the_full_disk_stops_half_way_leaves_neither_row_nor_folder(disk: Disk) -> None:
    """Its folder half made, the create failed; the row's removal, on the same full disk, failed
    too, so the folder (never trashed) and a "creating" row stayed, later marked broken."""
    disk.set_up()  # W's env layer built
    failed = 0
    try:
        for leave_kb in range(0, 200, 8):
            disk.fill(leave_kb)
            made = disk.warden("create", "W2", "--template", "minimal", "--json")
            disk.free()
            listed = disk.warden("list", "--json")
            assert listed.code == 0, listed.stderr
            rows = {w["name"]: w for w in json.loads(listed.stdout)["data"]}
            if made.code == 0:
                assert rows["W2"]["status"] == "ready", rows
                assert disk.warden("destroy", "W2", "--yes", "--no-archive").code == 0
                continue
            failed += 1
            assert "W2" not in rows, (leave_kb, made.stdout, rows["W2"])
            assert disk.find("workspaces", "-maxdepth", "1", "-name", "W2*") == "", leave_kb
            said = json.loads(made.stdout)["error"]
            assert "no space left" in said["message"], said
    finally:
        disk.free()
    assert failed, "the disk was never full enough to stop a create"
    events = json.loads(disk.warden("audit", "--limit", "1000", "--json").stdout)["data"]
    outcomes = {e["result"] for e in events if e["action"] == "workspace.create" and e["target"] == "W2"}
    assert "internal" not in outcomes, outcomes  # a full disk is audited as what it is
    assert disk.warden("create", "W2", "--template", "minimal").code == 0


def test_the_janitor_goes_on_past_a_pass_the_full_disk_stopped(disk: Disk) -> None:
    """`warden janitor` (its loop) ended at the first pass a full disk stopped (exit 1), and
    cleaned up no more once space came back."""
    disk.set_up()
    janitor = subprocess.Popen(["nsenter", "-t", str(disk.holder.pid), "-m", "--", sys.executable, "-m", "warden",
                                "janitor"], env={**disk.environ, "WARDEN_JANITOR_INTERVAL": "1s"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(2)
        disk.fill(0)
        time.sleep(3)
        disk.free()
        time.sleep(3)
        assert janitor.poll() is None, janitor.communicate()
    finally:
        janitor.send_signal(signal.SIGINT)
        out, err = janitor.communicate(timeout=30)
    said = err.decode()
    assert "warden: this pass stopped: no space left" in said, said
    assert "Traceback" not in said
    assert len(out.decode().splitlines()) >= 3, out  # passes before the full disk and after it


def test_an_archive_the_full_disk_stops_leaves_no_archive_behind(disk: Disk) -> None:
    """The pack took the last space and the status write after it failed on the full disk: the
    packed archive stayed in archives/, named by no row, for good (the space that stopped the
    archive, lost). What a failed archive packed goes with it; the workspace stays as it was."""
    disk.set_up(data=True)
    failed = 0
    try:
        for leave_kb in range(200, 520, 8):
            disk.fill(leave_kb)
            archived = disk.warden("archive", "W", "--json")
            disk.free()
            status = json.loads(disk.warden("info", "W", "--json").stdout)["data"]["status"]
            if archived.code == 0:
                assert status == "archived"
                assert disk.warden("unarchive", "W").code == 0
                continue
            failed += 1
            assert status == "ready", (leave_kb, archived.stdout)
            assert disk.find("archives", "-type", "f") == "", (leave_kb, archived.stdout)
            said = json.loads(archived.stdout)["error"]
            assert "no space left" in said["message"], said
    finally:
        disk.free()
    assert failed, "the disk was never full enough to stop an archive"
    ran = disk.warden("run", "W", "--", "sh", "-c", "wc -c < data.bin")
    assert (ran.code, ran.stdout.strip()) == (0, "262144"), ran.stderr


def test_a_destroy_the_full_disk_stops_leaves_no_destroyed_copy_behind(disk: Disk) -> None:
    """Its archive packed and its row's copy kept beside it, the destroy's registry write failed
    on the full disk: the workspace was still there, yet `warden unarchive` knew a destroyed copy
    of it that never was, and the archive's space was lost."""
    disk.set_up(data=True)
    failed = 0
    try:
        for leave_kb in range(200, 520, 8):
            disk.fill(leave_kb)
            destroyed = disk.warden("destroy", "W", "--yes", "--json")
            disk.free()
            if destroyed.code == 0:
                break  # the disk let it through at last: its archive is the way back
            failed += 1
            status = json.loads(disk.warden("info", "W", "--json").stdout)["data"]["status"]
            assert status == "ready", (leave_kb, destroyed.stdout)
            assert disk.find("archives", "-type", "f") == "", (leave_kb, destroyed.stdout)
    finally:
        disk.free()
    assert failed, "the disk was never full enough to stop a destroy"
    back = disk.warden("unarchive", "W")
    assert back.code == 0, back.stderr
    ran = disk.warden("run", "W", "--", "sh", "-c", "wc -c < data.bin")
    assert (ran.code, ran.stdout.strip()) == (0, "262144"), ran.stderr


def test_a_checkpoint_is_made_only_with_its_audit_row(disk: Disk) -> None:
    """A checkpoint saved, its audit row's write then failed on the full disk: the command said
    "no space left" (exit 1) while the checkpoint was there, listed and rolled back to, and
    nowhere in the audit log. A checkpoint said failed is not there; one listed is audited."""
    disk.set_up()
    said_failed = []
    try:
        # The content stays: a checkpoint then writes its manifest (a few KB) and its audit row.
        for leave_kb in range(0, 64, 2):  # the registry's writes fail first at most levels, the key's at some
            disk.fill(leave_kb)
            made = disk.warden("checkpoint", "W", "-m", f"at {leave_kb}", "--json")
            disk.free()
            if made.code != 0:
                assert json.loads(made.stdout)["error"]["code"] == "unavailable", made.stdout
                said_failed.append(f"at {leave_kb}")
    finally:
        disk.free()
    assert said_failed, "the disk was never full enough to stop a checkpoint"
    listed = {c["message"]: c["id"] for c in json.loads(disk.warden("checkpoints", "W", "--json").stdout)["data"]}
    assert not set(said_failed) & set(listed), sorted(set(said_failed) & set(listed))
    events = json.loads(disk.warden("audit", "--limit", "1000", "--json").stdout)["data"]
    audited = {e["detail"].get("id") for e in events if e["action"] == "checkpoint.create" and e["result"] == "ok"}
    assert set(listed.values()) <= audited, set(listed.values()) - audited


def test_a_setting_written_on_a_full_disk_says_what_was_not_audited(disk: Disk) -> None:
    """`config set` writes the file first (a broken config must stay fixable with it), then its
    audit row: on a full disk that row failed and the change was said "still to fix: no space
    left", as if the setting were what needed fixing. Refused: nothing changed; written: it says
    the audit log lacks it."""
    disk.set_up(workspace=False)
    written = refused = 0
    try:
        for leave_kb in range(0, 64, 2):
            before = disk.warden("config", "get", "api.max_execs").stdout.strip()
            disk.fill(leave_kb)
            done = disk.warden("config", "set", "api.max_execs", str(100 + leave_kb))
            disk.free()
            after = disk.warden("config", "get", "api.max_execs").stdout.strip()
            assert "Traceback" not in done.stderr
            if done.code != 0:
                refused += 1
                assert after == before and "no space left" in done.stderr, (leave_kb, done)
            elif "no space left" in done.stdout:
                written += 1
                assert after == str(100 + leave_kb), (leave_kb, done)
                assert "written, but not in the audit log: no space left" in done.stdout, done.stdout
                assert "still to fix" not in done.stdout
    finally:
        disk.free()
    assert written, "the disk never let the setting through while it stopped its audit row"


def test_a_rollback_said_failed_changed_nothing(disk: Disk) -> None:
    """The files brought back, the rollback's audit row (or its touch) then failed on the full
    disk: it said "no space left" (exit 1) with the workspace rolled back. Failed: the files are
    as they were; done: they are the checkpoint's, and a missing audit row is said."""
    disk.set_up()
    assert disk.warden("run", "W", "--", "sh", "-c", "echo saved > f.txt").code == 0
    saved = json.loads(disk.warden("checkpoint", "W", "--json").stdout)["data"]["id"]
    outcomes = set()
    try:
        for leave_kb in range(0, 96, 4):
            assert disk.warden("run", "W", "--", "sh", "-c", f"echo {leave_kb} > f.txt").code == 0
            disk.fill(leave_kb)
            done = disk.warden("rollback", "W", saved)
            disk.free()
            now = disk.warden("run", "W", "--", "cat", "f.txt").stdout.strip()
            assert "Traceback" not in done.stderr
            if done.code == 0:
                assert now == "saved", (leave_kb, done.stdout)
                outcomes.add("warned" if "not in the audit log: no space left" in done.stdout else "done")
            else:
                assert now == str(leave_kb), (leave_kb, done.stderr)
                assert "no space left" in done.stderr
                outcomes.add("failed")
    finally:
        disk.free()
    assert "failed" in outcomes and "done" in outcomes, outcomes


def test_a_file_change_said_failed_was_not_made(disk: Disk) -> None:
    """`warden fs W rm|mv|write` made the change, then its audit row failed on the full disk:
    it said "no space left" (exit 1) with the folder removed, the file moved or written. Failed:
    nothing changed; done: it exits 0 and says on stderr what the audit log lacks."""
    disk.set_up()
    said = set()
    try:
        for leave_kb in range(0, 72, 2):
            assert disk.warden("fs", "W", "mkdir", f"/d{leave_kb}").code == 0
            assert disk.inside("sh", "-c", f"printf old | {sys.executable} -m warden fs W write /a.txt").code == 0
            disk.fill(leave_kb)
            removed = disk.warden("fs", "W", "rm", f"/d{leave_kb}")
            moved = disk.warden("fs", "W", "mv", "/a.txt", f"/b{leave_kb}.txt")
            disk.free()
            for done, there in ((removed, disk.warden("fs", "W", "stat", f"/d{leave_kb}").code == 0),
                                (moved, disk.warden("fs", "W", "stat", "/a.txt").code == 0)):
                assert "Traceback" not in done.stderr
                if done.code == 0:
                    assert not there, (leave_kb, done.stderr)
                    unaudited = "but not in the audit log: no space left" in done.stderr
                    said.add("done, not audited" if unaudited else "done")
                else:
                    assert there, (leave_kb, done.stderr)
                    said.add("failed")
            disk.warden("fs", "W", "rm", "/a.txt")
    finally:
        disk.free()
    assert {"failed", "done", "done, not audited"} <= said, said


def test_a_lock_said_failed_is_not_held(disk: Disk) -> None:
    """The lock taken, its audit row then failed on the full disk: `warden lock` said "no space
    left" (exit 1) with the lock held; so did `unlock` with it given back."""
    disk.set_up()
    said = set()
    try:
        for leave_kb in range(0, 64, 1):
            for verb in ("lock", "unlock"):
                disk.fill(leave_kb)
                done = disk.warden(verb, "W")
                disk.free()
                listed = disk.warden("locks")
                assert listed.code == 0, (leave_kb, verb, listed.stderr)
                held = "W" in listed.stdout
                assert "Traceback" not in done.stderr
                if done.code == 0:
                    assert held == (verb == "lock"), (leave_kb, verb, done.stderr)
                    said.add("not audited" if "not in the audit log: no space left" in done.stderr else "done")
                elif "no space left" in done.stderr:
                    assert held == (verb == "unlock"), (leave_kb, verb, done.stderr)
                    said.add("failed")
                if held != (verb == "lock"):
                    break  # lock again, or unlock again, at the next level
    finally:
        disk.free()
    assert {"failed", "done", "not audited"} <= said, said


def test_a_command_that_ran_exits_with_its_own_status_on_a_full_disk(disk: Disk) -> None:
    """The command ran and exited 3, then its outcome's write failed on the full disk: `warden
    run` exited 1 saying "no space left", and its person would run it again. Refused: 126, it
    never ran; ran: its own status, and a line saying what the audit log lacks."""
    disk.set_up()
    codes = set()
    try:
        for leave_kb in range(0, 64, 1):
            disk.fill(leave_kb)
            ran = disk.warden("run", "W", "--", "sh", "-c", f"echo ran{leave_kb}; exit 3")
            disk.free()
            codes.add(ran.code)
            assert ran.code in (3, 126), (leave_kb, ran.code, ran.stderr)
            assert (ran.stdout == f"ran{leave_kb}\n") == (ran.code == 3), (leave_kb, ran.stdout)
            if ran.code == 3 and "no space left" in ran.stderr:
                codes.add("unrecorded")
                assert "the command ran and exited 3, but not in the audit log" in ran.stderr, ran.stderr
    finally:
        disk.free()
    assert {126, "unrecorded"} <= codes, codes


@contextlib.contextmanager
def served(disk: Disk) -> Iterator[tuple[str, str, Path]]:
    """`warden serve` on the disk's home, and a token of bot b1 that may run commands in W:
    (its URL, the token, its log)."""
    import re

    from tests.support.waiting import poll

    assert disk.warden("bot", "register", "b1").code == 0
    granted = disk.warden("grant", "W", "b1", "--permissions", "read,execute", "--json")
    token = json.loads(granted.stdout)["data"]["token"]
    log = disk.path.parent / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(["nsenter", "-t", str(disk.holder.pid), "-m", "--", sys.executable, "-m",
                                   "warden", "serve", "--port", "0", "--no-access-log"],
                                  stdout=out, stderr=subprocess.STDOUT, env=disk.environ, stdin=subprocess.DEVNULL)
    try:
        found = poll(lambda: re.search(rb"listening on (http://127\.0\.0\.1:\d+)", log.read_bytes()), timeout=60)
        assert found, log.read_bytes()
        yield found.group(1).decode(), token, log
    finally:
        server.terminate()
        server.wait(30)


def test_a_bots_command_that_ran_is_answered_with_its_status_on_a_full_disk(disk: Disk) -> None:
    """Over HTTP the same: the bot's command ran, its outcome's write (with the call's event)
    failed on the full disk, and the bot was answered 503 "no space left", so it would run the
    command again. It gets its command's result, streamed too (where its last line was an error
    event after the command's output); the server's log says what the audit lacks."""
    import httpx

    disk.set_up()
    with served(disk) as (url, token, log):
        answers = set()
        try:
            for stream in (False, True):
                for leave_kb in range(0, 64, 1):
                    disk.fill(leave_kb)
                    answer = httpx.post(f"{url}/v1/workspaces/W/exec", headers={"Authorization": f"Bearer {token}"},
                                        json={"cmd": ["sh", "-c", f"echo ran{leave_kb}; exit 3"], "stream": stream},
                                        timeout=60)
                    disk.free()
                    if answer.status_code == 200 and stream:
                        events = [json.loads(line) for line in answer.text.splitlines()]
                        assert events[0] == {"type": "stdout", "data": f"ran{leave_kb}\n"}, events
                        assert (events[-1]["type"], events[-1].get("exit_code")) == ("exit", 3), events
                        answers.add("streamed")
                    elif answer.status_code == 200:
                        body = answer.json()
                        assert (body["exit_code"], body["stdout"]) == (3, f"ran{leave_kb}\n"), body
                        answers.add(200)
                    else:
                        assert answer.status_code == 503, (leave_kb, answer.status_code, answer.text)
                        answers.add(503)
        finally:
            disk.free()
        assert {503, 200, "streamed"} <= answers, answers  # the disk was full enough to refuse some
        said = log.read_bytes().decode(errors="replace")
        assert "the command ran and exited 3, but not in the audit log: no space left" in said, said[-3000:]
        assert "Traceback" not in said, said[-3000:]


def test_a_key_rotation_refused_by_a_full_disk_leaves_no_half_key(disk: Disk) -> None:
    """The next master key is written aside, then linked into place: refused by the full disk,
    its file aside stayed in keys/ (empty, or part of a key) for good. Nothing is left now, and
    the secrets open and rotate once space is freed."""
    disk.set_up(workspace=False)
    set_ = disk.inside(sys.executable, "-m", "warden", "secret", "set", "S", input=b"value")
    assert set_.code == 0, set_.stderr
    refused = 0
    try:
        for leave_kb in range(0, 64, 2):  # the registry's writes fail first at most levels, the key's at some
            disk.fill(leave_kb)
            rotated = disk.warden("keys", "rotate", "secrets")
            disk.free()
            assert "Traceback" not in rotated.stderr and "internal error" not in rotated.stderr, rotated.stderr
            if rotated.code != 0:
                refused += 1
                assert "no space left on /" in rotated.stderr, rotated.stderr  # names where
            assert disk.find("keys", "-name", "*.tmp") == "", (leave_kb, rotated.stderr)
    finally:
        disk.free()
    assert refused, "the disk was never full enough to refuse a rotation"
    assert disk.warden("keys", "rotate", "secrets").code == 0
    assert "S" in disk.warden("secret", "list").stdout
    assert disk.warden("audit", "verify").code == 0


def test_a_refusal_for_a_full_disk_says_where(disk: Disk) -> None:
    """A write or a flush names no file: an archive's pack, a checkpoint's or an install's own
    files refused by the full disk said "no space left on the device", on a machine with several
    (a backup's copy of the registry: "on the registry disk", which had room)."""
    disk.set_up()
    said = []
    try:
        for command in (("archive", "W"), ("install", "W", "nothing-here"), ("checkpoint", "W"),
                        ("backup", str(disk.path / "home.tgz"), "--workspaces")):
            for leave_kb in range(0, 48, 4):
                disk.fill(leave_kb)
                done = disk.warden(*command)
                disk.free()
                assert "Traceback" not in done.stderr, done.stderr
                if "no space left" in done.stderr:
                    said.append(done.stderr.strip().splitlines()[-1])
                if done.code == 0 and command[0] == "archive":
                    assert disk.warden("unarchive", "W").code == 0
    finally:
        disk.free()
    assert said, "the disk was never full enough to refuse one"
    assert all(line.startswith(f"warden: no space left on {disk.path}") for line in said), said


def test_a_background_process_that_ended_on_a_full_disk_keeps_its_output_and_status(disk: Disk) -> None:
    """Collecting an ended background process writes its output aside, then its outcome: on the
    full disk `wait` said "no space left on the device" (no place), and a write that took part of
    the output would have kept it cut. Once freed, its status and its whole output are there."""
    disk.set_up()
    said = []
    try:
        for leave_kb in range(16, 48, 4):
            started = disk.warden("run", "--detach", "W", "--", "sh", "-c",
                                  f"sleep 1; head -c 3000 /dev/zero | tr '\\0' o; echo; echo bye{leave_kb}; exit 7")
            assert started.code == 0, started.stderr
            process = started.stdout.split()[-1]
            disk.fill(leave_kb)
            time.sleep(2)  # it ends while the disk is full
            waited = disk.warden("wait", "W", process)
            disk.free()
            assert "Traceback" not in waited.stderr, waited.stderr
            if waited.code != 7:
                said.append(waited.stderr.strip())
                waited = disk.warden("wait", "W", process)
            assert waited.code == 7, (leave_kb, waited.stderr)
            logs = disk.warden("logs", "W", process)
            assert logs.stdout == "o" * 3000 + f"\nbye{leave_kb}\n", (leave_kb, logs.stdout[-100:])
    finally:
        disk.free()
    assert said, "the disk was never full enough to refuse a collection"
    assert all(line.startswith(f"warden: no space left on {disk.path}") for line in said), said


def test_a_rollbacks_save_stops_at_min_free_not_at_a_full_disk(disk: Disk) -> None:
    """The save a rollback makes first (of what the workspace holds now) is not bounded by
    workspace.max_disk, and workspace.min_free was looked at only as it started: one save of a
    workspace a bot filled took the home's filesystem below min_free (or to nothing). It now
    stops at the room above min_free, frees what it wrote, and changes nothing."""
    disk.set_up()
    assert disk.warden("config", "set", "workspace.min_free", "8M").code == 0
    assert disk.warden("run", "W", "--", "sh", "-c", "echo kept > f.txt").code == 0
    saved = json.loads(disk.warden("checkpoint", "W", "--json").stdout)["data"]["id"]
    # What the bot wrote since: 12 MiB that no checkpoint holds.
    wrote = disk.warden("run", "W", "--", "sh", "-c", "head -c 12582912 /dev/urandom > big.bin")
    assert wrote.code == 0, wrote.stderr
    disk.fill(8 * 1024 + 10 * 1024)  # 10 MiB above min_free: room for less than the save
    try:
        done = disk.warden("rollback", "W", saved)
        avail = int(disk.inside("df", "-k", "--output=avail", str(disk.path)).stdout.split()[-1])
    finally:
        disk.free()
    assert done.code != 0 and "Traceback" not in done.stderr, done.stderr
    assert "no space left on the filesystem of Warden's home to save W" in done.stderr, done.stderr
    assert "workspace.min_free" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert avail >= 8 * 1024, f"the save left {avail} KB free, below workspace.min_free (8 MiB)"
    listed = disk.warden("run", "W", "--", "sh", "-c", "cat f.txt; stat -c %s big.bin")
    assert listed.stdout.split() == ["kept", "12582912"], listed  # nothing was rolled back
    assert disk.warden("audit", "verify").code == 0
