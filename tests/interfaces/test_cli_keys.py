"""`warden bot`, `grant`, `grants`, `revoke`, `secret` as a user runs them."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cli
from tests.support.servers import warden_environ
from warden.core.tokens import looks_like_token

pytestmark = pytest.mark.used_home  # a copy of a home whose registry is made (tests/conftest.py `home`)


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One home with workspace `demo` for the module (its first create builds a layer); tests
    use bot names of their own."""
    home = tmp_path_factory.mktemp("cli-keys") / "home"
    home.mkdir()
    cli = Cli(warden_environ(home))
    assert cli("create", "demo").code == 0
    for bot in ("list-bot", "refused-bot", "a-bot", "b-bot", "runner-bot", "reader-bot", "zone-bot"):
        assert cli("bot", "register", bot).code == 0  # a grant is only for a registered bot
    return cli


@pytest.mark.empty_home  # what init makes in a home nothing has used yet
def test_init_creates_private_keys(cli: Any, home: Path) -> None:
    result = cli("init", "--json")
    assert result.code == 0
    assert {"keys/pepper", "keys/master.key"} <= set(result.json["data"]["created"])
    for name in ("pepper", "master.key"):
        assert stat.S_IMODE((home / "keys" / name).stat().st_mode) == 0o600
    assert "keys/pepper" not in cli("init", "--json").json["data"]["created"]


def test_bot_register_prints_the_token_alone_once(cli: Any) -> None:
    result = cli("bot", "register", "code-bot")
    assert result.code == 0
    assert looks_like_token(result.stdout.strip())
    assert "shown only once" in result.stderr
    listed = cli("bot", "list", "--json").json["data"]
    assert [b["name"] for b in listed] == ["code-bot"]
    assert "token" not in str(listed).lower() or result.stdout.strip() not in str(listed)
    again = cli("bot", "register", "code-bot", "--json")
    assert again.code == 5 and again.json["error"]["code"] == "conflict"
    assert cli("bot", "register", "bad/name").code == 2


def test_grant_json_shape_and_listing(ws: Any) -> None:
    result = ws("grant", "demo", "list-bot", "--permissions", "read,write", "--ttl", "2h", "--json")
    assert result.code == 0, result.stderr
    data = result.json["data"]
    assert {"token", "accessor", "expires"} <= set(data)
    assert looks_like_token(data["token"])
    listed = [g for g in ws("grants", "demo", "--json").json["data"] if g["bot"] == "list-bot"]
    assert [(g["accessor"], g["bot"], g["permissions"], g["state"]) for g in listed] == [
        (data["accessor"], "list-bot", ["read", "write"], "active")]
    assert data["token"] not in ws("grants", "demo").stdout
    human = ws("grant", "demo", "list-bot", "--permissions", "read")
    assert looks_like_token(human.stdout.strip()) and "accessor acc_" in human.stderr


@pytest.mark.parametrize(("args", "code"), [
    (["--permissions", "read,fly"], 2),
    (["--permissions", "read", "--ttl", "40d"], 2),
    (["--permissions", "read", "--ttl", "2h", "--max-ttl", "1h"], 2),
    (["--permissions", "read", "--max-ttl", "90d"], 2),
    (["--permissions", "read", "--secrets", "API_KEY"], 2),
    (["--permissions", "read,secrets", "--secrets", "NOT_SET"], 4),
    (["--permissions", "read", "--ttl", "soon"], 2),
])
def test_bad_grants_change_nothing(ws: Any, args: list[str], code: int) -> None:
    result = ws("grant", "demo", "refused-bot", *args, "--json")
    assert result.code == code, result.stdout
    assert not [g for g in ws("grants", "demo", "--json").json["data"] if g["bot"] == "refused-bot"]


def test_grant_on_a_missing_workspace(cli: Any) -> None:
    assert cli("grant", "nope", "code-bot", "--permissions", "read").code == 4


