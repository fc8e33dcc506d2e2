"""`warden create NAME` refuses a taken name before any slow work (a layer build takes ~18 s).

`--template nosuch` stands for the slow part: it fails only once create gets that far, so a
refusal that names the name proves the name was checked first.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli
from warden.bootstrap import App
from warden.core.workspaces import WorkspaceRecord


def test_a_registered_name_is_refused_first(app: App, cli: Cli, home: Path) -> None:
    now = "2025-01-01T00:00:00+00:00"
    with app.registry.transaction() as tx:
        tx.workspaces.insert(WorkspaceRecord(id="ws_0", name="taken", path=str(home / "workspaces" / "taken"),
                                        type="user", status="ready", created_at=now, last_accessed=now))
    result = cli("create", "taken", "--template", "nosuch", "--json")
    assert result.code == 5, result.stdout
    assert result.json["error"]["code"] == "conflict"
    assert "already exists" in result.json["error"]["message"]


def test_a_folder_in_the_way_is_refused_first(cli: Cli, home: Path) -> None:
    (home / "workspaces" / "stray").mkdir(parents=True)
    result = cli("create", "stray", "--template", "nosuch")
    assert result.code == 5
    assert "not a registered workspace" in result.stderr and "template" not in result.stderr
    assert (home / "workspaces" / "stray").is_dir()
    assert cli("list", "--json").json["data"] == []
