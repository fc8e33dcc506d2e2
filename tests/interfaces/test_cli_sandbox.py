"""`warden sandbox list|add|remove|check` through the real entry point (seed 004)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = pytest.mark.shared_home


def test_list_add_remove_at_three_levels(cli: Cli, home: Path) -> None:
    empty = cli("sandbox", "list")
    assert empty.code == 0 and empty.stdout.startswith("Effective Sandbox Paths:")
    assert cli("create", "proj").code == 0
    mine = ("/opt/company_tools", "/var/www/project/assets", "/tmp/temp_data", "/home/user/sensitive")
    assert cli("sandbox", "add", "/opt/company_tools", "--mode", "ro").code == 0
    assert cli("sandbox", "add", "/var/www/project/assets", "--workspace", "proj").code == 0
    assert cli("sandbox", "add", "/tmp/temp_data", "--workspace", "proj", "--session", "s1").code == 0
    assert cli("sandbox", "remove", "/home/user/sensitive", "--workspace", "proj", "--session", "s1").code == 0

    shown = cli("sandbox", "list", "--workspace", "proj", "--session", "s1")
    lines = shown.stdout.splitlines()
    assert lines[0] == "Effective Sandbox Paths:" and lines[1] == ""
    assert lines[2].split() == ["Path", "Action", "Source"]
    rows = [line.split() for line in lines[3:] if line.split()[0] in mine]
    assert rows == [["/opt/company_tools", "ALLOW", "(ro)", "global"],
                    ["/var/www/project/assets", "ALLOW", "workspace"],
                    ["/tmp/temp_data", "ALLOW", "session"],
                    ["/home/user/sensitive", "DENY", "session"]]
    data = [d for d in cli("sandbox", "list", "--workspace", "proj", "--json").json["data"] if d["path"] in mine]
    assert [(d["path"], d["action"], d["source"], d["mode"]) for d in data] == [
        ("/opt/company_tools", "allow", "global", "ro"), ("/var/www/project/assets", "allow", "workspace", "rw")]

    # The files are seed 004's format, at the seed's three places.
    assert "/opt/company_tools" in [e["path"] for e in json.loads((home / "sandbox_paths.json").read_text())[
        "allowed_paths"]]
    ws = Path(cli("info", "proj", "--json").json["data"]["path"])
    session_doc = json.loads((ws / ".warden" / "sessions" / "s1" / "sandbox.json").read_text())
    assert session_doc["denied_paths"][0]["path"] == "/home/user/sensitive"

    # add after remove: allowed again at that level, no longer denied.
    assert cli("sandbox", "add", "/home/user/sensitive", "--workspace", "proj", "--session", "s1").code == 0
    session_doc = json.loads((ws / ".warden" / "sessions" / "s1" / "sandbox.json").read_text())
    assert session_doc["denied_paths"] == [] and session_doc["allowed_paths"][-1]["path"] == "/home/user/sensitive"


def test_check_prints_the_decision_and_rule_and_exits_3_on_deny(cli: Cli) -> None:
    assert cli("create", "proj2").code == 0
    assert cli("sandbox", "add", "/opt/tools", "--mode", "ro").code == 0
    assert cli("sandbox", "remove", "/opt/tools/secret", "--workspace", "proj2", "--session", "s1").code == 0

    read = cli("sandbox", "check", "/opt/tools/bin/x", "--op", "read")
    assert read.code == 0 and read.stdout.splitlines() == [
        "allow read /opt/tools/bin/x", "rule: allow: global allowed_paths /opt/tools (ro)"]
    write = cli("sandbox", "check", "/opt/tools/bin/x", "--op", "write")
    assert write.code == 3 and "rule: deny: global allowed_paths /opt/tools is ro" in write.stdout
    session = cli("sandbox", "check", "/opt/tools/secret/k", "--workspace", "proj2", "--session", "s1", "--json")
    assert session.code == 3
    assert session.json["data"]["rule"] == "deny: session denied_paths /opt/tools/secret"
    assert session.json["data"]["decision"] == "deny"
    assert cli("sandbox", "check", "/opt/tools/secret/k", "--workspace", "proj2").code == 0
    system = cli("sandbox", "check", "/etc/shadow")
    assert system.code == 3 and "deny: system path /etc (sandbox.block_system_paths)" in system.stdout
    # Relative paths are inside the workspace when --workspace is given.
    inside = cli("sandbox", "check", "notes/a.txt", "--workspace", "proj2", "--op", "write", "--json")
    assert inside.code == 0 and inside.json["data"]["rule"] == "allow: workspace owner (rw)"
    protected = cli("sandbox", "check", ".warden/sandbox.json", "--workspace", "proj2", "--op", "write")
    assert protected.code == 3 and "protected workspace file /.warden" in protected.stdout
    sibling = cli("sandbox", "check", inside.json["data"]["path"].replace("/proj2/", "/proj2-evil/"),
                  "--workspace", "proj2")
    assert sibling.code == 3


def test_bad_input_exits_2_with_one_line_and_changes_nothing(cli: Cli, home: Path) -> None:
    for args in (("sandbox", "add", "/x", "--session", "s1"),
                 ("sandbox", "add", "/x", "--level", "workspace"),
                 ("sandbox", "add", "/x", "--mode", "rwx"),
                 ("sandbox", "check", "/x", "--op", "chmod")):
        bad = cli(*args)
        assert bad.code == 2, (args, bad.stderr)
        assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    before = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    for args in (("sandbox", "add", "/y", "--session", "s1"), ("sandbox", "remove", "/y", "--level", "session")):
        assert cli(*args).code == 2
    after = (home / "sandbox_paths.json").read_bytes() if (home / "sandbox_paths.json").exists() else None
    assert before == after
    missing = cli("sandbox", "list", "--workspace", "ghost", "--json")
    assert missing.code == 4 and missing.json["error"]["code"] == "not_found"


def test_an_allow_a_deny_still_wins_over_is_said_at_once(cli: Cli) -> None:
    """A deny always wins: an allow under a protected system path, or of a path another level
    denies, is written but changes no run; `add` says so instead of a plain "allowed"."""
    system = cli("sandbox", "add", "/etc/newcomer-app", "--mode", "rw")
    assert system.code == 0
    assert "runs still do not get /etc/newcomer-app: deny: system path /etc" in system.stderr + system.stdout
    assert cli("sandbox", "add", "/etc/newcomer-app", "--json").json["data"]["overruled_by"].startswith(
        "deny: system path /etc")
    assert cli("create", "proj4").code == 0
    assert cli("sandbox", "remove", "/srv/newcomer-data").code == 0  # denied for every workspace
    other_level = cli("sandbox", "add", "/srv/newcomer-data", "--workspace", "proj4")
    assert other_level.code == 0 and "deny: global denied_paths /srv/newcomer-data" in other_level.stdout
    plain = cli("sandbox", "add", "/srv/newcomer-open", "--workspace", "proj4")
    assert plain.code == 0 and "still do not get" not in plain.stdout + plain.stderr  # (it does not exist: that note)
    assert cli("sandbox", "add", "/srv/newcomer-data").code == 0  # the global deny dropped: nothing said
    assert "still do not get" not in cli("sandbox", "add", "/srv/newcomer-data", "--workspace", "proj4").stdout


def test_forget_undoes_an_add_or_a_remove_at_its_level_only(cli: Cli, home: Path, tmp_path: Path) -> None:
    """`add` and `remove` only turn an allow into a deny and back: `forget` drops the path from
    both lists of one level, so the other levels (or no list at all) decide it again, and a run
    sees the change at its next command."""
    data = tmp_path / "forget-data"
    data.mkdir()
    (data / "f").write_text("seen\n")
    assert cli("create", "proj5").code == 0
    assert cli("sandbox", "add", str(data), "--mode", "ro").code == 0  # global
    assert cli("sandbox", "remove", str(data), "--workspace", "proj5").code == 0  # the workspace's deny wins
    read = ("run", "proj5", "--", "sh", "-c", f"cat {data}/f 2>/dev/null || echo hidden")
    assert cli(*read).stdout == "hidden\n"

    forgot = cli("sandbox", "forget", str(data), "--workspace", "proj5")
    assert forgot.code == 0, forgot.stderr
    assert forgot.stdout.strip() == (f"forgot {data} at level workspace (it was denied); now runs may read it: "
                                     f"allow: global allowed_paths {data} (ro)")
    ws = Path(cli("info", "proj5", "--json").json["data"]["path"])
    assert json.loads((ws / ".warden" / "sandbox.json").read_text()) == {"allowed_paths": [], "denied_paths": []}
    assert cli(*read).stdout == "seen\n"  # the global allow decides again

    gone = cli("sandbox", "forget", str(data), "--json")
    assert gone.code == 0 and [w["action"] for w in gone.json["data"]["was"]] == ["allow"]
    assert gone.json["data"]["was"][0]["mode"] == "ro" and gone.json["data"]["now"]["allowed"] is False
    assert str(data) not in [e if isinstance(e, str) else e["path"] for e in json.loads(
        (home / "sandbox_paths.json").read_text())["allowed_paths"]]
    assert cli(*read).stdout == "hidden\n"
    events = [e for e in cli("audit", "--json", "--limit", "200").json["data"] if e["action"] == "sandbox.forget"]
    assert [(e["target"], e["detail"]["path"], e["detail"]["was"]) for e in events[-2:]] == [
        ("proj5", str(data), ["deny"]), ("global", str(data), ["allow"])]


def test_forget_of_a_path_a_level_does_not_list_exits_4_and_makes_nothing(cli: Cli, home: Path) -> None:
    assert cli("create", "proj6").code == 0
    assert cli("sandbox", "add", "/srv/forget-me", "--workspace", "proj6").code == 0
    ws = Path(cli("info", "proj6", "--json").json["data"]["path"])
    before = (ws / ".warden" / "sandbox.json").read_bytes()
    globally = cli("sandbox", "forget", "/srv/forget-me", "--workspace", "proj6", "--level", "global")
    assert globally.code == 4 and "not in the global level's lists;" in globally.stderr, globally.stderr
    for args in (("/srv/forget-me",),  # listed by the workspace, not globally
                 ("/srv/forget-me", "--workspace", "proj6", "--session", "s9"),
                 ("/srv/forget-me/below", "--workspace", "proj6")):  # a path below an entry is not it
        missing = cli("sandbox", "forget", *args)
        assert missing.code == 4, (args, missing.stderr)
        assert missing.stderr.count("\n") == 1 and "`warden sandbox list` shows each path's level" in missing.stderr
    assert not (ws / ".warden" / "sessions" / "s9").exists()  # the session's folder not made to say so
    assert (ws / ".warden" / "sandbox.json").read_bytes() == before
    assert cli("sandbox", "forget", "relative", "--level", "session").code == 2
    assert cli("sandbox", "forget", "/srv/forget-me", "--workspace", "proj6", "--json").json["data"]["level"] == \
        "workspace"


def test_a_run_that_does_not_find_a_denied_path_ends_with_warden_s_line(cli: Cli, tmp_path: Path) -> None:
    """Found as a newcomer: after `warden sandbox remove ~/datasets`, `cat ~/datasets/x.csv` said
    only "No such file or directory", as for a file that is not there, with no line from Warden."""
    data = tmp_path / "denied-data"
    data.mkdir()
    (data / "x.csv").write_text("a,b\n")
    assert cli("create", "proj7").code == 0
    assert cli("sandbox", "remove", str(data), "--workspace", "proj7").code == 0
    hint = (f"warden: {data} is denied to this workspace's commands, so the sandbox hides it; `warden sandbox "
            f"forget {data} --workspace proj7` takes the deny back (`warden sandbox list --workspace proj7` "
            "shows at which level it is)")
    for argv in (["cat", f"{data}/x.csv"], ["python", "-c", f"open('{data}/x.csv')"]):
        run = cli("run", "proj7", "--", *argv)
        assert run.code == 1 and "No such file or directory" in run.stderr, run.stderr
        assert run.stderr.rstrip("\n").splitlines()[-1] == hint
    missing = cli("run", "proj7", "--", "cat", str(tmp_path / "nowhere" / "x.csv"))  # not denied: no line
    assert missing.code == 1 and "warden:" not in missing.stderr
    assert cli("sandbox", "forget", str(data), "--workspace", "proj7").code == 0
    assert cli("run", "proj7", "--", "cat", f"{data}/x.csv").stderr.count("warden:") == 0


def test_add_of_a_path_that_does_not_exist_says_so_and_allows_it_all_the_same(cli: Cli, tmp_path: Path) -> None:
    """Found as a newcomer: `warden sandbox add ~/nope` answered "allowed" alone; runs then did
    not find it, with nothing to say why (a missing allowed path is not mounted)."""
    later = tmp_path / "made-later"
    added = cli("sandbox", "add", str(later), "--mode", "ro")
    assert added.code == 0
    assert added.stdout.splitlines() == [f"allowed {later} (ro) at level global",
                                         f"note: {later} does not exist on this host (yet); runs get it once it does"]
    assert cli("sandbox", "add", str(tmp_path), "--mode", "ro").stdout.count("note:") == 0  # one that exists
    assert cli("sandbox", "add", str(later), "--mode", "ro", "--json").json["data"]["path"] == str(later)
    for path in (later, tmp_path):
        assert cli("sandbox", "forget", str(path)).code == 0


def test_a_session_deny_stops_the_background_process_started_under_its_allow(cli: Cli, tmp_path: Path) -> None:
    """A live sandbox kept the digest of the workspace's path policy without the session's lists
    (`warden run --session S`): a `sandbox remove PATH --session S` left a detached process
    started under S's allow reading PATH through every `ps` and sweep, while a workspace-level
    deny stopped it at once (found attacking the policy digest). It now keeps its session's."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "s.txt").write_text("x\n")
    assert cli("create", "sess").code == 0
    assert cli("sandbox", "add", str(secret), "--workspace", "sess", "--session", "s1").code == 0
    started = cli("run", "sess", "--session", "s1", "--detach", "--json", "--", "sh", "-c",
                  f"while true; do cat {secret}/s.txt; sleep 0.2; done")
    assert started.code == 0, started.stderr
    listed = cli("ps", "sess", "--json")
    assert [p["status"] for p in listed.json["data"]] == ["running"], listed.stdout  # its policy unchanged
    assert cli("sandbox", "remove", str(secret), "--workspace", "sess", "--session", "s1").code == 0
    after = cli("ps", "sess", "--json").json["data"]
    assert [p["status"] for p in after] == ["killed"], after
    assert "path policy" in after[0]["stopped_by"]


