"""`warden backup` / `warden restore`: the way back the errors about lost state point to."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


@pytest.mark.initialised_home
def test_a_lost_registry_and_keys_come_back_from_a_backup(cli: Cli, home: Path, tmp_path: Path) -> None:
    assert cli("init").code == 0
    assert cli("create", "saved").code == 0
    assert cli("fs", "saved", "write", "/a.txt", input="mine\n").code == 0
    assert cli("bot", "register", "b").code == 0
    token = cli("grant", "saved", "b", "--permissions", "read").stdout.strip()
    assert cli("secret", "set", "API_KEY", input="s3cret").code == 0
    made = cli("backup", str(tmp_path / "home.tgz"), "--workspaces", "--json")
    assert made.code == 0, made.stderr
    assert {"warden.db", "keys", "config.toml", "workspaces"} <= set(made.json["data"]["holds"])
    assert (tmp_path / "home.tgz").stat().st_mode & 0o077 == 0  # it holds the keys
    # Disaster: the registry, the keys and the workspace are gone.
    (home / "warden.db").unlink()
    shutil.rmtree(home / "keys")
    shutil.rmtree(home / "workspaces" / "saved")
    lost = cli("list")
    assert lost.code == 1 and "warden.db" in lost.stderr
    restored = cli("restore", str(tmp_path / "home.tgz"), "--yes")
    assert restored.code == 0, restored.stderr
    assert cli("fs", "saved", "cat", "/a.txt").stdout == "mine\n"
    assert cli("run", "saved", "--", "cat", "a.txt").stdout == "mine\n"
    assert cli("audit", "verify").code == 0
    from warden.bootstrap import bootstrap

    app = bootstrap(home, environ=cli.environ)
    try:
        assert app.auth.authenticate(token).bot == "b"
        assert app.secrets.environment(["API_KEY"]).env == {"API_KEY": "s3cret"}
    finally:
        app.close()


@pytest.mark.initialised_home
def test_restore_refuses_to_overwrite_and_anything_not_a_backup(cli: Cli, home: Path, tmp_path: Path) -> None:
    assert cli("init").code == 0
    assert cli("create", "here").code == 0
    assert cli("backup", str(tmp_path / "b.tgz")).code == 0
    before = (home / "warden.db").read_bytes()
    r = cli("restore", str(tmp_path / "b.tgz"))
    assert r.code == 5 and "--yes" in r.stderr
    assert (home / "warden.db").read_bytes() == before
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        for name in ("WARDEN-BACKUP", "../escape.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "evil.tgz").write_bytes(evil.getvalue())
    r = cli("restore", str(tmp_path / "evil.tgz"), "--yes")
    assert r.code == 2 and not (home.parent / "escape.txt").exists()
    (tmp_path / "junk.tgz").write_bytes(b"not a tar")
    r = cli("restore", str(tmp_path / "junk.tgz"), "--yes")
    assert r.code == 2 and "not a Warden backup" in r.stderr
    assert cli("info", "here").code == 0


@pytest.mark.parametrize("entries", [
    [("workspaces", "sym", "/tmp"), ("workspaces/w/x", "file", "")],          # the workspaces folder a link
    [("archives", "sym", "/tmp")],
    [("workspaces/w/link", "sym", "/tmp"), ("workspaces/w/./link/x", "file", "")],  # spelled around the check
    [("workspaces//w", "dir", "")],
    [("keys/pepper", "hard", "/etc/passwd")],
])
def test_a_crafted_backup_never_writes_outside_the_home(cli: Cli, home: Path, tmp_path: Path,
                                                         entries: list[tuple[str, str, str]]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        marker = tarfile.TarInfo("WARDEN-BACKUP")
        marker.size = 1
        tar.addfile(marker, io.BytesIO(b"1"))
        for name, kind, target in entries:
            info = tarfile.TarInfo(name)
            if kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, target
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "crafted.tgz").write_bytes(buf.getvalue())
    r = cli("restore", str(tmp_path / "crafted.tgz"), "--yes")
    assert r.code == 2, r.stdout + r.stderr
    assert not (home / "workspaces").is_symlink() and not (home / "archives").is_symlink()


def test_a_workspace_nested_deeper_than_the_recursion_limit_is_backed_up(cli: Cli, home: Path,
                                                                         tmp_path: Path) -> None:
    assert cli("create", "deep").code == 0
    folder = home / "workspaces" / "deep"
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1100):  # a bot can nest folders this deep in one command
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    try:
        r = cli("backup", str(tmp_path / "deep.tgz"), "--workspaces")
        assert r.code == 0, r.stderr
        # Removed through Warden too: its recursive delete copes with the depth (shutil.rmtree,
        # pytest's own clean-up of old temporary folders among them, would not).
        removed = cli("fs", "deep", "rm", "/d", "-r")
        assert removed.code == 0, removed.stderr
        assert not (folder / "d").exists()
    finally:
        subprocess.run(["rm", "-rf", str(folder / "d")], check=False)


# `warden backup` in a process that SIGKILLs itself as it packs the registry's copy: the moment a
# kill -9 leaves both a half-written backup beside the target and the copy in the home.
_KILLED_MID_BACKUP = """
import os, signal, sys, tarfile
from warden.interfaces.cli.entry import main

