"""The files of $WARDEN_HOME (core/ports/files.py: ConfigFile, HomeFiles, KeyFiles) held to the
same checks in their fakes (tests/support/fakes: FakeConfigFile, FakeHomeFiles, FakeKeyFiles) and
their real adapters (adapters/home_files: HostConfigFile, HostHomeFiles; adapters/keystore.Keystore)."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.fakes import FakeConfigFile, FakeHomeFiles, FakeKeyFiles
from warden.adapters.home_files import HostConfigFile, HostHomeFiles
from warden.adapters.keystore import Keystore
from warden.core.errors import InvalidInput
from warden.core.ports import KeyFiles

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# -- ConfigFile ------------------------------------------------------------------------------
class HostConfig(HostConfigFile):
    def damage(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("[workspace\nmax_disk = \n")


class FakeConfig(FakeConfigFile):
    def damage(self) -> None:
        self.broken = True


@pytest.fixture(params=["fake", "host"])
def config(request: pytest.FixtureRequest, tmp_path: Path) -> HostConfig | FakeConfig:
    # The host's file lies in a home not made yet: set_value makes it.
    return FakeConfig() if request.param == "fake" else HostConfig(tmp_path / "home" / "config.toml")


def test_settings_are_set_by_dotted_key_and_read_as_tables(config: HostConfig | FakeConfig) -> None:
    assert config.read() == {}
    config.set_value("workspace.max_disk", "2G")
    config.set_value("sandbox.timeout", 30)
    config.set_value("workspace.max_files", 1000)
    config.set_value("workspace.max_disk", "3G")
    assert config.read() == {"workspace": {"max_disk": "3G", "max_files": 1000}, "sandbox": {"timeout": 30}}


def test_a_file_that_is_not_toml_is_neither_read_nor_written(config: HostConfig | FakeConfig) -> None:
    config.damage()
    with pytest.raises(InvalidInput):
        config.read()
    with pytest.raises(InvalidInput):
        config.set_value("workspace.max_disk", "2G")


# -- HomeFiles -------------------------------------------------------------------------------
class HostHome(HostHomeFiles):
    def mode_of(self, path: str) -> int:
        return stat.S_IMODE(os.stat(path).st_mode)

    def text_of(self, path: str) -> str:
        return Path(path).read_text()


class FakeHome(FakeHomeFiles):
    def mode_of(self, path: str) -> int:
        return self.folders[path]

    def text_of(self, path: str) -> str:
        return self.configs[path]


@pytest.fixture(params=["fake", "host"])
def home_files(request: pytest.FixtureRequest, tmp_path: Path) -> HostHome | FakeHome:
    return FakeHome() if request.param == "fake" else HostHome(tmp_path / "home")


def test_home_folders_are_made_once_with_their_mode(home_files: HostHome | FakeHome, tmp_path: Path) -> None:
    home = f"{tmp_path}/home"
    assert home_files.make_folder(home, 0o700) is True
    assert home_files.make_folder(home, 0o700) is False
    assert home_files.make_folder(f"{home}/keys", 0o700) is True
    assert home_files.make_folder(f"{home}/layers", 0o755) is True
    assert (home_files.mode_of(f"{home}/keys"), home_files.mode_of(f"{home}/layers")) == (0o700, 0o755)
    assert home_files.make_folder(f"{tmp_path}/root/workspaces", 0o755) is True  # parents made along
    assert home_files.make_folder(f"{tmp_path}/root", 0o755) is False


def test_the_config_file_is_written_only_when_new(home_files: HostHome | FakeHome, tmp_path: Path) -> None:
    home = f"{tmp_path}/home"
    home_files.make_folder(home, 0o700)
    assert home_files.create_config(f"{home}/config.toml", "# Warden\n") is True
    assert home_files.create_config(f"{home}/config.toml", "# another\n") is False
    assert home_files.text_of(f"{home}/config.toml") == "# Warden\n"


def test_the_home_is_marked_set_up_once(home_files: HostHome | FakeHome, tmp_path: Path) -> None:
    home_files.make_folder(f"{tmp_path}/home", 0o700)
    assert home_files.mark(lambda: T0) is True
    assert home_files.mark(lambda: T0) is False


# -- KeyFiles --------------------------------------------------------------------------------
@pytest.fixture(params=["fake", "host"])
def key_files(request: pytest.FixtureRequest, tmp_path: Path) -> KeyFiles:
    return FakeKeyFiles() if request.param == "fake" else Keystore(tmp_path / "home" / "keys", {})


def test_missing_key_files_are_made_and_named(key_files: KeyFiles) -> None:
    assert key_files.ensure() == ["keys/pepper", "keys/master.key"]
    assert key_files.ensure() == []


def test_a_reset_makes_new_keys_at_once(key_files: KeyFiles) -> None:
    """`warden init --reset-keys` reports what the reset made, then ensure finds nothing to make."""
    key_files.ensure()
    assert key_files.reset("20260301T120000") == ["keys/pepper", "keys/master.key"]
    assert key_files.ensure() == []
