"""`warden run` with more arguments than the kernel takes: exit 2 with one line, not a crash."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import Cli
from warden.adapters.sandbox import execlimits
from warden.bootstrap import App

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


def test_run_with_a_command_line_too_long_for_bwrap_exits_2(app: App, cli: Cli) -> None:
    app.workspaces.create("argws")
    # Just over what the runner lets through to bwrap, yet still under what `warden` itself
    # can be started with (the runner keeps a margin under the kernel's limit for bwrap's options).
    total = execlimits._arg_max() + 1024
    piece = 100 * 1024
    args = ["a" * piece] * (total // piece) + ["b" * (total % piece)]
    result = cli("run", "argws", "--", "true", *args)
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "too long" in lines[0] and "stdin or a file" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    as_json = cli("run", "argws", "--json", "--", "true", *args[:-1], args[-1][:-10])
    assert as_json.code == 2 and as_json.json["error"]["code"] == "invalid"
