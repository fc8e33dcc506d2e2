"""`warden health` reads files the bot shapes: links, FIFOs and devices must not hang or leak it."""

from __future__ import annotations

import os
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
