"""Lifecycle from the CLI: suspend, resume, archive, unarchive, cleanup, health and repair, broken rows."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture
from tests.support.waiting import wait_until
from warden.bootstrap import bootstrap


def _descendants(pid: int) -> dict[int, str]:
    """The processes below `pid` on this host, with their command names."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = names[child]
                todo.append(child)
    return found


def _create(env: EnvHome, name: str, *args: str) -> Path:
    proc = env.cli("create", name, "--template", "local", *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path(json.loads(proc.stdout)["data"]["path"])


def _status(env: EnvHome, name: str) -> str:
    return json.loads(env.cli("info", name, "--json").stdout)["data"]["status"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_suspend_stops_sandboxed_processes_and_resume_reopens(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("sus")
    ws = _create(envhome, name)
    sleeper = subprocess.Popen(["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                                "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                                "--bind", str(ws), str(ws), "--chdir", str(ws), "--unshare-pid",
                                "--die-with-parent", "--", "sleep", "60"])
    try:
        wait_until(lambda: "sleep" in _descendants(sleeper.pid).values(), message="the sandbox never started")
        command = [pid for pid, comm in _descendants(sleeper.pid).items() if comm == "sleep"]
        proc = envhome.cli("suspend", name, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["data"]["stopped"] == command  # the command, not bwrap around it
        assert sleeper.wait(timeout=10) != 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    assert _status(envhome, name) == "suspended"
    assert json.loads(envhome.cli("suspend", name, "--json").stdout)["data"]["status"] == "suspended"
    proc = envhome.cli("resume", name, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"]["status"] == "ready"


def test_archive_frees_the_folder_and_unarchive_restores_it(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("arc")
    ws = _create(envhome, name)
    (ws / "notes.txt").write_text("keep me")
    own_site = next((ws / ".venv" / "lib").glob("python3.*/site-packages"))
    (own_site / "botpkg.py").write_text("X = 1\n")  # something a bot installed
    proc = envhome.cli("archive", name, "--json")
    assert proc.returncode == 0, proc.stderr
    archive = json.loads(proc.stdout)["data"]["archive"]
    assert os.path.isfile(archive) and str(envhome.home / "archives") in archive
    assert not ws.exists()
    assert _status(envhome, name) == "archived"
    assert envhome.cli("suspend", name).returncode == 5  # archived → suspended is no step
    listed = json.loads(envhome.cli("list", "--status", "archived", "--json").stdout)["data"]
    assert name in {w["name"] for w in listed}
    proc = envhome.cli("unarchive", name, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["status"] == "ready"
    assert (ws / "notes.txt").read_text() == "keep me"
    out = subprocess.run([str(ws / ".venv/bin/python"), "-c", "import alpha, botpkg; print(botpkg.X)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
    assert not os.path.exists(archive)
    assert envhome.cli("unarchive", name).returncode == 5


def test_health_finds_damage_and_repair_fixes_it(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("hl")
    ws = _create(envhome, name)
    healthy = json.loads(envhome.cli("health", name, "--json").stdout)["data"]
    assert healthy["healthy"] and healthy["configured"] and healthy["python_venv"]
    assert healthy["python_deps_installed"] and healthy["node_deps_installed"]
    assert all(layer["read_only"] for layer in healthy["layers"]) and healthy["disk_usage"] > 0
    # A repair of a healthy workspace mends nothing, and says so (it said "re-linked .venv").
    proc = envhome.cli("health", name, "--repair", "--json")
    assert proc.returncode == 0, proc.stdout
    assert json.loads(proc.stdout)["data"]["fixed"] == []
    # Break it: the venv's link to the layer, a node link, and the marker.
    pth = next(ws.glob(".venv/lib/python3.*/site-packages/_warden_layer.pth"))
    pth.unlink()
    (ws / "node_modules" / "tiny-top").unlink()
    (ws / ".workspace_configured").unlink()
    proc = envhome.cli("health", name, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)["data"]
    assert not report["healthy"] and not report["configured"]
    assert "alpha" in report["python_missing"] and "tiny-top" in report["node_missing"]
    assert any("not configured" in i for i in report["issues"])
    proc = envhome.cli("health", name, "--repair", "--json")
    assert proc.returncode == 0, proc.stdout
    fixed = json.loads(proc.stdout)["data"]
    assert fixed["healthy"] and fixed["fixed"] and not fixed["failed"]
    subprocess.run([str(ws / ".venv/bin/python"), "-c", "import alpha"], check=True)
    assert (ws / ".workspace_configured").exists()


def test_repair_rebuilds_a_pruned_layer(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("prn")
    ws = _create(envhome, name)
    shutil.rmtree(ws / ".venv")
    health = json.loads(envhome.cli("health", name, "--json").stdout)["data"]
    assert health["python_venv"] is False and any("venv" in i for i in health["issues"])
    proc = envhome.cli("resume", name, "--json")  # resume runs health and repair
    assert proc.returncode == 0, proc.stdout
    subprocess.run([str(ws / ".venv/bin/python"), "-c", "import alpha"], check=True)


def test_dead_creator_shows_broken_and_is_repairable(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("dead")
    ws = _create(envhome, name)
    dead = subprocess.Popen(["true"])
    dead.wait()
    app = envhome.app()
    try:
        record = app.workspaces.get(name)
        with app.registry.db.transaction() as tx:
            meta = {**record.meta, "pid": dead.pid, "pid_start": 1}
            tx.execute("UPDATE workspaces SET status = 'creating', meta = :m WHERE name = :n",
                       {"m": json.dumps(meta), "n": name})
    finally:
        app.close()
    (ws / ".workspace_configured").unlink()
    listed = json.loads(envhome.cli("list", "--json").stdout)["data"]
    assert [w["status"] for w in listed if w["name"] == name] == ["broken"]
    proc = envhome.cli("health", name, "--repair", "--json")
    assert proc.returncode == 0, proc.stdout
    assert _status(envhome, name) == "ready"


def test_cleanup_by_last_access(envhome: EnvHome) -> None:  # noqa: F811
    idle, temp = envhome.name("idle"), envhome.name("temp")
    _create(envhome, idle)
    temp_ws = _create(envhome, temp, "--type", "temporary")
    later = datetime.now(UTC) + timedelta(days=8)
    app = bootstrap(envhome.home, environ=envhome.environ, clock=lambda: later)
    try:
        plan = app.lifecycle.cleanup(timedelta(days=7), dry_run=True)
        actions = {a.name: a.action for a in plan.actions}
        assert actions[idle] == "archive" and actions[temp] == "destroy"
        assert app.workspaces.get(idle).status == "ready"  # a dry run changes nothing
        empty = app.lifecycle.cleanup(timedelta(days=30), dry_run=True).to_json()
        assert empty["actions"] == []
        # A DURATION as the user writes one, never timedelta's "30 days, 0:00:00".
        assert (empty["older_than"], empty["older_than_s"]) == ("30d", 30 * 86400)
        done = app.lifecycle.cleanup(timedelta(days=7))
        assert all(a.done for a in done.actions if a.name in (idle, temp))
        assert app.workspaces.get(idle).status == "archived"
        assert not temp_ws.exists()
    finally:
        app.close()
    assert envhome.cli("info", temp).returncode == 4
    assert envhome.cli("cleanup", "--older-than", "7d", "--dry-run", "--json").returncode == 0
    assert envhome.cli("cleanup", "--older-than", "soon").returncode == 2


def test_snapshot_build_counts_one_package_in_the_singular(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    """Found as a newcomer: a one-package layer was "ready" with "1 packages"."""
    extra = tmp_path / "one.yaml"
    extra.write_text("name: one\npython:\n  dependencies: [\"beta>=3\"]\n")  # no dependency of its own
    said = envhome.cli("snapshot", "build", str(extra)).stdout
    assert "(python, 1 package, " in said, said


def test_prune_keeps_layers_in_use(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    extra = tmp_path / "solo.yaml"
    extra.write_text("name: solo\npython:\n  dependencies: [gamma]\n")
    built = json.loads(envhome.cli("snapshot", "build", str(extra), "--json").stdout)["data"]["layers"]
    solo = built[0]["id"]
    proc = envhome.cli("snapshot", "prune", "--dry-run", "--json")
    planned = json.loads(proc.stdout)["data"]["removed"]
    assert solo in planned
    in_use = json.loads(envhome.cli("snapshot", "list", "--json").stdout)["data"]
    used = {row["id"] for row in in_use if row["workspaces"]}
    assert not used & set(planned)
    assert (envhome.home / "layers" / solo).exists()
    removed = json.loads(envhome.cli("snapshot", "prune", "--json").stdout)["data"]["removed"]
    assert solo in removed and not (envhome.home / "layers" / solo).exists()
    assert all((envhome.home / "layers" / i).exists() for i in used)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_prune_leaves_the_layer_of_a_create_in_flight(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    """A create finds its layer, then claims its row: a prune between the two removed a layer no row
    named yet, and the create said "created" of a broken workspace. The create is paused (strace
    delays its read of layer.json) right there while a real prune runs."""
    extra = tmp_path / "inflight.yaml"
    extra.write_text("name: inflight\npython:\n  dependencies: [gamma, \"beta>=2\"]\n")
    (layer,) = json.loads(envhome.cli("snapshot", "build", str(extra), "--json").stdout)["data"]["layers"]
    info = Path(layer["path"]) / "layer.json"
    name, log = envhome.name("inflight"), tmp_path / "strace.log"
    create = subprocess.Popen(["strace", "-f", "-qq", "-o", str(log), "-P", str(info), "-e", "trace=openat",
                               "-e", "inject=openat:delay_exit=3000000:when=1", sys.executable, "-m", "warden",
                               "create", name, "--template", str(extra), "--json"],
                              env=envhome.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: log.exists() and "DELAYED" in log.read_text(), timeout=60,
                   message="the create did not read its layer")
        pruned = envhome.cli("snapshot", "prune", "--json")
    finally:
        out, err = create.communicate(timeout=120)
    assert create.returncode == 0, out.decode() + err.decode()
    assert layer["id"] not in json.loads(pruned.stdout)["data"]["removed"]
    health = json.loads(envhome.cli("health", name, "--json").stdout)["data"]
    assert health["healthy"], health
    assert envhome.cli("destroy", name, "--no-archive", "--yes").returncode == 0
    # Once no create holds it, the layer goes as any unused one.
    assert layer["id"] in json.loads(envhome.cli("snapshot", "prune", "--json").stdout)["data"]["removed"]


def test_a_bot_cannot_take_the_name_of_an_archived_workspace(envhome: EnvHome) -> None:  # noqa: F811
    """Else: a bot creates the name, fills it, destroys it, and `unarchive` restores the bot's copy."""
    from warden.core.errors import Conflict

    app = envhome.app()
    name = envhome.name("precious")
    app.workspaces.create(name, template="local")
    app.files(name).write_text("/notes.txt", "mine")
    app.workspaces.destroy(name)
    with pytest.raises(Conflict, match="archived workspace of user"):
        app.workspaces.create(name, kind="bot", actor="bot:evil", template="local")
    restored = envhome.cli("unarchive", name, "--json")
    assert restored.returncode == 0, restored.stderr
    assert app.files(name).read_text("/notes.txt") == "mine"


# The real CLI in a process that SIGKILLs itself at one join of a lifecycle command: what a
# `kill -9` at that moment leaves, with no random timing.
_KILLED_AT = """
import os, signal, sys
from warden.services.workspaces import WorkspaceService
from warden.interfaces.cli.entry import main

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

setattr(WorkspaceService, sys.argv[1], die)
sys.argv = ["warden", *sys.argv[2:]]
main()
"""


def _killed_at(env: EnvHome, join: str, *args: str) -> None:
    """`warden ARGS` killed (-9) as it calls WorkspaceService.`join`."""
    proc = subprocess.run([sys.executable, "-c", _KILLED_AT, join, *args], env=env.environ, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize(("command", "join"), [("unarchive", "set_status"), ("archive", "trash")])
def test_a_lifecycle_command_killed_between_folder_and_status_leaves_a_usable_workspace(
        envhome: EnvHome, command: str, join: str) -> None:  # noqa: F811
    """An unarchive killed after its folder is back but before its status write, or an archive
    killed after its status write but before its folder went, left `archived` with the folder
    there: unarchive refused ("move it away") and archive said archived, for good."""
    name = envhome.name("join")
    ws = _create(envhome, name)
    (ws / "notes.txt").write_text("keep me")
    if command == "unarchive":
        assert envhome.cli("archive", name).returncode == 0
    _killed_at(envhome, join, command, name)
    assert _status(envhome, name) == "archived"
    assert ws.is_dir()  # the state the kill leaves

    # `warden archive` finishes what the archive began: archived means the folder is gone.
    proc = envhome.cli("archive", name, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archive = json.loads(proc.stdout)["data"]["archive"]
    assert not ws.exists() and os.path.isfile(archive)

    # And the workspace comes back, whole.
    _killed_at(envhome, "set_status", "unarchive", name)
    proc = envhome.cli("unarchive", name, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["status"] == "ready"
    assert (ws / "notes.txt").read_text() == "keep me"
    assert not os.path.exists(archive)
    assert envhome.cli("run", name, "--", "cat", "notes.txt").stdout == "keep me"


def test_unarchive_still_refuses_a_folder_that_is_not_the_workspaces(envhome: EnvHome) -> None:  # noqa: F811
    """Only the workspace's own folder (its .workspace.json names its id) is taken as restored."""
    name = envhome.name("other")
    ws = _create(envhome, name)
    assert envhome.cli("archive", name).returncode == 0
    ws.mkdir()
    (ws / ".workspace.json").write_text(json.dumps({"id": "ws_someoneelse", "name": name}))
    proc = envhome.cli("unarchive", name)
    assert proc.returncode == 5 and "move it away" in proc.stderr, proc.stderr
    assert _status(envhome, name) == "archived"


def test_a_rebuild_that_fails_or_is_killed_leaves_the_workspaces_their_layer(envhome: EnvHome,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    """`snapshot build --rebuild` removed the layer before building its new copy: the workspaces on
    it were broken for the whole build ('layer ... MISSING'), and for good when the build failed
    (its packages no longer to be found) or was killed. The new copy now takes the old one's place
    in one step once built."""
    extra = tmp_path / "rebuilt.yaml"
    extra.write_text("name: rebuilt\npython:\n  dependencies: [gamma]\n")
    (layer,) = json.loads(envhome.cli("snapshot", "build", str(extra), "--json").stdout)["data"]["layers"]
    folder = Path(layer["path"])
    name = envhome.name("rebuilt")
    envhome.create(name, str(extra))
    built = folder.stat().st_ino

    def healthy() -> bool:
        return bool(json.loads(envhome.cli("health", name, "--json").stdout)["data"]["healthy"])

    (tmp_path / "no-wheels").mkdir()
    failed = envhome.cli("snapshot", "build", str(extra), "--rebuild",
                         env={"WARDEN_ENVS_FIND_LINKS": str(tmp_path / "no-wheels")})
    assert failed.returncode != 0, failed.stdout
    assert healthy() and folder.stat().st_ino == built

    rebuild = subprocess.Popen([sys.executable, "-m", "warden", "snapshot", "build", str(extra), "--rebuild"],
                               env=envhome.environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: any(folder.parent.glob(f".build-{layer['id']}-{rebuild.pid}-*")), timeout=60,
                   message="the rebuild did not start building")
        assert (folder / "layer.json").exists()  # while it builds
    finally:
        rebuild.kill()
        rebuild.wait()
    assert healthy() and folder.stat().st_ino == built

    assert envhome.cli("snapshot", "build", str(extra), "--rebuild").returncode == 0
    assert folder.stat().st_ino != built and healthy()  # built again, in the old one's place
    assert envhome.cli("destroy", name, "--delete", "--yes").returncode == 0



def test_a_rebuild_stops_the_live_sandboxes_that_mounted_the_old_layer(envhome: EnvHome,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    """The rebuild swaps its new layer in and removes the old one's files, but a live sandbox
    started before had mounted the old folder: reused, every later `--detach` run (and bot exec)
    in it found its packages gone (ModuleNotFoundError) while health said 'healthy', until it
    idled out. A sandbox whose read-only mounts were replaced is now started afresh at its next command."""
    extra = tmp_path / "live.yaml"
    extra.write_text("name: live\npython:\n  dependencies: [gamma]\n")
    assert envhome.cli("snapshot", "build", str(extra)).returncode == 0
    name = envhome.name("live")
    envhome.create(name, str(extra))

    def detached(*argv: str) -> str:
        proc = envhome.cli("run", name, "--detach", "--", *argv)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    before = detached("sleep", "120")  # keeps the live sandbox running across the rebuild
    assert envhome.cli("snapshot", "build", str(extra), "--rebuild").returncode == 0
    after = detached("python", "-c", "import gamma")
    assert "exited (exit 0)" in envhome.cli("wait", name, after).stdout, envhome.cli("logs", name, after).stderr
    assert "running" not in envhome.cli("ps", name).stdout.split(before, 1)[1].splitlines()[0]
    assert envhome.cli("destroy", name, "--delete", "--yes").returncode == 0
