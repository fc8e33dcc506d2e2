"""Programs that draw text (matplotlib, anything on fontconfig) find fontconfig's configuration
in the sandbox: no "Fontconfig error" in the output of a run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.used_home,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.skipif(shutil.which("fc-match") is None or not Path("/etc/fonts").is_dir(),
                                 reason="no fontconfig on this machine")]


def test_fontconfig_finds_its_configuration(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "plots"
    folder.mkdir()
    assert cli("ws", "set", str(folder)).code == 0
    result = cli("run", "plots", "--", "fc-match", "sans")
    assert result.code == 0, result.stderr
    assert "Fontconfig error" not in result.stdout + result.stderr
    assert result.stdout.strip()
