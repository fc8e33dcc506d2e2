"""A layer changed by hand, a venv or a layer gone: the workspace says so, and repair restores it."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


def status(cli: Cli, name: str) -> str:
    return str(cli("info", name, "--json").json["data"]["status"])


def layer_site(home: Path) -> Path:
    return next((home / "layers").glob("py*/venv/lib/python3.*/site-packages"))


def test_a_layer_changed_by_hand_is_found_and_rebuilt(cli: Cli, home: Path) -> None:
    assert cli("create", "lay").code == 0
    site = layer_site(home)
    os.chmod(site, stat.S_IMODE(site.stat().st_mode) | 0o200)
    (site / "evil.pth").write_text("import os; os.environ['EVIL'] = '1'\n")  # would run in every workspace
    report = cli("health", "lay", "--json").json["data"]
    assert not report["healthy"] and any("changed since it was built" in i for i in report["issues"])
    assert [entry["intact"] for entry in report["layers"] if entry["id"].startswith("py")] == [False]
    repaired = cli("health", "lay", "--repair", "--json")
    assert repaired.code == 0, repaired.stderr
    assert repaired.json["data"]["healthy"], repaired.json["data"]["issues"]
    assert not (layer_site(home) / "evil.pth").exists()
    assert cli("run", "lay", "--", "python", "-c", "import os; print(os.environ.get('EVIL'))").stdout == "None\n"


def test_a_missing_venv_or_layer_is_broken_not_ready_and_repair_brings_it_back(cli: Cli, home: Path) -> None:
    assert cli("create", "gone").code == 0
    shutil.rmtree(home / "workspaces" / "gone" / ".venv")
    assert status(cli, "gone") == "broken"
    assert cli("health", "gone", "--repair").code == 0
    assert status(cli, "gone") == "ready"
    layer = next(p for p in (home / "layers").iterdir() if p.name.startswith("py"))
    for dirpath, dirnames, _ in os.walk(layer):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
    os.chmod(layer, 0o755)
    shutil.rmtree(layer)
    assert status(cli, "gone") == "broken"
    assert cli("health", "gone", "--repair").code == 0
    assert status(cli, "gone") == "ready"
    assert cli("run", "gone", "--", "python", "-c", "print(1)").stdout == "1\n"


def test_a_live_sandbox_on_a_layer_repair_rebuilt_is_not_reused(cli: Cli, home: Path) -> None:
    """A live sandbox (a detached server's) bind-mounts the layer folder it found at its start:
    a repair of another workspace on the same layer rebuilt it, and left this one the old
    folder, emptied, so each later command in it ran without its packages (its own repair
    changes its lease, which stopped it; the other's does not). A sandbox whose read-only
    mounts were replaced is started afresh."""
    assert cli("create", "held").code == 0 and cli("create", "mended").code == 0
    server = cli("run", "held", "--detach", "--", "sleep", "120")
    assert server.code == 0, server.stderr
    site = layer_site(home)
    layer_root = site.parents[3]
    os.chmod(site, stat.S_IMODE(site.stat().st_mode) | 0o200)
    (site / "evil.pth").write_text("import os; os.environ['EVIL'] = '1'\n")
    assert cli("health", "mended", "--repair").code == 0
    probe = cli("run", "held", "--detach", "--", "python", "-c",
                f"import os; print(os.environ.get('EVIL'), os.path.exists({str(layer_root / 'layer.json')!r}))")
    assert probe.code == 0, probe.stderr
    pid = probe.stdout.strip()
    waited = cli("wait", "held", pid)
    assert "exited (exit 0)" in waited.stdout, (waited.stdout, cli("logs", "held", pid).stderr)
    assert cli("logs", "held", pid).stdout == "None True\n"  # the layer as repaired, not the emptied old one
    # The old sandbox was stopped (its sleep no longer runs).
    assert "running" not in cli("ps", "held").stdout.split(server.stdout.strip(), 1)[1].splitlines()[0]
    for name in ("held", "mended"):
        assert cli("destroy", name, "--delete", "--yes").code == 0
