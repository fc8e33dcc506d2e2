"""`warden fs NAME ls|cat|stat|write|rm|mkdir PATH` through the real entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.shared_home


@pytest.fixture
def demo(cli: Cli, request: pytest.FixtureRequest) -> Path:
    name = "ws-" + request.node.name.removeprefix("test_")[:40].replace("_", "-")
    created = cli("create", name, "--json")
    assert created.code == 0, created.stderr
    return Path(created.json["data"]["path"])


def test_write_cat_ls_stat_mkdir_rm(cli: Cli, demo: Path) -> None:
    wrote = cli("fs", demo.name, "write", "/notes/a.txt", input="hello\n")
    assert wrote.code == 0 and wrote.stdout == "wrote 6 bytes to /notes/a.txt\n"
    assert (demo / "notes" / "a.txt").read_text() == "hello\n"
    cat = cli("fs", demo.name, "cat", "notes/a.txt")
    assert cat.code == 0 and cat.stdout == "hello\n"
    assert cli("fs", demo.name, "cat", "/notes/a.txt", "--json").json["data"] == {
        "path": "/notes/a.txt", "size": 6, "encoding": "utf-8", "content": "hello\n"}
    listing = cli("fs", demo.name, "ls", "/notes", "--json").json["data"]
    assert [(e["name"], e["type"], e["size"]) for e in listing] == [("a.txt", "file", 6)]
    assert "notes/" in cli("fs", demo.name, "ls").stdout.splitlines()
    info = cli("fs", demo.name, "stat", "/notes/a.txt", "--json").json["data"]
    assert info["type"] == "file" and info["size"] == 6 and info["nlink"] == 1
    assert cli("fs", demo.name, "mkdir", "/x/y/z").code == 0 and (demo / "x" / "y" / "z").is_dir()
    assert cli("fs", demo.name, "rm", "/x").code == 5  # not empty: conflict
    removed = cli("fs", demo.name, "rm", "-r", "/x", "--json").json["data"]
    assert removed == {"path": "/x", "deleted": True, "type": "dir"}
    assert not (demo / "x").exists()
    audit = cli("audit", "--workspace", demo.name, "--json").json["data"]
    writes = [e for e in audit if e["action"] == "fs.write"]
    assert writes and writes[-1]["target"] == f"{demo.name}:/notes/a.txt"
    assert writes[-1]["rule"] == "allow: workspace owner (rw)"


def test_cat_writes_raw_bytes(environ: dict[str, str], cli: Cli, demo: Path) -> None:
    blob = bytes(range(256)) * 4
    run = subprocess.run([sys.executable, "-m", "warden", "fs", demo.name, "write", "/bin.dat"], input=blob,
                         capture_output=True, env=environ, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    out = subprocess.run([sys.executable, "-m", "warden", "fs", demo.name, "cat", "/bin.dat"],
                         capture_output=True, env=environ, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout == blob
    as_json = cli("fs", demo.name, "cat", "/bin.dat", "--json").json["data"]
    assert as_json["encoding"] == "base64" and as_json["size"] == len(blob)


def test_refusals_have_the_right_exit_status_and_one_line(cli: Cli, demo: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("s")
    os.symlink(tmp_path / "outside", demo / "link")
    cases = [
        (("fs", demo.name, "cat", "/missing"), 4, "not_found"),
        (("fs", demo.name, "cat", "/../outside/secret"), 2, "invalid"),
        (("fs", demo.name, "cat", "/link/secret"), 3, "denied"),
        (("fs", demo.name, "write", "/.warden/sandbox.json"), 3, "denied"),
        (("fs", demo.name, "write", "/.workspace.json"), 3, "denied"),
        (("fs", demo.name, "rm", "/"), 3, "denied"),
        (("fs", "nope", "ls"), 4, "not_found"),
    ]
    for args, status, code in cases:
        human = cli(*args, input="x")
        assert human.code == status, (args, human.stderr)
        assert human.stderr.count("\n") == 1 and "Traceback" not in human.stderr, human.stderr
        machine = cli(*args, "--json", input="x")
        assert machine.code == status and machine.json["error"]["code"] == code
    assert not (demo / ".warden" / "sandbox.json").exists()
    assert (tmp_path / "outside" / "secret").read_text() == "s"


def test_size_limit_refuses_before_anything_lands(cli: Cli, demo: Path) -> None:
    limit = {"WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "1"}
    big = cli("fs", demo.name, "write", "/big.bin", input=b"x" * (1024 * 1024 + 1), env=limit)
    assert big.code == 2 and "sandbox.max_file_size_mb" in big.stderr
    assert not (demo / "big.bin").exists()
    assert cli("fs", demo.name, "write", "/ok.bin", input=b"x" * (1024 * 1024), env=limit).code == 0


def test_zone_configuration_applies_to_the_cli(cli: Cli, demo: Path) -> None:
    (demo / ".warden").mkdir(exist_ok=True)
    (demo / ".warden" / "zones.yaml").write_text(
        "zones:\n  data: {mode: ro}\n  final: {approval: {delete: blocked}}\n")
    (demo / "data").mkdir()
    (demo / "data" / "in.csv").write_text("a\n")
    assert cli("fs", demo.name, "cat", "/data/in.csv").stdout == "a\n"
    ro = cli("fs", demo.name, "write", "/data/in.csv", input="b")
    assert ro.code == 3 and "zone data is ro" in ro.stderr
    # `ask` (the default) is answered by the CLI user, who is the person asked.
    assert cli("fs", demo.name, "write", "/final/r.md", input="r").code == 0
    blocked = cli("fs", demo.name, "rm", "/final/r.md")
    assert blocked.code == 3 and "zone final blocks delete" in blocked.stderr


def test_a_read_only_zone_without_its_folder_is_read_only_in_the_first_run(cli: Cli, demo: Path) -> None:
    (demo / ".warden").mkdir(exist_ok=True)
    (demo / ".warden" / "zones.yaml").write_text("zones:\n  reports: {mode: ro}\n")
    assert not (demo / "reports").exists()
    out = cli("run", demo.name, "--", "sh", "-c", "mkdir -p reports; echo x > reports/r.md || echo refused")
    assert out.code == 0 and "refused" in out.stdout, out.stderr
    assert (demo / "reports").is_dir() and not (demo / "reports" / "r.md").exists()


def test_python_api_files(home: Path, environ: dict[str, str]) -> None:
    from warden import Warden

    with Warden.open(home, environ=environ) as w:
        ws = w.create("api-demo")
        ws.files.write_text("notes/a.txt", "hi")
        assert ws.files.read_text("/notes/a.txt") == "hi"
        assert ws.files.exists("/notes/a.txt") and "notes" in [e.name for e in ws.files.list("/")]
        ws.files.write_bytes("/b.bin", b"\x00\xff")
        assert ws.files.read_bytes("b.bin") == b"\x00\xff"
        assert ws.files.stat("/b.bin").size == 2
        ws.files.mkdir("/d")
        assert ws.files.delete("/d") == "dir"


def test_mkdir_says_whether_it_made_the_folder(cli: Cli, demo: Path, tmp_path: Path) -> None:
    first = cli("fs", demo.name, "mkdir", "/d1", "--json")
    assert first.code == 0 and first.json["data"] == {"path": "/d1", "created": True}
    again = cli("fs", demo.name, "mkdir", "/d1", "--json")
    assert again.code == 0 and again.json["data"] == {"path": "/d1", "created": False}
    assert cli("fs", demo.name, "mkdir", "/d1").stdout == "/d1 already exists\n"
    assert cli("fs", demo.name, "mkdir", "/d1/d2").stdout == "created /d1/d2\n"
    assert cli("fs", demo.name, "mkdir", "/", "--json").json["data"]["created"] is False
    audit = [e for e in cli("audit", "--workspace", demo.name, "--json").json["data"] if e["action"] == "fs.mkdir"]
    assert [e["detail"]["created"] for e in audit[-5:]] == [True, False, False, True, False]
    # What is already there must still be a real folder: a file or a link is refused as before.
    (demo / "file.txt").write_text("x")
    on_file = cli("fs", demo.name, "mkdir", "/file.txt", "--json")
    assert on_file.code == 5 and "exists and is not a directory" in on_file.json["error"]["message"]
    os.symlink(tmp_path, demo / "away")
    link = cli("fs", demo.name, "mkdir", "/away", "--json")
    assert link.code == 3 and link.json["error"]["code"] == "denied"
