"""What a bot is told names paths as the workspace shows them, never where Warden keeps them on
the host: no Warden home, no person's home or username, no other workspace. Each case provokes a
refusal through a real `warden serve` (and `warden mcp` over stdio) and reads the whole answer."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.services.test_git import seeded_remote
from tests.support.mcp import FOLDERS, World, make_world, stdio_session, text
from tests.support.servers import ServeProcess

Break = Callable[[Path], None]


def _zones(content: bytes) -> Break:
    def put(paper: Path) -> None:
        (paper / ".warden" / "zones.yaml").write_bytes(content)
    return put


def _zones_folder(paper: Path) -> None:
    (paper / ".warden" / "zones.yaml").unlink()
    (paper / ".warden" / "zones.yaml").mkdir()


def _zones_link(paper: Path) -> None:
    (paper / "zones-elsewhere.yaml").write_text(FOLDERS)
    (paper / ".warden" / "zones.yaml").unlink()
    (paper / ".warden" / "zones.yaml").symlink_to(paper / "zones-elsewhere.yaml")


def _sandbox_json(paper: Path) -> None:
    (paper / ".warden" / "sandbox.json").write_text("{not json")


def _policy_folder_link(paper: Path) -> None:
    (paper / ".warden").rename(paper / "policy-elsewhere")
    (paper / ".warden").symlink_to(paper / "policy-elsewhere")


def _zone_folder_link(paper: Path) -> None:
    (paper / "input").rename(paper / "input-elsewhere")
    (paper / "input").symlink_to(paper / "input-elsewhere")


def _workspace_folder_link(paper: Path) -> None:
    paper.rename(paper.parent / "paper-elsewhere")
    paper.symlink_to(paper.parent / "paper-elsewhere")


def _git_head_broken(paper: Path) -> None:
    (paper.parent / "repo" / ".git" / "HEAD").write_text("garbage\n")


def _nothing(paper: Path) -> None:
    pass


def _restore(paper: Path) -> None:
    if paper.is_symlink():
        paper.unlink()
        (paper.parent / "paper-elsewhere").rename(paper)
    policy = paper / ".warden"
    if policy.is_symlink():
        policy.unlink()
        (paper / "policy-elsewhere").rename(policy)
    zones = policy / "zones.yaml"
    if zones.is_dir() and not zones.is_symlink():
        shutil.rmtree(zones)
    elif zones.exists() or zones.is_symlink():
        zones.unlink()
    zones.write_text(FOLDERS)
    (policy / "sandbox.json").unlink(missing_ok=True)
    (paper / "zones-elsewhere.yaml").unlink(missing_ok=True)
    if (paper / "input").is_symlink():
        (paper / "input").unlink()
        (paper / "input-elsewhere").rename(paper / "input")
    (paper.parent / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


READ = ("GET", "/v1/workspaces/paper/files/content", {"params": {"path": "input/data.csv"}})
EXEC = ("POST", "/v1/workspaces/paper/exec", {"json": {"cmd": ["true"]}})

# name: (what breaks, the request, the token, the error code the bot gets)
CASES: dict[str, tuple[Break, tuple[str, str, dict[str, Any]], str, str]] = {
    "zones.yaml not YAML": (_zones(b"zones: [oops\n"), READ, "alice@paper", "invalid"),
    "zones.yaml not YAML, exec": (_zones(b"zones: [oops\n"), EXEC, "alice@paper", "invalid"),
    "zones.yaml not YAML, a grant limited to zones": (
        _zones(b"zones: [oops\n"), ("GET", "/v1/workspaces/paper/files", {"params": {"path": "drafts"}}),
        "bob@drafts", "invalid"),
    "zones.yaml bad mode": (_zones(b"zones:\n  input: {mode: rx}\n"), READ, "alice@paper", "invalid"),
    "zones.yaml bad zone name": (_zones(b"zones:\n  ../vault: {mode: rw}\n"), READ, "alice@paper", "invalid"),
    "zones.yaml not UTF-8": (_zones(b"zones:\n  \xff: {mode: rw}\n"), READ, "alice@paper", "invalid"),
    "zones.yaml a folder": (_zones_folder, READ, "alice@paper", "invalid"),
    "zones.yaml a link": (_zones_link, READ, "alice@paper", "denied"),
    "sandbox.json not JSON": (_sandbox_json, READ, "alice@paper", "invalid"),
    ".warden a link": (_policy_folder_link, READ, "alice@paper", "denied"),
    "exec cwd outside, absolute": (
        _nothing, ("POST", "/v1/workspaces/paper/exec", {"json": {"cmd": ["pwd"], "cwd": "/etc"}}),
        "alice@paper", "invalid"),
    "a zone's folder a link, exec": (_zone_folder_link, EXEC, "alice@paper", "denied"),
    "the workspace's folder a link": (_workspace_folder_link, READ, "alice@paper", "denied"),
    "the workspace's folder a link, checkpoint": (
        _workspace_folder_link, ("POST", "/v1/workspaces/paper/checkpoints", {"json": {"message": "m"}}),
        "alice@paper", "denied"),
    "git status on a broken .git": (
        _git_head_broken, ("GET", "/v1/workspaces/repo/git/status", {}), "alice@repo", "conflict"),
    "git diff on a broken .git": (
        _git_head_broken, ("GET", "/v1/workspaces/repo/git/diff", {}), "alice@repo", "conflict"),
    "read-only zone": (
        _nothing, ("PUT", "/v1/workspaces/paper/files/content", {"params": {"path": "input/x"}, "content": b"x"}),
        "alice@paper", "denied"),
    "outside the granted zones": (_nothing, READ, "bob@drafts", "denied"),
    "missing file": (
        _nothing, ("GET", "/v1/workspaces/paper/files/content", {"params": {"path": "nope/x.txt"}}),
        "alice@paper", "not_found"),
    "climbing out": (
        _nothing, ("GET", "/v1/workspaces/paper/files/content", {"params": {"path": "../vault/secret.txt"}}),
        "alice@paper", "invalid"),
    "a folder read as a file": (
        _nothing, ("GET", "/v1/workspaces/paper/files/content", {"params": {"path": "input"}}),
        "alice@paper", "invalid"),
}


def host_words(world: World) -> list[str]:
    """What would give the host away: the Warden home (the test's home folder holds it), the
    workspaces' folder, and the person's username."""
    home = Path(world.environ["WARDEN_HOME"]) if "WARDEN_HOME" in world.environ else world.root.parent
    words = [str(home), str(world.root), str(world.root.parent.parent)]
    user = os.environ.get("USER") or os.environ.get("LOGNAME")
    if user and len(user) > 3:
        words.append(f"/{user}/")
    return words


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("bot-answers")
    world = make_world(base)
    bare = seeded_remote(base, {"notes.md": "one\n"})
    world.cli("create", "repo", "--template", "minimal")
    world.cli("git", "repo", "clone", f"file://{bare}")
    world.tokens["alice@repo"] = world.cli("grant", "repo", "alice", "--permissions", "read,write")
    yield world


@pytest.fixture(scope="module")
def served(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    # The smallest archive limit: a bot's own workspace can pass it (the last case below).
    environ = {**world.environ, "WARDEN_WORKSPACE_ARCHIVE_MAX_SIZE": "1M"}
    with ServeProcess(environ, tmp_path_factory.mktemp("serve"), "--no-access-log") as server:
        yield server


@pytest.mark.parametrize("case", list(CASES))
def test_an_http_refusal_names_no_host_path(world: World, served: ServeProcess, case: str) -> None:
    breaking, (method, route, extra), token, code = CASES[case]
    paper = world.path("paper")
    breaking(paper)
    try:
        answer = httpx.request(method, served.url + route, timeout=60,
                               headers={"Authorization": f"Bearer {world.tokens[token]}"}, **extra)
    finally:
        _restore(paper)
    assert answer.json()["error"]["code"] == code, answer.text
    for word in host_words(world):
        assert word not in answer.text, f"{case}: {answer.text}"


def test_deleting_a_workspace_too_large_to_archive_names_no_host_path(world: World, served: ServeProcess) -> None:
    bot = {"Authorization": f"Bearer {world.tokens['carol']}"}
    made = httpx.post(served.url + "/v1/workspaces", headers=bot, timeout=120,
                      json={"bot": "carol", "request": "workspace", "params": {"name": "mine", "template": "minimal"}})
    assert made.status_code == 201, made.text
    grant = {"Authorization": f"Bearer {made.json()['workspace']['access_token']}"}
    wrote = httpx.put(served.url + "/v1/workspaces/mine/files/content", params={"path": "a.bin"},
                      content=b"x" * 2_000_000, headers=grant, timeout=60)
    assert wrote.status_code == 200, wrote.text
    answer = httpx.delete(served.url + "/v1/workspaces/mine", headers=grant, timeout=120)
    assert answer.json()["error"]["code"] == "invalid", answer.text
    assert "workspace mine holds" in answer.text
    for word in host_words(world):
        assert word not in answer.text, answer.text


MCP_CASES: dict[str, tuple[Break, str, dict[str, Any]]] = {
    "zones.yaml not YAML": (_zones(b"zones: [oops\n"), "read_file", {"path": "input/data.csv"}),
    "zones.yaml a folder": (_zones_folder, "list_directory", {"path": "/"}),
    "sandbox.json not JSON": (_sandbox_json, "write_file", {"path": "drafts/a.txt", "content": "x"}),
    "exec cwd outside, absolute": (_nothing, "exec", {"cmd": ["pwd"], "cwd": "/etc"}),
}


def test_mcp_refusals_name_no_host_path(world: World) -> None:
    paper = world.path("paper")

    async def go() -> dict[str, tuple[bool, str]]:
        seen: dict[str, tuple[bool, str]] = {}
        async with stdio_session(world, world.tokens["alice@paper"]) as session:
            for case, (breaking, tool, arguments) in MCP_CASES.items():
                breaking(paper)
                try:
                    result = await session.call_tool(tool, {"workspace": "paper", **arguments})
                finally:
                    _restore(paper)
                seen[case] = (bool(result.is_error), text(result))
        return seen

    for case, (refused, said) in asyncio.run(go()).items():
        assert refused, f"{case}: {said}"
        for word in host_words(world):
            assert word not in said, f"{case}: {said}"
