"""The approvals loop end to end: a bot's write to an `ask` zone waits (HTTP 202), a person
answers with the real CLI, the exact bytes land; denial and expiry change nothing; a bot never
answers its own request; a bot given `approve` answers another's over HTTP; two answers at once
carry an operation out once."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.servers import ServeProcess, cli_out, warden_environ
from warden.client import Client
from warden.core.errors import Denied, NotFound, Pending

ZONES = ("zones:\n"
         "  drafts: {approval: {write: preApproved, delete: preApproved}}\n"
         "  final: {approval: {write: ask, delete: ask}}\n"
         "  archive: {approval: {write: preApproved, delete: blocked}}\n"
         "  inbox: {approval: {write: ask, delete: ask}}\n"
         "  left: {path: shelf/left, approval: {write: ask, delete: ask}}\n"
         "  right: {path: shelf/right, approval: {write: ask, delete: ask}}\n")


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    base = tmp_path_factory.mktemp("approvals")
    environ = warden_environ(base / "home")
    cli_out(environ, "init")
    path = Path(json.loads(cli_out(environ, "create", "paper", "--template", "minimal", "--json"))["data"]["path"])
    (path / ".warden").mkdir(exist_ok=True)
    (path / ".warden" / "zones.yaml").write_text(ZONES)
    for bot in ("writer", "reviewer", "idle", "runner"):
        cli_out(environ, "bot", "register", bot)
    writer = cli_out(environ, "grant", "paper", "writer", "--permissions", "read,write,approve")
    reviewer = cli_out(environ, "grant", "paper", "reviewer", "--permissions", "read,approve")
    idle = cli_out(environ, "grant", "paper", "idle", "--permissions", "read,write")
    runner = cli_out(environ, "grant", "paper", "runner", "--permissions", "read,write,execute")
    with ServeProcess(environ, base) as server:
        yield {"environ": environ, "path": path, "url": server.url, "writer": writer, "reviewer": reviewer,
               "idle": idle, "runner": runner}


def _cli(loop: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden", *args], capture_output=True, text=True,
                          env=loop["environ"], timeout=120, check=False)  # type: ignore[arg-type]


def _put(loop: dict[str, object], token: str, path: str, data: bytes) -> httpx.Response:
    return httpx.put(f"{loop['url']}/v1/workspaces/paper/files/content", params={"path": path}, content=data,
                     headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_a_write_to_an_ask_zone_waits_and_lands_exactly_once_approved(loop: dict[str, object]) -> None:
    root: Path = loop["path"]  # type: ignore[assignment]
    data = b"# Report\n\nfinal figures: 42\n" + bytes(range(256))
    asked = _put(loop, loop["writer"], "/final/report.md", data)  # type: ignore[arg-type]
    assert asked.status_code == 202, asked.text
    approval = asked.json()["approval"]
    assert approval["status"] == "pending" and approval["id"].startswith("apr_")
    assert approval["sha256"] == hashlib.sha256(data).hexdigest() and approval["size"] == len(data)
    assert not (root / "final" / "report.md").exists()  # nothing happens before the answer

    # The bot polls; the person sees it in the queue, with the change as a diff.
    client = Client(str(loop["url"]), str(loop["writer"]))
    assert client.approval(approval["id"])["status"] == "pending"
    listed = _cli(loop, "approvals", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["data"]
    assert [(r["id"], r["bot"], r["operation"], r["path"]) for r in rows] == [
        (approval["id"], "writer", "write", "/final/report.md")]
    shown = _cli(loop, "approvals", "--show", approval["id"])
    assert shown.returncode == 0 and "writer asks to write /final/report.md" in shown.stdout
    assert "binary" in shown.stdout  # the bytes are not text: summarised, not dumped

    # A bot never answers its own request, even holding `approve`.
    own = httpx.post(f"{loop['url']}/v1/approvals/{approval['id']}/approve",
                     headers={"Authorization": f"Bearer {loop['writer']}"}, timeout=30)
    assert own.status_code == 403 and "asked by writer" in own.json()["error"]["message"]
    assert not (root / "final" / "report.md").exists()

    done = _cli(loop, "approve", approval["id"], "--note", "looks right")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"approved {approval['id']}: write /final/report.md in paper done")
    assert (root / "final" / "report.md").read_bytes() == data
    final = client.wait_for_approval(approval["id"], timeout=5)
    assert final["status"] == "approved" and final["answered_by"] == "user" and final["note"] == "looks right"
    assert final["outcome"] == {"size": len(data)}

    again = _cli(loop, "approve", approval["id"])
    assert again.returncode == 5 and "it is approved" in again.stderr

    audit = json.loads(_cli(loop, "audit", "--json", "--limit", "50").stdout)["data"]
    actions = [(e["action"], e["actor"], e["result"]) for e in audit if approval["id"] in json.dumps(e)]
    assert ("approval.request", f"bot:writer@{approval['requester'].split('@')[1]}", "pending") in actions
    assert ("approval.approve", "user", "ok") in actions


def test_a_denied_request_changes_nothing(loop: dict[str, object]) -> None:
    root: Path = loop["path"]  # type: ignore[assignment]
    (root / "final").mkdir(exist_ok=True)
    (root / "final" / "keep.md").write_text("original\n")
    asked = _put(loop, loop["idle"], "/final/keep.md", b"overwritten\n")  # type: ignore[arg-type]
    assert asked.status_code == 202
    approval_id = asked.json()["approval"]["id"]
    shown = _cli(loop, "approvals", "--show", approval_id)
    assert "-original" in shown.stdout and "+overwritten" in shown.stdout
    denied = _cli(loop, "deny", approval_id, "--note", "no")
    assert denied.returncode == 0 and denied.stdout.startswith(f"denied {approval_id}")
    assert (root / "final" / "keep.md").read_text() == "original\n"
    view = Client(str(loop["url"]), str(loop["idle"])).approval(approval_id)
    assert view["status"] == "denied" and view["note"] == "no"
    assert _cli(loop, "approve", approval_id).returncode == 5  # answered: no second answer


def test_a_delete_waiting_for_approval_shows_what_would_go(loop: dict[str, object]) -> None:
    """Found as a newcomer: `approvals --show` of a delete showed no content, and a reviewer
    approved the deletion of a file unseen."""
    root: Path = loop["path"]  # type: ignore[assignment]
    (root / "final" / "notes").mkdir(parents=True, exist_ok=True)
    (root / "final" / "doomed.md").write_text("line one\nline two\n")
    for name in ("a.md", "b.md"):
        (root / "final" / "notes" / name).write_text("x")
    headers = {"Authorization": f"Bearer {loop['idle']}"}
    shown = {}
    for path in ("/final/doomed.md", "/final/notes"):
        asked = httpx.delete(f"{loop['url']}/v1/workspaces/paper/files", params={"path": path}, headers=headers,
                             timeout=30)
        assert asked.status_code == 202, asked.text
        approval_id = asked.json()["approval"]["id"]
        shown[path] = _cli(loop, "approvals", "--show", approval_id).stdout
        assert _cli(loop, "deny", approval_id).returncode == 0  # the later tests find no request of this one
    assert "-line one" in shown["/final/doomed.md"] and "-line two" in shown["/final/doomed.md"]
    assert "deletes the folder /final/notes only if it is empty (it holds 2 entries now)" in shown["/final/notes"]
    assert (root / "final" / "doomed.md").exists()


def test_a_bot_given_approve_answers_another_bots_request_over_http(loop: dict[str, object]) -> None:
    root: Path = loop["path"]  # type: ignore[assignment]
    writer = Client(str(loop["url"]), str(loop["writer"]))
    with pytest.raises(Pending) as waiting:
        writer.workspace("paper").files.write("/final/from-sdk.txt", "via the SDK\n")
    approval_id = waiting.value.approval_id  # the documented attribute (docs/files.md)
    assert approval_id.startswith("apr_") and approval_id == waiting.value.approval["id"]
    # Its message names the SDK's way to wait, not the HTTP poll.
    assert f"client.wait_for_approval('{approval_id}')" in str(waiting.value) and "poll GET" not in str(waiting.value)
    reviewer = Client(str(loop["url"]), str(loop["reviewer"]))
    assert [a["id"] for a in reviewer.approvals("paper")] == [approval_id]
    # A bot without `approve` neither answers nor even learns that another bot's request exists.
    idle = Client(str(loop["url"]), str(loop["idle"]))
    with pytest.raises(NotFound, match="no approval request"):
        idle.approve(approval_id)
    with pytest.raises(NotFound, match="no approval request"):
        idle.approval(approval_id)
    answered = reviewer.approve(approval_id, note="ok")
    assert answered["status"] == "approved" and answered["answered_by"].startswith("bot:reviewer@")
    assert (root / "final" / "from-sdk.txt").read_text() == "via the SDK\n"
    assert writer.wait_for_approval(waiting.value.approval_id, timeout=5)["status"] == "approved"
    # A delete in an `ask` zone waits as well; in a `blocked` one it is refused outright.
    with pytest.raises(Pending) as deleting:
        writer.workspace("paper").files.delete("/final/from-sdk.txt")
    assert (root / "final" / "from-sdk.txt").exists()
    reviewer.approve(deleting.value.approval["id"])
    assert not (root / "final" / "from-sdk.txt").exists()
    (root / "archive").mkdir(exist_ok=True)
    (root / "archive" / "old.txt").write_text("x")
    with pytest.raises(Denied, match="blocks delete"):
        writer.workspace("paper").files.delete("/archive/old.txt")
    # preApproved zones need no one.
    assert writer.workspace("paper").files.write("/drafts/d.txt", "d") == 1


def test_two_answers_at_once_carry_the_operation_out_once(loop: dict[str, object]) -> None:
    root: Path = loop["path"]  # type: ignore[assignment]
    asked = _put(loop, loop["idle"], "/final/once.txt", b"once\n")  # type: ignore[arg-type]
    approval_id = asked.json()["approval"]["id"]
    results: list[subprocess.CompletedProcess[str]] = []
    threads = [threading.Thread(target=lambda: results.append(_cli(loop, "approve", approval_id))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.returncode for r in results) == [0, 5], [r.stderr for r in results]
    assert (root / "final" / "once.txt").read_text() == "once\n"
    audit = json.loads(_cli(loop, "audit", "--json", "--limit", "100").stdout)["data"]
    carried = [e for e in audit if e["action"] == "fs.write" and e["target"] == "paper:/final/once.txt"
               and e["result"] == "ok"]
    assert len(carried) == 1 and f"approval {approval_id}" in carried[0]["rule"]


def test_a_revoked_grant_s_request_is_not_carried_out(loop: dict[str, object]) -> None:
    environ: dict[str, str] = loop["environ"]  # type: ignore[assignment]
    root: Path = loop["path"]  # type: ignore[assignment]
    cli_out(environ, "bot", "register", "shortlived")
    token = cli_out(environ, "grant", "paper", "shortlived", "--permissions", "write")
    asked = _put(loop, token, "/final/late.txt", b"late\n")
    approval_id = asked.json()["approval"]["id"]
    cli_out(environ, "revoke", "paper", "shortlived")
    late = _cli(loop, "approve", approval_id)
    assert late.returncode == 3 and "no longer live" in late.stderr
    assert not (root / "final" / "late.txt").exists()
    assert json.loads(_cli(loop, "approvals", "--all", "--json").stdout)["data"][0]["status"] == "failed"


def test_bad_ids_and_unknown_requests(loop: dict[str, object]) -> None:
    bad = _cli(loop, "approve", "nope")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "apr_" in bad.stderr
    missing = _cli(loop, "deny", "apr_" + "0" * 16)
    assert missing.returncode == 4
    unknown = httpx.get(f"{loop['url']}/v1/approvals/apr_{'0' * 16}",
                        headers={"Authorization": f"Bearer {loop['writer']}"}, timeout=30)
    assert unknown.status_code == 404
    nobody = httpx.get(f"{loop['url']}/v1/approvals/apr_{'0' * 16}", timeout=30)
    assert nobody.status_code == 401


def test_a_bot_cannot_mint_an_approver_or_answer_requests_of_grants_it_minted(loop: dict[str, object]) -> None:
    url, root = str(loop["url"]), loop["path"]
    writer = Client(url, str(loop["writer"])).workspace("paper")  # holds admin? no: read,write,approve
    environ: dict[str, str] = loop["environ"]  # type: ignore[assignment]
    cli_out(environ, "bot", "register", "lead")
    lead_token = cli_out(environ, "grant", "paper", "lead", "--permissions", "read,write,admin,approve")
    lead = Client(url, lead_token).workspace("paper")
    # `approve` is a person's to give: a child grant never carries it, under any name.
    with pytest.raises(Denied, match="only a person gives the approve permission"):
        lead.grant("ghost-approver", ["read", "approve"], zones=["*"])
    # A worker the lead minted asks; the lead (its minter) may not answer, another approver may.
    worker = lead.grant("worker", ["read", "write"], zones=["final"])
    with pytest.raises(Pending) as waiting:
        Client(url, worker.token).workspace("paper").files.write("/final/by-worker.md", "w\n")
    approval_id = waiting.value.approval["id"]
    with pytest.raises(Denied, match="minted by lead"):
        Client(url, lead_token).approve(approval_id)
    assert Client(url, str(loop["reviewer"])).approve(approval_id)["status"] == "approved"
    assert (root / "final" / "by-worker.md").read_text() == "w\n"  # type: ignore[operator]
    del writer


def test_an_approver_limited_to_zones_answers_for_those_only(loop: dict[str, object]) -> None:
    url = str(loop["url"])
    environ: dict[str, str] = loop["environ"]  # type: ignore[assignment]
    cli_out(environ, "bot", "register", "drafts-reviewer")
    narrow = cli_out(environ, "grant", "paper", "drafts-reviewer", "--permissions", "read,approve",
                     "--zones", "drafts:ro")
    asked = _put(loop, str(loop["idle"]), "/final/outside.md", b"x")
    approval_id = asked.json()["approval"]["id"]
    with pytest.raises(NotFound):
        Client(url, narrow).approve(approval_id)
    assert approval_id not in [a["id"] for a in Client(url, narrow).approvals("paper")]
    _cli(loop, "deny", approval_id)


def test_a_move_between_two_ask_zones_needs_an_approver_of_both(loop: dict[str, object]) -> None:
    """A move out of one `ask` zone into another was recorded under the source's zone alone, so an
    approver given `approve` over /inbox only approved a file into /final, where it answers nothing
    (found attacking the review loop as a bot: a write there it is not even shown)."""
    url, root = str(loop["url"]), loop["path"]
    environ: dict[str, str] = loop["environ"]  # type: ignore[assignment]
    cli_out(environ, "bot", "register", "inbox-reviewer")
    narrow = cli_out(environ, "grant", "paper", "inbox-reviewer", "--permissions", "read,approve",
                     "--zones", "inbox:ro")
    (root / "inbox").mkdir(exist_ok=True)  # type: ignore[operator]
    (root / "inbox" / "letter.md").write_text("from outside\n")  # type: ignore[operator]
    asked = httpx.post(f"{url}/v1/workspaces/paper/files/move",
                       json={"source": "/inbox/letter.md", "destination": "/final/letter.md"},
                       headers={"Authorization": f"Bearer {loop['idle']}"}, timeout=30)
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    assert approval_id not in [a["id"] for a in Client(url, narrow).approvals("paper")]
    with pytest.raises(NotFound):
        Client(url, narrow).approve(approval_id)
    assert not (root / "final" / "letter.md").exists()  # type: ignore[operator]
    assert "zones inbox, final" in _cli(loop, "approvals", "--show", approval_id).stdout  # type: ignore[operator]
    # An approver of both zones (the whole workspace here) may answer it.
    assert Client(url, str(loop["reviewer"])).approve(approval_id)["status"] == "approved"
    assert (root / "final" / "letter.md").read_text() == "from outside\n"  # type: ignore[operator]
    # So does a folder's delete reaching two zones beneath it: named after the first, it took both.
    cli_out(environ, "bot", "register", "left-reviewer")
    left = cli_out(environ, "grant", "paper", "left-reviewer", "--permissions", "read,approve", "--zones", "left:ro")
    for side in ("left", "right"):
        (root / "shelf" / side).mkdir(parents=True, exist_ok=True)  # type: ignore[operator]
        (root / "shelf" / side / "book.md").write_text(side)  # type: ignore[operator]
    headers = {"Authorization": f"Bearer {loop['idle']}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "delete_file", "arguments": {"workspace": "paper", "path": "/shelf", "recursive": True}}}
    answer = httpx.post(f"{url}/mcp", json=call, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    approval_id = answer.json()["result"]["structuredContent"]["approval"]["id"]
    assert approval_id not in [a["id"] for a in Client(url, left).approvals("paper")]
    with pytest.raises(NotFound):
        Client(url, left).approve(approval_id)
    assert (root / "shelf" / "right" / "book.md").read_text() == "right"  # type: ignore[operator]
    _cli(loop, "deny", approval_id)


def test_a_bot_chosen_path_cannot_forge_lines_of_the_preview(loop: dict[str, object]) -> None:
    forged = "/final/r.md (pending)\n--- a/final/r.md\n+++ b/final/r.md\n+harmless"
    asked = _put(loop, str(loop["idle"]), forged, b"payload\n")
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    shown = _cli(loop, "approvals", "--show", approval_id)
    assert "+harmless" not in shown.stdout.splitlines()
    assert "\\n+harmless" in shown.stdout and "+payload" in shown.stdout
    _cli(loop, "deny", approval_id)


def test_a_move_waiting_for_approval_names_where_it_goes(loop: dict[str, object]) -> None:
    """A person approving a move must see its destination: "move /drafts/a.md" alone could be a move
    anywhere in the workspace (over a file of theirs, say)."""
    root: Path = loop["path"]  # type: ignore[assignment]
    (root / "drafts").mkdir(exist_ok=True)
    (root / "drafts" / "moving.md").write_text("draft\n")
    asked = httpx.post(f"{loop['url']}/v1/workspaces/paper/files/move",
                       json={"source": "/drafts/moving.md", "destination": "/final/moved.md"},
                       headers={"Authorization": f"Bearer {loop['idle']}"}, timeout=30)
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    listed = _cli(loop, "approvals")
    assert "/final/moved.md" in listed.stdout, listed.stdout
    shown = _cli(loop, "approvals", "--show", approval_id)
    assert "idle asks to move /drafts/moving.md to /final/moved.md" in shown.stdout, shown.stdout
    # What would land is shown, as a new file at the destination (it showed only the two paths).
    assert "+++ b/final/moved.md" in shown.stdout and "\n+draft" in shown.stdout, shown.stdout
    (root / "drafts" / "moving.md").write_text("changed by the bot\n")
    changed = _cli(loop, "approvals", "--show", approval_id)
    assert "changed since it was asked: approving it moves nothing" in changed.stdout, changed.stdout
    assert "changed by the bot" not in changed.stdout
    (root / "drafts" / "moving.md").write_text("draft\n")
    done = _cli(loop, "approve", approval_id)
    assert done.returncode == 0, done.stderr
    assert "move /drafts/moving.md to /final/moved.md in paper done" in done.stdout, done.stdout
    assert (root / "final" / "moved.md").read_text() == "draft\n"


# Left running by the bot: holds its draft open for writing from before the move was asked, and
# writes through that descriptor once the file stands in /final.
_HOLDER = """
import os, time
fd = os.open("drafts/held.md", os.O_RDWR)
print("holding", flush=True)
for _ in range(600):
    if os.path.exists("final/held.md"):
        break
    time.sleep(0.05)
