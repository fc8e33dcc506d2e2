"""Two lifecycle commands at once, a run against a destroy, a create killed half-way.

The repros of the reliability review, through the real CLI in parallel processes: nothing the
user wrote is lost, no command says "created" or "archived" unless it is true when printed,
and repair never declares a half-made workspace ready. Workspace leases (services/leases)
make the lifecycle changes take turns.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


def spawn(cli: Cli, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "warden", *args], env=cli.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), err.decode()


def blob_of(tmp_path: Path, files: int) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(files):
            data = f"file {i}\n".encode() * 20
            info = tarfile.TarInfo(f"src/d{i % 50}/f{i}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / f"blob-{files}.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


def status(cli: Cli, name: str) -> str | None:
    r = cli("info", name, "--json")
    return r.json["data"]["status"] if r.code == 0 else None


def wait_for_status(cli: Cli, name: str, wanted: str, timeout: float = 30) -> None:
    wait_until(lambda: status(cli, name) == wanted, timeout=timeout, message=f"{name} never became {wanted}")


def test_two_archives_at_once_lose_nothing(cli: Cli) -> None:
    for attempt in range(6):
        name = f"arc{attempt}"
        assert cli("create", name).code == 0
        assert cli("fs", name, "write", "/notes/keep.txt", input="precious\n").code == 0
        first = spawn(cli, "archive", name)
        time.sleep(0.02 * attempt)  # a different head start each attempt: what the test does
        second = spawn(cli, "archive", name)
        results = [finish(first), finish(second)]
        assert sorted(code for code, _, _ in results) in ([0, 0], [0, 5]), results
        assert not any("internal" in err for _, _, err in results), results
        assert status(cli, name) == "archived"
        assert cli("unarchive", name).code == 0
        assert cli("fs", name, "cat", "/notes/keep.txt").stdout == "precious\n"


def test_parallel_destroys_destroy_once_and_archive_once(cli: Cli, home: Path) -> None:
    assert cli("create", "gone").code == 0
    procs = [spawn(cli, "destroy", "gone", "--yes") for _ in range(3)]
    codes = sorted(finish(p)[0] for p in procs)
    assert codes.count(0) == 1 and set(codes) <= {0, 4, 5}, codes
    archives = list((home / "archives").glob("gone-*.tar.zst"))
    assert len(archives) == 1
    assert cli("unarchive", "gone").code == 0


def test_destroy_during_a_create_never_gives_a_false_success(cli: Cli, tmp_path: Path, home: Path) -> None:
    blob = blob_of(tmp_path, 3000)
    for attempt in range(4):
        name = f"race{attempt}"
        create = spawn(cli, "create", name, "--blob", str(blob), "--json")
        time.sleep(0.05 + 0.1 * attempt)  # a later destroy each attempt: what the test does
        destroyed = cli("destroy", name, "--yes", "--no-archive")
        code, out, err = finish(create)
        now = status(cli, name)
        folder = home / "workspaces" / name
        if destroyed.code == 0:
            assert now is None and not folder.exists(), (attempt, code, err)
        else:
            assert destroyed.code in (4, 5), destroyed.stderr
            if code == 0:  # "created" is true when printed, and still true
                assert json.loads(out)["data"]["status"] == "ready" and now == "ready"
                assert len(list((folder / "src").rglob("*.txt"))) == 3000
            else:
                assert now is None and not folder.exists()


def test_repair_during_a_live_create_is_refused(cli: Cli, tmp_path: Path) -> None:
    blob = blob_of(tmp_path, 6000)
    create = spawn(cli, "create", "live", "--blob", str(blob))
    wait_for_status(cli, "live", "creating")
    repair = cli("health", "live", "--repair", "--json")
    code, _, err = finish(create)
    assert code == 0, err
    assert repair.code == 5 and repair.json["error"]["code"] == "locked", repair.stdout
    assert status(cli, "live") == "ready"


def test_a_create_killed_while_unpacking_is_never_repaired_to_ready(cli: Cli, tmp_path: Path, home: Path) -> None:
    blob = blob_of(tmp_path, 20000)
    create = spawn(cli, "create", "killed", "--blob", str(blob))
    wait_for_status(cli, "killed", "creating")
    # The blob's first file is on disk (of 20000): the create is unpacking.
    wait_until((home / "workspaces" / "killed" / "src" / "d0" / "f0.txt").exists, interval=0.005,
               message="the create never started unpacking")
    os.kill(create.pid, signal.SIGKILL)
    create.wait()
    assert status(cli, "killed") == "broken"
    repair = cli("health", "killed", "--repair")
    assert repair.code == 5 and "incomplete" in repair.stderr
    assert status(cli, "killed") == "broken"
    assert cli("destroy", "killed", "--yes", "--no-archive").code == 0


def test_a_run_against_a_destroy_is_stopped_and_audited_never_an_internal_error(cli: Cli, home: Path) -> None:
    assert cli("create", "busy").code == 0
    run = spawn(cli, "run", "busy", "--", "sh", "-c", "echo kept > early.txt; sleep 30")
    wait_until((home / "workspaces" / "busy" / "early.txt").exists, timeout=20, message="the run never started")
    destroy = cli("destroy", "busy", "--yes")
    code, _, err = finish(run)
    assert destroy.code == 0, destroy.stderr
    assert code in (137, 143) and "internal" not in err
    assert "stopped by `warden destroy`" in err, err
    # What the run wrote before it was stopped is in the archive the destroy made.
    assert cli("unarchive", "busy").code == 0
    assert (home / "workspaces" / "busy" / "early.txt").read_text() == "kept\n"
    events = [e["action"] for e in cli("audit", "--workspace", "busy", "--json").json["data"]]
    assert "run.start" in events and "run" in events


def test_runs_wait_for_nobody_and_are_refused_during_an_archive(cli: Cli, tmp_path: Path) -> None:
    assert cli("create", "arcrun", "--blob", str(blob_of(tmp_path, 20000))).code == 0
    archive = spawn(cli, "archive", "arcrun")
    refused = None
    deadline = time.monotonic() + 20
    while archive.poll() is None and time.monotonic() < deadline:
        r = cli("run", "arcrun", "--json", "--", "sh", "-c", "echo lost > late.txt")
        if r.code != 0:
            refused = r
            break
    finish(archive)
    if refused is not None:  # a run that met the archive was refused, not half-run
        assert refused.code == 126 and refused.json["error"]["code"] in ("locked", "conflict"), refused.stdout
    assert cli("unarchive", "arcrun").code == 0


def test_destroying_an_archived_workspace_keeps_its_way_back(cli: Cli) -> None:
    assert cli("create", "twice").code == 0
    assert cli("fs", "twice", "write", "/a.txt", input="still here\n").code == 0
    assert cli("archive", "twice").code == 0
    assert cli("destroy", "twice", "--yes").code == 0
    assert cli("unarchive", "twice").code == 0
    assert cli("fs", "twice", "cat", "/a.txt").stdout == "still here\n"


def test_doctor_fix_sweeps_what_killed_runs_left(cli: Cli, home: Path) -> None:
    assert cli("create", "swept").code == 0
    run = spawn(cli, "run", "swept", "--", "sleep", "30")

    def started() -> bool:
        return "run.start" in [e["action"] for e in cli("audit", "--workspace", "swept", "--json").json["data"]]

    wait_until(started, timeout=20, interval=0.05, message="the run never started")
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    stale_tmp = home / "archives" / f".swept-x.tar.zst.{run.pid}.tmp"
    stale_tmp.parent.mkdir(exist_ok=True)
    stale_tmp.write_bytes(b"half an archive")
    fixed = cli("doctor", "--fix", "--json")
    swept = fixed.json["data"]["swept"]
    assert str(stale_tmp) in swept["temp_files"] and not stale_tmp.exists()
    assert len(swept["lost_runs"]) == 1
    lost = [e for e in cli("audit", "--workspace", "swept", "--json").json["data"] if e["action"] == "run.lost"]
    assert len(lost) == 1
    # The killed run's cgroups (named after its process) are gone.
    from warden.adapters.sandbox import cgroups

    support = cgroups.detect()
    for spec in (support.memory, support.pids):
        if spec is not None:
            assert not list(Path(spec[1]).glob(f"warden-{run.pid}-*"))
    again = cli("doctor", "--fix", "--json").json["data"]["swept"]
    assert again["lost_runs"] == [] and again["temp_files"] == []


def test_doctor_fix_stops_a_sandbox_its_killed_warden_left_running(cli: Cli, home: Path) -> None:
    """A Warden killed right after starting bwrap: the sandbox (reparented, without its limits)
    carries on. `doctor --fix` finds it by its folder and its parentless state, and ends it."""
    assert cli("create", "orphan").code == 0
    ws = home / "workspaces" / "orphan"
    # The shell that starts bwrap exits at once, as a killed Warden would: bwrap is reparented.
    subprocess.run(["sh", "-c", "bwrap --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
                                "--symlink usr/lib64 /lib64 --unshare-pid -- /usr/bin/sleep 300 "
                                ">/dev/null 2>&1 &"], cwd=ws, check=True)
    from warden.adapters.processes import orphan_sandboxes

    wait_until(lambda: orphan_sandboxes([str(ws)]), interval=0.05, message="the stray sandbox did not start")
    swept = cli("doctor", "--fix", "--json").json["data"]["swept"]
    assert swept["orphan_sandboxes"]
    wait_until(lambda: not orphan_sandboxes([str(ws)]), interval=0.05, message="the stray sandbox is still running")


def test_an_archive_that_finds_it_archived_says_so(cli: Cli, home: Path) -> None:
    # The archive that lost the race (or came later) printed "archived NAME to FILE (0B)": the
    # file the other one packed, with a size it never measured.
    assert cli("create", "twice").code == 0
    assert cli("archive", "twice").code == 0
    again = cli("archive", "twice")
    assert again.code == 0
    archive = next((home / "archives").glob("twice-*.tar.zst"))
    assert again.stdout.strip() == f"twice was archived already, to {archive}"


def test_doctor_fix_reclaims_an_archive_no_row_names(cli: Cli, home: Path) -> None:
    """An unarchive killed after its status write and before its archive's removal (or an archive
    killed after its rename into archives/ and before its status write) left a whole archive that
    no row names, taking its size in the home for good. With its workspace's folder back and its
    lease free, the sweep removes it; an archived workspace's own archive, a destroyed one's way
    back, and one of a name the registry does not know stay."""
    assert cli("create", "kept").code == 0
    assert cli("fs", "kept", "write", "/a.txt", input="mine\n").code == 0
    assert cli("archive", "kept").code == 0
    archives = home / "archives"
    own = next(archives.glob("kept-*.tar.zst"))
    stale = archives / "kept-20260101T000000-abcd.tar.zst"
    shutil.copy(own, stale)  # the unarchive below leaves this copy behind, as its kill would have
    unknown = archives / "nobody-20260101T000000-abcd.tar.zst"
    shutil.copy(own, unknown)
    for name in ("gone", "still"):
        assert cli("create", name).code == 0
        assert cli("archive", name).code == 0
    assert cli("destroy", "gone", "--yes").code == 0
    assert cli("unarchive", "kept").code == 0
    assert not own.exists() and stale.exists()
    others = sorted(p.name for p in archives.iterdir() if p.name.startswith(("gone-", "still-")))

    run = spawn(cli, "run", "kept", "--", "sleep", "30")  # holds the workspace's lease: not swept now
    wait_until(lambda: "run.start" in [e["action"] for e in cli("audit", "--workspace", "kept", "--json").json["data"]],
               timeout=20, interval=0.05, message="the run never started")
    busy = cli("doctor", "--fix", "--json").json["data"]["swept"]
    assert busy["stale_archives"] == [] and stale.exists()
    os.kill(run.pid, signal.SIGKILL)
    run.wait()

    fixed = cli("doctor", "--fix")
    assert "stale archives: 1" in fixed.stdout, fixed.stdout
    assert not stale.exists() and unknown.exists()
    assert sorted(p.name for p in archives.iterdir() if p.name.startswith(("gone-", "still-"))) == others
    assert cli("fs", "kept", "cat", "/a.txt").stdout == "mine\n"
    assert cli("unarchive", "gone").code == 0 and cli("unarchive", "still").code == 0
    assert cli("audit", "verify").code == 0


def test_doctor_fix_removes_the_key_and_config_files_a_killed_writer_made_aside(cli: Cli, home: Path) -> None:
    """A key file or a new config.toml is written aside (`.NAME.PID.TAG.tmp`, key material in the
    first) and then linked into place: a writer killed between the two left it for good, the
    sweep's pattern (`.NAME.PID.tmp`) not knowing the TAG and its folders not the keys'."""
    assert cli("init").code == 0
    gone = subprocess.Popen(["true"])  # its pid: a process that ended
    gone.wait()
    left = [home / f".config.toml.{gone.pid}.new.tmp", home / "keys" / f".master.key.{gone.pid}.0badf00d.tmp"]
    alive = home / "keys" / f".pepper.key.{os.getpid()}.0badf00d.tmp"  # its writer runs: kept
    for path in (*left, alive):
        path.write_bytes(b"k" * 32)
    swept = cli("doctor", "--fix", "--json").json["data"]["swept"]
    assert sorted(swept["temp_files"]) == sorted(map(str, left))
    assert not any(p.exists() for p in left) and alive.exists()
    alive.unlink()
    assert cli("secret", "set", "S", input="v").code == 0  # the real keys untouched


def test_a_workspace_two_commands_find_broken_at_once_is_audited_broken_once(cli: Cli, home: Path,
                                                                             environ: dict[str, str]) -> None:
    """Two commands that read a workspace whose folder had gone (or whose creator had died)
    before either marked it broken: the second's compare-and-set changed nothing, yet each
    audited `workspace.broken` (two `warden list` at once: 3 times in 5). A change is audited by
    the command that made it only. The second command is this process, its rows read before the
    CLI's `warden list` wrote."""
    from warden.bootstrap import bootstrap

    assert cli("create", "gone", "--template", "minimal").code == 0
    shutil.move(str(home / "workspaces" / "gone"), str(home / "gone-elsewhere"))
    other = bootstrap(home, environ=environ)
    try:
        with other.registry.transaction(write=False) as tx:
            read_before = tx.workspaces.list_all()
        assert cli("list").code == 0  # the first finds the folder gone: broken, audited
        shown = other.workspaces._reconcile(read_before)  # the second, on what it read before
        assert [r.status for r in shown if r.name == "gone"] == ["broken"]
    finally:
        other.close()
    events = cli("audit", "--workspace", "gone", "--json").json["data"]
    assert [e["action"] for e in events].count("workspace.broken") == 1, events
