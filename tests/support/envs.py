"""A Warden home with a local package index and a built template, shared by the env tests.

Building a layer takes seconds, so one home (and its layers) serves a whole test session;
each test uses its own workspace names. Under pytest-xdist each worker process has its own,
used by one test at a time: some change the whole home (cleanup archives every idle
workspace), so two tests must never work in one beside each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.packages import write_template
from warden.bootstrap import App, bootstrap

PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


@dataclass
class EnvHome:
    root: Path
    home: Path
    template: Path
    wheels: Path
    npm: Path
    environ: dict[str, str]

    def app(self) -> App:
        return bootstrap(self.home, environ=self.environ)

    def cli(self, *args: str, input: bytes | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "warden", *args], input=input, capture_output=True,
                              timeout=timeout, env={**self.environ, **(env or {})}, check=False)
        return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                           proc.stderr.decode("utf-8", "replace"))

    @staticmethod
    def name(prefix: str = "ws") -> str:
        return f"{prefix}-{secrets.token_hex(3)}"

    def create(self, name: str, template: str = "local") -> Path:
        """`warden create NAME --template T` through the CLI; the workspace folder."""
        proc = self.cli("create", name, "--template", template, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return Path(json.loads(proc.stdout)["data"]["path"])


def tree_hash(root: Path) -> str:
    """A digest of every name and regular file's bytes below `root` (links not followed)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def envhome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvHome]:
    """A home whose template `local` (Python alpha+beta, Node tiny-top) is built once."""
    root = tmp_path_factory.mktemp("envhome")
    template = write_template(root, "local", python=PYTHON)
    home = root / "home"
    home.mkdir()
    environ = {k: v for k, v in os.environ.items()
               if k in {"PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "TMPDIR", "PYENV_ROOT"}}
    environ.update({"HOME": str(root), "WARDEN_HOME": str(home),
                    "WARDEN_ENVS_FIND_LINKS": str(root / "wheels"), "WARDEN_ENVS_NO_INDEX": "1",
                    "npm_config_cache": str(root / "npm-cache"), "UV_CACHE_DIR": str(root / "uv-cache")})
    env = EnvHome(root, home, template, root / "wheels", root / "npm", environ)
    proc = env.cli("init")  # a set-up home, as a user's is: whichever test comes first finds it so
    assert proc.returncode == 0, proc.stderr
    (home / "templates").mkdir(exist_ok=True)
    (home / "templates" / "local.yaml").write_text(template.read_text())
    proc = env.cli("snapshot", "build", "local", "--json")
    assert proc.returncode == 0, proc.stderr
    yield env