def test_a_session_s_deny_is_said_to_be_taken_back_by_that_session_s_forget(cli: Cli, tmp_path: Path) -> None:
    """Found as a newcomer: a run of a session whose deny hid a path ended with `warden sandbox forget
    P --workspace W`, which looks in the workspace's lists (exit 4, "not in the workspace level's
    lists"); the line now names the session, and what it names works."""
    data = tmp_path / "session-data"
    (data / "private").mkdir(parents=True)
    (data / "private" / "p.txt").write_text("p\n")
    assert cli("create", "proj8").code == 0
    assert cli("sandbox", "add", str(data), "--mode", "ro", "--workspace", "proj8").code == 0
    assert cli("sandbox", "remove", str(data / "private"), "--workspace", "proj8", "--session", "s1").code == 0
    run = cli("run", "proj8", "--session", "s1", "--", "cat", f"{data}/private/p.txt")
    assert run.code == 1, run.stderr
    forget = f"warden sandbox forget {data}/private --workspace proj8 --session s1"
    assert run.stderr.rstrip("\n").splitlines()[-1] == (
        f"warden: {data}/private is denied to this workspace's commands, so the sandbox hides it; `{forget}` takes "
        "the deny back (`warden sandbox list --workspace proj8 --session s1` shows at which level it is)"), run.stderr
    assert cli(*forget.split()[1:]).code == 0
    assert cli("run", "proj8", "--session", "s1", "--", "cat", f"{data}/private/p.txt").stdout == "p\n"


def test_a_file_can_be_allowed_and_one_with_other_hard_links_cannot(cli: Cli, home: Path, tmp_path: Path) -> None:
    """Found as a newcomer: `warden sandbox add FILE` was "internal error: NotADirectoryError: Not a
    directory: '..'" (a file has no `..` to walk up), and so was every run of a workspace that had
    a file allowed. A file is judged from the folder holding it; one with other hard links (it may be
    Warden's own registry or key under another name) is refused."""
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    assert cli("create", "proj9").code == 0
    added = cli("sandbox", "add", str(notes), "--mode", "ro", "--workspace", "proj9")
    assert added.code == 0 and "internal error" not in added.stderr, added.stderr
    run = cli("run", "proj9", "--", "cat", str(notes))
    assert run.code == 0 and run.stdout == "kept\n", run.stderr
    key = tmp_path / "key-alias"
    os.link(home / "warden.db", key)  # the registry, under another name
    refused = cli("sandbox", "add", str(key), "--mode", "ro", "--workspace", "proj9")
    assert refused.code != 0 and "other hard links" in refused.stderr, refused.stderr
    assert cli("run", "proj9", "--", "cat", str(notes)).stdout == "kept\n"
