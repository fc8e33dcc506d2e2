"""Layers are built once from local packages, sealed read-only, never hard-linked; failures leave nothing."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture
from tests.support.packages import make_wheel
from warden.adapters.envs.interpreters import Interpreter


def _layers(env: EnvHome) -> list[Path]:
    return [p for p in (env.home / "layers").iterdir() if not p.name.startswith((".", "_"))]


def test_layers_are_sealed_and_share_no_inode(envhome: EnvHome) -> None:  # noqa: F811
    layers = _layers(envhome)
    kinds = {json.loads((p / "layer.json").read_text())["kind"] for p in layers}
    assert {"python", "node"} <= kinds
    for layer in layers:
        for dirpath, dirnames, filenames in os.walk(layer):
            for name in dirnames + filenames:
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISLNK(st.st_mode):
                    continue
                assert not st.st_mode & 0o222, os.path.join(dirpath, name)
                if stat.S_ISREG(st.st_mode):
                    # No hard link into any cache or other tree (cross-bot poisoning).
                    assert st.st_nlink == 1, os.path.join(dirpath, name)


def test_python_layer_has_lock_bytecode_and_pip(envhome: EnvHome) -> None:  # noqa: F811
    for layer in _layers(envhome):
        info = json.loads((layer / "layer.json").read_text())
        if info["kind"] != "python":
            continue
        lock = (layer / "requirements.lock").read_text()
        assert "alpha==1.0" in lock and "beta==2.1" in lock
        # Named relative to the layer, so a home moved elsewhere keeps its layers.
        assert not info["site_packages"].startswith("/")
        site = layer / info["site_packages"]
        assert site.is_dir()
        assert list(site.glob("alpha/__pycache__/*.pyc")), "bytecode must be compiled at build time"
        # pip from the interpreter's bundled wheel; none where it has none (Debian's python3):
        # `warden install` then uses uv.
        bundled = Interpreter(**info["python"]).pip_wheel is not None
        assert (site / "pip").is_dir() == bundled
        assert "alpha-hello" in info["scripts"]
        return
    raise AssertionError("no python layer")


def test_node_layer_keeps_its_lock(envhome: EnvHome) -> None:  # noqa: F811
    for layer in _layers(envhome):
        info = json.loads((layer / "layer.json").read_text())
        if info["kind"] == "node":
            assert (layer / "package-lock.json").is_file()
            assert {"tiny-top", "tiny-dep"} <= set(info["links"])
            return
    raise AssertionError("no node layer")


def test_snapshot_list_and_idempotent_build(envhome: EnvHome) -> None:  # noqa: F811
    before = sorted(p.name for p in _layers(envhome))
    proc = envhome.cli("snapshot", "build", "local", "--json")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in _layers(envhome)) == before
    listed = json.loads(envhome.cli("snapshot", "list", "--json").stdout)["data"]
    assert {row["id"] for row in listed} >= set(before)


def test_failed_build_leaves_nothing(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\npython:\n  dependencies: [does-not-exist-anywhere]\n")
    before = sorted(os.listdir(envhome.home / "layers"))
    proc = envhome.cli("snapshot", "build", str(bad), "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "unavailable" and "does-not-exist-anywhere" in error["message"]
    after = [n for n in os.listdir(envhome.home / "layers") if n not in before]
    # At most the (empty) lock file of the attempted id; never a layer or a build folder.
    assert all(n.endswith(".lock") for n in after), after
    proc = envhome.cli("create", envhome.name("bad"), "--template", str(bad), "--json")
    assert proc.returncode == 1
    assert json.loads(envhome.cli("list", "--json").stdout)["data"] == [] or all(
        w["template"] != "bad" for w in json.loads(envhome.cli("list", "--json").stdout)["data"])


def test_layer_id_follows_dependencies(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    make_wheel(envhome.wheels, "delta", "1.0")
    t = tmp_path / "other.yaml"
    t.write_text(envhome.template.read_text().replace("- beta<3", "- beta<3\n    - delta"))
    proc = envhome.cli("snapshot", "build", str(t), "--json")
    assert proc.returncode == 0, proc.stderr
    ids = {layer["id"] for layer in json.loads(proc.stdout)["data"]["layers"]}
    original = json.loads(envhome.cli("snapshot", "build", "local", "--json").stdout)["data"]["layers"]
    py_ids = {layer["id"] for layer in original if layer["kind"] == "python"}
    assert not ids & py_ids or len(ids) == 2  # the node layer is shared, the python one is new
    assert len(ids - py_ids) >= 1


@pytest.mark.parametrize("bad", ["3.x", "4"])
def test_bad_python_flag_is_usage_error(envhome: EnvHome, bad: str) -> None:  # noqa: F811
    proc = envhome.cli("create", envhome.name(), "--template", "local", "--python", bad, "--json")
    assert proc.returncode == 2


def test_a_garbage_layer_json_is_a_broken_layer(tmp_path: Path) -> None:
    """Not a KeyError in `template`/`snapshot list`: the folder reads as missing and is rebuilt."""
    from warden.adapters.envs.layer_store import LAYER_FILE, LayerStore

    store = LayerStore(tmp_path / "layers")
    for garbage in (b"not json", b"[]", b'{"kind": "python"}', b'{"id": "other", "kind": "python"}'):
        (store.path("py-1")).mkdir(parents=True, exist_ok=True)
        (store.path("py-1") / LAYER_FILE).write_bytes(garbage)
        assert store.read("py-1") is None and not store.exists("py-1") and store.all() == []
    build = tmp_path / "layers" / ".build-py-1"
    build.mkdir()
    info = store.commit(build, "py-1", {"id": "py-1", "kind": "python"})
    assert info["id"] == "py-1" and store.exists("py-1")


def test_a_layer_changed_after_its_build_is_found_by_its_digest(tmp_path: Path) -> None:
    from warden.adapters.envs.layer_store import LayerStore, tree_digest

    store = LayerStore(tmp_path / "layers")
    with store.staging("py-x") as build:
        (build / "lib").mkdir()
        (build / "lib" / "mod.py").write_text("X = 1\n")
        os.symlink("lib/mod.py", build / "link.py")
        store.commit(build, "py-x", {"id": "py-x", "kind": "python"})
    assert not store.tampered("py-x")
    info = store.read("py-x")
    assert info is not None and info["tree_sha256"] == tree_digest(store.path("py-x"))
    site = store.path("py-x") / "lib"
    os.chmod(site, 0o755)
    (site / "evil.pth").write_text("import os\n")  # what a root user or a bug might add
    assert store.tampered("py-x")
    (site / "evil.pth").unlink()
    assert not store.tampered("py-x")
    os.chmod(site / "mod.py", 0o644)
    (site / "mod.py").write_text("X = 2\n")  # same size, other bytes
    assert store.tampered("py-x")


def test_a_layer_build_counts_its_packages_as_they_are_installed(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    # Built for real by uv from local wheels: its progress (stderr, not a terminal: lines) follows
    # uv's output through each package, prepared then installed, naming it, not only 0 and all.
    names = [f"count{i}" for i in range(8)]
    for name in names:
        make_wheel(envhome.wheels, name, "1.0")
    t = tmp_path / "counted.yaml"
    more = "".join(f"    - {n}\n" for n in names)
    t.write_text(envhome.template.read_text().replace("- beta<3", "- beta<3\n" + more))
    proc = envhome.cli("snapshot", "build", str(t))
    assert proc.returncode == 0, proc.stderr
    for phase in ("prepared", "installed"):
        counts = [line.rsplit(": ", 1)[1] for line in proc.stderr.splitlines() if f"/10 {phase}" in line]
        assert counts and counts[-1].startswith(f"10/10 {phase}"), proc.stderr  # alpha, beta and the eight
        between = [c for c in counts if not c.startswith(("0/", "10/"))]
        assert len(between) >= 3, proc.stderr  # it moved through the packages
        assert all(re.fullmatch(rf"\d+/10 {phase} \((alpha|beta|count\d)\)", c) for c in between), counts
    assert "TRACE" not in proc.stderr  # uv's log is read, never shown
