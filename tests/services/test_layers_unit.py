"""Layers, health, the disk quota, installs and home set-up on fakes of their ports: milliseconds.

The same services run against real layers, folders, bwrap and SQLite in test_default_template.py,
test_health_hostile.py, test_quota.py, test_install.py and the CLI tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.services.test_workspaces_unit import ROOT, World
from tests.support.fakes import FAKE_PYTHON, FakeConfigFile, FakeHomeFiles, FakeKeyFiles, FakeSafeRoots
from tests.support.fakes import FakeSandboxTools as Tools
from warden.core.errors import InvalidInput, TooLarge, Unavailable
from warden.core.layers import Interpreter
from warden.core.quota import Usage
from warden.core.settings import resolve
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog
from warden.services.health import HealthService
from warden.services.installs import InstallService
from warden.services.quota import QuotaService
from warden.services.settings import HomeSetup, set_setting


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _health(world: World) -> HealthService:
    return HealthService(world.service, world.folders, world.layers, world.io)


# -- layers --------------------------------------------------------------------------------------
def test_a_resolution_is_cached_until_its_interpreter_goes(world: World) -> None:
    first = world.layers.resolve("minimal")
    assert first.python is not None and first.python.interpreter == FAKE_PYTHON
    assert first.layer_ids == [first.python.layer_id] and first.layer_ids[0].startswith("py3.12-")
    assert world.layers.resolve("minimal") == first and world.builder.lookups == 1
    world.builder.installed.clear()
    assert world.layers.resolve("minimal") == first and world.builder.lookups == 2


def test_a_template_replaced_with_the_same_size_and_time_is_resolved_again(world: World, tmp_path: Path) -> None:
    """`cp -p`, `rsync -t`, tar or `touch -r` give a new template the old one's size and modification
    time: the cached resolution was kept, and new workspaces got the old dependencies."""
    folder = tmp_path / "templates"
    folder.mkdir(exist_ok=True)
    template = folder / "same.yaml"
    template.write_text("name: same\npython:\n  dependencies: [alpha]\n")
    before = os.stat(template)
    first = world.layers.resolve("same")
    template.write_text("name: same\npython:\n  dependencies: [gamma]\n")
    os.utime(template, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(template).st_size == before.st_size
    again = world.layers.resolve("same")
    assert again.template.python is not None and list(again.template.python.dependencies) == ["gamma"]
    assert again.layer_ids != first.layer_ids


def test_the_layer_id_follows_the_interpreter(world: World) -> None:
    other = Interpreter("/py/3.13/bin/python3.13", "3.13.0", "cpython", "/py/3.13", "/py/3.13/lib", "linux")
    world.builder.pythons["3.13"] = other
    a = world.layers.resolve("minimal", python="3.12")
    b = world.layers.resolve("minimal", python="3.13")
    assert a.layer_ids != b.layer_ids and b.python is not None and b.python.interpreter == other


def test_ensure_builds_a_missing_layer_once(world: World) -> None:
    resolution = world.layers.resolve("minimal")
    assert world.layers.missing(resolution) == resolution.layer_ids
    layers = world.layers.ensure(resolution)
    assert layers.python is not None and layers.node is None and world.layers.missing(resolution) == []
    world.layers.ensure(resolution)
    assert world.builder.builds == resolution.layer_ids


def test_snapshot_build_list_and_prune_answer_what_the_cli_showed(world: World) -> None:
    build = world.layers.build("minimal", progress=False)
    (layer_id,) = build.resolution.layer_ids
    assert build.to_json() == {"template": "minimal", "layers": [
        {"id": layer_id, "kind": "python", "path": f"/layers/{layer_id}", "size": 100, "packages": [],
         "built_at": None}]}
    (row,) = world.layers.list({layer_id: ["w2", "w1"]})
    assert row.to_json() == {"id": layer_id, "kind": "python", "template": "minimal", "built_at": None,
                             "size": 100, "packages": 0, "workspaces": ["w1", "w2"], "path": f"/layers/{layer_id}"}
    assert world.layers.prune(lambda: {layer_id: ["w1"]}) == []
    assert [r.id for r in world.layers.prune(dict, dry_run=True)] == [layer_id] and world.store.removed == []
    assert [r.id for r in world.layers.prune(dict)] == [layer_id] and world.store.removed == [layer_id]


def test_prune_passes_over_a_layer_a_create_holds_and_reads_the_users_again(world: World) -> None:
    """A create finds (or builds) its layer before its row names it: a prune between the two took
    the layer, and the create said "created" of a workspace with no packages."""
    (layer_id,) = world.layers.build("minimal", progress=False).resolution.layer_ids
    with world.store.hold([layer_id]):
        assert world.layers.prune(dict) == [] and world.store.removed == []
    # The create ended between the prune's two readings: its row names the layer by the second.
    readings = iter([{}, {layer_id: ["w1"]}])
    assert world.layers.prune(lambda: next(readings)) == [] and world.store.removed == []


def test_create_holds_its_layers_until_its_row_names_them(world: World) -> None:
    seen: list[tuple[list[str], list[str]]] = []
    populate = world.folders.populate

    def spy(path: str, resolution: Any, layers: Any) -> Any:
        seen.append((list(world.store.held), [r.name for r in world.service.list()]))
        return populate(path, resolution, layers)

    world.folders.populate = spy  # type: ignore[method-assign]
    world.service.create("w1", template="minimal")
    ((held, rows),) = seen
    assert held == world.layers.resolve("minimal").layer_ids and rows == ["w1"]
    assert world.store.held == []


def test_a_failed_build_refuses_the_create(world: World) -> None:
    world.builder.fail = Unavailable("uv pip sync failed")
    with pytest.raises(Unavailable):
        world.service.create("w1")
    assert world.row("w1") is None and world.io.kind(f"{ROOT}/w1") is None


# -- health ------------------------------------------------------------------------------------
def test_a_new_workspace_is_healthy(world: World) -> None:
    record = world.service.create("w1")
    report = _health(world).check(record)
    assert report.healthy and report.issues == [] and report.python_venv and report.python_deps_installed
    data = report.to_json()
    assert list(data) == ["name", "status", "path", "configured", "python_venv", "python_deps_installed",
                          "python_missing", "node_modules", "node_deps_installed", "node_missing", "layers",
                          "disk_usage", "issues", "policy", "healthy"]
    assert data["layers"] == [{"id": record.meta["layers"][0], "present": True, "read_only": True, "intact": True}]


def test_health_reports_a_missing_layer_and_repair_rebuilds_it(world: World) -> None:
    record = world.service.create("w1")
    (layer_id,) = record.meta["layers"]
    world.store.remove(layer_id)
    report = _health(world).check(record)
    assert not report.healthy
    assert f"layer {layer_id} missing (repair rebuilds it)" in report.issues
    assert report.to_json()["layers"] == [{"id": layer_id, "present": False, "read_only": False}]
    repaired = _health(world).repair(record)
    assert f"rebuilt layers {layer_id}" in repaired.fixed and repaired.failed == []
    assert repaired.health.healthy and repaired.before == report.issues
    assert list(repaired.to_json()) == ["fixed", "failed", "before", "health"]


def test_health_reports_a_writable_or_changed_layer(world: World) -> None:
    record = world.service.create("w1")
    (layer_id,) = record.meta["layers"]
    world.store.writable.add(layer_id)
    world.store.changed.add(layer_id)
    issues = _health(world).check(record).issues
    assert f"layer {layer_id} is writable" in issues
    assert f"layer {layer_id} was changed since it was built (repair rebuilds it)" in issues


def test_health_of_a_folder_that_is_gone(world: World) -> None:
    record = world.service.create("w1")
    world.io.trash(record.path)
    report = _health(world).check(record)
    assert report.issues == ["workspace folder missing"] and not report.to_json()["healthy"]
    repaired = _health(world).repair(record)
    assert "before" not in repaired.to_json() and repaired.failed[0].startswith("the workspace folder is gone")


def test_health_finds_missing_packages_without_running_anything(world: World) -> None:
    record = world.service.create("w1")
    world.io.files[f"{record.path}/pyproject.toml"] = b'[project]\ndependencies = ["Requests>=2", "idna"]\n'
    site = f"{record.path}/.venv/lib/python3.12/site-packages"
    world.io.dirs.add(f"{site}/idna-3.7.dist-info")
    world.io.files[f"{site}/idna-3.7.dist-info/METADATA"] = b"Metadata-Version: 2.1\nName: idna\n\nbody"
    report = _health(world).check(record)
    assert report.python_missing == ["Requests"] and report.python_deps_installed is False
    calls: list[tuple[list[str], bool]] = []
    result = _health(world).repair(record, install=lambda r, packages, node: calls.append((packages, node)))
    assert calls == [(["Requests"], False)] and "reinstalled Requests" in result.fixed


def test_a_venv_naming_a_folder_outside_its_layers_is_not_believed(world: World) -> None:
    record = world.service.create("w1")
    world.io.venvs[record.path]["layer_site"] = "/home/u/secrets"
    assert "the venv names a folder that is not its layer" in _health(world).check(record).issues


# -- the disk quota ----------------------------------------------------------------------------
def test_quota_refusals_name_their_setting(world: World) -> None:
    quota = QuotaService(resolve({"workspace": {"max_disk": "1M", "max_files": 100, "min_free": "1G"}}, {}),
                         Path("/home/u/.warden"), world.disk)
    world.disk.usage["/w"] = Usage(1 << 20, 3)
    with pytest.raises(TooLarge) as exc:
        quota.check_room("w", "/w")
    assert exc.value.rule == "workspace.max_disk"
    world.disk.usage["/w"] = Usage(0, 100)
    with pytest.raises(TooLarge) as exc:
        quota.check_write("w", quota.usage("/w"), 0, 1, "writing f")
    assert exc.value.rule == "workspace.max_files"
    quota.check_write("w", Usage(0, 0), 4096, 1, "writing f")  # room enough
    world.disk.free = 1 << 20
    with pytest.raises(Unavailable) as refused:
        quota.check_free()
    assert refused.value.rule == "workspace.min_free"


def test_quota_watch_starts_from_what_the_folder_holds(world: World) -> None:
    world.disk.usage["/w"] = Usage(8192, 2)
    with world.quota.watch("/w") as watch:
        assert watch.start == Usage(8192, 2) and watch.breach is None


# -- installs ----------------------------------------------------------------------------------
def _installs(world: World, tools: Tools) -> tuple[InstallService, FakeSafeRoots]:
    roots = FakeSafeRoots(world.io)
    service = InstallService(world.service, world.quota, world.audit, lambda: pytest.fail("no run service here"),
                             tools=tools, roots=roots, files=world.io, tarballs=roots, settings=world.settings)
    return service, roots


def test_a_repair_reinstall_runs_npm_with_its_settings(world: World) -> None:
    record = world.service.create("w1")
    broken = record.__class__(**{**record.__dict__, "status": "broken"})
    tools = Tools()
    result = _installs(world, tools)[0].install_record(broken, ["left-pad@1.3.0"], node=True, persist=False)
    (run,) = tools.runs
    env = run["env"]
    assert isinstance(env, dict)
    # All three npm settings reach npm (a lint-suppression comment once swallowed the second one).
    assert (env["npm_config_cache"], env["npm_config_update_notifier"], env["npm_config_loglevel"]) == (
        "/tmp/.npm", "false", "error")
    assert result.to_json() == {"name": "w1", "packages": ["left-pad@1.3.0"], "node": True, "ok": True,
                                "exit_code": 0, "recorded_in": None, "error": None}


def _with_layer(world: World, record: WorkspaceRecord, *, pip: bool) -> WorkspaceRecord:
    """`record`, broken, on a Python layer at /layers/L (with pip in it or not)."""
    if pip:
        world.io.files["/layers/L/venv/lib/python3.11/site-packages/pip/__init__.py"] = b""
    meta = {**record.meta, "python": "3.11.2", "ro_paths": ["/usr", "/layers/L"]}
    return record.__class__(**{**record.__dict__, "status": "broken", "meta": meta})


def test_a_failed_install_reports_the_end_of_its_output(world: World) -> None:
    broken = _with_layer(world, world.service.create("w1"), pip=True)
    tools = Tools()
    tools.exit_code, tools.stderr = 1, "Collecting nothing\nERROR: No matching distribution found for nothing\n"
    result = _installs(world, tools)[0].install_record(broken, ["nothing"], node=False, persist=True)
    assert not result.ok and result.error == "Collecting nothing | ERROR: No matching distribution found for nothing"
    assert tools.runs[0]["argv"][:4] == [f"{ROOT}/w1/.venv/bin/python", "-m", "pip", "install"]


def test_without_pip_in_the_layer_or_the_venv_uv_installs_mounted_read_only(world: World) -> None:
    # Debian's python3 has no ensurepip wheel to give a layer pip: `python -m pip` would fail.
    broken = _with_layer(world, world.service.create("w1"), pip=False)
    world.io.files["/opt/fake/bin/uv"] = b"\x7fELF"
    tools = Tools()
    result = _installs(world, tools)[0].install_record(broken, ["six"], node=False, persist=False)
    assert result.ok
    (run,) = tools.runs
    assert run["argv"] == ["/opt/fake/bin/uv", "pip", "install", "--python", f"{ROOT}/w1/.venv/bin/python",
                           "--link-mode=copy", "--compile-bytecode", "six"]
    assert "/opt/fake/bin/uv" in run["ro_paths"]  # type: ignore[operator]
    env = run["env"]
    assert isinstance(env, dict)
    # A bot-written uv.toml in the workspace must not steer it; its cache is the sandbox's own /tmp.
    assert (env["UV_NO_CONFIG"], env["UV_PYTHON_DOWNLOADS"], env["UV_CACHE_DIR"]) == ("1", "never", "/tmp/.uv-cache")
    # pip that a bot (or Warden) put into the workspace's own venv is used as before.
    world.io.files[f"{ROOT}/w1/.venv/lib/python3.11/site-packages/pip/__init__.py"] = b""
    _installs(world, tools)[0].install_record(broken, ["six"], node=False, persist=False)
    assert tools.runs[1]["argv"][:4] == [f"{ROOT}/w1/.venv/bin/python", "-m", "pip", "install"]


def test_a_python_install_is_recorded_in_pyproject(world: World) -> None:
    record = world.service.create("w1")
    broken = record.__class__(**{**record.__dict__, "status": "broken"})
    result = _installs(world, Tools())[0].install_record(broken, ["attrs>=23"], node=False, persist=True)
    assert result.recorded_in == "pyproject.toml"
    assert '"attrs>=23"' in world.io.files[f"{ROOT}/w1/pyproject.toml"].decode()


def test_a_full_workspace_installs_nothing(world: World) -> None:
    world.service.create("w1")
    world.disk.usage[f"{ROOT}/w1"] = Usage(10 << 30, 1)
    tools = Tools()
    with pytest.raises(TooLarge):
        _installs(world, tools)[0].install("w1", ["attrs"])
    assert tools.runs == []


# -- home set-up and settings ------------------------------------------------------------------
def test_init_makes_what_is_missing_and_says_so(world: World, tmp_path: Path) -> None:
    files, keys, opened = FakeHomeFiles(), FakeKeyFiles(), []
    home = tmp_path / "home"
    setup = HomeSetup(root=home, folders=[(home, 0o700), (home / "layers", 0o755)], config=home / "config.toml",
                      files=files, open_registry=lambda: opened.append(1), keys=lambda: keys,
                      audit=lambda: world.audit, clock=lambda: world.now)
    assert setup.init() == ["home", "layers", "config.toml", "keys/pepper", "keys/master.key", ".initialised"]
    assert setup.init() == [] and len(opened) == 2
    assert files.folders == {str(home): 0o700, str(home / "layers"): 0o755}
    setup.init(reset_keys=True)
    assert keys.resets == ["20260301T120000"]
    assert [e.action for e in AuditLog.list(world.audit, limit=10)] == ["init", "init", "keys.reset", "init"]


def test_set_setting_judges_the_value_before_writing() -> None:
    config = FakeConfigFile()
    assert set_setting(config, "workspace.max_disk", "2G") == "2G"
    assert config.values == {"workspace.max_disk": "2G"}
    with pytest.raises(InvalidInput):
        set_setting(config, "workspace.max_files", "many")
    with pytest.raises(InvalidInput):
        set_setting(FakeConfigFile(broken=True), "workspace.max_disk", "2G")
    assert config.values == {"workspace.max_disk": "2G"}


def test_resolution_json_keeps_the_cache_format(world: World) -> None:
    resolution = world.layers.resolve("minimal")
    data = json.loads(json.dumps(resolution.to_json()))
    assert data["python"] == {"layer_id": resolution.layer_ids[0], "interpreter": FAKE_PYTHON.to_json()}
    assert data["node"] is None
