"""Repair reinstalls packages the workspace records but lost, while it holds the workspace."""

from __future__ import annotations

import json
import shutil

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture


def test_repair_reinstalls_a_recorded_package_that_went_missing(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("reins")
    ws = envhome.create(name)
    assert envhome.cli("install", name, "gamma", "--json").returncode == 0
    site = next((ws / ".venv" / "lib").glob("python3.*/site-packages"))
    for path in site.glob("gamma*"):
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    health = json.loads(envhome.cli("health", name, "--json").stdout)["data"]
    assert health["python_missing"] == ["gamma"]
    proc = envhome.cli("health", name, "--repair", "--json")
    data = json.loads(proc.stdout)["data"]
    assert data["failed"] == [], data["failed"]
    assert any("reinstalled gamma" in fixed for fixed in data["fixed"]) and data["healthy"]