add = tarfile.TarFile.add
def add_then_die(self, name, arcname=None, *args, **kwargs):
    if arcname == "warden.db":
        os.kill(os.getpid(), signal.SIGKILL)
    return add(self, name, arcname, *args, **kwargs)

tarfile.TarFile.add = add_then_die
sys.argv = ["warden", *sys.argv[1:]]
main()
"""


@pytest.mark.initialised_home
def test_a_backup_killed_midway_leaves_nothing_behind_for_good(cli: Cli, home: Path, tmp_path: Path) -> None:
    """A killed backup's half-written file (it holds the keys) and its registry copy in the home
    stayed forever, one more of each for every kill; the next backup and the janitor remove them."""
    assert cli("create", "kept").code == 0
    target = tmp_path / "out" / "home.tgz"

    def killed() -> None:
        proc = subprocess.run([sys.executable, "-c", _KILLED_MID_BACKUP, "backup", str(target), "--workspaces"],
                              env=cli.environ, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)

    def left() -> list[str]:
        return sorted([p.name for p in target.parent.iterdir() if p.name.endswith(".tmp")]
                      + [p.name for p in home.iterdir() if p.name.endswith(".tmp") or p.name.startswith("tmp")])

    killed()
    assert len(left()) == 2 and not target.exists(), left()  # what the kill leaves: the state tested
    made = cli("backup", str(target), "--workspaces")
    assert made.code == 0, made.stderr
    assert left() == []
    killed()
    assert len(left()) == 2
    assert cli("janitor", "--once").code == 0
    assert [name for name in left() if not name.startswith(".home.tgz.")] == []  # the home's: swept
    restored = cli("restore", str(target), "--yes")  # the backup made between the kills is whole
    assert restored.code == 0, restored.stderr
    assert cli("run", "kept", "--", "true").code == 0


_KILLED_MID_RESTORE = """
import os, signal, sys, tarfile
from warden.interfaces.cli.entry import main

