"""JSON nested past Python's stack, where a bot or a typo can put it, is read as invalid, never an
internal error (finding: a workspace's package.json of 5,000 nested objects, which any bot with
`write` can leave, made `warden health` exit 1 "internal error: RecursionError", and `warden config
set` of a `[[[[…` list did the same: json.loads and tomllib raise RecursionError, not ValueError)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import cli_out, warden_environ

DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


def _cli(environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden", *args], capture_output=True, text=True, env=environ,
                          timeout=120, check=False)


@pytest.fixture(scope="module")
def environ(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    environ = warden_environ(tmp_path_factory.mktemp("deep") / "home")
    cli_out(environ, "init")
    return environ


def test_health_of_a_workspace_whose_package_json_nests_too_deep(environ: dict[str, str]) -> None:
    path = Path(json.loads(cli_out(environ, "create", "deep", "--template", "minimal", "--json"))["data"]["path"])
    (path / "package.json").write_text(DEEP_OBJECT)
    checked = _cli(environ, "health", "deep", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["ok"] is True and "internal" not in checked.stderr


def test_config_set_of_a_list_nested_too_deep_is_invalid(environ: dict[str, str]) -> None:
    done = _cli(environ, "config", "set", "sandbox.allowed_commands", "[" * 3000 + "]" * 3000)
    assert done.returncode == 2 and "not a valid array" in done.stderr, done.stderr
    assert "internal" not in done.stderr


def test_health_of_a_workspace_whose_pyproject_nests_too_deep(environ: dict[str, str]) -> None:
    path = Path(json.loads(cli_out(environ, "create", "deeppy", "--template", "minimal", "--json"))["data"]["path"])
    (path / "pyproject.toml").write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    checked = _cli(environ, "health", "deeppy", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["ok"] is True


def test_a_config_toml_nested_too_deep_is_said_in_one_line(tmp_path: Path) -> None:
    environ = warden_environ(tmp_path / "home")
    cli_out(environ, "init")
    (tmp_path / "home" / "config.toml").write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    for args in (("config", "get", "versions.keep"), ("config", "set", "versions.keep", "3"), ("list",)):
        done = _cli(environ, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "config.toml: not valid TOML (nested too deep)" in done.stderr and "internal" not in done.stderr
