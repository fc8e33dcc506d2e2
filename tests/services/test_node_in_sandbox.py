"""Node runs inside the sandbox with the default limits (V8 reserves address space for wasm)."""

from __future__ import annotations

import shutil

import pytest

from warden.bootstrap import App

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def test_webassembly_memory_allocates_under_default_limits(app: App) -> None:
    app.workspaces.create("nodews")
    script = ("const ms = []; for (let i = 0; i < 3; i++) ms.push(new WebAssembly.Memory({initial: 16}));"
              "console.log('wasm', ms.length)")
    result = app.runs.run("nodews", ["node", "-e", script], timeout=60)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "wasm 3"
