"""GitService with real git against a local bare repository: clone, stage, push, pull, discard,
and canaries: whatever a repository's config, its `.git/hooks` or its working tree names, no
program of theirs runs during any of Warden's git calls."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from warden.adapters.git import HostGit
from warden.adapters.gitguard import GitGuard
from warden.bootstrap import App
from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, TooLarge
from warden.core.workspaces import WorkspaceRecord
from warden.services.git import GitService

pytestmark = [pytest.mark.skipif(shutil.which("git") is None, reason="needs git"), pytest.mark.initialised_home]

CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
             "GIT_AUTHOR_NAME": "Other", "GIT_AUTHOR_EMAIL": "o@x", "GIT_COMMITTER_NAME": "Other",
             "GIT_COMMITTER_EMAIL": "o@x", "HOME": "/nonexistent"}


def git(*args: str, cwd: Path | str | None = None) -> str:
    """Plain git, as the person (or another clone of the remote) runs it outside Warden."""
    return subprocess.run(["git", *args], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True,
                          check=True, timeout=60).stdout


def seeded_remote(where: Path, files: dict[str, str], *, name: str = "remote") -> Path:
    """A bare repository `where/NAME.git` on branch main holding one commit of `files`."""
    bare = where / f"{name}.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = where / f"{name}-seed"
    git("clone", "-q", str(bare), str(seed))
    for path, text in files.items():
        (seed / path).parent.mkdir(parents=True, exist_ok=True)
        (seed / path).write_text(text)
    git("add", ".", cwd=seed)
    git("commit", "-qm", "init", cwd=seed)
    git("push", "-q", "origin", "main", cwd=seed)
    return bare


class Workspaces:
    """The one workspace these tests use (the registry is not what they are about)."""

    def __init__(self, record: WorkspaceRecord) -> None:
        self.record = record

    def get(self, name: str) -> WorkspaceRecord:
        if name != self.record.name:
            raise NotFound(f"no workspace {name}")
        return self.record


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    return seeded_remote(tmp_path, {"a.txt": "hello\n", "docs/b.txt": "b\n"})


@pytest.fixture
def record(tmp_path: Path) -> WorkspaceRecord:
    folder = tmp_path / "workspaces" / "demo"
    (folder / ".venv" / "bin").mkdir(parents=True)
    (folder / ".workspace.json").write_text("{}")
    (folder / ".gitignore").write_text(".venv/\n")
    (folder / "pyproject.toml").write_text("[project]\nname = 'w'\n")
    return WorkspaceRecord(id="ws_1", name="demo", path=str(folder), type="user", status="ready",
                           created_at="2026-01-01T00:00:00+00:00", last_accessed="2026-01-01T00:00:00+00:00")


@pytest.fixture
def service(app: App, record: WorkspaceRecord, tmp_path: Path) -> GitService:
    return GitService(workspaces=Workspaces(record), git=HostGit(app.environ), audit=app.audit,  # type: ignore[arg-type]
                      secrets=lambda: app.secrets, forbidden_roots=[str(tmp_path / "workspaces")])


@pytest.fixture
def ws(service: GitService, record: WorkspaceRecord, remote: Path) -> Path:
    service.clone("demo", f"file://{remote}")
    return Path(record.path)


def test_clone_lands_at_the_root_as_the_persons_repository(app: App, ws: Path, service: GitService) -> None:
    assert (ws / "a.txt").read_text() == "hello\n" and (ws / "docs" / "b.txt").exists()
    assert GitGuard(str(ws)).knows(".git")  # runs bind it read-only; no sweep moves it aside
    assert not list((ws / ".git").glob("hooks/*"))  # no template, so no sample hooks either
    assert (ws / "pyproject.toml").exists() and "/pyproject.toml" in (ws / ".git/info/exclude").read_text()
    status = service.status("demo")
    assert (status.branch, status.upstream, status.changes) == ("main", "origin/main", ())
    event = app.audit.list(limit=2)[0]
    assert (event.action, event.target, event.result) == ("git.clone", "demo", "ok")


def test_clone_checks_out_the_branch_asked_for(service: GitService, record: WorkspaceRecord, remote: Path,
                                               tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    git("checkout", "-qb", "dev", cwd=other)
    (other / "dev.txt").write_text("dev\n")
    git("add", ".", cwd=other)
    git("commit", "-qm", "dev", cwd=other)
    git("push", "-q", "origin", "dev", cwd=other)
    result = service.clone("demo", f"file://{remote}", branch="dev")
    assert result.branch == "dev" and (Path(record.path) / "dev.txt").exists()
    assert service.status("demo").upstream == "origin/dev"
    with pytest.raises(InvalidInput):
        service.clone("demo", f"file://{remote}", branch="--upload-pack=x")


def test_clone_refuses_a_workspace_with_files(service: GitService, record: WorkspaceRecord, remote: Path) -> None:
    (Path(record.path) / "notes.txt").write_text("mine")
    with pytest.raises(Conflict, match="not empty"):
        service.clone("demo", f"file://{remote}")
    assert not (Path(record.path) / ".git").exists()


def test_clone_refuses_a_repository_inside_the_workspaces(service: GitService, tmp_path: Path) -> None:
    inside = tmp_path / "workspaces" / "other" / "r.git"
    git("init", "-q", "--bare", str(inside))
    with pytest.raises(Denied, match="inside Warden's workspaces"):
        service.clone("demo", f"file://{inside}")


def test_a_repository_that_would_write_over_wardens_files_is_refused(
        service: GitService, record: WorkspaceRecord, tmp_path: Path) -> None:
    bare = seeded_remote(tmp_path, {".workspace.json": '{"type": "user"}'}, name="hostile")
    with pytest.raises(InvalidInput, match=r"\.workspace\.json"):
        service.clone("demo", f"file://{bare}")
    assert (Path(record.path) / ".workspace.json").read_text() == "{}"
    assert not (Path(record.path) / ".git").exists()


def test_stage_proposes_without_moving_the_branch_then_push_lands_it(
        app: App, ws: Path, service: GitService, remote: Path) -> None:
    head = git("rev-parse", "HEAD", cwd=ws).strip()
    (ws / "a.txt").write_text("hello\nmore\n")
    (ws / "new.txt").write_text("new\n")
    assert {p for _, p in service.diff("demo").files} == {"a.txt", "new.txt"}
    proposal = service.stage("demo", "Change a, add new", actor="bot:b1")
    assert "+more" in (proposal.diff or "") and "+new" in (proposal.diff or "")
    assert set(proposal.files) == {("M", "a.txt"), ("A", "new.txt")}
    assert git("rev-parse", "HEAD", cwd=ws).strip() == head  # the branch did not move
    assert git("status", "--porcelain", cwd=ws).strip()  # the person's index untouched too
    [listed] = service.staged("demo")
    assert (listed.id, listed.actor, listed.message, listed.branch) == (proposal.id, "bot:b1",
                                                                        "Change a, add new", "main")
    pushed = service.push("demo", proposal.id, "user")
    assert git("rev-parse", "main", cwd=remote).strip() == proposal.commit == pushed.commit
    assert git("rev-parse", "HEAD", cwd=ws).strip() == proposal.commit
    assert service.status("demo").changes == () and service.staged("demo") == []
    assert [e.action for e in app.audit.list(limit=3)][-1] == "git.staged"
    with pytest.raises(Conflict, match="nothing to stage"):
        service.stage("demo", "again")


def test_push_is_refused_when_the_remote_moved_then_pull_fast_forwards(
        ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    (other / "docs" / "b.txt").write_text("b2\n")
    git("commit", "-qam", "elsewhere", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    (ws / "a.txt").write_text("mine\n")
    proposal = service.stage("demo", "mine")
    with pytest.raises(Conflict, match="pull"):
        service.push("demo", proposal.id)
    assert git("log", "-1", "--format=%s", "main", cwd=remote).strip() == "elsewhere"
    pulled = service.pull("demo")
    assert pulled.files == 1 and (ws / "docs" / "b.txt").read_text() == "b2\n"
    assert (ws / "a.txt").read_text() == "mine\n"  # the local change stays
    with pytest.raises(Conflict, match="stage again"):
        service.push("demo", proposal.id)
    again = service.stage("demo", "mine, again")
    with pytest.raises(InvalidInput, match="2 proposals"):
        service.push("demo")
    service.push("demo", again.id)
    assert git("log", "-1", "--format=%s", "main", cwd=remote).strip() == "mine, again"


def test_pull_refuses_when_the_branches_diverged(ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    (other / "docs" / "b.txt").write_text("theirs\n")
    git("commit", "-qam", "theirs", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    (ws / "a.txt").write_text("ours\n")
    git("commit", "-qam", "ours", cwd=ws)  # the person's own commit, outside Warden
    with pytest.raises(Conflict, match="diverged"):
        service.pull("demo")


def test_a_pull_refuses_local_changes_it_would_overwrite_and_keeps_the_rest(
        ws: Path, service: GitService, remote: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "-q", str(remote), str(other))
    (other / "docs" / "b.txt").write_text("theirs\n")
    (other / "new.txt").write_text("new upstream\n")
    (other / "a.txt").unlink()
    git("add", "-A", cwd=other)
    git("commit", "-qm", "theirs", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    before = git("rev-parse", "HEAD", cwd=ws).strip()
    for path, text in (("docs/b.txt", "mine\n"), ("new.txt", "untracked, mine\n")):
        (ws / path).write_text(text)
        with pytest.raises(Conflict, match=f"local changes to '{path}' would be overwritten"):
            service.pull("demo")
        assert git("rev-parse", "HEAD", cwd=ws).strip() == before and (ws / path).read_text() == text
        (ws / path).unlink()
        if path == "docs/b.txt":
            git("checkout", "-q", "--", path, cwd=ws)
    (ws / "notes.txt").write_text("a file of my own\n")
    pulled = service.pull("demo")
    assert pulled.files == 3 and pulled.after != before
    assert (ws / "docs" / "b.txt").read_text() == "theirs\n" and (ws / "new.txt").exists()
    assert not (ws / "a.txt").exists() and (ws / "notes.txt").exists()
    assert git("status", "--porcelain", cwd=ws) == "?? notes.txt\n"  # index and branch follow the files


def test_git_output_is_bounded_while_it_is_read(app: App, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """256 MiB of output past a 1 MiB cap: git is stopped at the cap, never read whole first."""
    import resource

    import warden.adapters.git as git_module

    monkeypatch.setattr(git_module, "_MAX_OUTPUT", 1 << 20)
    (ws / "big.bin").write_bytes(os.urandom(1 << 20))
    blob = git("hash-object", "-w", "big.bin", cwd=ws).strip()
    (ws / "big.bin").unlink()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(TooLarge, match=r"^git cat-file printed more than 1 MiB"):
        HostGit(app.environ).run(str(ws), ["cat-file", "--batch"], input=f"{blob}\n" * 256)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 64 * 1024


def test_an_approved_push_lands_only_the_commit_that_was_approved(app: App, ws: Path, service: GitService) -> None:
    (ws / "a.txt").write_text("approved\n")
    proposal = service.stage("demo", "approved")
    with pytest.raises(Conflict, match="no longer the commit that was asked to be pushed"):
        service.push("demo", proposal.id, "bot:x", commit="0" * 40)
    service.discard("demo", proposal.id)
    with pytest.raises(Conflict, match="no longer the commit"):
        service.push("demo", proposal.id, "bot:x", commit=proposal.commit)
    assert [e.action for e in app.audit.list(limit=3)] == ["git.push", "git.discard", "git.push"]  # no listing


def test_an_approved_push_answered_again_after_a_kill_is_finished_not_failed(
        app: App, record: WorkspaceRecord, ws: Path, remote: Path) -> None:
    """A Warden killed after the remote took an approved push (and the branch followed) left the
    request `approving`; answered again, the push said "stage again" (killed before the proposal
    was dropped) or "nothing was pushed" (after), and the request was recorded failed, though pushed."""

    class Killed(BaseException):
        pass

    class KilledAfterTheBranchMoved(HostGit):
        def run(self, workspace: str, argv: Sequence[str], **kwargs: Any) -> Any:
            if argv and argv[0] == "read-tree":
                raise Killed
            return super().run(workspace, argv, **kwargs)

    def service(git_adapter: HostGit) -> GitService:
        return GitService(workspaces=Workspaces(record), git=git_adapter, audit=app.audit,  # type: ignore[arg-type]
                          secrets=lambda: app.secrets)

    for kill_before_the_end in (True, False):
        (ws / "a.txt").write_text(f"approved {kill_before_the_end}\n")
        proposal = service(HostGit(app.environ)).stage("demo", "approved")
        if kill_before_the_end:
            with pytest.raises(Killed):
                service(KilledAfterTheBranchMoved(app.environ)).push("demo", proposal.id, "bot:x",
                                                                     commit=proposal.commit)
        else:  # the push ran to its end; the approval's record of it did not
            service(HostGit(app.environ)).push("demo", proposal.id, "bot:x", commit=proposal.commit)
        again = service(HostGit(app.environ)).push("demo", proposal.id, "bot:x", commit=proposal.commit)
        assert again.done_before and again.commit == proposal.commit
        assert git("rev-parse", "main", cwd=remote).strip() == proposal.commit  # pushed once, as asked
        assert service(HostGit(app.environ)).staged("demo") == []
        assert git("status", "--porcelain", cwd=ws) == ""  # index and branch follow the pushed commit
    # The person moved the branch to a proposal's commit on the host (a merge of it): not pushed,
    # and not said done.
    (ws / "a.txt").write_text("merged by hand\n")
    proposal = service(HostGit(app.environ)).stage("demo", "merged by hand")
    git("update-ref", "refs/heads/main", proposal.commit, cwd=ws)  # (the working tree has it already)
    git("read-tree", proposal.commit, cwd=ws)
    with pytest.raises(Conflict, match="it was not pushed"):
        service(HostGit(app.environ)).push("demo", proposal.id, "bot:x", commit=proposal.commit)
    assert git("rev-parse", "main", cwd=remote).strip() != proposal.commit


def test_a_stage_runs_no_git_command_twice(app: App, record: WorkspaceRecord, service: GitService,
                                           ws: Path) -> None:
    """Its gitlinks' diff-tree once (not again after the working tree's own check), the repository's
    config read once for all its commands (again only once the file changed)."""
    ran: list[tuple[str, ...]] = []

    class Recording(HostGit):
        def _spawn(self, argv: Sequence[str], workspace: str, **kwargs: Any) -> Any:
            ran.append(tuple(argv))
            return super()._spawn(argv, workspace, **kwargs)

    recording = GitService(workspaces=Workspaces(record), git=Recording(app.environ), audit=app.audit,  # type: ignore[arg-type]
                           secrets=lambda: app.secrets)
    (ws / "a.txt").write_text("once\n")
    recording.stage("demo", "once")
    repeated = sorted({argv for argv in ran if ran.count(argv) > 1})
    assert repeated == [], repeated
    assert sum("--list" in argv for argv in ran) == 1  # the repository's config, read once
    git("config", "user.name", "Changed", cwd=ws)
    recording.status("demo")
    assert sum("--list" in argv for argv in ran) == 2  # a changed config is read again


def test_discard_restores_the_files_and_keeps_the_commit(ws: Path, service: GitService) -> None:
    (ws / "a.txt").write_text("changed\n")
    (ws / "docs" / "b.txt").write_text("changed b\n")
    (ws / "added.txt").write_text("added\n")
    proposal = service.stage("demo", "to be dropped")
    (ws / "docs" / "b.txt").write_text("changed b again\n")  # changed since staging: kept
    result = service.discard("demo", proposal.id)
    assert set(result.restored) == {"a.txt", "added.txt"} and result.kept == ("docs/b.txt",)
    assert (ws / "a.txt").read_text() == "hello\n" and not (ws / "added.txt").exists()
    assert (ws / "docs" / "b.txt").read_text() == "changed b again\n"
    assert service.staged("demo") == []
    assert git("rev-parse", f"refs/warden/discarded/{proposal.id}", cwd=ws).strip() == proposal.commit
    with pytest.raises(NotFound):
        service.discard("demo", proposal.id)


def test_a_first_commit_into_an_empty_repository(service: GitService, record: WorkspaceRecord,
                                                 tmp_path: Path) -> None:
    empty = tmp_path / "empty.git"
    git("init", "-q", "--bare", "-b", "main", str(empty))
    service.clone("demo", f"file://{empty}")
    ws = Path(record.path)
    (ws / "hello.py").write_text("print('hi')\n")
    assert [p for _, p in service.diff("demo").files] == ["hello.py"]
    proposal = service.stage("demo", "First")
    assert proposal.parent == "" and proposal.files == (("A", "hello.py"),)
    branch = proposal.branch
    service.push("demo", proposal.id)
    assert git("rev-parse", branch, cwd=empty).strip() == proposal.commit
    assert git("rev-parse", "HEAD", cwd=ws).strip() == proposal.commit and service.status("demo").changes == ()


def test_bad_input_is_one_clear_error(ws: Path, service: GitService) -> None:
    with pytest.raises(InvalidInput):
        service.discard("demo", "../../heads/main")
    with pytest.raises(InvalidInput):
        service.stage("demo", "   ")
    with pytest.raises(NotFound, match="no proposal waiting"):
        service.push("demo")
    with pytest.raises(NotFound):
        service.status("nope")


# -- canaries ----------------------------------------------------------------------------------

@pytest.fixture
def canary(tmp_path: Path) -> tuple[Path, Path]:
    """(a program that only touches a file, the file): it must never run."""
    ran = tmp_path / "canary-ran"
    program = tmp_path / "canary.sh"
    program.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {ran}\ncat >/dev/null 2>&1 || true\n")
    program.chmod(0o755)
    return program, ran


HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-merge",
         "pre-push", "reference-transaction", "post-index-change", "pre-auto-gc", "post-rewrite",
         "fsmonitor-watchman", "pre-merge-commit", "push-to-checkout")


def exercise(service: GitService, ws: Path, remote: Path, tmp_path: Path) -> None:
    """Every Warden git operation, as a review loop does them."""
    service.status("demo")
    (ws / "a.txt").write_text("v2\n")
    service.diff("demo")
    dropped = service.stage("demo", "dropped")
    service.discard("demo", dropped.id)
    (ws / "a.txt").write_text("v3\n")
    proposal = service.stage("demo", "kept")
    service.staged("demo")
    service.push("demo", proposal.id)
    other = tmp_path / f"other-{os.urandom(3).hex()}"
    git("clone", "-q", str(remote), str(other))
    (other / "docs" / "b.txt").write_text("from elsewhere\n")
    git("commit", "-qam", "elsewhere", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    service.pull("demo")


def test_the_canary_runs_when_plain_git_honours_a_hook(ws: Path, canary: tuple[Path, Path]) -> None:
    program, ran = canary
    (ws / ".git" / "hooks").mkdir(exist_ok=True)
    shutil.copy(program, ws / ".git" / "hooks" / "pre-commit")
    (ws / "a.txt").write_text("x\n")
    git("commit", "-qam", "x", cwd=ws)
    assert ran.exists()


def test_hooks_in_the_repository_never_run(ws: Path, service: GitService, remote: Path, tmp_path: Path,
                                          canary: tuple[Path, Path]) -> None:
    program, ran = canary
    hooks = ws / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOKS:
        shutil.copy(program, hooks / name)
    exercise(service, ws, remote, tmp_path)
    assert not ran.exists()


def test_the_workspaces_attributes_name_no_program(ws: Path, service: GitService, remote: Path, tmp_path: Path,
                                                   canary: tuple[Path, Path]) -> None:
    # A bot writes the working tree, so `.gitattributes` and `.gitmodules` are its: drivers they
    # name are defined nowhere git reads (no system or global config, the repository's vetted).
    (ws / ".gitattributes").write_text("* filter=lfs diff=evil merge=evil\n")
    (ws / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = ./x\n\tupdate = !sh -c touch\n')
    exercise(service, ws, remote, tmp_path)
    assert not canary[1].exists()


@pytest.mark.parametrize("planted", [
    "core.fsmonitor={program}",
    "core.pager={program}",
    "pager.diff={program}",
    "diff.external={program}",
    "diff.evil.textconv={program}",
    "diff.evil.command={program}",
    "filter.evil.clean={program}",
    "filter.evil.smudge={program}",
    "filter.evil.process={program}",
    "merge.evil.driver={program}",
    "core.hooksPath={hooks}",
    "include.path={included}",
    "includeIf.gitdir:/.path={included}",
    "core.sshCommand={program}",
    "credential.helper=!{program}",
    "core.askPass={program}",
    "remote.origin.uploadpack={program}",
    "remote.origin.receivepack={program}",
    "core.alternateRefsCommand={program}",
    "gpg.program={program}",
    "url.ext::{program}.insteadOf=file://",
])
def test_config_that_names_a_program_is_refused_and_never_run(
        app: App, ws: Path, service: GitService, remote: Path, tmp_path: Path, canary: tuple[Path, Path],
        planted: str) -> None:
    program, ran = canary
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in HOOKS:
        shutil.copy(program, hooks / name)
    included = tmp_path / "included.config"
    included.write_text(f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {program}\n")
    (ws / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    key, _, value = planted.format(program=program, hooks=hooks, included=included).partition("=")
    git("config", "--file", str(ws / ".git" / "config"), key, value)
    with pytest.raises(Denied, match="can make git run a program"):
        exercise(service, ws, remote, tmp_path)
    for op in (lambda: service.diff("demo"), lambda: service.stage("demo", "x"), lambda: service.pull("demo"),
               lambda: service.push("demo")):
        with pytest.raises((Denied, NotFound)):
            op()
    event = app.audit.list(limit=1)[0]
    assert (event.action, event.decision, event.rule) == ("git.push", "deny", "git.config")
    assert not ran.exists()


def test_worktree_config_is_vetted_too_and_a_commondir_refused(ws: Path, service: GitService,
                                                             canary: tuple[Path, Path]) -> None:
    program, ran = canary
    git("config", "--file", str(ws / ".git" / "config"), "extensions.worktreeConfig", "true")
    git("config", "--file", str(ws / ".git" / "config.worktree"), "core.fsmonitor", str(program))
    with pytest.raises(Denied, match=r"core\.fsmonitor"):
        service.status("demo")
    (ws / ".git" / "config.worktree").unlink()
    service.status("demo")
    (ws / ".git" / "commondir").write_text("/elsewhere\n")
    with pytest.raises(Denied, match="commondir"):
        service.status("demo")
    assert not ran.exists()


def test_a_remote_url_naming_a_transport_helper_is_refused(ws: Path, service: GitService,
                                                          canary: tuple[Path, Path]) -> None:
    program, ran = canary
    git("config", "--file", str(ws / ".git" / "config"), "remote.origin.url", f"ext::{program} %S")
    with pytest.raises(Denied, match="transport helper"):
        service.pull("demo")
    assert not ran.exists()


def test_the_callers_git_environment_is_not_honoured(app: App, record: WorkspaceRecord, remote: Path,
                                                     tmp_path: Path, canary: tuple[Path, Path]) -> None:
    program, ran = canary
    hostile = {**app.environ, "GIT_SSH_COMMAND": str(program), "GIT_SSH": str(program),
               "GIT_EXTERNAL_DIFF": str(program), "GIT_PAGER": str(program), "GIT_ASKPASS": str(program),
               "SSH_ASKPASS": str(program), "GIT_EDITOR": str(program),
               "GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{program}'",
               "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": str(tmp_path)}
    shutil.copy(program, tmp_path / "pre-commit")
    service = GitService(workspaces=Workspaces(record), git=HostGit(hostile), audit=app.audit,  # type: ignore[arg-type]
                         secrets=lambda: app.secrets, forbidden_roots=[str(tmp_path / "workspaces")])
    service.clone("demo", f"file://{remote}")
    ws = Path(record.path)
    exercise(service, ws, remote, tmp_path)
    # An ssh remote: git would run GIT_SSH_COMMAND for it; Warden's own ssh runs instead (and fails).
    git("config", "--file", str(ws / ".git" / "config"), "remote.origin.url", "ssh://127.0.0.1:1/x.git")
    with pytest.raises(Conflict):
        service.pull("demo")
    assert not ran.exists()


# -- proposals that overlap, a stale one discarded -------------------------------------------------

def test_discarding_a_stale_proposal_keeps_what_a_newer_one_carries(
        service: GitService, record: WorkspaceRecord, tmp_path: Path) -> None:
    """The sequence a new user followed as the messages suggested: stage, push refused (the remote
    moved), pull, stage again, discard the first one. The line both proposals carry stays."""
    bare = seeded_remote(tmp_path, {"notes.md": "first\nsecond\n", "other.md": "o\n"}, name="notes")
    service.clone("demo", f"file://{bare}")
    ws = Path(record.path)
    other = tmp_path / "other"
    git("clone", "-q", str(bare), str(other))
    (other / "other.md").write_text("o2\n")
    git("commit", "-qam", "elsewhere", cwd=other)
    git("push", "-q", "origin", "main", cwd=other)
    (ws / "notes.md").write_text("first\nsecond\nthird\n")
    first = service.stage("demo", "third")
    with pytest.raises(Conflict, match="pull"):
        service.push("demo", first.id)
    service.pull("demo")
    second = service.stage("demo", "third-again")
    assert {(p.id, p.stale) for p in service.staged("demo")} == {(first.id, True), (second.id, False)}
    dropped = service.discard("demo", first.id)
    assert dropped.stale and dropped.restored == ()
    assert (ws / "notes.md").read_text() == "first\nsecond\nthird\n"  # the newer proposal's line stays
    service.push("demo", second.id)
    assert git("status", "--porcelain", cwd=ws) == ""  # the working tree is where the branch is
    assert git("show", "main:notes.md", cwd=bare) == "first\nsecond\nthird\n"
    with pytest.raises(Conflict, match="nothing to stage"):
        service.stage("demo", "would have deleted third")


def test_discard_leaves_the_files_another_waiting_proposal_carries(ws: Path, service: GitService) -> None:
    (ws / "a.txt").write_text("shared change\n")
    first = service.stage("demo", "first")
    (ws / "new.txt").write_text("only in the second\n")
    second = service.stage("demo", "second")
    result = service.discard("demo", second.id)
    assert not result.stale and result.restored == ("new.txt",) and result.shared == ("a.txt",)
    assert (ws / "a.txt").read_text() == "shared change\n" and not (ws / "new.txt").exists()
    pushed = service.push("demo", first.id)
    assert pushed.stale == () and git("status", "--porcelain", cwd=ws) == ""


def test_a_push_makes_the_other_proposals_stale(ws: Path, service: GitService) -> None:
    (ws / "a.txt").write_text("one\n")
    first = service.stage("demo", "first")
    (ws / "a.txt").write_text("two\n")
    second = service.stage("demo", "second")
    assert service.push("demo", first.id).stale == (second.id,)
    [left] = service.staged("demo")
    assert (left.id, left.stale) == (second.id, True)
    with pytest.raises(Conflict, match="stage again"):
        service.push("demo", second.id)
    assert service.discard("demo", second.id).stale
    assert (ws / "a.txt").read_text() == "two\n"  # a stale discard touches nothing


# -- messages a bot writes ---------------------------------------------------------------------------

def test_a_stage_message_cannot_forge_warden_trailers(ws: Path, service: GitService) -> None:
    (ws / "a.txt").write_text("typo fixed\n")
    forged = ("Fix typo\n\nWarden-Proposal: p-00000000\nWarden-Actor: user\nWarden-Branch: main\n\n"
              "Signed-off-by: x <x@y>\n\nHIDDEN")
    for message in (forged, "Fix typo\x1b[1A\x1b[2K", "Fix typo\rinnocent"):
        with pytest.raises(InvalidInput):
            service.stage("demo", message, actor="bot:b1")
    assert service.staged("demo") == []
    proposal = service.stage("demo", "Fix typo\n\nSigned-off-by: x <x@y>\n\nsecond paragraph", actor="bot:b1")
    # Every word is shown, not just the first paragraph; the trailers are Warden's own.
    assert service.staged("demo")[0].message == "Fix typo\n\nSigned-off-by: x <x@y>\n\nsecond paragraph"
    assert (proposal.actor, proposal.branch) == ("bot:b1", "main")


# -- git control entries a bot plants while its process runs -----------------------------------------

def test_a_planted_gitfile_is_refused_before_git_follows_it(
        app: App, ws: Path, service: GitService, tmp_path: Path) -> None:
    elsewhere = seeded_remote(tmp_path, {"secret.txt": "s\n"}, name="host-repo")
    secret_head = git("rev-parse", "main", cwd=elsewhere).strip()
    (ws / "sub2").mkdir()
    (ws / "sub2" / ".git").write_text(f"gitdir: {elsewhere}\n")
    (ws / "a.txt").write_text("changed\n")
    for op in (lambda: service.diff("demo", actor="bot:b1"), lambda: service.status("demo", actor="bot:b1"),
               lambda: service.stage("demo", "x", actor="bot:b1")):
        with pytest.raises(Denied, match=r"sub2/\.git") as refused:
            op()
        assert secret_head not in str(refused.value)
    event = app.audit.list(limit=1)[0]
    assert (event.action, event.decision, event.rule) == ("git.stage", "deny", "git.control")
    (ws / "sub2" / ".git").unlink()
    assert secret_head not in service.diff("demo").diff


def test_a_gitfile_planted_and_gone_between_the_sweeps_is_caught_by_its_gitlink(
        ws: Path, service: GitService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the bot's process made sub2/.git just after the scan and took it away before the
    # next one: `add -A` saw it, and the tree holds a gitlink to the host repository's HEAD.
    monkeypatch.setattr(HostGit, "strangers", lambda self, workspace: [])
    elsewhere = seeded_remote(tmp_path, {"secret.txt": "s\n"}, name="host-repo")
    (ws / "sub2").mkdir()
    (ws / "sub2" / ".git").write_text(f"gitdir: {elsewhere}\n")
    with pytest.raises(Denied, match="sub2") as refused:
        service.diff("demo", actor="bot:b1")
    assert git("rev-parse", "main", cwd=elsewhere).strip() not in str(refused.value)


def test_a_repository_look_alike_is_refused_too(ws: Path, service: GitService) -> None:
    bare = ws / "data" / "fake"
    git("init", "-q", "--bare", str(bare))
    with pytest.raises(Denied, match="data/fake"):
        service.diff("demo")


@pytest.fixture
def submodule(ws: Path) -> Path:
    """A repository of the person's own inside the workspace (`sub/.git`, known as theirs)."""
    sub = ws / "sub"
    git("init", "-q", "-b", "main", str(sub))
    (sub / "s.txt").write_text("s\n")
    git("add", ".", cwd=sub)
    git("commit", "-qm", "sub", cwd=sub)
    GitGuard(str(ws)).adopt("sub/.git")
    return sub