time.sleep(0.2)
os.pwrite(fd, b"EVIL, never approved\\n", 0)
"""


def test_an_approved_move_lands_a_file_the_bot_holds_no_descriptor_of(loop: dict[str, object]) -> None:
    """Approving a move of the bot's draft into an `ask` zone lets in the bytes the person approved,
    not an inode the bot's process still has open for writing: else it rewrites /final at will."""
    root: Path = loop["path"]  # type: ignore[assignment]
    headers = {"Authorization": f"Bearer {loop['runner']}"}
    assert _put(loop, str(loop["runner"]), "/drafts/held.md", b"as approved\n").status_code == 200
    started = httpx.post(f"{loop['url']}/v1/workspaces/paper/exec", headers=headers, timeout=60,
                         json={"cmd": ["python3", "-c", _HOLDER], "background": True})
    assert started.status_code == 202, started.text
    process = started.json()["id"]
    logs = f"{loop['url']}/v1/workspaces/paper/processes/{process}/logs"
    for _ in range(200):
        if "holding" in httpx.get(logs, headers=headers, timeout=30).text:
            break
        time.sleep(0.05)
    asked = httpx.post(f"{loop['url']}/v1/workspaces/paper/files/move", headers=headers, timeout=30,
                       json={"source": "/drafts/held.md", "destination": "/final/held.md"})
    assert asked.status_code == 202, asked.text
    done = _cli(loop, "approve", asked.json()["approval"]["id"])
    assert done.returncode == 0, done.stderr
    waited = httpx.get(f"{loop['url']}/v1/workspaces/paper/processes/{process}/wait", headers=headers,
                       params={"timeout": 30}, timeout=60)
    assert waited.json()["status"] == "exited" and waited.json()["exit_code"] == 0, waited.text
    assert (root / "final" / "held.md").read_bytes() == b"as approved\n"
    assert not (root / "drafts" / "held.md").exists()


