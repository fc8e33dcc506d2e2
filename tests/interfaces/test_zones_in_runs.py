"""Zones hold inside `warden run` too: a zone whose writes need a person is read-only there
(EROFS: changes go through the file API and its approvals), and in a zone whose deletes need a
person or are blocked nothing can be removed or renamed (EACCES, by Landlock), while writing
there and removing elsewhere still work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cli
from warden.adapters.sandbox.landlock import abi

pytestmark = pytest.mark.shared_home

ZONES = ("zones:\n"
         "  drafts: {approval: {write: preApproved, delete: preApproved}}\n"
         "  final: {approval: {write: ask, delete: ask}}\n"
         "  archive: {approval: {write: preApproved, delete: blocked}}\n")


@pytest.fixture
def paper(cli: Cli, request: pytest.FixtureRequest) -> Path:
    name = "zr-" + request.node.name.removeprefix("test_")[:40].replace("_", "-")
    created = cli("create", name, "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    root = Path(created.json["data"]["path"])
    (root / ".warden").mkdir(exist_ok=True)
    (root / ".warden" / "zones.yaml").write_text(ZONES)
    for zone in ("drafts", "final", "archive"):
        (root / zone).mkdir()
        (root / zone / "old.txt").write_text(f"{zone}\n")
    return root


def _sh(cli: Cli, root: Path, script: str) -> str:
    out = cli("run", root.name, "--", "sh", "-c", "exec 2>&1; " + script)
    assert out.code == 0, out.stderr
    return out.stdout


def test_an_ask_zone_is_read_only_inside_runs(cli: Cli, paper: Path) -> None:
    said = _sh(cli, paper, "echo new > final/new.md 2>&1 || true; echo x >> final/old.txt 2>&1 || true; "
                           "rm final/old.txt 2>&1 || true")
    assert said.count("Read-only file system") == 3, said
    assert not (paper / "final" / "new.md").exists() and (paper / "final" / "old.txt").read_text() == "final\n"


def test_a_write_refused_in_an_ask_zone_names_the_zone_not_the_workspace(cli: Cli, paper: Path) -> None:
    """"write in the workspace" was Warden's line for a write the command had made in the workspace:
    the zone is named, and the way its files change."""
    out = cli("run", paper.name, "--", "sh", "-c", "echo new > final/new.md")
    assert out.code != 0 and "Read-only file system" in out.stderr, out.stderr
    assert out.stderr.endswith("warden: that path is read-only in the sandbox (the system, read-only mounts, and the "
                               "zones /final of the workspace's .warden/zones.yaml); write elsewhere in the workspace "
                               f"or in /tmp; a zone's files change through `warden fs {paper.name} write PATH`\n"), \
        out.stderr


@pytest.mark.skipif(abi() < 2, reason="this kernel has no Landlock ABI 2: such zones are read-only instead")
def test_nothing_is_removed_or_renamed_in_a_zone_whose_deletes_are_blocked(cli: Cli, paper: Path) -> None:
    said = _sh(cli, paper, "rm archive/old.txt 2>&1 || true; mv archive/old.txt drafts/ 2>&1 || true; "
                           "mv archive/old.txt archive/renamed.txt 2>&1 || true; "
                           "echo more >> archive/old.txt && echo appended; "
                           "mkdir archive/sub && echo new > archive/sub/n.txt && echo made; "
                           "rm archive/sub/n.txt 2>&1 || true; rmdir archive/sub 2>&1 || true; "
                           "rm drafts/old.txt && echo removed-elsewhere")
    assert said.count("Permission denied") == 5, said
    assert "appended" in said and "made" in said and "removed-elsewhere" in said
    assert (paper / "archive" / "old.txt").read_text() == "archive\nmore\n"
    assert (paper / "archive" / "sub" / "n.txt").exists() and not (paper / "drafts" / "old.txt").exists()
    # The file API holds the same rule for everyone.
    refused = cli("fs", paper.name, "rm", "/archive/old.txt")
    assert refused.code == 3 and "zone archive blocks delete" in refused.stderr


def test_a_workspace_without_such_zones_runs_its_command_directly(cli: Cli, paper: Path) -> None:
    (paper / ".warden" / "zones.yaml").write_text("zones:\n  drafts: {approval: {write: preApproved, "
                                                  "delete: preApproved}}\n")
    said = _sh(cli, paper, "cat /proc/self/status | grep -c NoNewPrivs; ls /etc/warden 2>&1 || true; "
                           "rm final/old.txt && echo removed")
    assert "removed" in said and "landlock.py" not in said


@pytest.mark.skipif(abi() < 2, reason="this kernel has no Landlock ABI 2: such zones are read-only instead")
def test_the_loaders_variables_reach_the_command_but_never_the_launcher(cli: Cli, paper: Path, tmp_path: Path) -> None:
    """A preloaded library that makes landlock_restrict_self a no-op would lift the rule if the
    launcher itself were started with LD_PRELOAD; it gets it only after the rule holds."""
    import shutil
    import subprocess

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the preloaded library")
    source = tmp_path / "pre.c"
    source.write_text('#define _GNU_SOURCE\n#include <stdarg.h>\n#include <dlfcn.h>\n'
                      'long syscall(long n, ...) { va_list ap; va_start(ap, n); long a[6];'
                      ' for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long); va_end(ap);'
                      ' if (n == 446) return 0;'
                      ' static long (*real)(long, ...); if (!real) real = dlsym(RTLD_NEXT, "syscall");'
                      ' return real(n, a[0], a[1], a[2], a[3], a[4], a[5]); }\n')
    library = paper / "drafts" / "pre.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"],
                   check=True, capture_output=True)
    out = cli("run", paper.name, "--env", f"LD_PRELOAD={library}", "--", "sh", "-c",
              "exec 2>&1; echo \"preload=$LD_PRELOAD\"; rm archive/old.txt || echo refused")
    assert out.code == 0, out.stderr
    assert f"preload={library}" in out.stdout and "refused" in out.stdout
    assert (paper / "archive" / "old.txt").exists()


def test_a_kept_zone_s_folder_is_made_before_the_run_and_a_link_refused(cli: Cli, paper: Path) -> None:
    (paper / ".warden" / "zones.yaml").write_text("zones:\n  vault: {approval: {write: preApproved, "
                                                  "delete: blocked}}\n")
    said = _sh(cli, paper, "ls -ld vault | cut -c1; rmdir vault 2>&1 || echo kept; mv vault v2 || echo kept")
    assert said.splitlines()[0] == "d" and said.count("kept") == 2
    assert (paper / "vault").is_dir() and not (paper / "vault").is_symlink()


def test_a_broken_zones_file_refuses_the_run_with_126_saying_what_is_wrong(cli: Cli, paper: Path) -> None:
    (paper / ".warden" / "zones.yaml").write_text("zones:\n  final: {approval: {write: maybe}}\n")
    out = cli("run", paper.name, "--json", "--", "true")
    assert out.code == 126 and out.json["error"]["code"] == "invalid"
    assert "approval 'maybe' is not one of preApproved, ask, blocked" in out.json["error"]["message"]


def test_a_write_refused_in_an_ro_zone_does_not_send_the_person_to_warden_fs(cli: Cli, paper: Path) -> None:
    """Found as a newcomer: a write in an `ro` zone ended "a zone's files change through `warden fs
    NAME write PATH`", which then refused it ("zone input is ro"): only the zones that take writes
    are sent there."""
    (paper / ".warden" / "zones.yaml").write_text(ZONES + "  input: {mode: ro}\n")
    out = cli("run", paper.name, "--", "sh", "-c", "echo new > input/new.csv")
    assert out.code != 0 and "Read-only file system" in out.stderr, out.stderr
    last = out.stderr.rstrip("\n").splitlines()[-1]
    assert "the files of /final change through `warden fs " in last, last
    assert "/input takes no writes, `warden fs` included" in last, last
    refused = cli("fs", paper.name, "write", "/input/new.csv", input="x")  # as the line says
    assert refused.code == 3 and "zone input is ro" in refused.stderr


@pytest.mark.skipif(abi() < 2, reason="this kernel has no Landlock ABI 2: such zones are read-only instead")
def test_a_removal_a_kept_zone_forbids_in_runs_ends_with_warden_s_line(cli: Cli, paper: Path) -> None:
    """Found as a newcomer: with a zone whose deletes are blocked, `rm x` at the workspace's top said
    only "Permission denied" (Landlock forbids it there too), with no line from Warden."""
    (paper / "x").write_text("x\n")
    for argv in (["rm", "x"], ["python", "-c", "import os; os.remove('x')"]):
        out = cli("run", paper.name, "--", *argv)
        assert out.code == 1 and "Permission denied" in out.stderr, out.stderr
        assert out.stderr.rstrip("\n").splitlines()[-1] == (
            "warden: runs of this workspace cannot remove or rename entries in the zones /archive (their deletes "
            "ask a person or are blocked), nor directly in the workspace folder or in a top-level folder a "
            f"run made; `warden fs {paper.name} rm PATH` (or `mv`) does it where the zone allows"), out.stderr
    assert cli("fs", paper.name, "rm", "/x").code == 0 and not (paper / "x").exists()
