"""`warden install` takes a checkpoint first: rolling back to it undoes the recorded requirement."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_install_checkpoints_first_and_rollback_undoes_the_record(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("ckins")
    ws = envhome.create(name)
    before = (ws / "pyproject.toml").read_text()
    proc = envhome.cli("install", name, "gamma", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"gamma"' in (ws / "pyproject.toml").read_text()
    listed = json.loads(envhome.cli("checkpoints", name, "--json").stdout)["data"]
    assert [c["message"] for c in listed] == ["before install gamma"]
    assert envhome.cli("rollback", name, listed[0]["id"]).returncode == 0
    assert (ws / "pyproject.toml").read_text() == before
