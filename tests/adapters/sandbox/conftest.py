"""Fixtures of the sandbox adapter tests: a plain workspace folder and a runner around it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from warden.adapters.sandbox.host import build_spec, bwrap_path
from warden.adapters.sandbox.runner import run_sandboxed
from warden.core.limits import Limits
from warden.core.runs import RunResult

if bwrap_path() is None:
    pytest.skip("bubblewrap is not installed", allow_module_level=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def sandbox(workspace: Path) -> Callable[..., RunResult]:
    """Run argv in the workspace's sandbox: sandbox(argv, limits=..., env=..., **runner_kwargs)."""

    def run(argv: list[str], *, limits: Limits | None = None, env: dict[str, str] | None = None,
            caller_env: dict[str, str] | None = None, spec_kw: dict[str, Any] | None = None,
            **kw: Any) -> RunResult:
        spec = build_spec(str(workspace), argv, caller_env=caller_env or dict(os.environ),
                          env=env or {}, **(spec_kw or {}))
        return run_sandboxed(spec, limits or Limits(timeout_s=30), **kw)

    return run
