"""`warden list` shows what a person wants to see: when a workspace expires, its size on disk
(`--size`), and the destroyed workspaces that were kept as archives (`--destroyed`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.used_home


@pytest.mark.slow
def test_list_shows_expiry_size_and_destroyed_archives(cli: Cli, tmp_path: Path) -> None:
    assert cli("create", "brief", "--template", "minimal", "--ttl", "2h").code == 0
    assert cli("fs", "brief", "write", "/data.bin", input=b"x" * 300_000).code == 0
    listed = cli("list")
    assert listed.code == 0
    header, row = listed.stdout.splitlines()[:2]
    assert "Expires" in header and "Size" not in header  # no walk unless asked
    assert row.split()[0] == "brief" and "never" not in row
    expires = cli("list", "--json").json["data"][0]["expires"]
    assert expires and expires[:10] in row

    sized = cli("list", "--size", "--json").json["data"][0]
    assert sized["size"]["bytes"] >= 300_000 and sized["size"]["files"] >= 1
    assert "Size" in cli("list", "--size").stdout.splitlines()[0]

    gone = cli("destroy", "brief", "--yes")
    assert gone.code == 0 and "`warden unarchive brief` brings it back" in gone.stdout
    after = cli("list")
    assert "1 destroyed workspace kept as archives: `warden list --destroyed`" in after.stdout
    shelved = cli("list", "--destroyed", "--json").json["data"]
    assert [s["name"] for s in shelved] == ["brief"]
    assert Path(shelved[0]["archive"]).is_file() and shelved[0]["size"] > 0
    assert "brief" in cli("list", "--destroyed").stdout

    assert cli("unarchive", "brief").code == 0  # the way back the listing names
    assert cli("list", "--destroyed", "--json").json["data"] == []
    assert cli("list", "--names").stdout.split() == ["brief"]
