"""`warden install`: sandboxed, into the workspace only, recorded with comments kept."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.support.envs import EnvHome, envhome, tree_hash  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def test_python_install_lands_in_the_workspace_and_is_recorded(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("ins")
    ws = envhome.create(name)
    other = envhome.create(envhome.name("other"))
    pyproject = ws / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("dependencies = [", "# my own note\ndependencies = ["))
    layers = envhome.home / "layers"
    before = tree_hash(layers)
    proc = envhome.cli("install", name, "gamma", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["data"]["recorded_in"] == "pyproject.toml"
    text = pyproject.read_text()
    assert '"gamma"' in text and "# my own note" in text
    own = next(ws.glob(".venv/lib/python3.*/site-packages"))
    assert (own / "gamma").is_dir()
    # pip (in the layer when the interpreter bundles it) sees the layer's beta through the .pth
    # and installs only gamma; uv (used where there is no pip, e.g. Debian's python3) does not.
    layer_has_pip = any(layers.glob("*/venv/lib/python3.*/site-packages/pip"))
    assert (own / "beta").exists() != layer_has_pip
    subprocess.run([str(ws / ".venv/bin/python"), "-c", "import gamma, beta"], check=True)
    assert tree_hash(layers) == before
    assert subprocess.run([str(other / ".venv/bin/python"), "-c", "import gamma"]).returncode != 0
    health = json.loads(envhome.cli("health", name, "--json").stdout)["data"]
    assert health["healthy"], health


def test_no_persist_and_shadowing_a_layer_package(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("shadow")
    ws = envhome.create(name)
    before = (ws / "pyproject.toml").read_text()
    proc = envhome.cli("install", name, "beta==3.0", "--no-persist", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (ws / "pyproject.toml").read_text() == before
    out = subprocess.run([str(ws / ".venv/bin/python"), "-c", "import beta; print(beta.VERSION)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3.0"  # the workspace's own copy shadows the layer's 2.1


def test_node_install(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("npm")
    ws = envhome.create(name)
    tarball = envhome.npm / "tiny-extra-1.2.0.tgz"
    proc = envhome.cli("install", name, "--node", str(tarball), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny-extra" in json.loads((ws / "package.json").read_text())["dependencies"]
    out = subprocess.run(["node", "-e", "console.log(require('tiny-extra').version)"], cwd=ws,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.2.0"


@pytest.mark.parametrize("bad", ["-r/etc/passwd", "--index-url=http://x", "a b", "six; import os"])
def test_option_injection_is_refused(envhome: EnvHome, bad: str) -> None:  # noqa: F811
    proc = envhome.cli("install", "whatever", "--json", "--", bad)
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "invalid"


def test_failed_install_reports_and_records_nothing(envhome: EnvHome) -> None:  # noqa: F811
    name = envhome.name("fail")
    ws = envhome.create(name)
    before = (ws / "pyproject.toml").read_text()
    proc = envhome.cli("install", name, "no-such-package-here", "--json")
    assert proc.returncode == 2  # invalid: the index holds no such package, not an outage to wait out
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "invalid" and "no-such-package-here" in error["message"]
    assert (ws / "pyproject.toml").read_text() == before


def test_an_install_with_no_index_to_reach_is_unavailable_and_says_which_setting(envhome: EnvHome) -> None:  # noqa: F811
    """With no index to reach (envs.install_domains empty, an index over the network), pip says of
    any package what it says of one the index lacks: that is no proof the request is wrong, so
    the answer is 503 `unavailable` (CLI exit 1), not 400. Its last line named the run's way to
    network ("run with --net allow, or `warden install` for packages") to a person who had just
    run `warden install`; it now names the setting that gives installs their network."""
    name = envhome.name("offline")
    ws = envhome.create(name)
    before = (ws / "pyproject.toml").read_text()
    proc = envhome.cli("install", name, "no-such-package-here", "--json",
                       env={"WARDEN_ENVS_NO_INDEX": "0", "WARDEN_ENVS_INSTALL_DOMAINS": "",
                            "WARDEN_ENVS_INDEX_URL": "https://index.example.invalid/simple"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "unavailable", error
    assert "envs.install_domains" in error["message"] and "--net allow" not in error["message"], error
    assert (ws / "pyproject.toml").read_text() == before


def test_a_manifest_warden_cannot_edit_refuses_the_install_before_it_runs(envhome: EnvHome) -> None:  # noqa: F811
    """A pyproject.toml Warden cannot record into (a typo, or a bot's) was found only after the
    install: the package was in, not recorded, and the person told to fix it or use --no-persist
    for an install that had happened. It is refused first; --no-persist still installs."""
    name = envhome.name("badman")
    ws = envhome.create(name)
    (ws / "pyproject.toml").write_text("[project\nname = 1\n")
    refused = envhome.cli("install", name, "gamma")
    assert refused.returncode == 2 and "pyproject.toml is not valid TOML" in refused.stderr, refused.stderr
    assert not list(ws.glob(".venv/lib/python3.*/site-packages/gamma"))
    assert envhome.cli("install", name, "gamma", "--no-persist").returncode == 0
    assert list(ws.glob(".venv/lib/python3.*/site-packages/gamma"))


def test_a_pyproject_too_costly_to_edit_refuses_the_install_at_once(envhome: EnvHome) -> None:  # noqa: F811
    """tomlkit's parse grows faster than the file: a bot's 5,000 dotted keys in 1,500 tables (75
    KiB) kept the server's CPU busy over a minute for each install it asked for. Counted first
    (tomllib, linear), refused in a moment; a person's ordinary pyproject.toml is still edited."""
    name = envhome.name("costly")
    ws = envhome.create(name)
    ordinary = (ws / "pyproject.toml").read_text()
    (ws / "pyproject.toml").write_text("".join(f"a.b{i % 1500}.k{i} = 1\n" for i in range(5000)))
    started = time.monotonic()
    refused = envhome.cli("install", name, "gamma")
    assert refused.returncode == 2 and "more than 1000 keys" in refused.stderr, refused.stderr
    assert time.monotonic() - started < 15
    assert not list(ws.glob(".venv/lib/python3.*/site-packages/gamma"))
    (ws / "pyproject.toml").write_text(ordinary + "".join(f"[tool.t{i}]\nk = [1, 2]\n" for i in range(300)))
    assert envhome.cli("install", name, "gamma").returncode == 0
    assert "gamma" in (ws / "pyproject.toml").read_text()