def test_revoke_by_bot_and_by_accessor(ws: Any) -> None:
    first = ws("grant", "demo", "a-bot", "--permissions", "read", "--json").json["data"]
    ws("grant", "demo", "b-bot", "--permissions", "read", "--json")
    result = ws("revoke", "demo", "--accessor", first["accessor"], "--json")
    assert result.code == 0 and result.json["data"]["revoked"] == [first["accessor"]]
    assert ws("revoke", "demo", "b-bot").code == 0
    states = {g["bot"]: g["state"] for g in ws("grants", "demo", "--json").json["data"]
              if g["bot"] in {"a-bot", "b-bot"}}
    assert states == {"a-bot": "revoked", "b-bot": "revoked"}
    assert ws("revoke", "demo", "b-bot").code == 4  # nothing live left
    assert ws("revoke", "demo").code == 2
    assert ws("revoke", "demo", "a-bot", "--accessor", first["accessor"]).code == 2


def test_bot_rm_revokes_what_it_holds(ws: Any) -> None:
    ws("bot", "register", "temp-bot")
    ws("grant", "demo", "temp-bot", "--permissions", "read")
    result = ws("bot", "rm", "temp-bot", "--json")
    assert result.code == 0 and len(result.json["data"]["revoked"]) == 1
    assert "temp-bot" not in [b["name"] for b in ws("bot", "list", "--json").json["data"]]
    assert ws("bot", "rm", "temp-bot").code == 4


def test_secrets_from_stdin_never_echoed(cli: Any, home: Path) -> None:
    value = "sk-cli-secret-value-123"
    result = cli("secret", "set", "API_KEY", input=value + "\n")
    assert result.code == 0 and value not in result.stdout + result.stderr
    listed = cli("secret", "list", "--json")
    assert [s["name"] for s in listed.json["data"]] == ["API_KEY"] and value not in listed.stdout
    assert cli("secret", "set", "API_KEY", input="").code == 2
    assert cli("secret", "set", "lower", input="v").code == 2
    rotated = cli("secret", "rotate-key", "--json")
    assert rotated.code == 0 and rotated.json["data"]["resealed"] == 1
    assert cli("secret", "list", "--json").json["data"][0]["key_id"] == rotated.json["data"]["key_id"]
    assert cli("secret", "rm", "API_KEY").code == 0
    assert cli("secret", "rm", "API_KEY").code == 4
    for path in home.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes()
    assert value not in cli("audit", "--limit", "100", "--json").stdout


def test_serve_help_mentions_its_defaults(cli: Any) -> None:
    result = cli("serve", "--help")
    assert result.code == 0 and "--port" in result.stdout and "--host" in result.stdout


def test_run_as_token_env_injects_the_grants_secrets(ws: Any) -> None:
    assert ws("secret", "set", "RUN_KEY", input="run-secret-value").code == 0
    token = ws("grant", "demo", "runner-bot", "--permissions", "execute,secrets", "--secrets", "RUN_KEY").stdout.strip()
    probe = ["python", "-c", "import os; print(os.environ.get('RUN_KEY'))"]
    as_bot = ws("run", "demo", "--as-token-env", "--json", "--", *probe, env={"WARDEN_TOKEN": token})
    assert as_bot.code == 0, as_bot.stdout + as_bot.stderr
    assert as_bot.json["data"]["stdout"] == "run-secret-value\n"
    assert ws("run", "demo", "--json", "--", *probe).json["data"]["stdout"] == "None\n"  # the person: no secret
    refused = ws("run", "demo", "--as-token-env", "--", "true", env={"WARDEN_TOKEN": "wdn_" + "0" * 43})
    assert refused.code == 126 and "permission denied" in refused.stderr
    reader = ws("grant", "demo", "reader-bot", "--permissions", "read").stdout.strip()
    assert ws("run", "demo", "--as-token-env", "--", "true", env={"WARDEN_TOKEN": reader}).code == 126
    audit = ws("audit", "--limit", "50", "--json").json["data"]
    assert any(e["action"] == "run.as_token" and e["decision"] == "allow" for e in audit)
    assert any(e["action"] == "run" and e["actor"].startswith("bot:runner-bot@acc_") for e in audit)
    assert token not in str(audit) and "run-secret-value" not in str(audit)