def test_a_terminal_s_lock_refuses_bots_with_423(loop: dict[str, object]) -> None:
    environ = {**loop["environ"], "WARDEN_TERMINAL": "person"}  # type: ignore[dict-item]
    (loop["path"] / "drafts").mkdir(exist_ok=True)  # type: ignore[operator]  # also when run alone
    cli_out(environ, "lock", "paper", "--reason", "reviewing")
    try:
        refused = _put(loop, str(loop["idle"]), "/drafts/while-locked.md", b"x")
        assert refused.status_code == 423 and "locked by its person's terminal (reviewing)" in refused.text
        assert httpx.get(f"{loop['url']}/v1/workspaces/paper/files", params={"path": "/drafts"},
                         headers={"Authorization": f"Bearer {loop['idle']}"}, timeout=30).status_code == 200
    finally:
        cli_out(environ, "unlock", "paper")
    assert _put(loop, str(loop["idle"]), "/drafts/after.md", b"x").status_code == 200


def test_an_approved_change_can_be_rolled_back(loop: dict[str, object]) -> None:
    root: Path = loop["path"]  # type: ignore[assignment]
    (root / "final" / "kept.md").write_text("the person's text\n")
    asked = _put(loop, str(loop["idle"]), "/final/kept.md", b"the bot's text\n")
    approval_id = asked.json()["approval"]["id"]
    assert _cli(loop, "approve", approval_id).returncode == 0
    assert (root / "final" / "kept.md").read_text() == "the bot's text\n"
    listed = json.loads(_cli(loop, "checkpoints", "paper", "--json").stdout)["data"]
    [before] = [c for c in listed if approval_id in c["message"]]
    assert _cli(loop, "rollback", "paper", before["id"], "--path", "/final/kept.md").returncode == 0
    assert (root / "final" / "kept.md").read_text() == "the person's text\n"


