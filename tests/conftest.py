"""Shared fixtures: a fresh WARDEN_HOME per test, the wired App, and the real `warden` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from warden.bootstrap import App, bootstrap

REPO = Path(__file__).resolve().parent.parent


def isolated_environ(home: Path) -> dict[str, str]:
    """The environment a CLI call gets: only what Warden needs, plus WARDEN_HOME."""
    keep = {k: v for k, v in os.environ.items()
            if k in {"PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "TMPDIR"}}
    keep["HOME"] = str(home.parent)
    keep["WARDEN_HOME"] = str(home)
    return keep


@pytest.fixture(scope="module")
def _module_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "warden-home"
    path.mkdir()
    return path


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """An empty Warden home for one test; one for the whole module under `pytest.mark.shared_home`
    (its first `create` builds the layer, the others reuse it)."""
    if request.node.get_closest_marker("shared_home"):
        return Path(request.getfixturevalue("_module_home"))
    path = tmp_path / "warden-home"
    path.mkdir()
    return path


@pytest.fixture
def environ(home: Path) -> dict[str, str]:
    """The environment a CLI call in this test gets: only what Warden needs, plus WARDEN_HOME."""
    return isolated_environ(home)


@pytest.fixture
def app(home: Path, environ: dict[str, str]) -> Iterator[App]:
    """The real wired App on the test's home."""
    application = bootstrap(home, environ=environ)
    yield application
    application.close()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs the real `warden` entry point in a subprocess, as a user would."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.environ = environ

    def __call__(self, *args: str, input: str | bytes | None = None, timeout: float = 120,
                 env: dict[str, str] | None = None) -> CliResult:
        data = input.encode() if isinstance(input, str) else input
        proc = subprocess.run([sys.executable, "-m", "warden", *args], input=data,
                              capture_output=True, timeout=timeout, env={**self.environ, **(env or {})},
                              check=False)
        return CliResult(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                         proc.stderr.decode("utf-8", "replace"))


@pytest.fixture
def cli(environ: dict[str, str]) -> Cli:
    return Cli(environ)