def test_run_as_token_env_reaches_only_what_its_grant_allows(ws: Any) -> None:
    # It once followed the person's --net and network settings, not the grant's domains.
    assert ws("config", "set", "network.allowed_domains", "person.example").code == 0
    assert ws("bot", "register", "net-bot").code == 0
    token = ws("grant", "demo", "net-bot", "--permissions", "execute", "--allow-domain", "pypi.org").stdout.strip()
    as_bot = {"WARDEN_TOKEN": token}
    beyond = ws("run", "demo", "--as-token-env", "--net", "allow", "--allow-domain", "example.com", "--", "true",
                env=as_bot)
    assert beyond.code == 126 and "does not allow network to example.com" in beyond.stderr
    # The person's allowed domains are not the bot's: naming none, it has no network at all.
    persons = ws("run", "demo", "--as-token-env", "--net", "allow", "--allow-domain", "person.example", "--",
                 "true", env=as_bot)
    assert persons.code == 126 and "person.example" in persons.stderr
    within = ws("run", "demo", "--as-token-env", "--allow-domain", "pypi.org", "--json", "--", "sh", "-c",
                'echo "$HTTPS_PROXY"', env=as_bot)
    assert within.code == 0 and within.json["data"]["stdout"].startswith("http://127.0.0.1:")
    quiet = ws("run", "demo", "--as-token-env", "--json", "--", "sh", "-c", 'echo "[$HTTPS_PROXY]"', env=as_bot)
    assert quiet.code == 0 and quiet.json["data"]["stdout"] == "[]\n"
    assert ws("config", "set", "network.allowed_domains", "").code == 0


def test_grant_to_a_zone_the_workspace_lacks(ws: Any) -> None:
    result = ws("grant", "demo", "zone-bot", "--permissions", "read", "--zones", "nozone", "--json")
    assert result.code == 2 and "no zone nozone" in result.json["error"]["message"]
    assert ws("grant", "demo", "zone-bot", "--permissions", "read", "--zones", "cache").code == 0


def test_destroy_revokes_the_workspaces_grants(cli: Cli) -> None:
    assert cli("create", "gone").code == 0
    assert cli("bot", "register", "b").code == 0
    assert cli("grant", "gone", "b", "--permissions", "read").code == 0
    assert cli("destroy", "gone", "--yes", "--no-archive").code == 0
    assert cli("create", "gone").code == 0
    listed = cli("grants", "gone", "--json").json["data"]
    assert listed and {g["state"] for g in listed} == {"revoked"}, listed


def _grant_rows(home: Path) -> int:
    with sqlite3.connect(home / "warden.db") as db:
        return int(db.execute("SELECT count(*) FROM grants").fetchone()[0])


def test_grant_to_an_unregistered_bot_is_not_found(ws: Cli) -> None:
    home = Path(ws.environ["WARDEN_HOME"])
    before = _grant_rows(home)
    human = ws("grant", "demo", "nobot", "--permissions", "read")
    assert human.code == 4 and human.stdout == ""
    assert human.stderr.count("\n") == 1 and "`warden bot register nobot`" in human.stderr, human.stderr
    machine = ws("grant", "demo", "nobot", "--permissions", "read", "--json")
    assert machine.code == 4 and machine.json["error"]["code"] == "not_found"
    assert _grant_rows(home) == before
    assert not [g for g in ws("grants", "demo", "--json").json["data"] if g["bot"] == "nobot"]
    assert ws("bot", "register", "nobot").code == 0
    assert ws("grant", "demo", "nobot", "--permissions", "read").code == 0
    assert _grant_rows(home) == before + 1


def test_a_too_long_ttl_is_explained_without_flag_syntax(ws: Cli) -> None:
    # The same words reach the HTTP API, whose body fields are ttl and max_ttl.
    for args in (["--ttl", "40d"], ["--ttl", "2h", "--max-ttl", "1h"], ["--max-ttl", "90d"], ["--ttl", "0s"]):
        result = ws("grant", "demo", "refused-bot", "--permissions", "read", *args, "--json")
        assert result.code == 2, args
        message = result.json["error"]["message"]
        assert "--" not in message and "ttl" in message, message


def test_one_machine_keeps_its_key_files_and_no_cluster_key(cli: Cli, home: Path) -> None:
    assert cli("init").code == 0
    assert sorted(p.name for p in (home / "keys").iterdir()) == ["master.key", "pepper"]
    assert cli("keys", "show", "--json").json["data"]["mode"] == "local"
    refused = cli("keys", "rotate", "pepper", "--json")
    assert refused.code == 2 and "--reset-keys" in refused.json["error"]["message"]
    rotated = cli("keys", "rotate", "secrets", "--json")
    assert rotated.code == 0 and rotated.json["data"]["key_id"].startswith("mk_")


