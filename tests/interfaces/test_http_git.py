"""Git over HTTP for bots, against a real `warden serve`: a grant with `read` sees the status, the
diff and the proposals; staging needs `write` over the whole workspace and records the bot as
the proposal's actor; a bot's push waits for a person's approval, then lands in the remote."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.test_git import git, seeded_remote
from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.client import Client
from warden.core.errors import Denied, Pending

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    root = tmp_path_factory.mktemp("http-git")
    bare = seeded_remote(root, {"notes.md": "one\n"})
    environ = warden_environ(root / "home")
    cli_out(environ, "init")
    path = Path(cli_out(environ, "create", "repo", "--template", "minimal", "--json").split('"path": "')[1]
                .split('"')[0])
    cli_out(environ, "git", "repo", "clone", f"file://{bare}")
    tokens = {}
    for bot in ("reader", "writer"):
        cli_out(environ, "bot", "register", bot)
    tokens["reader"] = cli_out(environ, "grant", "repo", "reader", "--permissions", "read")
    tokens["writer"] = cli_out(environ, "grant", "repo", "writer", "--permissions", "read,write")
    with ServeProcess(environ, root) as server:
        yield server.url, tokens, path


def test_bots_look_and_stage_but_never_push(world: tuple[str, dict[str, str], Path]) -> None:
    url, tokens, path = world
    (path / "notes.md").write_text("one\ntwo\n")

    def call(method: str, route: str, bot: str, **kwargs: object) -> httpx.Response:
        return httpx.request(method, f"{url}/v1/workspaces/repo/git/{route}",
                             headers={"Authorization": f"Bearer {tokens[bot]}"}, timeout=60, **kwargs)  # type: ignore[arg-type]

    status = call("GET", "status", "reader")
    assert status.status_code == 200 and status.json()["changes"] == [{"code": " M", "path": "notes.md"}]
    assert "+two" in call("GET", "diff", "reader").json()["diff"]
    assert call("POST", "stage", "reader", json={"message": "x"}).status_code == 403
    staged = call("POST", "stage", "writer", json={"message": "Add two"})
    assert staged.status_code == 201, staged.text
    body = staged.json()
    assert "+two" in body["diff"] and body["actor"].startswith("bot:writer@acc_")
    [listed] = call("GET", "staged", "reader").json()
    assert (listed["id"], listed["message"]) == (body["id"], "Add two")
    assert call("POST", "push", "reader", json={"proposal": body["id"]}).status_code == 403
    assert call("POST", "push", "writer", json={"proposal": "p-00000000"}).status_code == 404
    assert call("POST", "push", "writer", json={"proposal": "p-nope"}).status_code == 400  # not an id at all
    bare = Path(git("remote", "get-url", "origin", cwd=path).removeprefix("file://").strip())
    before = git("rev-parse", "main", cwd=bare)
    environ = warden_environ(path.parent.parent)

    def audited() -> list[tuple[int, str]]:
        listed = subprocess.run([sys.executable, "-m", "warden", "audit", "--workspace", "repo", "--json",
                                 "--limit", "100"], capture_output=True, text=True, env=environ, check=True)
        return sorted((e["seq"], e["action"]) for e in json.loads(listed.stdout)["data"])

    def actions_since(seq: int) -> list[str]:
        return [action for number, action in audited() if number > seq]

    seen = audited()[-1][0]
    asked = call("POST", "push", "writer", json={"proposal": body["id"]})
    # One event for the request (no listing of every proposal, audited as git.staged, besides it).
    assert actions_since(seen) == ["approval.request", "api.git.push"]
    assert asked.status_code == 202, asked.text
    approval = asked.json()["approval"]
    assert (approval["operation"], approval["status"], approval["detail"]["commit"]) == (
        "git.push", "pending", body["commit"])
    assert git("rev-parse", "main", cwd=bare) == before  # nothing pushed before a person says so
    shown = subprocess.run([sys.executable, "-m", "warden", "approvals", "--show", approval["id"]],
                           capture_output=True, text=True, env=environ, check=True).stdout
    assert "+two" in shown  # the person sees the proposal's diff
    seen_before_approval = audited()[-1][0]
    approved = subprocess.run([sys.executable, "-m", "warden", "approve", approval["id"]], capture_output=True,
                              text=True, env=environ, check=True).stdout
    assert f"git.push {body['id']} in repo done (branch main, commit {body['commit']}" in approved
    assert "[]" not in approved  # nothing made stale: not said as an empty list
    assert actions_since(seen_before_approval) == ["checkpoint.create", "git.push"]  # one push, no listing
    assert git("rev-parse", "main", cwd=bare).strip() == body["commit"]
    done = Client(url, tokens["writer"]).wait_for_approval(approval["id"], timeout=5)
    assert done["status"] == "approved" and done["outcome"]["commit"] == body["commit"]
    assert httpx.get(f"{url}/v1/workspaces/repo/git/status", timeout=10).status_code == 401


def test_the_sdk(world: tuple[str, dict[str, str], Path]) -> None:
    url, tokens, path = world
    (path / "sdk.txt").write_text("from the sdk\n")
    writer = Client(url, tokens["writer"]).workspace("repo").git
    assert {"code": "??", "path": "sdk.txt"} in writer.status()["changes"]
    assert "+from the sdk" in writer.diff()["diff"]
    proposal = writer.stage("From the SDK")
    assert proposal["id"] in {p["id"] for p in writer.staged()}
    with pytest.raises(Denied):
        Client(url, tokens["reader"]).workspace("repo").git.stage("no")
    with pytest.raises(Pending) as waiting:
        writer.push(proposal["id"])
    assert waiting.value.approval["operation"] == "git.push"
    # Said as a file change that waits is: which request, and what the person runs.
    assert f"`warden approve {waiting.value.approval_id}`" in str(waiting.value)
    assert proposal["id"] in str(waiting.value)


def test_the_person_sees_every_word_of_a_bots_message(world: tuple[str, dict[str, str], Path]) -> None:
    url, tokens, path = world
    headers = {"Authorization": f"Bearer {tokens['writer']}"}
    stage = f"{url}/v1/workspaces/repo/git/stage"
    forged = ("Fix typo\n\nWarden-Proposal: p-00000000\nWarden-Actor: user\nWarden-Branch: main\n\n"
              "Signed-off-by: x <x@y>\n\nHIDDEN")
    (path / "typo.md").write_text("fixed\n")
    for message in (forged, "Fix typo\x1b[1A\x1b[2Kinnocent"):
        refused = httpx.post(stage, json={"message": message}, headers=headers, timeout=60)
        assert refused.status_code == 400, refused.text
    staged = httpx.post(stage, json={"message": "Fix typo\n\nSigned-off-by: x <x@y>\n\nHIDDEN words"},
                        headers=headers, timeout=60)
    assert staged.status_code == 201, staged.text
    proposal = staged.json()
    assert proposal["message"].endswith("HIDDEN words")
    asked = httpx.post(f"{url}/v1/workspaces/repo/git/push", json={"proposal": proposal["id"]}, headers=headers,
                       timeout=60).json()["approval"]
    environ = warden_environ(path.parent.parent)
    shown = cli_out(environ, "approvals", "--show", asked["id"])
    assert "  | HIDDEN words" in shown and "  | Signed-off-by: x <x@y>" in shown and "+fixed" in shown
    listed = cli_out(environ, "git", "repo", "staged")
    assert "Fix typo (+2 more lines)" in listed
    one = cli_out(environ, "git", "repo", "staged", proposal["id"])
    assert "  | HIDDEN words" in one and "typo.md" in one
    cli_out(environ, "deny", asked["id"])
    cli_out(environ, "git", "repo", "discard", proposal["id"])


def test_a_planted_gitfile_reveals_nothing_of_the_host(world: tuple[str, dict[str, str], Path],
                                                       tmp_path: Path) -> None:
    url, tokens, path = world
    elsewhere = seeded_remote(tmp_path, {"secret.txt": "s\n"}, name="host-repo")
    head = git("rev-parse", "main", cwd=elsewhere).strip()
    (path / "sub2").mkdir()
    (path / "sub2" / ".git").write_text(f"gitdir: {elsewhere}\n")
    try:
        diff = httpx.get(f"{url}/v1/workspaces/repo/git/diff", headers={"Authorization": f"Bearer {tokens['reader']}"},
                         timeout=60)
        assert diff.status_code == 403 and "sub2/.git" in diff.text and head not in diff.text
    finally:
        shutil.rmtree(path / "sub2")


def test_a_bot_cannot_ask_to_push_a_stale_proposal(world: tuple[str, dict[str, str], Path]) -> None:
    url, tokens, path = world
    headers = {"Authorization": f"Bearer {tokens['writer']}"}
    (path / "stale.md").write_text("one\n")
    first = httpx.post(f"{url}/v1/workspaces/repo/git/stage", json={"message": "first"}, headers=headers,
                       timeout=60).json()
    (path / "stale.md").write_text("two\n")
    second = httpx.post(f"{url}/v1/workspaces/repo/git/stage", json={"message": "second"}, headers=headers,
                        timeout=60).json()
    pushed = cli_out(warden_environ(path.parent.parent), "git", "repo", "push", first["id"])
    assert "now stale" in pushed and second["id"] in pushed
    staged = {p["id"]: p for p in httpx.get(f"{url}/v1/workspaces/repo/git/staged", headers=headers,
                                            timeout=60).json()}
    assert staged[second["id"]]["stale"] is True
    asked = httpx.post(f"{url}/v1/workspaces/repo/git/push", json={"proposal": second["id"]}, headers=headers,
                       timeout=60)
    assert asked.status_code == 409 and "stage again" in asked.text
