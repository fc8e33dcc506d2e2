"""A home made by the code before workspace leases keeps working after them.

The home is built by that very commit's code (its `src/` from git), then used by this code:
its registry is migrated, its workspace runs, its grant token and stored secret still work,
and its audit chain still verifies.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO, isolated_environ
from warden.bootstrap import bootstrap

BASE = "ba1cb12"  # the last commit before the second round's reliability work


@pytest.fixture
def old_src(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git")
    proc = subprocess.run(["git", "-C", str(REPO), "archive", BASE, "src"], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"commit {BASE} is not in this clone ({proc.stderr.decode().strip()[:100]})")
    target = tmp_path / "old"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(target)  # git archive of this very repository
    return target / "src"


def run(environ: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([sys.executable, "-m", "warden", *args], input=stdin, capture_output=True, text=True,
                          env=environ, timeout=300, check=False)
    assert proc.returncode == 0, (args, proc.stderr)
    return proc.stdout.strip()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_home_of_the_previous_code_keeps_working(tmp_path: Path, old_src: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    new = isolated_environ(home)
    old = {**new, "PYTHONPATH": str(old_src)}
    run(old, "init")
    run(old, "create", "kept")
    run(old, "fs", "kept", "write", "/notes.txt", stdin="from before\n")
    run(old, "bot", "register", "oldbot")
    run(old, "secret", "set", "API_KEY", stdin="s3cret")
    token = run(old, "grant", "kept", "oldbot", "--permissions", "read,execute,secrets", "--secrets", "API_KEY")
    run(old, "run", "kept", "--", "true")
    # The new code on the same home.
    assert run(new, "run", "kept", "--", "cat", "notes.txt") == "from before"
    assert "ready" in run(new, "info", "kept")
    run(new, "archive", "kept")
    run(new, "unarchive", "kept")
    run(new, "audit", "verify")
    app = bootstrap(home, environ=new)
    try:
        principal = app.auth.authenticate(token)
        assert principal.bot == "oldbot"
        assert app.secrets.environment(["API_KEY"]).env == {"API_KEY": "s3cret"}
    finally:
        app.close()
