"""`warden backup --workspaces` keeps the workspaces' checkpoints; a restore brings them back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.initialised_home


def test_a_backup_with_workspaces_keeps_the_checkpoints(cli: Cli, home: Path, tmp_path: Path) -> None:
    created = cli("create", "kept", "--json")
    assert created.code == 0, created.stderr
    folder = Path(created.json["data"]["path"])
    (folder / "kept.txt").write_text("v1\n")
    made = cli("checkpoint", "kept", "--json").json["data"]["id"]
    backup = cli("backup", str(tmp_path / "home.tgz"), "--workspaces", "--json")
    assert backup.code == 0 and "versions" in backup.json["data"]["holds"]
    shutil.rmtree(home / "versions" / "kept")
    assert cli("checkpoints", "kept", "--json").json["data"] == []
    assert cli("restore", str(tmp_path / "home.tgz"), "--yes").code == 0
    (folder / "kept.txt").write_text("v2\n")
    assert cli("rollback", "kept", made).code == 0
    assert (folder / "kept.txt").read_text() == "v1\n"
