"""Shared fixtures: a fresh WARDEN_HOME per test, the wired App, and the real `warden` CLI.

Under pytest-xdist (`scripts/test` runs `-n 4 --dist loadscope`): the tests of one module run
on one worker, in order, so a module fixture (a `shared_home` module's home, a server, a story
told over several tests) is made once; a test marked `alone` runs with no other test beside it
(tests/support/alone.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import alone
from warden.bootstrap import App, bootstrap

REPO = Path(__file__).resolve().parent.parent


_session: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    _session["config"] = config
    if hasattr(config, "workerinput"):  # an xdist worker: its basetemp is <the session's basetemp>/gwN
        alone.install(alone.MachineLock(Path(config.option.basetemp).parent))


def layer_cache() -> Path:
    """The layer cache every test home of this run shares (`envs.layer_cache`): the first home
    that needs a layer builds it, the others copy it (~0.1 s against ~1.3 s of CPU), as homes of
    one machine do. A test of building itself unsets WARDEN_ENVS_LAYER_CACHE."""
    if "layer_cache" not in _session:
        config = _session["config"]
        base = (Path(config.option.basetemp).parent if hasattr(config, "workerinput")
                else config._tmp_path_factory.getbasetemp())
        folder = base / "layer-cache"
        folder.mkdir(mode=0o700, exist_ok=True)
        _session["layer_cache"] = folder
    return Path(_session["layer_cache"])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """End the home daemons this session's tests started and left (tests/interfaces/
    test_cli_daemon.py stops its own; a test elsewhere that switched it on may not), then the
    live sandboxes their homes left: with the server or daemon that started one gone and its
    home deleted, nobody collects what ran in it, and its supervisor waits six idle periods
    (an hour) before it gives up: a whole suite left ~30 of them (3 processes each)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    from tests.interfaces.test_cli_daemon import daemon_pids, stop_daemon
    from warden.adapters.processes import kill_orphan_sandboxes

    base = factory.getbasetemp()
    if daemon_pids(base):
        stop_daemon(base)
    kill_orphan_sandboxes([str(base)])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Each test, from its set-up to its teardown, beside others or alone."""
    exclusive = item.get_closest_marker("alone") is not None
    keep = exclusive and nextitem is not None and nextitem.get_closest_marker("alone") is not None
    with alone.beside_others(exclusive=exclusive, keep=keep):
        return (yield)


def isolated_environ(home: Path) -> dict[str, str]:
    """The environment a CLI call gets: only what Warden needs, plus WARDEN_HOME."""
    keep = {k: v for k, v in os.environ.items()
            if k in {"PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER", "LOGNAME", "TMPDIR"}}
    keep["HOME"] = str(home.parent)
    keep["WARDEN_HOME"] = str(home)
    # Each command runs in the CLI process itself, as the tests that kill one mid-way need; the
    # home's daemon (one per home, of which the suite makes hundreds) is tested on its own
    # (tests/interfaces/test_cli_daemon.py), where it is switched back on.
    keep["WARDEN_DAEMON"] = "0"
    keep["WARDEN_ENVS_LAYER_CACHE"] = str(layer_cache())
    return keep


def at_a_terminal() -> None:
    """A Popen `preexec_fn` for a test that presses Ctrl-C on a `warden` command: SIGINT at its
    default, as in a terminal's foreground job, even when the suite itself runs as a background
    job (a shell starts those with SIGINT ignored, and Python then never raises KeyboardInterrupt)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def _module_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "warden-home"
    path.mkdir()
    return path


def _set_up_once(tmp_path_factory: pytest.TempPathFactory, label: str, *args: str) -> Path:
    """An empty home made as `home` makes one, then `warden ARGS` run on it through the CLI."""
    home = tmp_path_factory.mktemp(label) / "warden-home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "warden", *args], env=isolated_environ(home),
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return home


@pytest.fixture(scope="session")
def _used_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home a first read-only command has used: its registry made, nothing else (no init)."""
    return _set_up_once(tmp_path_factory, "used-home", "list")


@pytest.fixture(scope="session")
def _initialised_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home `warden init` has set up: registry, keys, config, templates, its marker."""
    return _set_up_once(tmp_path_factory, "initialised-home", "init")


def _copy(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "warden-home"
    shutil.copytree(template, path, symlinks=True)
    return path


@pytest.fixture
def initialised_home(_initialised_template: Path, tmp_path: Path) -> Path:
    """This test's own copy of a home `warden init` set up once per session (per xdist worker)."""
    return _copy(_initialised_template, tmp_path)


@pytest.fixture
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The Warden home of one test: an empty folder; one for the whole module under
    `pytest.mark.shared_home` (its first `create` builds the layer, the others reuse it).

    Every fresh home's first `warden` command migrates its registry, which costs most of a
    second of CPU. So a test that only needs a home to work in takes a copy of one set up once
    per session: `pytest.mark.used_home`, a home whose registry a first read-only command made
    (what its own first command would have done), or `pytest.mark.initialised_home`, one that
    `warden init` set up (for tests whose own `init` is only their set-up). `pytest.mark.
    empty_home` keeps the empty folder where a module asks for a copy (first-use tests). No copy
    holds a layer: a layer names its own absolute path, so each home builds its own.
    """
    if request.node.get_closest_marker("shared_home"):
        return Path(request.getfixturevalue("_module_home"))
    if not request.node.get_closest_marker("empty_home"):
        if request.node.get_closest_marker("initialised_home"):
            return _copy(request.getfixturevalue("_initialised_template"), tmp_path)
        if request.node.get_closest_marker("used_home"):
            return _copy(request.getfixturevalue("_used_template"), tmp_path)
    path = tmp_path / "warden-home"
    path.mkdir()
    return path


@pytest.fixture
def environ(home: Path) -> dict[str, str]:
    """The environment a CLI call in this test gets: only what Warden needs, plus WARDEN_HOME."""
    return isolated_environ(home)


@pytest.fixture
def app(home: Path, environ: dict[str, str]) -> Iterator[App]:
    """The real wired App on the test's home."""
    application = bootstrap(home, environ=environ)
    yield application
    application.close()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs the real `warden` entry point in a subprocess, as a user would."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.environ = environ

    def __call__(self, *args: str, input: str | bytes | None = None, timeout: float = 120,
                 env: dict[str, str] | None = None) -> CliResult:
        data = input.encode() if isinstance(input, str) else input
        proc = subprocess.run([sys.executable, "-m", "warden", *args], input=data,
                              capture_output=True, timeout=timeout, env={**self.environ, **(env or {})},
                              check=False)
        return CliResult(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                         proc.stderr.decode("utf-8", "replace"))


@pytest.fixture
def cli(environ: dict[str, str]) -> Cli:
    return Cli(environ)
