"""The workspace disk quota end to end: real bwrap runs, `fs write`, blobs, installs, min_free.

The overshoot is measured here: what a workspace holds after a run was stopped, walked
independently (st_blocks * 512, every entry once), against the limit.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.adapters.test_quota import blocks
from tests.conftest import Cli, isolated_environ

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]

MiB = 1 << 20
WRITE_30_MIB = "for i in range(30):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
MAKE_3000 = "mkdir many && cd many && i=0; while [ $i -lt 3000 ]; do : > f$i; i=$((i+1)); done"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("quota") / "warden-home"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def cli(home: Path) -> Cli:
    return Cli(isolated_environ(home))


@pytest.fixture
def ws(cli: Cli, home: Path, request: pytest.FixtureRequest) -> tuple[str, Path]:
    name = request.node.name.removeprefix("test_")[:40].replace("_", "-").strip("-")
    created = cli("create", name, "--json")
    assert created.code == 0, created.stderr
    return name, home / "workspaces" / name


def last_run(cli: Cli, name: str) -> dict[str, object]:
    events = cli("audit", "--workspace", name, "--json").json["data"]
    runs = [e for e in events if e["action"] == "run"]
    return runs[-1] if runs else {}


@pytest.mark.alone  # how far past the limit a run gets depends on how soon the watcher gets a core
def test_a_run_writing_past_max_disk_is_stopped_within_a_mebibyte(cli: Cli, ws: tuple[str, Path]) -> None:
    """30 x 1 MiB against a 5M limit, five times. The overshoot is the write that crosses the
    limit plus what the command writes before the kill lands: 72 KiB over (the workspace's own
    files made the fifth write cross) or one more 1 MiB write. That needs the watcher on a CPU
    at once, i.e. real-time priority (root here); without it a busy machine delays it by a
    slice or more, so only the stop itself is asked of every run then."""
    from warden.adapters.quota import realtime_allowed

    name, folder = ws
    overshoots = []
    for _ in range(5):
        r = cli("run", name, "--json", "--", "python3", "-c", WRITE_30_MIB, env={"WARDEN_WORKSPACE_MAX_DISK": "5M"})
        data = r.json["data"]
        note = data["stderr"].strip().splitlines()[-1]
        assert f"workspace {name} grew to " in note and "over workspace.max_disk (5M)" in note, data["stderr"]
        assert note.endswith("raise the limit with `warden config set workspace.max_disk VALUE`")
        assert last_run(cli, name)["detail"]["stopped_by"] == "workspace.max_disk"  # type: ignore[index]
        assert r.code == 137 and data["signal"] == 9 and note.startswith(f"warden: stopped: workspace {name} ")
        overshoots.append(blocks(folder)[0] - 5 * MiB)
        for written in folder.glob("f*"):
            written.unlink()
    one_write = MiB + 128 * 1024
    if realtime_allowed():
        assert sum(over <= one_write for over in overshoots) >= 4, [o // 1024 for o in overshoots]
    # Without it, how far a run gets is the scheduler's (CI as a normal user saw 2 to 25 MiB over,
    # median 18: the watcher held off a CPU for the whole command); doctor says "tens of MiB".
    # Each run above was still stopped by the watcher (137, stopped_by), which is what it promises.
    # Live output too: the note is the last line on stderr.
    live = cli("run", name, "--", "python3", "-c", WRITE_30_MIB, env={"WARDEN_WORKSPACE_MAX_DISK": "5M"})
    assert live.code == 137 and live.stderr.rstrip().endswith("`warden config set workspace.max_disk VALUE`")


def test_no_single_file_may_pass_the_bytes_left(cli: Cli, ws: tuple[str, Path]) -> None:
    name, folder = ws
    before = blocks(folder)[0]
    r = cli("run", name, "--json", "--", "sh", "-c", "head -c 8000000 /dev/zero > one",
            env={"WARDEN_WORKSPACE_MAX_DISK": "5M"})
    # RLIMIT_FSIZE is the budget left: head dies of SIGXFSZ (128+25) at it, unless the watcher
    # saw the file's last block pass the limit first (137).
    assert r.code in (137, 153), r.stdout + r.stderr
    assert (folder / "one").stat().st_size <= 5 * MiB - before


@pytest.mark.alone  # as above: the overshoot measures the watcher's reaction time
def test_a_run_making_too_many_files_is_stopped_within_a_hundred(cli: Cli, ws: tuple[str, Path]) -> None:
    """3000 new files against max_files=500, three times: most runs stop within 100 files past
    the limit (see the test above for why not all; without real-time priority, within 1000)."""
    from warden.adapters.quota import realtime_allowed

    name, folder = ws
    bound = 100 if realtime_allowed() else 1000
    within = []
    for _ in range(3):
        r = cli("run", name, "--json", "--", "sh", "-c", MAKE_3000, env={"WARDEN_WORKSPACE_MAX_FILES": "500"})
        assert "over workspace.max_files (500)" in r.json["data"]["stderr"], r.stdout + r.stderr
        over = blocks(folder)[1] - 500
        within.append((r.code, over, r.code == 137 and over <= bound))
        shutil.rmtree(folder / "many")
    assert [ok for *_, ok in within].count(True) >= 2, within
    # Within the limits again (the files deleted), runs go on.
    ok = cli("run", name, "--", "true", env={"WARDEN_WORKSPACE_MAX_FILES": "500"})
    assert ok.code == 0, ok.stderr


def test_a_workspace_over_its_limit_may_still_delete(cli: Cli, ws: tuple[str, Path]) -> None:
    name, folder = ws
    (folder / "old").write_bytes(b"o" * 3 * MiB)
    r = cli("run", name, "--", "rm", "old", env={"WARDEN_WORKSPACE_MAX_DISK": "1M"})
    assert r.code == 0, r.stderr
    assert not (folder / "old").exists()


def test_a_workspace_a_few_bytes_short_of_its_limit_still_runs(cli: Cli, ws: tuple[str, Path]) -> None:
    """A run filled it to within bytes of max_disk: the next one, the `rm` included, must start."""
    from warden.adapters.disk_usage import measure

    name, folder = ws
    used = measure(str(folder)).bytes
    with open(folder / "fill", "wb") as fill:  # sparse: charged by its length, to the byte
        fill.truncate(2 * MiB - used - 34)
    assert 2 * MiB - measure(str(folder)).bytes == 34
    for argv in (["ls"], ["rm", "fill"]):
        r = cli("run", name, "--", *argv, env={"WARDEN_WORKSPACE_MAX_DISK": "2M"})
        assert r.code == 0, (argv, r.stderr)
    assert not (folder / "fill").exists()


def test_fs_write_past_the_limit_is_refused_and_writes_nothing(cli: Cli, ws: tuple[str, Path]) -> None:
    name, folder = ws
    r = cli("fs", name, "write", "/big.bin", "--json", input=b"\0" * 2_000_000,
            env={"WARDEN_WORKSPACE_MAX_DISK": "1M"})
    assert r.code == 2, r.stdout + r.stderr
    error = r.json["error"]
    assert error["code"] == "invalid" and "workspace.max_disk" in error["message"]  # TooLarge: HTTP 413
    assert not (folder / "big.bin").exists()
    assert not [p for p in folder.iterdir() if p.name.startswith(".big.bin")]  # no temp file left
    assert cli("fs", name, "write", "/small.txt", input=b"fits", env={"WARDEN_WORKSPACE_MAX_DISK": "1M"}).code == 0
    events = cli("audit", "--workspace", name, "--json").json["data"]
    refused = [e for e in events if e["action"] == "fs.write" and e["result"] == "invalid"]
    assert refused and refused[-1]["rule"] == "workspace.max_disk"


def test_an_http_upload_past_the_limit_is_413_and_writes_nothing(tmp_path: Path) -> None:
    import httpx

    from tests.support.servers import ThreadServer
    from warden.bootstrap import bootstrap

    home = tmp_path / "home"
    app = bootstrap(home, environ={**isolated_environ(home), "WARDEN_WORKSPACE_MAX_DISK": "1M"})
    try:
        app.workspaces.create("up", template="minimal")
        app.grants.register_bot("bot")
        token = app.grants.grant("up", "bot", "read,write").token
        with ThreadServer(app) as server:
            url, auth = server.url + "/v1/workspaces/up/files/content", {"Authorization": f"Bearer {token}"}
            big = httpx.put(url, params={"path": "big.bin"}, content=b"\0" * 2_000_000, headers=auth, timeout=60)
            assert big.status_code == 413, big.text
            assert "workspace.max_disk" in big.json()["error"]["message"]
            small = httpx.put(url, params={"path": "small.txt"}, content=b"fits", headers=auth, timeout=60)
            assert small.status_code < 300, small.text
        folder = Path(app.workspaces.get("up").path)
        assert not (folder / "big.bin").exists() and (folder / "small.txt").read_bytes() == b"fits"
    finally:
        app.close()


def test_min_free_refuses_runs_and_writes(cli: Cli, ws: tuple[str, Path]) -> None:
    name, folder = ws
    low = {"WARDEN_WORKSPACE_MIN_FREE": "1000T"}
    r = cli("run", name, "--", "touch", "ran", env=low)
    assert r.code == 126 and "workspace.min_free" in r.stderr and "free disk space" in r.stderr
    assert not (folder / "ran").exists()
    w = cli("fs", name, "write", "/note.txt", "--json", input=b"hi", env=low)
    assert w.code == 1 and w.json["error"]["code"] == "unavailable"
    assert not (folder / "note.txt").exists()
    assert last_run(cli, name)["result"] == "unavailable"


def test_a_blob_past_the_quota_is_refused(cli: Cli, home: Path, tmp_path: Path) -> None:
    big = io.BytesIO()
    with tarfile.open(fileobj=big, mode="w:gz") as tar:
        info = tarfile.TarInfo("data.bin")
        info.size = 3 * MiB
        tar.addfile(info, io.BytesIO(b"\0" * info.size))
    (tmp_path / "big.tgz").write_bytes(big.getvalue())
    r = cli("create", "blob-disk", "--blob", str(tmp_path / "big.tgz"), "--json",
            env={"WARDEN_WORKSPACE_MAX_DISK": "2M"})
    assert r.code == 2 and "workspace.max_disk" in r.json["error"]["message"]
    many = {"files": {f"src/f{i}.txt": "x" for i in range(150)}}
    (tmp_path / "many.json").write_text(json.dumps(many))
    r = cli("create", "blob-files", "--blob", str(tmp_path / "many.json"), "--json",
            env={"WARDEN_WORKSPACE_MAX_FILES": "100"})
    assert r.code == 2 and "workspace.max_files" in r.json["error"]["message"]
    assert not (home / "workspaces" / "blob-disk").exists() and not (home / "workspaces" / "blob-files").exists()


def test_install_into_a_full_workspace_is_refused_before_it_runs(cli: Cli, ws: tuple[str, Path]) -> None:
    name, folder = ws
    (folder / "fill").write_bytes(b"f" * 2 * MiB)
    r = cli("install", name, "tomli", "--json", env={"WARDEN_WORKSPACE_MAX_DISK": "1M"})
    assert r.code == 2 and "workspace.max_disk" in r.json["error"]["message"], r.stdout + r.stderr
    assert last_run(cli, name) == {}  # nothing ran


def test_doctor_says_which_mechanism_holds_the_quota(cli: Cli) -> None:
    checks = {c["name"]: c for c in cli("doctor", "--json").json["data"]["checks"]}
    detail = checks["disk quota"]["detail"]
    assert detail.startswith(("Warden's watcher", "kernel project quota")) and "overshoot" in detail


def test_fallocate_past_the_file_length_is_refused(cli: Cli, ws: tuple[str, Path]) -> None:
    """FALLOC_FL_KEEP_SIZE allocates blocks RLIMIT_FSIZE does not see: refused (the seccomp
    filter), so one call cannot take the disk before the watcher notices."""
    name, folder = ws
    script = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
              "fd = os.open('big', os.O_CREAT | os.O_WRONLY); "
              "rc = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(200 << 20)); "
              "print(rc, ctypes.get_errno())")
    r = cli("run", name, "--", "python3", "-c", script, env={"WARDEN_WORKSPACE_MAX_DISK": "5M"})
    assert r.code == 0, r.stderr
    assert r.stdout.split() == ["-1", "95"]  # EOPNOTSUPP
    assert blocks(folder / "big")[0] < MiB


def test_a_run_whose_reader_stopped_reading_is_still_stopped_at_max_disk(cli: Cli, ws: tuple[str, Path]) -> None:
    """A person's `warden run` beside a detached server runs in the live sandbox, whose runner
    waits on the command and watches the quota in one loop. Its output piped to a reader that
    reads nothing yet (`| less` not scrolled, a terminal held by Ctrl-S): a child fills that
    pipe, writing it blocks the loop, and the files written meanwhile were never looked at,
    60 MiB against 5M, the run ending 0. The watch stays a thread's while output may block."""
    name, folder = ws
    server = cli("run", name, "--detach", "--json", "--", "sleep", "60")
    assert server.code == 0, server.stderr
    writer = ("head -c 1000000 /dev/zero & i=0; "
              "while [ $i -lt 60 ]; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done")
    with subprocess.Popen([sys.executable, "-m", "warden", "run", name, "--", "sh", "-c", writer],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={**cli.environ, "WARDEN_WORKSPACE_MAX_DISK": "5M"}) as proc:
        deadline, seen, still = time.monotonic() + 15, -1, 0
        while time.monotonic() < deadline and still < 10:  # its output not read meanwhile
            time.sleep(0.2)
            count = len(list(folder.glob("f*")))
            still, seen = (still + 1 if count == seen and count else 0), count
        held = blocks(folder)[0]
        _, err = proc.communicate(timeout=60)
    try:
        assert held < 20 * MiB, f"{held // MiB} MiB written against 5M while its output was not read"
        assert proc.returncode == 137 and b"over workspace.max_disk (5M)" in err, (proc.returncode, err[-400:])
    finally:
        cli("kill", name, server.json["data"]["id"])
