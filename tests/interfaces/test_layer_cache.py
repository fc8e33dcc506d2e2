"""The layer cache several homes share (`envs.layer_cache`), through the real CLI: one home builds a
layer and puts it there, the next copies it (its own inodes, checked against the digest), a changed
entry or a cache others may write is never used, and no bot can be given the cache as a path."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Cli, isolated_environ
from warden.adapters.envs.layer_store import make_read_only, make_writable

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _home(tmp_path: Path, name: str, cache: Path) -> tuple[Cli, Path]:
    home = tmp_path / name / "warden-home"
    home.mkdir(parents=True)
    return Cli({**isolated_environ(home), "WARDEN_ENVS_LAYER_CACHE": str(cache)}), home


def _layer(home: Path) -> Path:
    (layer,) = [p for p in (home / "layers").iterdir() if p.name.startswith("py")]
    return layer


def _files(root: Path) -> dict[str, os.stat_result]:
    return {str(p.relative_to(root)): p.lstat() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    folder = tmp_path / "layer-cache"
    folder.mkdir(mode=0o700)
    return folder


def test_a_layer_built_in_one_home_is_copied_into_the_next(tmp_path: Path, cache: Path) -> None:
    first, first_home = _home(tmp_path, "a", cache)
    made = first("create", "one")
    assert made.code == 0, made.stderr
    assert "copied from the layer cache" not in made.stderr
    (cached,) = list(cache.iterdir())
    assert cached.name == _layer(first_home).name and not stat.S_IMODE(cached.stat().st_mode) & 0o222

    second, second_home = _home(tmp_path, "b", cache)
    made = second("create", "two")
    assert made.code == 0, made.stderr
    assert f"copied from the layer cache {cache}" in made.stderr
    layer = _layer(second_home)
    info = json.loads((layer / "layer.json").read_text())
    assert info["copied_from"] == str(cache) and not info["site_packages"].startswith("/")
    copied, source = _files(layer), _files(cached)
    assert copied.keys() - {"layer.json"} == source.keys() - {"layer.json"}
    for rel, st in copied.items():  # a copy of its own, sealed as a built layer is
        assert st.st_nlink == 1 and st.st_ino != source[rel].st_ino and not st.st_mode & 0o222, rel

    # Nothing of the first home or the cache is needed any more: the layer is the second home's.
    shutil.rmtree(tmp_path / "a", ignore_errors=True)
    for p in [cache, *cache.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o700)
    shutil.rmtree(cache)
    # The workspace's venv reads the layer's site-packages where the second home has it.
    ran = second("run", "two", "--", "python", "-c", "import os, sys; print([p for p in sys.path if os.path.isdir(p)])")
    assert ran.code == 0, ran.stderr
    assert f"'{layer}/venv/lib/" in ran.stdout
    assert second("health", "two", "--json").json["data"]["status"] == "ready"


def test_a_changed_entry_is_never_copied_and_the_layer_is_built(tmp_path: Path, cache: Path) -> None:
    first, _ = _home(tmp_path, "a", cache)
    assert first("create", "one").code == 0
    (cached,) = list(cache.iterdir())
    planted = next(cached.glob("venv/lib/python3*/site-packages")) / "evil.pth"
    planted.parent.chmod(0o755)
    planted.write_text("import os; os.system('echo pwned')\n")

    second, second_home = _home(tmp_path, "b", cache)
    made = second("create", "two")
    assert made.code == 0, made.stderr
    assert "copied from the layer cache" not in made.stderr
    layer = _layer(second_home)
    assert "copied_from" not in json.loads((layer / "layer.json").read_text())
    assert not list(layer.rglob("evil.pth"))


def _doctor_says(cli: Cli) -> dict[str, object]:
    (check,) = [c for c in cli("doctor", "--json").json["data"]["checks"] if c["name"] == "layer cache"]
    return dict(check)


def test_a_cache_others_may_write_is_not_used_and_doctor_says_so(tmp_path: Path, cache: Path) -> None:
    cache.chmod(0o777)
    first, _ = _home(tmp_path, "a", cache)
    assert first("create", "one").code == 0
    assert list(cache.iterdir()) == []  # nothing put there either
    said = _doctor_says(first)
    assert not said["ok"] and not said["required"] and said["fix"] == f"chmod go-w {cache}"


def test_the_first_build_makes_the_folder_for_the_user_alone(tmp_path: Path) -> None:
    cache = tmp_path / "not-yet"
    first, _ = _home(tmp_path, "a", cache)
    assert _doctor_says(first)["ok"]
    assert first("create", "one").code == 0
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and len(list(cache.iterdir())) == 1
    assert "1 layer(s)" in str(_doctor_says(first)["detail"])


def test_what_a_home_killed_while_publishing_left_is_swept_by_the_next_publisher(tmp_path: Path, cache: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    left = cache / f".publish-py3.11-0123456789abcdef-{ended.pid}-a1b2c3"  # its publisher is gone
    busy = cache / f".publish-py3.11-0123456789abcdef-{os.getpid()}-d4e5f6"  # this one still runs
    for folder in (left, busy):
        (folder / "venv").mkdir(parents=True)
        (folder / "venv" / "half").write_text("x")
        make_read_only(folder)
    first, _ = _home(tmp_path, "a", cache)
    assert first("create", "one").code == 0
    assert not left.exists() and busy.exists()
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1
    make_writable(busy)


def test_no_bot_can_be_given_the_cache_as_an_allowed_path(tmp_path: Path, cache: Path) -> None:
    cli, home = _home(tmp_path, "a", cache)
    assert cli("create", "one").code == 0
    before = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    for path in (str(cache), str(cache / "py3.11-x"), str(tmp_path)):
        refused = cli("sandbox", "add", path, "--workspace", "one", "--json")
        assert refused.code == 2, (path, refused.stdout)
        assert refused.json["error"]["code"] == "invalid"
    assert "layer cache" in cli("sandbox", "add", str(cache), "--json").json["error"]["message"]
    after = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    assert before == after


def test_a_link_on_the_way_to_the_cache_hides_it_from_no_check(tmp_path: Path) -> None:
    """The cache configured through a link (`…/link/cache`, link -> real): a bot given the link's
    target read-write would write entries (with a digest of its own) that other homes copy. The
    name check refuses the target, and a run whose policy allowed it before the cache was set
    does not mount it (the check by inode at each run)."""
    real = tmp_path / "real"
    (real / "cache").mkdir(parents=True, mode=0o700)
    (tmp_path / "link").symlink_to(real)
    cache = tmp_path / "link" / "cache"
    home = tmp_path / "a" / "warden-home"
    home.mkdir(parents=True)
    plain = Cli({**isolated_environ(home), "WARDEN_ENVS_LAYER_CACHE": ""})
    assert plain("create", "one").code == 0
    assert plain("sandbox", "add", str(real), "--workspace", "one").code == 0  # before the cache was set

    cli = Cli({**isolated_environ(home), "WARDEN_ENVS_LAYER_CACHE": str(cache)})
    refused = cli("sandbox", "add", str(real), "--workspace", "one", "--json")
    assert refused.code == 2 and "layer cache" in refused.json["error"]["message"], refused.stdout
    ran = cli("run", "one", "--", "sh", "-c", f"mkdir {real}/cache/planted; ls {real}")
    assert not (real / "cache" / "planted").exists()
    assert f"not mounting the allowed path {real}" in ran.stderr


def test_each_run_judges_mount_sources_against_the_cache_by_inode(tmp_path: Path) -> None:
    """Below the name check: a source that is the cache, lies in it or holds it under another name
    (here through a link; a bind mount of it is the same inode) is skipped, another is mounted."""
    from warden.adapters.sandbox.mountsrc import HostMountSources
    from warden.core.bwrap_argv import Bind

    home, real, other = tmp_path / "home", tmp_path / "real", tmp_path / "other"
    for folder in (home / "workspaces" / "w1", real / "cache" / "py3.11-x", other):
        folder.mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    sources = HostMountSources(str(home), str(home / "workspaces"), [str(tmp_path / "link" / "cache")])
    binds = [Bind(str(p), "rw") for p in (real, real / "cache", real / "cache" / "py3.11-x", other)]
    with sources.open_binds(binds, str(home / "workspaces" / "w1")) as (kept, _fds, skipped):
        assert [b.path for b in kept] == [str(other)]
        assert len(skipped) == 3 and all("layer cache" in line for line in skipped), skipped


def test_a_cache_below_a_folder_others_may_write_is_not_used(tmp_path: Path) -> None:
    """The cache is checked, then read by name: whoever may write a folder above it could swap it
    for a folder of their own in between (and an entry there passes its own digest). Such a
    cache is neither read nor written; a sticky folder (/tmp) above is fine."""
    from warden.adapters.envs.layer_cache import LayerCache

    above = tmp_path / "shared"
    (above / "cache").mkdir(parents=True, mode=0o700)
    above.chmod(0o777)
    cache = above / "cache"
    said = LayerCache(cache).unusable()
    assert said is not None and str(above) in said[0] and said[1] == f"chmod go-w {above}"
    above.chmod(0o1777)
    assert LayerCache(cache).usable()
    above.chmod(0o777)
    first, _ = _home(tmp_path, "a", cache)
    assert first("create", "one").code == 0
    assert list(cache.iterdir()) == []
    assert not _doctor_says(first)["ok"]


def test_a_layer_built_from_other_sources_is_not_copied(tmp_path: Path, cache: Path) -> None:
    """A layer id names what was asked for, not where it came from: a home that installs from its
    own find-links folder (or index) builds its layer rather than take a sibling's of the same id."""
    first, _ = _home(tmp_path, "a", cache)
    assert first("create", "one").code == 0
    (cached,) = list(cache.iterdir())

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    second, second_home = _home(tmp_path, "b", cache)
    second.environ["WARDEN_ENVS_FIND_LINKS"] = str(wheels)
    made = second("create", "two")
    assert made.code == 0, made.stderr
    assert "copied from the layer cache" not in made.stderr
    info = json.loads((_layer(second_home) / "layer.json").read_text())
    assert "copied_from" not in info and info["sources"]["find_links"] == [str(wheels)]
    assert json.loads((cached / "layer.json").read_text())["sources"]["find_links"] == []


def test_a_run_mounts_the_layer_folder_whatever_paths_its_layer_json_names() -> None:
    """A layer.json copied from the cache names its site-packages; what runs mount read-only is the
    layer's own folder, never one reckoned from that path (`venv` made it `/`: the whole host)."""
    from warden.core.layers import EnvLayers, Layer
    from warden.core.templates import Template
    from warden.services.folders import env_meta
    from warden.services.layers import Resolution

    layer = "/h/.warden/layers/py3.11-x"
    python = Layer.from_info({"id": "py3.11-x", "kind": "python", "site_packages": "venv"}, layer)
    node = Layer.from_info({"id": "node20-x", "kind": "node", "node_modules": "a"}, "/h/.warden/layers/node20-x")
    template = Template("t", "", "1.0", None, None)
    meta = env_meta(Resolution(template, None, None), EnvLayers(python, node), "/h/.warden/workspaces/w")
    assert meta["ro_paths"] == [layer, "/h/.warden/layers/node20-x"]
