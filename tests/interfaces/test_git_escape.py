"""A bot steering the person's host `git` through git metadata it leaves in its workspace.

Each attack runs as a bot would (inside `warden run`, through `warden fs`, or in a blob); then
the person runs the real `git status` on the host in the workspace, as they would. The bot's
configuration names a harmless canary program (it only touches a file): it must never run.
This is the one host-side run of a bot-influenced program these tests make on purpose, and
`test_the_canary_runs_when_git_trusts_the_config` shows that it would be noticed.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("git") is None,
                                 reason="needs bubblewrap and git"),
              pytest.mark.used_home]


@pytest.fixture
def canary(tmp_path: Path) -> tuple[Path, Path]:
    """(the program, the file it makes when it runs)."""
    ran = tmp_path / "CANARY_RAN"
    program = tmp_path / "canary.sh"
    program.write_text(f"#!/bin/sh\ntouch {ran}\n")
    program.chmod(0o755)
    return program, ran


def person_git(folder: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """The person's `git status`, with no system or global config of this machine in the way."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CEILING_DIRECTORIES": str(folder.parent.parent)}
    return subprocess.run(["git", "status", "--short"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture
def ws(cli: Cli) -> Path:
    created = cli("create", "gitws", "--json")
    assert created.code == 0, created.stderr
    return Path(created.json["data"]["path"])


def bot_run(cli: Cli, script: str) -> str:
    r = cli("run", "gitws", "--", "sh", "-c", script)
    return r.stdout + r.stderr


def test_the_canary_runs_when_git_trusts_the_config(tmp_path: Path, canary: tuple[Path, Path]) -> None:
    program, ran = canary
    repo = tmp_path / "plain"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor", str(program)], check=True)
    person_git(repo, tmp_path)
    assert ran.exists()


@pytest.mark.parametrize("attack", [
    # git init inside, then a config naming the canary
    "git init -q . && git config core.fsmonitor {canary}",
    # a gitfile pointing at a repository the bot made under another name
    "mkdir -p evil && git init -q --bare evil && git --git-dir=evil config core.fsmonitor {canary} "
    "&& printf 'gitdir: evil\\n' > .git",
    # .git as a link to the bot's repository
    "git init -q --bare evil && git --git-dir=evil config core.fsmonitor {canary} && ln -s evil .git",
    # a nested repository, and an upper-case .GIT
    "mkdir -p sub/deeper && cd sub && git init -q && git config core.fsmonitor {canary}",
])
def test_bot_made_git_control_files_never_run_the_persons_git(
        cli: Cli, ws: Path, canary: tuple[Path, Path], tmp_path: Path, attack: str) -> None:
    program, ran = canary
    bot_run(cli, attack.format(canary=program))
    for folder in (ws, ws / "sub", ws / "sub" / "deeper"):
        if folder.is_dir():
            person_git(folder, tmp_path)
    assert not ran.exists()
    assert not list(ws.rglob(".git")), "a bot-made .git is still in place"
    audit = cli("audit", "--workspace", "gitws", "--json").json["data"]
    assert any(e["action"] == "git.quarantine" for e in audit)


def test_an_embedded_bare_repository_is_defused(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    program, ran = canary
    bot_run(cli, f"git init -q --bare bare && git --git-dir=bare config core.fsmonitor {program}")
    person_git(ws / "bare", tmp_path)
    assert not ran.exists()
    assert (ws / "bare" / "config").exists()  # the bot's files are kept, only HEAD is set aside
    assert not (ws / "bare" / "HEAD").exists()


def test_the_persons_repository_is_read_only_to_bots(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    program, ran = canary
    subprocess.run(["git", "init", "-q", str(ws)], check=True)  # the person's own repository
    (ws / "sub").mkdir()
    subprocess.run(["git", "init", "-q", str(ws / "sub")], check=True)
    out = bot_run(cli, f"git config core.fsmonitor {program}; printf '%s\\n' /tmp > .git/commondir; "
                       f"mkdir -p .git/hooks && cp {program} .git/hooks/post-checkout; "
                       f"cd sub && git config core.fsmonitor {program}; mv .git x; mkdir .git")
    assert "Read-only file system" in out or "Device or resource busy" in out
    person_git(ws, tmp_path)
    person_git(ws / "sub", tmp_path)
    assert not ran.exists()
    assert (ws / ".git").is_dir() and (ws / "sub" / ".git").is_dir()  # still the person's, kept
    # Between runs the person's repositories stay theirs: a second run leaves them in place.
    bot_run(cli, "true")
    assert (ws / ".git" / "HEAD").exists() and (ws / "sub" / ".git" / "HEAD").exists()


def test_file_api_refuses_git_control_files(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    program, ran = canary
    config = f"[core]\n\tfsmonitor = {program}\n"
    for path in ("/.git/config", "/sub/.git/config", "/sub/.GIT/config", "/.git"):
        r = cli("fs", "gitws", "write", path, input=config)
        assert r.code == 3, (path, r.stderr)
    # An embedded bare repository written file by file.
    for path, text in (("/b/config", config), ("/b/refs/heads/x", "0" * 40 + "\n"),
                       ("/b/HEAD", "ref: refs/heads/x\n")):
        cli("fs", "gitws", "mkdir", "/b/objects")
        cli("fs", "gitws", "write", path, input=text)
    person_git(ws / "b", tmp_path)
    assert not ran.exists()


def test_a_blob_cannot_carry_git_control_files(cli: Cli, tmp_path: Path) -> None:
    for member in (".git/config", "sub/.git", "x/.GIT/HEAD"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            data = b"[core]\n\tfsmonitor = /bin/true\n"
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        blob = tmp_path / "p.tar.gz"
        blob.write_bytes(buf.getvalue())
        r = cli("create", "blobbed", "--blob", str(blob))
        assert r.code == 2 and ".git" in r.stderr, (member, r.stderr)
        assert cli("info", "blobbed").code == 4


ROOT_BARE = ("mkdir -p refs/heads objects; echo 'ref: refs/heads/main' > HEAD; "
             "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n"
             "\\tfsmonitor = {canary}\\n' > config")


def test_the_workspace_root_shaped_as_a_repository_is_defused(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    program, ran = canary
    bot_run(cli, ROOT_BARE.format(canary=program))
    person_git(ws, tmp_path)
    assert not ran.exists() and not (ws / "HEAD").exists()


def test_the_root_shaped_as_a_repository_through_the_file_api(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    program, ran = canary
    cli("fs", "gitws", "mkdir", "/refs/heads")
    cli("fs", "gitws", "mkdir", "/objects")
    cli("fs", "gitws", "write", "/config",
        input=f"[core]\n\trepositoryformatversion = 0\n\tworktree = .\n\tfsmonitor = {program}\n")
    cli("fs", "gitws", "write", "/HEAD", input="ref: refs/heads/main\n")
    person_git(ws, tmp_path)
    assert not ran.exists()


def test_a_quarantined_repository_is_never_adopted(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    """Moved aside, then an idle run (no bot active: new `.git` entries would be the person's),
    then renamed back: it must not become the person's."""
    program, ran = canary
    bot_run(cli, f"mkdir sub && cd sub && git init -q && git config core.fsmonitor {program}")
    quarantined = next(ws.glob("sub/.git.warden-quarantined-*"))
    person_git(quarantined, tmp_path)  # even inside the moved-aside folder
    bot_run(cli, "true")
    out = bot_run(cli, "mv sub/.git.warden-quarantined-* sub/.git && mv sub/.git/HEAD.warden-quarantined sub/.git/HEAD")
    assert "moved aside" in out
    bot_run(cli, "true")
    person_git(ws / "sub", tmp_path)
    assert not ran.exists()


def test_a_folder_made_unreadable_hides_nothing(cli: Cli, ws: Path, canary: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    program, ran = canary
    bot_run(cli, f"mkdir -p hide/in && cd hide/in && git init -q && git config core.fsmonitor {program} "
                 "&& chmod 000 .. ")
    os.chmod(ws / "hide", 0o755)  # the person looks inside
    person_git(ws / "hide" / "in", tmp_path)
    assert not ran.exists()


def test_repositories_in_an_allowed_read_write_folder_are_the_persons(cli: Cli, ws: Path, tmp_path: Path,
                                                                     canary: tuple[Path, Path]) -> None:
    program, ran = canary
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    assert cli("sandbox", "add", str(project), "--mode", "rw", "--workspace", "gitws").code == 0
    out = bot_run(cli, f"echo hi > {project}/work.txt; git -C {project} config core.fsmonitor {program}; "
                       f"mkdir {project}/inner && git init -q {project}/inner && "
                       f"git -C {project}/inner config core.fsmonitor {program}")
    assert (project / "work.txt").read_text() == "hi\n"  # the folder is read-write
    assert "Read-only file system" in out
    for folder in (project, project / "inner"):
        person_git(folder, tmp_path)
    assert not ran.exists()


def test_a_repository_that_borrows_its_refs_through_commondir_is_defused(
        cli: Cli, ws: Path, canary: tuple[Path, Path], tmp_path: Path) -> None:
    """git takes a folder with HEAD and a `commondir` file (a linked worktree) for a repository,
    with refs, objects and config from the folder it names: no `refs` beside HEAD needed."""
    program, ran = canary
    config = (f"[core]\n\trepositoryformatversion = 1\n\tfsmonitor = {program}\n"
              "[extensions]\n\tworktreeConfig = true\n")
    for path, text in (("/c/config", config), ("/c/refs/keep", "x\n"), ("/c/objects/keep", "x\n"),
                       ("/HEAD", "ref: refs/heads/main\n"), ("/commondir", "c\n"),
                       ("/config.worktree", "[core]\n\tbare = false\n\tworktree = .\n")):
        cli("fs", "gitws", "write", path, input=text)
    bot_run(cli, "true")
    for folder in (ws, ws / "c"):
        person_git(folder, tmp_path)
    bot_run(cli, "mkdir -p e && cd e && echo 'ref: refs/heads/main' > HEAD && echo ../c > commondir && "
                 "printf '[core]\\n\\tbare = false\\n\\tworktree = .\\n' > config.worktree")
    person_git(ws / "e", tmp_path)
    assert not ran.exists()


def test_a_repository_a_bot_makes_deep_in_a_big_workspace_is_moved_aside(cli: Cli, ws: Path,
                                                                          canary: tuple[Path, Path],
                                                                          tmp_path: Path) -> None:
    program, ran = canary
    for i in range(2000):  # a node_modules: the sweeps around each run must still reach every folder
        folder = ws / "node_modules" / f"p{i // 50}" / f"lib{i % 50}"
        folder.mkdir(parents=True)
        (folder / "index.js").touch()
    bot_run(cli, "true")
    bot_run(cli, f"cd node_modules/p30/lib7 && git init -q && git config core.fsmonitor {program}")
    person_git(ws / "node_modules" / "p30" / "lib7", tmp_path)
    assert not ran.exists()
    assert not list(ws.rglob(".git")), "a bot-made .git is still in place"
    assert list(ws.glob("node_modules/p30/lib7/.git.warden-quarantined-*"))
