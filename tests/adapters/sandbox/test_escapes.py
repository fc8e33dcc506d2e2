"""Every escape attempt in escapes.py, run inside the sandbox as this user and as `nobody`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.sandbox.escapes import ATTACKS, run_one
from tests.support.alone import alone

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
# Bombs run with the machine to themselves (a fork bomb at its process limit takes every core).
BOMBS = {"fork_bomb", "memory_bomb"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.alone) if name in BOMBS else name
                                  for name in ATTACKS])
def test_contained(name: str, tmp_path: Path) -> None:
    assert run_one(name, tmp_path / "lab") is None


def _system_python() -> str | None:
    for candidate in ("/usr/bin/python3.11", "/usr/bin/python3.12", "/usr/bin/python3.13", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _as_nobody(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=600, env=env, cwd="/", check=False)


@pytest.fixture(scope="module")
def unprivileged() -> dict[str, Any]:
    """The whole attack list, run once by an unprivileged user with the system interpreter."""
    python = _system_python()
    if os.geteuid() != 0 or shutil.which("setpriv") is None or python is None:
        pytest.skip("needs root (to drop to nobody), setpriv and a system python3; as a normal user "
                    "test_contained already runs every attack unprivileged")
    paths = [str(REPO / "src"), str(REPO)]
    try:
        import bashlex

        paths.append(str(Path(bashlex.__file__).resolve().parents[1]))
    except ImportError:
        pass
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp", "PYTHONPATH": ":".join(paths),
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    probe = _as_nobody([python, "-c", "import warden.adapters.sandbox.runner"], env)
    if probe.returncode != 0:
        pytest.skip(f"the checkout is not readable by nobody: {probe.stderr.strip()[-200:]}")
    results: dict[str, Any] = {}
    for names, bombs in (([name for name in ATTACKS if name not in BOMBS], False), (sorted(BOMBS), True)):
        with alone() if bombs else contextlib.nullcontext():
            proc = _as_nobody([python, str(Path(__file__).with_name("escapes.py")), *names], env)
        assert proc.returncode == 0, proc.stderr
        report: dict[str, Any] = json.loads(proc.stdout)
        assert report["uid"] == NOBODY
        results.update(report["results"])
    return results


@pytest.mark.parametrize("name", list(ATTACKS))
def test_contained_as_unprivileged_user(name: str, unprivileged: dict[str, Any]) -> None:
    assert unprivileged[name] is None