def test_a_bot_chosen_path_in_a_failed_approval_reaches_the_terminal_escaped(loop: dict[str, object]) -> None:
    """`warden approve` that fails says why in one line on stderr, which named the bot's path as
    the bot wrote it: a name holding an OSC 52 sequence set the person's clipboard (a command to
    paste), and `\\x1b[2K\\r` rewrote the line into "done". The bot asks to move such a draft,
    then removes it; the person's approve fails, and the name comes out escaped."""
    name = "/drafts/\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2K\rapproved: done.md"
    headers = {"Authorization": f"Bearer {loop['runner']}"}
    assert _put(loop, str(loop["runner"]), name, b"draft\n").status_code == 200
    asked = httpx.post(f"{loop['url']}/v1/workspaces/paper/files/move", headers=headers, timeout=30,
                       json={"source": name, "destination": "/final/escaped.md"})
    assert asked.status_code == 202, asked.text
    gone = httpx.delete(f"{loop['url']}/v1/workspaces/paper/files", params={"path": name}, headers=headers,
                        timeout=30)
    assert gone.status_code in (200, 204), gone.text
    failed = _cli(loop, "approve", asked.json()["approval"]["id"])
    assert failed.returncode != 0 and failed.stderr, failed
    assert "\x1b" not in failed.stderr and "\r" not in failed.stderr and "\x07" not in failed.stderr, failed.stderr
    assert "\\x1b]52;c;cm0gLXJmIH4K\\x07" in failed.stderr, failed.stderr


def test_a_bot_chosen_path_in_json_output_carries_no_c1_control_or_bidi_override(loop: dict[str, object]) -> None:
    """`--json` escaped only what JSON must (C0 controls): a bot's path holding U+009B, which a
    terminal may read as CSI (`\\x9b2J` clears the screen), or U+202E went out to the person's
    terminal as it was. They go out as \\u escapes now: the same document for a program."""
    name = "/final/\x9b2J\x9b31mhidden\u202eev.txt"
    asked = _put(loop, str(loop["idle"]), name, b"payload\n")
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    try:
        listed = _cli(loop, "approvals", "--json")
        assert listed.returncode == 0, listed.stderr
        assert "\x9b" not in listed.stdout and "\u202e" not in listed.stdout
        assert "\\u009b2J" in listed.stdout and "\\u202e" in listed.stdout
        assert name in [r["path"] for r in json.loads(listed.stdout)["data"]]
    finally:
        _cli(loop, "deny", approval_id)