extractall = tarfile.TarFile.extractall
def extract_then_die(self, *args, **kwargs):
    extractall(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

tarfile.TarFile.extractall = extract_then_die
sys.argv = ["warden", *sys.argv[1:]]
main()
"""


@pytest.mark.initialised_home
def test_a_restore_killed_midway_leaves_no_copy_of_the_keys_behind(cli: Cli, home: Path, tmp_path: Path) -> None:
    """A killed restore's unpacked backup (keys and registry) stayed in the new home for good."""
    assert cli("create", "kept").code == 0
    backup = tmp_path / "home.tgz"
    assert cli("backup", str(backup), "--workspaces").code == 0
    elsewhere = {**cli.environ, "WARDEN_HOME": str(tmp_path / "new")}
    proc = subprocess.run([sys.executable, "-c", _KILLED_MID_RESTORE, "restore", str(backup)], env=elsewhere,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)

    def staged() -> list[str]:
        return [p.name for p in (tmp_path / "new").iterdir() if p.name.startswith(".restore")]

    assert len(staged()) == 1 and (tmp_path / "new" / staged()[0] / "keys").is_dir()  # the state tested
    proc = subprocess.run([sys.executable, "-m", "warden", "restore", str(backup)], env=elsewhere,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert staged() == []


@pytest.mark.initialised_home
def test_a_backup_restored_into_another_home_is_that_homes_alone(cli: Cli, home: Path, tmp_path: Path) -> None:
    """Restored into a second home of the same machine, the registry's paths named the first
    home's folders: `run` worked in them and `destroy` deleted them, and its live sandboxes'
    rows reached the first home's supervisors. Its paths now name the second home, and nothing
    the first home runs is the second's to reach."""
    from tests.conftest import isolated_environ
    from tests.support.waiting import wait_until

    assert cli("init").code == 0
    for name in ("kept", "other"):
        assert cli("create", name, "--template", "minimal").code == 0
    assert cli("fs", "kept", "write", "/a.txt", input="mine\n").code == 0
    detached = cli("run", "kept", "--detach", "--json", "--", "sleep", "300")
    assert detached.code == 0, detached.stderr
    made = cli("backup", str(tmp_path / "home.tgz"), "--workspaces", "--json")
    assert made.code == 0, made.stderr
    second_home = tmp_path / "second" / "warden-home"
    second = Cli(isolated_environ(second_home))
    restored = second("restore", str(tmp_path / "home.tgz"), "--json")
    assert restored.code == 0, restored.stderr
    assert restored.json["data"]["moved_from"] == str(home)
    assert restored.json["data"]["processes_lost"] == [detached.json["data"]["id"]]
    assert "warden health --all --repair" in second("restore", str(tmp_path / "home.tgz"), "--yes").stdout
    # Env layers are not in a backup: this home builds its own (or copies them from the layer cache),
    # for every workspace at once (each needed its own `health NAME --repair`).
    looked = second("health", "--all", "--json")
    assert looked.code == 1 and {(r["name"], r["healthy"]) for r in looked.json["data"]["workspaces"]} == {
        ("kept", False), ("other", False)}
    repaired = second("health", "--all", "--repair", "--json")
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    assert {r["name"] for r in repaired.json["data"]["workspaces"]} == {"kept", "other"}
    assert second("health", "--all", "kept").code == 2  # one or all, not both
    info = second("info", "kept", "--json")
    assert info.json["data"]["path"] == str(second_home / "workspaces" / "kept"), info.json
    ran = second("run", "kept", "--", "sh", "-c", "pwd; cat a.txt")
    assert ran.stdout == f"{second_home / 'workspaces' / 'kept'}\nmine\n", ran.stdout + ran.stderr
    assert second("destroy", "other", "--yes", "--no-archive").code == 0
    assert second("suspend", "kept").code == 0
    # The first home's folder, its workspace and its detached process are untouched.
    assert (home / "workspaces" / "other" / ".workspace.json").is_file()
    listed = {w["name"]: w["status"] for w in cli("list", "--json").json["data"]}
    assert listed == {"kept": "ready", "other": "ready"}, listed
    still = {p["id"]: p["status"] for p in cli("ps", "kept", "--json").json["data"]}
    assert still[detached.json["data"]["id"]] == "running", still
    assert second("audit", "verify").code == 0
    assert cli("suspend", "kept").code == 0
    wait_until(lambda: cli("ps", "kept", "--json").json["data"][0]["status"] != "running")


@pytest.mark.initialised_home
def test_a_backup_of_before_it_named_its_home_is_moved_too(cli: Cli, home: Path, tmp_path: Path) -> None:
    # Its WARDEN-BACKUP said only the format: the registry's `init` event names the home.
    from tests.conftest import isolated_environ

    assert cli("init").code == 0
    assert cli("create", "old", "--template", "minimal").code == 0
    assert cli("backup", str(tmp_path / "new.tgz")).code == 0
    with tarfile.open(tmp_path / "new.tgz") as source, tarfile.open(tmp_path / "old.tgz", "w:gz") as old:
        for member in source.getmembers():
            if member.name == "WARDEN-BACKUP":
                member.size = len(b"warden-backup 1\n")
                old.addfile(member, io.BytesIO(b"warden-backup 1\n"))
            else:
                old.addfile(member, source.extractfile(member) if member.isfile() else None)
    other = tmp_path / "other" / "warden-home"
    restored = Cli(isolated_environ(other))("restore", str(tmp_path / "old.tgz"), "--json")
    assert restored.code == 0, restored.stderr
    assert restored.json["data"]["moved_from"] == str(home)
    info = Cli(isolated_environ(other))("info", "old", "--json")
    assert info.json["data"]["path"] == str(other / "workspaces" / "old")


@pytest.mark.initialised_home
def test_a_backup_without_workspaces_restored_elsewhere_says_whose_files_it_lacks(cli: Cli, home: Path,
                                                                                 tmp_path: Path) -> None:
    """README's `warden backup FILE` then `restore` in another home: every workspace was `broken`
    there, and the one line after the restore pointed to a repair that cannot mend a missing folder."""
    from tests.conftest import isolated_environ

    assert cli("init").code == 0
    for name in ("one", "two"):
        assert cli("create", name, "--template", "minimal").code == 0
    assert cli("backup", str(tmp_path / "bare.tgz")).code == 0
    other = Cli(isolated_environ(tmp_path / "elsewhere" / "warden-home"))
    restored = other("restore", str(tmp_path / "bare.tgz"))
    assert restored.code == 0, restored.stderr
    assert ("the files of one, two are not in this backup (made without --workspaces): they show broken here, which "
            "no repair mends; restore a backup made with `warden backup FILE --workspaces`") in restored.stdout
    assert {w["name"]: w["status"] for w in other("list", "--json").json["data"]} == {"one": "broken", "two": "broken"}
    # With the workspaces, nothing is said of them.
    assert cli("backup", str(tmp_path / "full.tgz"), "--workspaces").code == 0
    third = Cli(isolated_environ(tmp_path / "third" / "warden-home"))("restore", str(tmp_path / "full.tgz"), "--json")
    assert third.code == 0 and third.json["data"]["workspaces_without_files"] == [], third.stdout