def test_a_bots_stage_may_not_add_a_gitlink(ws: Path, service: GitService, submodule: Path) -> None:
    with pytest.raises(Denied, match="submodule"):
        service.stage("demo", "point at another repository", actor="bot:b1")
    proposal = service.stage("demo", "my submodule")  # the person's own
    assert ("A", "sub") in proposal.files


def test_a_planted_gitmodules_breaks_no_review(ws: Path, service: GitService, submodule: Path,
                                              canary: tuple[Path, Path]) -> None:
    program, ran = canary
    proposal = service.stage("demo", "my submodule")
    (ws / ".gitmodules").write_text(f'[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tupdate = !{program}\n')
    assert [p.id for p in service.staged("demo")] == [proposal.id]
    assert "Subproject commit" in (service.proposal("demo", proposal.id).diff or "")
    assert ".gitmodules" in {p for _, p in service.diff("demo").files}
    service.status("demo")
    (ws / "a.txt").write_text("another change\n")
    dropped = service.stage("demo", "to drop")
    assert set(service.discard("demo", dropped.id).restored) == {"a.txt", ".gitmodules"}
    service.push("demo", proposal.id)
    assert not ran.exists()


# -- objects -------------------------------------------------------------------------------------------

def test_a_diff_leaves_no_object_in_the_persons_repository(ws: Path, service: GitService) -> None:
    def objects() -> set[str]:
        return {str(p.relative_to(ws / ".git")) for p in (ws / ".git" / "objects").rglob("*") if p.is_file()}

    before = objects()
    (ws / "big.bin").write_bytes(os.urandom(1 << 20))
    blob = git("hash-object", "big.bin", cwd=ws).strip()
    assert service.diff("demo").files == (("A", "big.bin"),)
    assert objects() == before
    assert not list((ws / ".warden").glob("git-objects-*"))  # the scratch objects went with it
    service.stage("demo", "big")
    assert git("cat-file", "-t", blob, cwd=ws).strip() == "blob"  # a stage keeps what it proposes
