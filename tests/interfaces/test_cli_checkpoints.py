"""`warden checkpoint|checkpoints|rollback` and `warden fs NAME versions|restore` through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.shared_home


@pytest.fixture
def demo(cli: Cli, request: pytest.FixtureRequest) -> Path:
    name = "ck-" + request.node.name.removeprefix("test_")[:40].replace("_", "-")
    created = cli("create", name, "--json")
    assert created.code == 0, created.stderr
    return Path(created.json["data"]["path"])


def test_checkpoint_list_and_rollback(cli: Cli, demo: Path) -> None:
    name = demo.name
    (demo / "src").mkdir()
    (demo / "src" / "a.py").write_text("one\n")
    made = cli("checkpoint", name, "-m", "first", "--json")
    assert made.code == 0, made.stderr
    first = made.json["data"]["id"]
    assert made.json["data"]["message"] == "first" and made.json["data"]["files"] >= 1
    (demo / "src" / "a.py").write_text("two\n")
    (demo / "src" / "b.py").write_text("new\n")
    (demo / "top.txt").write_text("top\n")
    text = cli("checkpoint", name)
    assert text.code == 0 and text.stdout.startswith("checkpoint ")
    listed = cli("checkpoints", name, "--json").json["data"]
    assert [c["id"] for c in listed][-1] == first and len(listed) == 2
    assert {"id", "created_at", "message", "actor", "files", "size"} <= set(listed[0])
    table = cli("checkpoints", name)
    assert table.stdout.splitlines()[0].split() == ["ID", "When", "Who", "Files", "Size", "Message"]
    assert "first" in table.stdout

    only = cli("rollback", name, first, "--path", "src/a.py", "--json")
    assert only.code == 0, only.stderr
    assert (demo / "src" / "a.py").read_text() == "one\n" and (demo / "src" / "b.py").exists()
    whole = cli("rollback", name, first)
    assert whole.code == 0 and f"back to {first}" in whole.stdout
    assert not (demo / "src" / "b.py").exists() and not (demo / "top.txt").exists()
    assert (demo / ".venv").is_dir()  # the environment is not part of checkpoints
    audit = cli("audit", "--workspace", name, "--json").json["data"]
    assert [e["action"] for e in audit].count("checkpoint.rollback") == 2
    dropped = cli("checkpoints", name, "--drop", first, "--json")
    assert dropped.code == 0 and dropped.json["data"]["dropped"] == [first]
    assert first not in [c["id"] for c in cli("checkpoints", name, "--json").json["data"]]
    assert cli("checkpoints", name, "--drop", first).code == 4


def test_refusals_have_stable_codes(cli: Cli, demo: Path) -> None:
    name = demo.name
    bad = cli("rollback", name, "../etc", "--json")
    assert bad.code == 2 and bad.json["error"]["code"] == "invalid"
    missing = cli("rollback", name, "abcdef12")
    assert missing.code == 4 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
    assert cli("checkpoint", "no-such-ws", "--json").json["error"]["code"] == "not_found"
    made = cli("checkpoint", name, "--json").json["data"]["id"]
    outside = cli("rollback", name, made, "--path", "/.git")
    assert outside.code == 2
    assert cli("checkpoints", name, "--json").json["data"][0]["id"] == made
    assert cli("rollback", name).code == 2  # usage: the ID is missing


def test_fs_write_and_rm_keep_versions(cli: Cli, demo: Path) -> None:
    name = demo.name
    for text in ("v1\n", "v2\n", "v3\n"):
        assert cli("fs", name, "write", "/notes.txt", input=text).code == 0
    assert cli("fs", name, "rm", "/notes.txt").code == 0
    versions = cli("fs", name, "versions", "/notes.txt", "--json").json["data"]
    assert [v["op"] for v in versions] == ["delete", "write", "write"]
    assert cli("fs", name, "versions", "/notes.txt").stdout.splitlines()[0].split()[:2] == ["ID", "When"]
    restored = cli("fs", name, "restore", "/notes.txt", versions[2]["id"], "--json")
    assert restored.code == 0 and restored.json["data"]["version"] == versions[2]["id"]
    assert (demo / "notes.txt").read_text() == "v1\n"
    assert cli("fs", name, "restore", "/notes.txt").code == 0
    assert (demo / "notes.txt").read_text() == "v3\n"
    assert cli("fs", name, "restore", "/never.txt").code == 4


def test_retention_settings_through_config(cli: Cli) -> None:
    assert cli("config", "set", "versions.keep", "2").code == 0
    assert cli("config", "get", "versions.keep").stdout.strip() == "2"
    assert cli("config", "set", "versions.max_size", "10M").code == 0
    assert cli("config", "get", "versions.max_size").stdout.strip() == "10M"
    assert cli("config", "set", "versions.keep", "-1").code == 2
    assert cli("config", "set", "versions.keep", "10").code == 0
    assert cli("config", "set", "versions.max_size", "1G").code == 0

