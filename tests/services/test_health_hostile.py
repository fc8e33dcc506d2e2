"""`warden health` reads files the bot shapes: links, FIFOs and devices must not hang or leak it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import Cli


def test_health_survives_fifos_and_links_planted_by_a_bot(cli: Cli, home: Path) -> None:
    created = cli("create", "hostile", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    site = next((ws / ".venv" / "lib").glob("python3.*/site-packages"))
    fifo_dist = site / "fifo-1.0.dist-info"
    fifo_dist.mkdir()
    os.mkfifo(fifo_dist / "METADATA")
    zero_dist = site / "zero-1.0.dist-info"
    zero_dist.mkdir()
    (zero_dist / "METADATA").symlink_to("/dev/zero")
    secret = home.parent / "outside.txt"
    secret.write_text("Metadata-Version: 2.1\nName: leaked-host-file\n")
    link_dist = site / "link-1.0.dist-info"
    link_dist.mkdir()
    (link_dist / "METADATA").symlink_to(secret)
    (ws / "pyproject.toml").unlink(missing_ok=True)
    os.mkfifo(ws / "pyproject.toml")
    (ws / "package.json").unlink(missing_ok=True)
    (ws / "package.json").symlink_to("/dev/zero")
    result = cli("health", "hostile", "--json", timeout=60)
    assert result.code in (0, 1), result.stderr
    report = result.json["data"] if result.json["ok"] else {}
    assert "leaked-host-file" not in result.stdout
    assert report == {} or "healthy" in report


def test_manifests_of_any_shape_never_stop_health_or_resume(cli: Cli, home: Path) -> None:
    # A bot writes pyproject.toml and package.json as it likes: `project = 1` made `warden
    # health` (and `health --all`, and `warden resume`, which checks health) an internal error.
    created = cli("create", "shapes", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    shapes = ["project = 1\n", "[project]\ndependencies = 5\n", '[project]\ndependencies = "six"\n',
              '[project]\ndependencies = [1, {a = 1}, "six>=1"]\n']
    for shape in shapes:
        (ws / "pyproject.toml").write_text(shape)
        (ws / "package.json").write_text('{"dependencies": ["left-pad"]}')
        for args in (("health", "shapes", "--json"), ("health", "--all", "--json")):
            result = cli(*args, timeout=60)
            assert result.json is not None and result.json["ok"] is True, (shape, result.stdout, result.stderr)
    (ws / "pyproject.toml").write_text("project = 1\n")
    assert cli("suspend", "shapes").code == 0
    resumed = cli("resume", "shapes", timeout=60)
    assert resumed.code == 0 and "internal error" not in resumed.stderr, resumed.stderr


def test_health_reads_the_headers_of_a_packages_metadata_not_all_of_it(cli: Cli, home: Path) -> None:
    # 8,000 dist-info folders, each a hard link to one 1 MiB METADATA (1 MiB of the bot's disk),
    # made `warden health` read 8 GB: 45 s, and an hour at workspace.max_files. Its headers only now.
    created = cli("create", "crowded", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    site = next((ws / ".venv" / "lib").glob("python3.*/site-packages"))
    big = ws / "metadata"
    big.write_text("Metadata-Version: 2.1\nName: wanted-pkg\nVersion: 1.0\n\n" + ("x" * 99 + "\n") * 10_480)
    for i in range(8000):
        folder = site / f"p{i}-1.0.dist-info"
        folder.mkdir()
        os.link(big, folder / "METADATA")
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["wanted-pkg", "absent-pkg"]\n')
    started = time.monotonic()
    result = cli("health", "crowded", "--json", timeout=120)
    took = time.monotonic() - started
    assert result.json is not None and result.json["ok"] is True, result.stdout
    assert result.json["data"]["python_missing"] == ["absent-pkg"]  # the large METADATA's Name is still read
    assert took < 20, f"health took {took:.1f} s"  # 45 s and more before


def test_health_reads_a_venvs_package_folders_beneath_one_open_of_it(cli: Cli, home: Path) -> None:
    # Each METADATA was read beneath its own open of the workspace (0.6 ms): 500,000 folders
    # (workspace.max_files) made `warden health` take minutes. One open for all of them now.
    created = cli("create", "many", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    site = next((ws / ".venv" / "lib").glob("python3.*/site-packages"))
    for i in range(20_000):
        folder = site / f"p{i}-1.0.dist-info"
        folder.mkdir()
        (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: p{i}\n")
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["p19999", "absent-pkg"]\n')
    started = time.monotonic()
    result = cli("health", "many", "--json", timeout=120)
    took = time.monotonic() - started
    assert result.json is not None and result.json["ok"] is True, result.stdout
    assert result.json["data"]["python_missing"] == ["absent-pkg"]
    assert took < 8, f"health took {took:.1f} s for 20,000 package folders"  # 2.9 s before, 1.3 s now, here


def test_health_looks_for_node_packages_beneath_the_workspace_only(cli: Cli, home: Path) -> None:
    # The package names are the bot's (package.json), and so is node_modules: `../..` in a name, or
    # a package folder linked to one of the host's, told the bot whether a host file exists.
    created = cli("create", "nodes", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    host = home.parent / "host-pkg"
    host.mkdir()
    (host / "package.json").write_text("{}")
    (ws.parent / "beside").mkdir()
    (ws.parent / "beside" / "package.json").write_text("{}")
    (ws / "node_modules" / "real").mkdir(parents=True)
    (ws / "node_modules" / "real" / "package.json").write_text("{}")
    (ws / "node_modules" / "linked").symlink_to(host)
    (ws / "package.json").write_text('{"dependencies": {"real": "1", "linked": "1", "../../beside": "1"}}')
    result = cli("health", "nodes", "--json", timeout=60)
    assert result.json is not None and result.json["ok"] is True, result.stdout
    assert result.json["data"]["node_missing"] == ["linked", "../../beside"]


def test_health_tells_nothing_of_host_folders_a_linked_node_modules_points_at(cli: Cli, home: Path,
                                                                               environ: dict[str, str]) -> None:
    # A package of the Node layer is looked for in the layer when node_modules/NAME is a link;
    # that test of the link (lstat) followed a node_modules (or @scope) the bot had linked to a
    # host folder, so whether the layer's package counted as missing told whether that host
    # folder holds a link of that name.
    from warden.bootstrap import bootstrap

    created = cli("create", "peek", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    ws = Path(created.json["data"]["path"])
    layer = home.parent / "layers" / "node-22"
    (layer / "node_modules" / "pkg").mkdir(parents=True)
    (layer / "node_modules" / "pkg" / "package.json").write_text("{}")
    app = bootstrap(home, environ=environ)
    try:
        record = app.workspaces.get("peek")
        with app.registry.transaction() as tx:
            tx.workspaces.update("peek", {"meta": {**record.meta, "node": True, "ro_paths": [str(layer)]}})
    finally:
        app.close()
    host = home.parent / "host-folder"
    host.mkdir()
    (ws / "node_modules").mkdir(exist_ok=True)
    (ws / "node_modules").rmdir()
    (ws / "node_modules").symlink_to(host)
    (ws / "package.json").write_text('{"dependencies": {"pkg": "1"}}')
    answers = []
    for holds_a_link in (False, True):
        if holds_a_link:
            (host / "pkg").symlink_to("/nowhere")
        result = cli("health", "peek", "--json", timeout=60)
        assert result.json is not None and result.json["ok"] is True, result.stdout
        answers.append(result.json["data"]["node_missing"])
    assert answers == [["pkg"], ["pkg"]]
    # Packages Warden linked from the layer into a real node_modules are found there, scoped too.
    (layer / "node_modules" / "@s" / "spkg").mkdir(parents=True)
    (layer / "node_modules" / "@s" / "spkg" / "package.json").write_text("{}")
    (ws / "node_modules").unlink()
    (ws / "node_modules" / "@s").mkdir(parents=True)
    (ws / "node_modules" / "pkg").symlink_to(layer / "node_modules" / "pkg")
    (ws / "node_modules" / "@s" / "spkg").symlink_to(layer / "node_modules" / "@s" / "spkg")
    (ws / "package.json").write_text('{"dependencies": {"pkg": "1", "@s/spkg": "1", "gone": "1"}}')
    result = cli("health", "peek", "--json", timeout=60)
    assert result.json is not None and result.json["data"]["node_missing"] == ["gone"], result.stdout
