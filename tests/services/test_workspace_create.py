"""`warden create` from a template: the folder, the env on the layer, the registry, races."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

from tests.support.envs import EnvHome, envhome  # noqa: F401 - fixture


def _create(env: EnvHome, name: str, *args: str, input: bytes | None = None) -> dict:
    proc = env.cli("create", name, "--template", "local", *args, "--json", input=input)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["data"]


def test_create_makes_a_complete_workspace(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name()
    data = _create(envhome, name, "--type", "bot", "--ttl", "2h")
    assert {"name", "path", "status", "template", "python_venv"} <= set(data)
    assert data["status"] == "ready" and data["template"] == "local" and data["type"] == "bot"
    ws = Path(data["path"])
    assert data["python_venv"] == str(ws / ".venv")
    meta = json.loads((ws / ".workspace.json").read_text())
    assert meta["name"] == name and meta["template"] == "local" and meta["type"] == "bot"
    assert meta["ttl"] == "2h" and meta["expires"] and len(meta["layers"]) == 2
    assert "access_key" not in meta
    assert (ws / ".workspace_configured").is_file()
    py = tomllib.loads((ws / "pyproject.toml").read_text())
    assert py["project"]["dependencies"] == ["alpha", "beta<3"]
    assert "tiny-top" in json.loads((ws / "package.json").read_text())["dependencies"]
    out = subprocess.run([str(ws / ".venv/bin/python"), "-c", "import alpha, beta; print(beta.VERSION)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2.1"
    hello = subprocess.run([str(ws / ".venv/bin/alpha-hello")], capture_output=True, text=True, check=True)
    assert hello.stdout.strip() == "hello from alpha"
    node = subprocess.run(["node", "-e", "console.log(JSON.stringify(require('tiny-top')))"], cwd=ws,
                          capture_output=True, text=True, check=True)
    assert json.loads(node.stdout) == {"top": "tiny-top", "dep": "tiny-dep"}
    (ws / "esm.mjs").write_text("import t from 'tiny-top'; console.log(t.top)\n")
    esm = subprocess.run(["node", "esm.mjs"], cwd=ws, capture_output=True, text=True, check=True)
    assert esm.stdout.strip() == "tiny-top"
    # node_modules holds links into the read-only layer, never copies or hard links.
    assert (ws / "node_modules" / "tiny-top").is_symlink()
    assert str((ws / "node_modules" / "tiny-top").resolve()).startswith(str(envhome.home / "layers"))


def test_create_from_a_built_layer_imports_no_yaml_or_sqlalchemy(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name()
    code = (f"import sys; from warden import Warden; w = Warden.open(); ws = w.create({name!r}, template='local');"
            "print(ws.status, 'yaml' in sys.modules, 'sqlalchemy' in sys.modules, 'tomlkit' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=envhome.environ, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["ready", "False", "False", "False"]


def test_same_name_twice_is_a_conflict(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name()
    _create(envhome, name)
    proc = envhome.cli("create", name, "--template", "local", "--json")
    assert proc.returncode == 5
    assert json.loads(proc.stdout)["error"]["code"] == "conflict"


def test_two_processes_racing_for_one_name(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("race")
    procs = [subprocess.Popen([sys.executable, "-m", "warden", "create", name, "--template", "local", "--json"],
                              env=envhome.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 5]
    listed = json.loads(envhome.cli("list", "--json").stdout)["data"]
    assert [w["status"] for w in listed if w["name"] == name] == ["ready"]


def test_missing_python_says_how_to_get_it(envhome: EnvHome) -> None:  # noqa: F811
    proc = envhome.cli("create", envhome.name(), "--template", "local", "--python", "3.14", "--json")
    if proc.returncode == 0:
        pytest.skip("Python 3.14 is installed here")
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 4 and error["code"] == "not_found"
    assert "Python 3.14 is not installed" in error["message"] and "installed:" in error["message"]


def test_unknown_template_lists_known_ones(envhome: EnvHome) -> None:  # noqa: F811
    proc = envhome.cli("create", envhome.name(), "--template", "nope", "--json")
    assert proc.returncode == 4
    assert "local" in json.loads(proc.stdout)["error"]["message"]


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_blob_from_file_and_stdin(envhome: EnvHome, tmp_path: Path) -> None:  # noqa: F811
    blob = tmp_path / "p.tar.gz"
    blob.write_bytes(_tgz({"src/app.py": b"print('hi')\n", "pyproject.toml": b"[project]\nname='mine'\n"}))
    data = _create(envhome, envhome.name(), "--blob", str(blob))
    ws = Path(data["path"])
    assert (ws / "src" / "app.py").read_text() == "print('hi')\n"
    assert "mine" in (ws / "pyproject.toml").read_text()  # the project's own file wins
    data = _create(envhome, envhome.name(), "--blob", "-", input=base64.b64encode(_tgz({"a.txt": b"A"})))
    assert (Path(data["path"]) / "a.txt").read_text() == "A"


def test_bad_blob_leaves_no_workspace(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("blob")
    proc = envhome.cli("create", name, "--template", "local", "--blob", "-", "--json",
                       input=_tgz({"../escape.txt": b"x"}))
    assert proc.returncode == 2
    assert "climbs out" in json.loads(proc.stdout)["error"]["message"]
    assert envhome.cli("info", name).returncode == 4
    root = envhome.home / "workspaces"
    assert not (root / name).exists() and not (root / "escape.txt").exists()


def test_list_filters_by_status_and_type(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("tmp")
    _create(envhome, name, "--type", "temporary")
    temps = json.loads(envhome.cli("list", "--type", "temporary", "--json").stdout)["data"]
    assert name in {w["name"] for w in temps} and all(w["type"] == "temporary" for w in temps)
    ready = json.loads(envhome.cli("list", "--status", "ready", "--json").stdout)["data"]
    assert all(w["status"] == "ready" for w in ready)
    assert envhome.cli("list", "--status", "sleeping").returncode == 2


def test_destroy_archives_by_default_and_returns_at_once(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("gone")
    data = _create(envhome, name)
    (Path(data["path"]) / "work.txt").write_text("results")
    assert envhome.cli("destroy", name).returncode == 2  # --yes is required
    proc = envhome.cli("destroy", name, "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["data"]
    assert out["destroyed"] and out["archive"].endswith(".tar.zst") and os.path.isfile(out["archive"])
    assert not Path(data["path"]).exists()
    assert envhome.cli("info", name).returncode == 4
    other = envhome.name("gone")
    data = _create(envhome, other)
    out = json.loads(envhome.cli("destroy", other, "--no-archive", "--yes", "--json").stdout)["data"]
    assert out["archive"] is None and not Path(data["path"]).exists()
