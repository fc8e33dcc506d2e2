"""The `default` template for real (PyPI and npm): opt-in, since it downloads ~100 MB once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.opt_in, pytest.mark.slow,
              pytest.mark.skipif(os.environ.get("WARDEN_OPT_IN") != "1", reason="set WARDEN_OPT_IN=1")]


def test_default_template_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "WARDEN_HOME": str(tmp_path / "home")}

    def warden(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "warden", *args], env=env, capture_output=True, text=True,
                              timeout=1800, check=False)

    proc = warden("create", "demo", "--template", "default", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = warden("run", "demo", "--json", "--", "python", "-c", "import pandas, matplotlib; print('ok')")
    assert proc.returncode == 0 and json.loads(proc.stdout)["data"]["stdout"].strip() == "ok", proc.stdout
    proc = warden("run", "demo", "--memory", "8G", "--json", "--", "node", "-e", "require('axios'); console.log('ok')")
    assert json.loads(proc.stdout)["data"]["stdout"].strip() == "ok", proc.stdout
    assert json.loads(warden("health", "demo", "--json").stdout)["data"]["healthy"]
