"""`config set` takes lists as a,b,c or as a JSON/TOML array; `config get` prints what set takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Cli


@pytest.mark.initialised_home
@pytest.mark.parametrize(("text", "stored"), [
    ('["python3","echo"]', ["python3", "echo"]),
    ("['python3', 'echo']", ["python3", "echo"]),
    ("python3, echo", ["python3", "echo"]),
    ("[]", []),
    ("", []),
])
def test_list_syntaxes_store_the_items(cli: Cli, text: str, stored: list[str]) -> None:
    cli("init")
    assert cli("config", "set", "sandbox.allowed_commands", text).code == 0
    assert cli("config", "get", "sandbox.allowed_commands", "--json").json["data"]["value"] == stored
    env = {"WARDEN_SANDBOX_ALLOWED_COMMANDS": text}
    assert cli("config", "get", "sandbox.allowed_commands", "--json", env=env).json["data"]["value"] == stored


@pytest.mark.initialised_home
def test_a_malformed_array_is_one_invalid_line_and_changes_nothing(cli: Cli, home: Path) -> None:
    cli("init")
    before = (home / "config.toml").read_bytes()
    for text in ('["a",', '["a", 1]', "[[\"a\"]]"):
        bad = cli("config", "set", "sandbox.allowed_commands", text)
        assert bad.code == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1, bad.stderr
        assert "sandbox.allowed_commands" in bad.stderr
    assert (home / "config.toml").read_bytes() == before
    env = cli("config", "show", "--json", env={"WARDEN_SANDBOX_ALLOWED_COMMANDS": '["a",'})
    assert env.code == 2 and env.json["error"]["code"] == "invalid"


@pytest.mark.initialised_home
@pytest.mark.parametrize(("key", "value"), [
    ("sandbox.allowed_commands", '["a,b", " c", "[x"]'),
    ("sandbox.allowed_commands", "pip, git"),
    ("network.allowed_domains", "[]"),
    ("envs.install_domains", "[::1]:443, pypi.org:443"),
    ("sandbox.memory", "512M"),
    ("sandbox.timeout", "90s"),
    ("sandbox.enabled", "true"),
    ("sandbox.pids", "64"),
])
def test_get_prints_what_set_takes_back(cli: Cli, key: str, value: str) -> None:
    cli("init")
    assert cli("config", "set", key, value).code == 0
    first = cli("config", "get", key, "--json").json["data"]["value"]
    printed = cli("config", "get", key).stdout.removesuffix("\n")
    assert cli("config", "set", key, printed).code == 0
    assert cli("config", "get", key, "--json").json["data"]["value"] == first
    assert cli("config", "get", key).stdout.removesuffix("\n") == printed


def test_setting_an_allowlist_says_when_it_is_not_enforced(cli: Cli) -> None:
    r = cli("config", "set", "sandbox.allowed_commands", '["python3","echo"]', "--json")
    assert r.code == 0 and "sandbox.enabled" in r.json["data"]["note"]
    assert cli("config", "set", "sandbox.enabled", "true").code == 0
    r = cli("config", "set", "sandbox.allowed_commands", "python3,echo", "--json")
    assert r.code == 0 and "note" not in r.json["data"]


@pytest.mark.initialised_home
def test_settings_set_at_once_are_all_kept(cli: Cli) -> None:
    """Each `config set` read, changed and wrote the whole file: six at once (one process each)
    kept two of their keys, and every one of them said it was set."""
    import concurrent.futures

    wanted = {"api.max_execs": "11", "api.max_execs_per_bot": "3", "approvals.max_pending": "7",
              "workspace.min_free": "1GB", "api.port": "8790", "workspace.sandbox_idle": "5m"}
    with concurrent.futures.ThreadPoolExecutor(len(wanted)) as pool:
        done = list(pool.map(lambda item: cli("config", "set", *item), wanted.items()))
    assert all(d.code == 0 for d in done), [d.stderr for d in done]
    got = {key: cli("config", "get", key).stdout.strip() for key in wanted}
    assert got == wanted
