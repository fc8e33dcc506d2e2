"""A workspace's hand-edited zones.yaml that cannot be read refuses every run and file change:
`warden health` says so (it said `healthy` while every command was refused), without calling the
environment broken, and `--repair` leaves the person's file as it is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]

BAD = "zones:\n  workspace: {path: /, mode: rw}\n"  # the root is no zone: a run refuses this file


def test_an_unreadable_zones_file_is_said_by_health_and_left_as_written(cli: Cli, home: Path) -> None:
    assert cli("create", "zoned").code == 0
    zones = home / "workspaces" / "zoned" / ".warden" / "zones.yaml"
    zones.parent.mkdir(exist_ok=True)
    zones.write_text(BAD)
    assert cli("run", "zoned", "--", "true").code == 126  # what the person met first
    said = cli("health", "zoned")
    assert said.code == 1
    assert "needs attention" in said.stdout and "healthy\n" not in said.stdout
    assert "policy: " in said.stdout and "zones.yaml" in said.stdout and "refused" in said.stdout
    report = cli("health", "zoned", "--json").json["data"]
    assert report["healthy"] is False and report["issues"] == [] and len(report["policy"]) == 1
    repaired = cli("health", "zoned", "--repair", "--json")
    assert repaired.code == 1 and repaired.json["data"]["policy"]
    assert zones.read_text() == BAD
    assert cli("info", "zoned", "--json").json["data"]["status"] == "ready"  # the environment is whole
    zones.write_text("zones:\n  final: {mode: rw}\n")
    assert cli("health", "zoned").code == 0
