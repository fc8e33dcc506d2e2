"""The CLI's contract: init, config, registry commands, envelopes and exit statuses."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli


def test_init_is_idempotent_and_creates_home(cli: Cli, home: Path) -> None:
    first = cli("init", "--json")
    assert first.code == 0, first.stderr
    assert "config.toml" in first.json["data"]["created"]
    assert (home / "config.toml").exists()
    assert (home / "keys").stat().st_mode & 0o777 == 0o700
    again = cli("init", "--json")
    assert again.code == 0
    assert again.json["data"]["created"] == []


def test_config_set_wrong_type_exits_2_and_changes_nothing(cli: Cli, home: Path) -> None:
    cli("init")
    before = (home / "config.toml").read_bytes()
    bad = cli("config", "set", "sandbox.max_file_size_mb", "lots")
    assert bad.code == 2
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert "whole number" in bad.stderr
    assert (home / "config.toml").read_bytes() == before
    bad_json = cli("config", "set", "sandbox.max_file_size_mb", "lots", "--json")
    assert bad_json.json == {"ok": False, "error": {"code": "invalid", "message": bad_json.json["error"]["message"]}}


def test_config_show_tells_each_source(cli: Cli) -> None:
    cli("init")
    assert cli("config", "set", "sandbox.max_file_size_mb", "5").code == 0
    rows = {r["key"]: r for r in cli("config", "show", "--json").json["data"]}
    assert rows["sandbox.max_file_size_mb"] == {**rows["sandbox.max_file_size_mb"], "value": 5, "source": "file"}
    assert rows["sandbox.enabled"]["source"] == "default"
    env = cli("config", "get", "sandbox.max_file_size_mb", "--json", env={"WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "7"})
    assert env.json["data"] == {"key": "sandbox.max_file_size_mb", "value": 7, "source": "environment"}


def test_config_keeps_comments_when_setting(cli: Cli, home: Path) -> None:
    cli("init")
    text = (home / "config.toml").read_text()
    (home / "config.toml").write_text("# mine\n" + text)
    cli("config", "set", "sandbox.enabled", "true")
    assert (home / "config.toml").read_text().startswith("# mine\n")
    assert cli("config", "get", "sandbox.enabled").stdout.strip() == "true"


def test_unknown_key_is_not_found(cli: Cli) -> None:
    result = cli("config", "get", "sandbox.nope")
    assert result.code == 4
    assert "unknown setting" in result.stderr


def test_create_list_info_destroy(cli: Cli, home: Path) -> None:
    created = cli("create", "demo", "--json")
    assert created.code == 0, created.stderr
    data = created.json["data"]
    assert {"name", "path", "status", "template", "python_venv"} <= data.keys()
    assert data["status"] == "ready"
    path = Path(data["path"])
    assert (path / ".workspace.json").exists()
    assert cli("create", "demo").code == 5
    assert [w["name"] for w in cli("list", "--json").json["data"]] == ["demo"]
    assert cli("info", "demo", "--json").json["data"]["path"] == str(path)
    assert cli("info", "nope").code == 4
    assert cli("destroy", "demo").code == 2  # needs --yes
    assert cli("destroy", "demo", "--yes", "--no-archive").code == 0
    assert not path.exists()
    assert cli("list", "--json").json["data"] == []


def test_bad_names_are_refused_without_state_change(cli: Cli, home: Path) -> None:
    for name in ("../evil", ".hidden", "a/b", "x" * 80, ""):
        result = cli("create", name, "--json")
        assert result.code == 2, name
        assert result.json["error"]["code"] == "invalid"
    assert cli("list", "--json").json["data"] == []


def test_usage_errors_exit_2_with_one_line(cli: Cli) -> None:
    result = cli("frobnicate")
    assert result.code == 2
    assert "Traceback" not in result.stderr
    result = cli("frobnicate", "--json")
    assert result.json["ok"] is False and result.json["error"]["code"] == "invalid"


def test_audit_records_and_verifies(cli: Cli, home: Path) -> None:
    cli("init")
    cli("create", "demo")
    events = cli("audit", "--json").json["data"]
    assert [e["action"] for e in events][-1] == "workspace.create"
    ok = cli("audit", "verify", "--json")
    assert ok.code == 0 and ok.json["data"]["ok"] is True


def test_destroy_archives_and_unarchive_brings_it_back(cli: Cli, home: Path) -> None:
    assert cli("create", "phoenix").code == 0
    assert cli("fs", "phoenix", "write", "/notes/keep.txt", input="kept\n").code == 0
    gone = cli("destroy", "phoenix", "--yes", "--json")
    assert gone.code == 0, gone.stderr
    assert gone.json["data"]["archive"]
    assert cli("info", "phoenix").code == 4
    back = cli("unarchive", "phoenix", "--json")
    assert back.code == 0, back.stderr
    assert back.json["data"]["status"] == "ready"
    assert cli("fs", "phoenix", "cat", "/notes/keep.txt").stdout == "kept\n"
    assert cli("run", "phoenix", "--", "python", "-c", "print(6*7)").stdout == "42\n"
    assert cli("unarchive", "nothing-here").code == 4
