"""Which way a zone whose deletes need a person is held in a run: under the Landlock launcher
when the kernel has ABI 2 and a system python3, else mounted read-only (never looser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden.adapters.sandbox import host, landlock
from warden.adapters.sandbox.landlock import LAUNCHER_PATH
from warden.core.bwrap_argv import SandboxSpec


def _spec(tmp_path: Path) -> SandboxSpec:
    ws = tmp_path / "ws"
    (ws / "archive").mkdir(parents=True)
    return host.build_spec(str(ws), ["true"], caller_env={}, env={}, keep_zones=[str(ws / "archive")])


def test_with_landlock_the_command_runs_under_the_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landlock, "abi", lambda: 7)
    monkeypatch.setattr(host, "python3_path", lambda: "/usr/bin/python3")
    spec = _spec(tmp_path)
    assert spec.command == ("/usr/bin/python3", "-I", "-S", LAUNCHER_PATH, str(tmp_path / "ws" / "archive"),
                            "--", "true")
    assert spec.keep_zones == (str(tmp_path / "ws" / "archive"),) and spec.ro_zones == ()


@pytest.mark.parametrize(("version", "python"), [(0, "/usr/bin/python3"), (1, "/usr/bin/python3"), (7, None)])
def test_without_it_the_zone_is_read_only_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  version: int, python: str | None) -> None:
    monkeypatch.setattr(landlock, "abi", lambda: version)
    monkeypatch.setattr(host, "python3_path", lambda: python)
    spec = _spec(tmp_path)
    assert spec.command == ("true",) and spec.keep_zones == ()
    assert spec.ro_zones == (str(tmp_path / "ws" / "archive"),)
