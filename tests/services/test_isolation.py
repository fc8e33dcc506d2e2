"""A bot that edits its own .venv or node_modules cannot change the layer or another workspace."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.envs import EnvHome, envhome, tree_hash  # noqa: F401 - fixture

ATTACK = r"""
import glob, os, sys
import alpha, beta
results = {}
def attempt(label, fn):
    try:
        fn()
        results[label] = "changed"
    except OSError as exc:
        results[label] = exc.strerror
# 1. edit an installed file of the layer in place (through the module's own path)
def edit(path):
    with open(path, "a") as f:
        f.write("\nPOISON = True\n")
attempt("layer_module", lambda: edit(beta.__file__))
attempt("layer_pyc", lambda: edit(glob.glob(os.path.dirname(alpha.__file__) + "/__pycache__/*.pyc")[0]))
attempt("layer_new_file", lambda: open(os.path.join(os.path.dirname(beta.__file__), "evil.py"), "w").close())
# 2. node_modules entries are links into the layer: write through one
attempt("node_through_link", lambda: edit("node_modules/tiny-top/index.js"))
attempt("node_dep_in_layer", lambda: edit(os.path.realpath("node_modules/tiny-top") + "/../tiny-dep/index.js"))
# 3. what a bot may do: replace its own link and its own venv files
os.unlink("node_modules/tiny-top")
os.makedirs("node_modules/tiny-top")
with open("node_modules/tiny-top/index.js", "w") as f:
    f.write("module.exports = {top: 'mine'};\n")
with open(glob.glob(".venv/lib/python3.*/site-packages")[0] + "/beta.py", "w") as f:
    f.write("VERSION = 'bot'\n")
print(repr(results))
"""


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_bot_edits_cannot_reach_layer_or_other_workspaces(envhome: EnvHome) -> None:  # noqa: F811
    bot, victim = envhome.name("bot"), envhome.name("victim")
    bot_ws = envhome.create(bot)
    victim_ws = envhome.create(victim)
    layers = envhome.home / "layers"
    layers_before, victim_before = tree_hash(layers), tree_hash(victim_ws)
    proc = envhome.cli("run", bot, "--json", "--", str(bot_ws / ".venv/bin/python"), "-c", ATTACK, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)["data"]
    assert data["exit_code"] == 0, data["stderr"]
    results = eval(data["stdout"].strip())  # a dict repr printed by the attack
    # Each write fails: the file modes deny it, and the layer mount is read-only for root too.
    assert len(results) == 5 and "changed" not in results.values(), results
    assert set(results.values()) <= {"Read-only file system", "Permission denied"}, results
    assert results["layer_new_file"] == "Read-only file system"
    assert tree_hash(layers) == layers_before
    assert tree_hash(victim_ws) == victim_before
    # The bot's own changes stay in its workspace.
    import subprocess

    out = subprocess.run([str(bot_ws / ".venv/bin/python"), "-c", "import beta; print(beta.VERSION)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "bot"
    out = subprocess.run([str(victim_ws / ".venv/bin/python"), "-c", "import beta; print(beta.VERSION)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2.1"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_layer_imports_and_node_work_inside_the_sandbox(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("inside")
    envhome.create(name)
    proc = envhome.cli("run", name, "--json", "--", "python", "-c", "import alpha, beta; print(beta.VERSION)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["stdout"].strip() == "2.1"
    proc = envhome.cli("run", name, "--json", "--", "node", "-e", "console.log(require('tiny-top').dep)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["stdout"].strip() == "tiny-dep"


def test_layer_files_are_not_writable_or_linked_on_the_host(envhome: EnvHome) -> None:  # noqa: F811
    ws = envhome.create(envhome.name("host"))
    site = Path(next(p for p in (ws / ".venv").glob("lib/python3.*/site-packages/_warden_layer.pth")).read_text()
                .split("addsitedir(")[1].rstrip(")\n").strip("'\""))
    for path in site.rglob("*.py"):
        st = os.stat(path)
        assert st.st_nlink == 1 and not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
