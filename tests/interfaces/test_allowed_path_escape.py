"""Allowed paths against a bot that plants links: Warden's home must never be mounted.

The attack of the second review: with `S` allowed read-write and `S/ref` allowed read-only but
not yet there, a bot makes `S/ref` a link to Warden's home; the next run would mount the
link's target and read the keys. And `sandbox add LINK` for a link to the home.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.used_home]


@pytest.fixture
def shared(tmp_path: Path, cli: Cli) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    assert cli("create", "victim").code == 0
    return folder


def test_a_link_planted_under_an_allowed_path_never_mounts_the_home(cli: Cli, home: Path, shared: Path) -> None:
    assert cli("sandbox", "add", str(shared), "--mode", "rw").code == 0
    assert cli("sandbox", "add", str(shared / "ref"), "--mode", "ro").code == 0  # not there yet
    rel = os.path.relpath(home, shared)
    plant = cli("run", "victim", "--", "ln", "-s", rel, str(shared / "ref"))
    assert plant.code == 0, plant.stderr
    assert (shared / "ref").is_symlink()
    steal = cli("run", "victim", "--", "sh", "-c", f"cat {shared}/ref/keys/master.key | wc -c; ls {shared}/ref/")
    assert "warden: not mounting the allowed path" in steal.stderr and "symbolic link" in steal.stderr
    assert "warden.db" not in steal.stdout and "keys" not in steal.stdout
    assert steal.stdout.split()[0] == "0"
    # An absolute link, and one to a single key file, fare no better.
    (shared / "ref").unlink()
    (shared / "ref").symlink_to(home / "keys")
    steal = cli("run", "victim", "--", "sh", "-c", f"ls {shared}/ref/ 2>&1")
    assert "master.key" not in steal.stdout and "pepper" not in steal.stdout


def test_a_link_in_the_middle_of_an_allowed_path_is_not_followed(cli: Cli, home: Path, shared: Path) -> None:
    (shared / "inner" / "data").mkdir(parents=True)
    assert cli("sandbox", "add", str(shared / "inner" / "data"), "--mode", "ro").code == 0
    assert cli("sandbox", "add", str(shared), "--mode", "rw").code == 0
    plant = cli("run", "victim", "--", "sh", "-c",
                f"mv {shared}/inner {shared}/gone && ln -s {home.parent} {shared}/inner")
    assert plant.code == 0, plant.stderr
    (home.parent / "data").mkdir(exist_ok=True)
    (home.parent / "data" / "host-secret").write_text("s\n")
    steal = cli("run", "victim", "--", "sh", "-c", f"ls {shared}/inner/data 2>&1")
    assert "host-secret" not in steal.stdout and "symbolic link" in steal.stderr


def test_sandbox_add_refuses_a_link_to_the_home(cli: Cli, home: Path, tmp_path: Path) -> None:
    link = tmp_path / "innocent"
    link.symlink_to(home)
    r = cli("sandbox", "add", str(link), "--mode", "ro")
    assert r.code == 2 and "symbolic link" in r.stderr
    parent_link = tmp_path / "up"
    parent_link.symlink_to(home.parent)
    r = cli("sandbox", "add", str(parent_link / home.name / "keys"))
    assert r.code == 2
    listed = cli("sandbox", "list", "--json").json["data"]
    assert not [e for e in listed if e["path"].startswith(str(tmp_path))]


def test_another_workspace_is_never_mounted(cli: Cli, home: Path, shared: Path) -> None:
    other = cli("create", "other", "--json").json["data"]["path"]
    Path(other, "private.txt").write_text("other's data\n")
    assert cli("sandbox", "add", other, "--workspace", "victim").code == 2
    # Through a link planted in an allowed folder, too.
    assert cli("sandbox", "add", str(shared), "--mode", "rw").code == 0
    assert cli("sandbox", "add", str(shared / "peek"), "--mode", "ro").code == 0
    cli("run", "victim", "--", "ln", "-s", other, str(shared / "peek"))
    steal = cli("run", "victim", "--", "sh", "-c", f"cat {shared}/peek/private.txt 2>&1")
    assert "other's data" not in steal.stdout


def test_a_denied_path_cannot_be_carried_away_by_renaming_a_folder_above_it(cli: Cli, shared: Path) -> None:
    secret = shared / "a" / "b" / "secret.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("denied content\n")
    assert cli("sandbox", "add", str(shared), "--mode", "rw").code == 0
    assert cli("sandbox", "remove", str(secret)).code == 0
    move = cli("run", "victim", "--", "sh", "-c",
               f"mv {shared}/a {shared}/moved; mv {shared}/a/b {shared}/moved-b; ls -R {shared}")
    assert "Device or resource busy" in move.stderr
    steal = cli("run", "victim", "--", "sh", "-c", f"cat {shared}/*/*/secret.txt {shared}/*/secret.txt 2>&1")
    assert "denied content" not in steal.stdout
    assert secret.read_text() == "denied content\n"  # where the person left it


def test_a_denied_path_through_a_link_cannot_be_carried_away(cli: Cli, shared: Path) -> None:
    # A folder behind a link was never pinned (the pins stopped at the link): `mv b c` took the
    # denied file along, and the next command read it where no deny named it. Pointing the link
    # elsewhere did the same, and so did a link planted where a denied path did not exist yet.
    (shared / "b").mkdir()
    (shared / "b" / "key").write_text("denied content\n")
    (shared / "a").symlink_to("b")
    assert cli("sandbox", "add", str(shared), "--mode", "rw").code == 0
    assert cli("sandbox", "remove", str(shared / "a" / "key")).code == 0
    move = cli("run", "victim", "--", "sh", "-c", f"mv {shared}/b {shared}/c")
    assert move.code != 0 and "symbolic link" in move.stderr
    steal = cli("run", "victim", "--", "sh", "-c", f"cat {shared}/*/key 2>&1")
    assert "denied content" not in steal.stdout
    assert (shared / "b" / "key").read_text() == "denied content\n"  # where the person left it
    assert cli("sandbox", "remove", str(shared / "later" / "token")).code == 0  # not made yet
    assert cli("sandbox", "forget", str(shared / "a" / "key")).code == 0
    assert cli("run", "victim", "--", "ln", "-s", "b", f"{shared}/later").code == 0
    (shared / "later" / "token").write_text("the person's token\n")  # lands in b/token
    steal = cli("run", "victim", "--", "sh", "-c", f"cat {shared}/b/token 2>&1")
    assert "the person's token" not in steal.stdout and "symbolic link" in steal.stderr
