"""What a person reads, kept as plain text files and compared word for word: the help of a few
commands, the answer to typos, and usage errors. A change to any of them shows in review as a
diff of tests/interfaces/snapshots/*.txt; to accept one, run this module with
WARDEN_UPDATE_SNAPSHOTS=1 and commit the files it rewrote."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.used_home

SNAPSHOTS = Path(__file__).parent / "snapshots"
# Each case: the snapshot's name → the command line. Help is laid out for 100 columns.
CASES: dict[str, list[str]] = {
    "help-top": ["--help"],
    "help-create": ["create", "--help"],
    "help-fs-write": ["fs", "notes", "write", "--help"],
    "help-completion": ["completion", "--help"],
    "typo-command": ["lsit"],
    "typo-subcommand": ["fs", "notes", "wrte", "/a"],
    "typo-option": ["list", "--jsn"],
    "typo-option-json": ["list", "--jsn", "--json"],
    "run-without-dashes": ["run", "notes", "python", "-V"],
    "missing-argument": ["fs", "notes", "write"],
    "bad-choice": ["completion", "tcsh"],
    "destroy-without-yes": ["destroy", "notes"],
    "no-such-workspace": ["info", "nothere"],
    "version": ["--version"],
}


def _render(result: object, argv: list[str]) -> str:
    code, stdout, stderr = result.code, result.stdout, result.stderr  # type: ignore[attr-defined]
    return f"$ warden {' '.join(argv)}\n[exit {code}]\n[stdout]\n{stdout}[stderr]\n{stderr}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_snapshot(cli: Cli, name: str) -> None:
    argv = CASES[name]
    got = _render(cli(*argv, env={"COLUMNS": "100"}), argv)
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("WARDEN_UPDATE_SNAPSHOTS") == "1":
        path.write_text(got)
    assert path.exists(), f"no snapshot {path.name}: run with WARDEN_UPDATE_SNAPSHOTS=1 and review it"
    assert got == path.read_text(), f"{path.name} differs; if the change is meant, update the snapshot"


def test_every_snapshot_file_has_a_case() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.txt")} == set(CASES)
