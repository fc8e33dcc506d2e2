"""`warden run`'s status when the command cannot start, bad timeouts, and runs on a workspace
that is not ready: the same answer with and without --json (INTERFACES.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Cli

pytestmark = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
              pytest.mark.shared_home]


@pytest.fixture
def ws(cli: Cli) -> Path:
    """Workspace `st` (made once per module: the home is shared)."""
    info = cli("info", "st", "--json")
    if info.code == 0:
        return Path(info.json["data"]["path"])
    created = cli("create", "st", "--json")
    assert created.code == 0, created.stderr
    return Path(created.json["data"]["path"])


def _runs(cli: Cli) -> int:
    return sum(e["action"] == "run" for e in cli("audit", "--limit", "1000", "--json").json["data"])


@pytest.mark.parametrize(("args", "status"), [
    (["--", "nonexistentcmd"], 127),
    (["--", "/nonexistent/bin"], 127),
    (["--env", "PATH=/x", "--", "sh"], 127),
    (["--", "./not-executable.txt"], 126),
])
def test_a_command_that_cannot_start_has_one_status_in_both_modes(cli: Cli, ws: Path, args: list[str],
                                                                  status: int) -> None:
    (ws / "not-executable.txt").write_text("plain text\n")
    text = cli("run", "st", *args)
    assert text.code == status, text.stderr
    assert text.stderr.startswith("bwrap: execvp ")  # the reason still reaches the person
    as_json = cli("run", "st", "--json", *args)
    assert as_json.code == status
    assert as_json.json["data"]["exit_code"] == status


def test_a_command_of_its_own_exit_1_is_still_1(cli: Cli, ws: Path) -> None:
    assert cli("run", "st", "--", "sh", "-c", "echo 'execvp: not really' >&2; exit 1").code == 1
    assert cli("run", "st", "--", "false").code == 1
    # A command that ends by printing bwrap's own set-up report is taken at its word, the same
    # way in both modes (it can only refuse itself).
    text = cli("run", "st", "--", "sh", "-c", "echo 'bwrap: no such mount' >&2; exit 1")
    json_mode = cli("run", "st", "--json", "--", "sh", "-c", "echo 'bwrap: no such mount' >&2; exit 1")
    assert text.code == json_mode.code == 126


@pytest.mark.parametrize("timeout", ["99999999999999999", "1e400", "inf", "nan", "0", "-5", "0s", "2d",
                                     "86401", "soon"])
def test_a_bad_timeout_is_invalid_not_an_internal_error(cli: Cli, ws: Path, timeout: str) -> None:
    before = _runs(cli)
    text = cli("run", "st", "--timeout", timeout, "--", "echo", "hi")
    assert text.code == 2 and text.stdout == ""
    assert text.stderr.count("\n") == 1 and "internal" not in text.stderr, text.stderr
    assert "--timeout" in text.stderr
    as_json = cli("run", "st", "--timeout", timeout, "--json", "--", "echo", "hi")
    assert as_json.code == 2 and as_json.json["error"]["code"] == "invalid"
    if timeout in ("99999999999999999", "1e400", "inf", "2d", "86401"):
        assert "maximum of 1d (86400 s)" in as_json.json["error"]["message"]
    assert _runs(cli) == before  # nothing ran


def test_the_longest_timeout_is_accepted(cli: Cli, ws: Path) -> None:
    for timeout in ("86400", "1d", "24h", "2.5"):
        assert cli("run", "st", "--timeout", timeout, "--", "true").code == 0, timeout


def test_a_workspace_that_is_not_ready_names_the_command_that_fixes_it(cli: Cli, ws: Path) -> None:
    assert cli("create", "idle").code == 0
    assert cli("suspend", "idle").code == 0
    suspended = cli("run", "idle", "--", "true")
    # 126: Warden refused to start it, whatever the reason; the code says which.
    assert suspended.code == 126 and "`warden resume idle`" in suspended.stderr, suspended.stderr
    assert cli("archive", "idle").code == 0
    archived = cli("run", "idle", "--json", "--", "true")
    assert archived.code == 126 and archived.json["error"]["code"] == "conflict"
    message = archived.json["error"]["message"]
    assert "`warden unarchive idle`" in message and "resume" not in message
    # Following the advice works.
    assert cli("unarchive", "idle").code == 0
    assert cli("run", "idle", "--", "true").code == 0


def test_in_sandbox_failures_say_what_warden_had_to_do_with_them(cli: Cli, ws: Path) -> None:
    typo = cli("run", "st", "--", "pyhton", "-V")
    assert typo.code == 127 and "warden: pyhton is not in the sandbox: did you mean python" in typo.stderr, typo.stderr
    # With network the command starts through Warden's relay: the same line.
    typo = cli("run", "st", "--net", "allow", "--allow-domain", "a.test", "--", "pyhton", "-V")
    assert typo.code == 127 and "warden: pyhton is not in the sandbox: did you mean python" in typo.stderr, typo.stderr
    # A PATH of the person's own hides sh, which is there all the same: said so, not "not in the sandbox".
    hidden = cli("run", "st", "--env", "PATH=/nowhere", "--", "sh", "-c", "echo hi")
    assert hidden.code == 127 and "not in the sandbox" not in hidden.stderr, hidden.stderr
    assert "warden: sh is not on the PATH the command was given (PATH=/nowhere)" in hidden.stderr, hidden.stderr
    big = cli("run", "st", "--", "sh", "-c", "head -c 3000000 /dev/zero > big.bin",
              env={"WARDEN_SANDBOX_MAX_FILE_SIZE_MB": "1"})
    assert big.code != 0 and "sandbox.max_file_size_mb" in big.stderr, big.stderr
    offline = cli("run", "st", "--", "python3", "-c",
                  "import socket; socket.getaddrinfo('pypi.org', 443)")
    assert offline.code == 1 and "the sandbox has no network" in offline.stderr, offline.stderr
    # `curl -s` prints nothing on a name that does not resolve: its status 6 says it.
    silent = cli("run", "st", "--", "curl", "-s", "https://pypi.org/")
    assert silent.code == 6 and "the sandbox has no network; run with --net allow" in silent.stderr, silent.stderr


def test_a_suggestion_never_names_what_a_linked_folder_of_the_workspace_holds(cli: Cli, tmp_path: Path) -> None:
    # The workspace's node_modules/.bin is the bot's: linked to a host folder, its names must
    # not come back as "did you mean" (the bot would learn what that folder holds).
    created = cli("create", "linked", "--json")
    assert created.code == 0, created.stderr
    host = tmp_path / "host-only"
    (host / ".bin").mkdir(parents=True)
    (host / ".bin" / "hostsecretname").write_text("")
    (Path(created.json["data"]["path"]) / "node_modules").symlink_to(host)
    probe = cli("run", "linked", "--", "hostsecretnam")
    assert probe.code == 127 and "warden: hostsecretnam is not in the sandbox (" in probe.stderr, probe.stderr
    assert "did you mean" not in probe.stderr and "hostsecretname" not in probe.stderr, probe.stderr
    # The same name in a real folder of the workspace is suggested: the test above can fail.
    (Path(created.json["data"]["path"]) / "node_modules").unlink()
    (Path(created.json["data"]["path"]) / "node_modules" / ".bin").mkdir(parents=True)
    (Path(created.json["data"]["path"]) / "node_modules" / ".bin" / "hostsecretname").write_text("")
    named = cli("run", "linked", "--", "hostsecretnam")
    assert "did you mean hostsecretname?" in named.stderr, named.stderr


def test_a_link_put_in_place_of_the_workspace_folder_runs_nothing(cli: Cli, tmp_path: Path) -> None:
    # The folder's path was resolved to be mounted: a link there ran the command in the folder
    # the link named, while the file API (which opens the folder with no link followed) refused.
    created = cli("create", "relinked", "--json")
    assert created.code == 0, created.stderr
    folder = Path(created.json["data"]["path"])
    elsewhere = tmp_path / "elsewhere"
    folder.rename(elsewhere)
    folder.symlink_to(elsewhere)
    try:
        refused = cli("run", "relinked", "--", "touch", "ran-here")
        assert refused.code == 126 and "symbolic link" in refused.stderr, refused.stderr
        assert not (elsewhere / "ran-here").exists()
    finally:
        folder.unlink()
        elsewhere.rename(folder)
    assert cli("run", "relinked", "--", "touch", "ran-here").code == 0
    assert (folder / "ran-here").exists()
