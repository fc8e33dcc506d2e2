"""The CLI's contract: init, config, registry commands, envelopes and exit statuses."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli
from warden.core.settings import KEYS, env_name

pytestmark = pytest.mark.used_home  # a copy of a home whose registry is made (tests/conftest.py `home`)


@pytest.mark.empty_home  # what init makes in a home nothing has used yet
def test_init_is_idempotent_and_creates_home(cli: Cli, home: Path) -> None:
    first = cli("init", "--json")
    assert first.code == 0, first.stderr
    assert "config.toml" in first.json["data"]["created"]
    assert (home / "config.toml").exists()
    assert (home / "keys").stat().st_mode & 0o777 == 0o700
    again = cli("init", "--json")
    assert again.code == 0
    assert again.json["data"]["created"] == []


@pytest.mark.initialised_home
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


@pytest.mark.initialised_home
def test_config_show_tells_each_source(cli: Cli) -> None:
    cli("init")
    assert cli("config", "set", "sandbox.max_file_size_mb", "5").code == 0
    rows = {r["key"]: r for r in cli("config", "show", "--json").json["data"]}
    assert rows["sandbox.max_file_size_mb"] == {**rows["sandbox.max_file_size_mb"], "value": 5, "source": "file"}
    assert rows["sandbox.enabled"]["source"] == "default"
    env = cli("config", "get", "sandbox.max_file_size_mb", "--json", env={"WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "7"})
    assert env.json["data"] == {"key": "sandbox.max_file_size_mb", "value": 7, "source": "environment"}


@pytest.mark.initialised_home
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


@pytest.mark.initialised_home
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


@pytest.mark.initialised_home
@pytest.mark.parametrize(("key", "value", "says"), [
    ("sandbox.memory", "0", "below the minimum 16M"),
    ("sandbox.memory", "15M", "below the minimum 16M"),
    ("sandbox.timeout", "0s", "below the minimum 1s"),
    ("sandbox.timeout", "2d", "above the maximum 1d"),
    ("api.port", "70000", "above the maximum 65535"),
    ("api.port", "0", "below the minimum 1"),
    ("api.workers", "65", "above the maximum 64"),
    ("sandbox.pids", "3", "below the minimum 4"),
    ("grants.max_ttl", "0s", "below the minimum 1s"),
    ("sandbox.root_dir", "relative/dir", "relative path; give an absolute one"),
    ("sandbox.backend", "kubernetes", "'kubernetes' is not yet runnable; see docs/kubernetes.md"),
    ("sandbox.backend", "firecracker", "not one of bubblewrap, kubernetes"),
])
def test_config_set_refuses_values_that_break_later_commands(cli: Cli, home: Path, key: str, value: str,
                                                            says: str) -> None:
    cli("init")
    before = (home / "config.toml").read_bytes()
    bad = cli("config", "set", key, value)
    assert bad.code == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and key in bad.stderr and says in bad.stderr, bad.stderr
    bad_json = cli("config", "set", key, value, "--json")
    assert bad_json.code == 2 and bad_json.json["error"]["code"] == "invalid"
    assert (home / "config.toml").read_bytes() == before
    # The same rule holds for the environment and for a hand-edited config file.
    env = cli("config", "show", "--json", env={env_name(key): value})
    assert env.code == 2 and env_name(key) in env.json["error"]["message"] and says in env.json["error"]["message"]
    section, _, name = key.partition(".")
    quoted = value if KEYS[key].kind == "int" else f'"{value}"'
    (home / "config.toml").write_text(f"[{section}]\n{name} = {quoted}\n")
    edited = cli("config", "show", "--json")
    assert edited.code == 2 and "config.toml" in edited.json["error"]["message"]
    assert says in edited.json["error"]["message"]


@pytest.mark.initialised_home
@pytest.mark.parametrize(("key", "value"), [
    ("sandbox.memory", "16M"), ("sandbox.timeout", "1d"), ("api.port", "65535"),
    ("sandbox.root_dir", "~/ws"), ("sandbox.root_dir", "/srv/ws"), ("sandbox.root_dir", ""),
    ("sandbox.backend", "bubblewrap"),
])
def test_config_set_accepts_the_edges(cli: Cli, key: str, value: str) -> None:
    cli("init")
    assert cli("config", "set", key, value).code == 0
    assert cli("config", "get", key, "--json").json["data"]["source"] == "file"


def test_serve_port_shares_the_ports_rule(cli: Cli) -> None:
    result = cli("serve", "--port", "70000", "--json")
    assert result.code == 2 and "65535" in result.json["error"]["message"]


def test_json_without_a_command_is_one_usage_error_document(cli: Cli) -> None:
    for args in (["--json"], ["--json", "--debug"], ["--home", "/tmp/nowhere", "--json"]):
        result = cli(*args)
        assert result.code == 2
        assert result.json == {"ok": False, "error": {"code": "invalid", "message": result.json["error"]["message"]}}
        assert "--help" in result.json["error"]["message"]
    plain = cli()
    assert plain.code == 2 and plain.stdout == "" and "usage:" in plain.stderr


@pytest.mark.parametrize("ttl", ["0s", "0d"])
def test_create_refuses_a_zero_ttl_and_makes_nothing(cli: Cli, home: Path, ttl: str) -> None:
    result = cli("create", "p5", "--ttl", ttl)
    assert result.code == 2 and result.stderr.count("\n") == 1
    assert "ttl must be longer than zero" in result.stderr
    as_json = cli("create", "p5", "--ttl", ttl, "--json")
    assert as_json.code == 2 and as_json.json["error"]["code"] == "invalid"
    assert cli("list", "--json").json["data"] == []
    assert not (home / "workspaces" / "p5").exists()


def test_cleanup_reports_the_duration_as_written(cli: Cli) -> None:
    result = cli("cleanup", "--older-than", "7d", "--dry-run", "--json")
    assert result.code == 0, result.stderr
    data = result.json["data"]
    assert (data["older_than"], data["older_than_s"]) == ("7d", 7 * 86400)
    assert cli("cleanup", "--older-than", "36h", "--json").json["data"]["older_than"] == "36h"
    assert cli("cleanup", "--older-than", "7d").stdout == "nothing idle for more than 7d\n"


@pytest.mark.initialised_home
def test_config_set_fixes_a_wrong_value_in_the_file(cli: Cli, home: Path) -> None:
    """Every other command refuses a wrong setting and points at `config set`, so it must work."""
    assert cli("init").code == 0
    config = home / "config.toml"
    config.write_text(config.read_text() + 'timeout = "0s"\nmemory = "1"\n')
    assert cli("list").code == 2
    fixed = cli("config", "set", "sandbox.timeout", "60s", "--json")
    assert fixed.code == 0 and "sandbox.memory" in fixed.json["data"]["warning"]
    assert cli("config", "set", "sandbox.memory", "512M").code == 0
    assert cli("list").code == 0
    assert cli("config", "get", "sandbox.timeout").stdout.strip() == "60s"


def test_a_workspace_whose_folder_is_gone_is_listed_broken(cli: Cli, home: Path) -> None:
    assert cli("create", "gone").code == 0
    shutil.rmtree(home / "workspaces" / "gone")
    listed = {w["name"]: w["status"] for w in cli("list", "--json").json["data"]}
    assert listed["gone"] == "broken"
    run = cli("run", "gone", "--", "true")
    assert run.code != 0 and "broken" in run.stderr
    assert cli("destroy", "gone", "--no-archive", "--yes").code == 0
    assert "gone" not in {w["name"] for w in cli("list", "--json").json["data"]}


def test_double_dash_ends_options_for_every_command(cli: Cli) -> None:
    assert cli("create", "--", "dd1").code == 0
    assert cli("info", "--json", "--", "dd1").json["data"]["name"] == "dd1"
    assert cli("run", "dd1", "--", "sh", "-c", "echo ok").stdout == "ok\n"


def test_a_reader_that_leaves_early_is_no_error(environ: dict[str, str]) -> None:
    """`warden list --json | head -c 0`: no traceback when the pipe closes."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "warden", "template", "list", "--json"], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
