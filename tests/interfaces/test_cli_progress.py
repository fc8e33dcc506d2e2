"""`warden install` shows its progress for real: the installer in the sandbox (pip, which the
workspace's layer carries), against the local index, moves the bar through each package it
collects, naming it; npm's too; `--json` draws none of it. Through a pipe: whole lines."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture
from tests.support.packages import make_wheel

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_install_shows_each_package_as_it_is_installed(envhome: EnvHome) -> None:  # noqa: F811
    deps = [f"pdep{i}" for i in range(6)]
    for dep in deps:
        make_wheel(envhome.wheels, dep, "1.0")
    make_wheel(envhome.wheels, "ptop", "1.0", requires=tuple(deps))
    name = envhome.name("prog")
    envhome.create(name)
    proc = envhome.cli("install", name, "ptop")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"installing into {name} [")]
    counts = [line.rsplit(": ", 1)[1] for line in lines if ": " in line]
    named = [c for c in counts if re.fullmatch(r"\d+/\d+ (prepared|installed) \((ptop|pdep\d)\)", c)]
    assert len({c.split()[0] for c in named}) >= 3, proc.stderr  # the count moved through packages
    assert any(c.endswith("installed") or "installed (" in c for c in counts), proc.stderr
    assert lines[-1].split("] ", 1)[1].startswith("1/1 done in"), proc.stderr
    assert "TRACE" not in proc.stderr and "\r" not in proc.stderr  # uv's log read, never shown


def test_install_with_json_draws_no_bar(envhome: EnvHome) -> None:  # noqa: F811
    make_wheel(envhome.wheels, "pquiet", "1.0")
    name = envhome.name("progq")
    envhome.create(name)
    proc = envhome.cli("install", name, "pquiet", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installing into" not in proc.stderr, proc.stderr


def test_node_install_ends_with_what_npm_added_and_shows_none_of_its_log(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("progn")
    envhome.create(name)
    proc = envhome.cli("install", name, "--node", f"file:{envhome.npm}/tiny-extra-1.2.0.tgz")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = [line.rsplit(": ", 1)[1] for line in proc.stderr.splitlines()
              if line.startswith(f"installing into {name} [") and line.count(": ") == 1]
    assert counts[0] == "0/1 prepared" and counts[-1] == "1/1 installed", proc.stderr  # npm's "added 1 package"
    assert "npm http" not in proc.stderr and "npm http" not in proc.stdout
