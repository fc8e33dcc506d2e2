"""The sweep's walk for Warden's temporary files in a workspace (adapters/safefs/temps.py) holds
only the folders on its way down open: a bot's folder of thousands of empty folders neither takes
the process's descriptors (the janitor walks in the server's own process) nor hides a leftover
past the descriptor limit.

A real tree on disk, walked in a child process whose descriptor limit is lower than the folder
count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warden.adapters.safefs import temps

_KEY = b"k" * 32
_FOLDERS = 1500  # more than the child's descriptor limit
_LIMIT = 256

_WALK = """
import os, resource, sys
from warden.adapters.safefs import temps
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[2])))
temps.sign_with(lambda make: bytes.fromhex(sys.argv[3]))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
base = len(os.listdir("/proc/self/fd"))
found, most = 0, 0
for _ in temps.signed_temps(fd):
    found += 1
    most = max(most, len(os.listdir("/proc/self/fd")) - base)
print(found, most)
"""


def test_a_folder_of_many_folders_costs_a_few_descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(temps, "_key_source", lambda make: _KEY)
    monkeypatch.setattr(temps, "_key", None)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(_FOLDERS):
        folder = workspace / f"d{i}"
        folder.mkdir()
        (folder / temps.temp_name("leaf")).write_bytes(b"")
    deep = workspace.joinpath(*(["n"] * 20))
    deep.mkdir(parents=True)
    (deep / temps.temp_name("leaf")).write_bytes(b"")
    walked = subprocess.run([sys.executable, "-c", _WALK, str(workspace), str(_LIMIT), _KEY.hex()],
                            capture_output=True, text=True, timeout=120, check=True)
    found, most = map(int, walked.stdout.split())
    assert found == _FOLDERS + 1, walked.stderr  # none hidden past the descriptor limit
    assert most <= 2 * 21 + 2, most  # the folders on the way down, not every sibling


def test_a_link_or_a_folder_with_a_leftovers_name_is_never_one(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(temps, "_key_source", lambda make: _KEY)
    monkeypatch.setattr(temps, "_key", None)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / temps.temp_name("x")).write_bytes(b"the person's")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "way").symlink_to(outside)
    (workspace / temps.temp_name("y")).symlink_to(outside / "anything")
    (workspace / temps.temp_name("z")).mkdir()
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert list(temps.signed_temps(fd)) == []
    finally:
        os.close(fd)
