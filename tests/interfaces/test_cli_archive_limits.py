"""Archiving reads every file's full length: sparse files cannot make destroy read terabytes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import Cli


def test_destroy_refuses_to_archive_more_than_the_limit_at_once(cli: Cli, home: Path) -> None:
    assert cli("create", "sparse").code == 0
    folder = home / "workspaces" / "sparse"
    for i in range(4):  # 4 GiB of length, a few KB on disk
        with open(folder / f"hole{i}", "wb") as fh:
            fh.truncate(1 << 30)
    started = time.monotonic()
    refused = cli("destroy", "sparse", "--yes", "--json", env={"WARDEN_WORKSPACE_ARCHIVE_MAX_SIZE": "1G"})
    assert refused.code == 2, refused.stdout + refused.stderr
    assert "workspace.archive_max_size" in refused.json["error"]["message"]
    assert time.monotonic() - started < 10, "refused from the sizes, without reading the files"
    assert folder.is_dir() and "sparse" in {w["name"] for w in cli("list", "--json").json["data"]}
    archives = home / "archives"
    assert not archives.exists() or not [p for p in os.listdir(archives) if p.startswith("sparse")]
    assert cli("destroy", "sparse", "--no-archive", "--yes").code == 0