def test_grant_warns_when_a_writer_shares_a_workspace_with_secrets(ws: Any) -> None:
    """A bot that may write in a workspace can plant what another's commands run there
    (`.venv/bin/sh`), and those run with that bot's secrets: Warden cannot tell planted code from
    the workspace's own, so `warden grant` says so, whichever of the two grants comes second."""
    assert ws("secret", "set", "SHARED_KEY", input="v").code == 0
    assert ws("create", "sharing", "--template", "minimal").code == 0
    for bot in ("keyholder", "looker", "planter", "keyholder2", "keyholder3"):
        assert ws("bot", "register", bot).code == 0
    holder = ws("grant", "sharing", "keyholder", "--permissions", "execute,secrets", "--secrets", "SHARED_KEY")
    assert holder.code == 0 and "warning" not in holder.stderr, holder.stderr
    assert "warning" not in ws("grant", "sharing", "looker", "--permissions", "read").stderr
    writer = ws("grant", "sharing", "planter", "--permissions", "read,write,execute")
    assert writer.code == 0
    line = [x for x in writer.stderr.splitlines() if x.startswith("warning:")]
    assert line == ["warning: keyholder and planter share sharing, where one may write (its commands too) and the "
                    "other's commands run with secrets: code a writer plants there (.venv/bin, node_modules/.bin, a "
                    "script) runs with them; give secrets on a workspace no other bot may write or run commands in"], \
        writer.stderr
    second = ws("grant", "sharing", "keyholder2", "--permissions", "execute,secrets", "--secrets", "SHARED_KEY",
                "--json")  # keyholder's commands may plant what keyholder2's run, and the other way round
    assert second.json["data"]["warnings"][0].startswith("keyholder, planter and keyholder2 share sharing"), \
        second.json
    for gone in ("planter", "keyholder", "keyholder2"):
        assert ws("revoke", "sharing", gone).code == 0
    again = ws("grant", "sharing", "keyholder3", "--permissions", "execute,secrets", "--secrets", "SHARED_KEY")
    assert "warning" not in again.stderr, again.stderr  # revoked writers no longer count


def test_grant_warns_when_a_bot_that_only_executes_shares_a_workspace_with_secrets(ws: Any) -> None:
    """Found as a newcomer: a `read,execute` bot (no `write`) planted `.venv/bin/ls` with a command,
    and another bot's `ls` wrote its secret where the first read it back; `warden grant` had not
    warned, as the README promised it would of a bot that may write there."""
    assert ws("secret", "set", "RUN_KEY", input="v").code == 0
    assert ws("create", "running", "--template", "minimal").code == 0
    for bot in ("runholder", "runreader"):
        assert ws("bot", "register", bot).code == 0
    assert ws("grant", "running", "runreader", "--permissions", "read,execute").code == 0
    holder = ws("grant", "running", "runholder", "--permissions", "execute,secrets", "--secrets", "RUN_KEY", "--json")
    assert holder.json["data"]["warnings"][0].startswith("runreader and runholder share running"), holder.json


def test_secret_rm_names_the_live_grants_that_still_name_it(ws: Any) -> None:
    """Found as a newcomer: `warden secret rm KEY` said "removed secret KEY" alone while a live
    grant named it; that bot's commands then quietly ran with the variable empty."""
    assert ws("secret", "set", "GONE_KEY", input="v").code == 0
    ws("bot", "register", "secret-bot")
    granted = ws("grant", "demo", "secret-bot", "--permissions", "read,execute,secrets", "--secrets", "GONE_KEY",
                 "--json").json["data"]["accessor"]
    removed = ws("secret", "rm", "GONE_KEY")
    assert removed.code == 0, removed.stderr
    assert removed.stdout.splitlines() == [
        "removed secret GONE_KEY",
        f"note: 1 live grant(s) still name it: secret-bot on demo ({granted}); their commands now run without it "
        "(`warden secret set GONE_KEY` stores it again, `warden revoke` ends a grant)"]
    assert ws("secret", "set", "GONE_KEY", input="v").code == 0
    assert ws("revoke", "demo", "--accessor", granted).code == 0  # a revoked grant is not named
    again = ws("secret", "rm", "GONE_KEY", "--json")
    assert again.code == 0 and again.json["data"]["still_named_by"] == [] and "note" not in again.stdout
