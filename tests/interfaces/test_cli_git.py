"""`warden git NAME …` through the real CLI: the review loop end to end on a real workspace, its
`.git` the person's (read-only inside runs, never moved aside), errors as one line and a code."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.services.test_git import git, seeded_remote

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"), pytest.mark.used_home]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return seeded_remote(tmp_path, {"README.md": "# demo\n"})


@pytest.fixture
def ws(cli: Cli, remote: Path) -> Path:
    created = cli("create", "gitws", "--template", "minimal", "--json")
    assert created.code == 0, created.stderr
    cloned = cli("git", "gitws", "clone", f"file://{remote}", "--json")
    assert cloned.code == 0, cloned.stderr
    assert cloned.json["data"]["branch"] == "main"
    return Path(created.json["data"]["path"])


def test_the_review_loop(cli: Cli, ws: Path, remote: Path) -> None:
    status = cli("git", "gitws", "status")
    assert status.code == 0 and "main → origin/main" in status.stdout and "nothing changed" in status.stdout
    (ws / "README.md").write_text("# demo\n\nmore\n")
    diff = cli("git", "gitws", "diff")
    assert diff.code == 0 and "+more" in diff.stdout
    staged = cli("git", "gitws", "stage", "-m", "Say more")
    assert staged.code == 0, staged.stderr
    assert "+more" in staged.stdout and "push it with" in staged.stdout
    listed = cli("git", "gitws", "staged", "--json").json["data"]
    assert [(p["message"], p["actor"], [f["path"] for f in p["files"]]) for p in listed] == [
        ("Say more", "user", ["README.md"])]
    pushed = cli("git", "gitws", "push", listed[0]["id"], "--json")
    assert pushed.code == 0, pushed.stderr
    assert git("rev-parse", "main", cwd=remote).strip() == pushed.json["data"]["commit"]
    assert cli("git", "gitws", "staged").stdout.strip() == "no proposals waiting"
    audit = cli("audit", "--workspace", "gitws", "--json").json["data"]
    assert {"git.clone", "git.stage", "git.push"} <= {e["action"] for e in audit}


def test_errors_are_one_line_with_a_code(cli: Cli, ws: Path) -> None:
    cases = [
        (("git", "gitws", "push"), 4, "not_found"),
        (("git", "gitws", "discard", "../heads/main"), 2, "invalid"),
        (("git", "gitws", "stage", "-m", "nothing"), 5, "conflict"),
        (("git", "nope", "status"), 4, "not_found"),
        (("git", "gitws", "clone", "file:///tmp/x.git"), 5, "conflict"),
    ]
    for args, code, name in cases:
        result = cli(*args, "--json")
        assert (result.code, result.json["error"]["code"]) == (code, name), (args, result.stdout)
        plain = cli(*args)
        assert plain.code == code and len(plain.stderr.strip().splitlines()) == 1, plain.stderr


def test_a_clone_refuses_ext_urls(cli: Cli, tmp_path: Path) -> None:
    assert cli("create", "plain", "--template", "minimal").code == 0
    result = cli("git", "plain", "clone", f"ext::sh -c touch% {tmp_path}/canary", "--json")
    assert (result.code, result.json["error"]["code"]) == (3, "denied")
    assert not (tmp_path / "canary").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_inside_runs_the_clone_is_read_only_and_stays_the_persons(cli: Cli, ws: Path) -> None:
    config = (ws / ".git" / "config").read_bytes()
    run = cli("run", "gitws", "--", "sh", "-c",
              "echo '[core]' >> .git/config; touch .git/hooks-x; echo changed > README.md")
    assert "Read-only" in run.stderr, run.stderr
    assert (ws / ".git" / "config").read_bytes() == config and not (ws / ".git" / "hooks-x").exists()
    assert (ws / "README.md").read_text() == "changed\n"
    assert (ws / ".git").is_dir()  # not quarantined after the run
    status = cli("git", "gitws", "status", "--json")
    assert status.code == 0, status.stderr
    # The person's own git, as they would run it, sees the clone too.
    proc = subprocess.run(["git", "-C", str(ws), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                          text=True, check=False, env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1",
                                                       "HOME": str(ws)})
    assert proc.stdout.strip() == "main"


def test_a_workspace_at_its_quota_takes_no_clone(cli: Cli, remote: Path) -> None:
    created = cli("create", "full", "--template", "minimal", "--json")
    assert created.code == 0
    (Path(created.json["data"]["path"]) / "pyproject.toml").write_bytes(b"#" * (2 << 20))
    assert cli("config", "set", "workspace.max_disk", "1M").code == 0
    result = cli("git", "full", "clone", f"file://{remote}", "--json")
    assert (result.code, result.json["error"]["code"]) == (2, "invalid"), result.stdout
    assert "workspace.max_disk" in result.json["error"]["message"] or "disk" in result.json["error"]["message"]
    assert not (Path(created.json["data"]["path"]) / ".git").exists()


def test_a_pull_keeps_a_checkpoint_to_roll_back_to(cli: Cli, ws: Path, remote: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    (other / "README.md").write_text("# demo\n\nfrom elsewhere\n")
    git("commit", "-qam", "elsewhere", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    (ws / "notes.txt").write_text("mine, untracked\n")
    assert cli("git", "gitws", "pull").code == 0
    assert (ws / "README.md").read_text() == "# demo\n\nfrom elsewhere\n"
    [before] = [c for c in cli("checkpoints", "gitws", "--json").json["data"] if c["message"] == "before git pull"]
    assert cli("rollback", "gitws", before["id"], "--path", "/README.md").code == 0
    assert (ws / "README.md").read_text() == "# demo\n"


def test_the_stale_proposal_a_new_user_discards_takes_nothing_away(cli: Cli, ws: Path, remote: Path,
                                                                   tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    (other / "other.md").write_text("elsewhere\n")
    git("add", ".", cwd=other)
    git("commit", "-qm", "elsewhere", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    (ws / "notes.md").write_text("third\n")
    first = cli("git", "gitws", "stage", "-m", "third", "--json").json["data"]["id"]
    refused = cli("git", "gitws", "push", first)
    assert refused.code == 5 and "pull" in refused.stderr
    assert cli("git", "gitws", "pull").code == 0
    second = cli("git", "gitws", "stage", "-m", "third-again", "--json").json["data"]["id"]
    listed = cli("git", "gitws", "staged").stdout
    assert f"{first} (stale)" in listed and f"{second} (stale)" not in listed
    discarded = cli("git", "gitws", "discard", first)
    assert discarded.code == 0 and "working tree was left as it is" in discarded.stdout
    assert (ws / "notes.md").read_text() == "third\n"
    assert cli("git", "gitws", "push", second).code == 0
    status = cli("git", "gitws", "status")
    assert "nothing changed" in status.stdout, status.stdout
    assert git("show", "main:notes.md", cwd=remote) == "third\n"


def test_a_workspace_at_its_quota_takes_no_stage(cli: Cli, ws: Path) -> None:
    (ws / "big.bin").write_bytes(b"#" * (2 << 20))
    assert cli("config", "set", "workspace.max_disk", "1M").code == 0
    result = cli("git", "gitws", "stage", "-m", "big", "--json")
    assert (result.code, result.json["error"]["code"]) == (2, "invalid"), result.stdout
    assert cli("git", "gitws", "staged").stdout.strip() == "no proposals waiting"
