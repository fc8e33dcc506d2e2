"""Git on a workspace (seed 003): clone, status, diff, pull, and changes staged for review.

A bot never writes a `.git`: the person's are read-only inside runs, and any other is moved
aside (core/gitcontrol). So changes reach the repository through Warden: `stage` turns the
working tree into a *proposal*, a commit on HEAD kept under `refs/warden/proposals/<id>` (the
checked-out branch does not move), and prints its diff; `push` sends a proposal to the remote
branch (fast-forward only), then moves the local branch to it (the working tree already holds
its content); `discard` drops it and restores its files to HEAD, except those another waiting
proposal carries.

Each proposal is the whole working tree against HEAD, built in a temporary index (the
person's index is left alone), so two proposals made one after the other overlap; once one is
pushed (or a pull moves HEAD), the others were made on an older HEAD: they are *stale*, refused
by push (stage again), and discarding one only drops it (the working tree has moved on since).

Before git looks at the working tree (status, diff, stage, discard), any `.git` or repository
look-alike in it that is not the person's is refused: a bot's process can plant one between the
git guard's sweeps, and git would read the repository it points to, anywhere on the host.
Scratch trees of a diff go to a temporary object directory; only `stage` adds to `.git`.

Every operation: the workspace must be usable (not being created, archived or broken), a
shared lease is held as for any change, one git operation at a time, an audit event
(`git.<op>`) whatever the outcome. git itself runs hardened (core/git.py, adapters/git.py).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from warden.core.errors import Conflict, Denied, InvalidInput, NotFound, WardenError
from warden.core.git import (
    DISCARDED_REF,
    PROPOSAL_REF,
    SCAFFOLDING,
    Proposal,
    Status,
    body,
    check_branch,
    check_message,
    check_proposal_id,
    check_url,
    clone_blockers,
    exclude_lines,
    parse_status,
    proposal_message,
    trailers,
    tree_conflicts,
    url_host,
)
from warden.core.ports.git import Credential, GitRunner
from warden.core.workspaces import WorkspaceRecord
from warden.services.audit import AuditLog

if TYPE_CHECKING:
    from warden.services.leases import LeaseService
    from warden.services.secrets import SecretService
    from warden.services.workspaces import WorkspaceService

__all__ = ["CloneResult", "DiffResult", "DiscardResult", "GitService", "PullResult", "PushResult"]

T = TypeVar("T")

# Statuses whose folder may be missing, half-made or packed away.
_UNAVAILABLE = {"creating": "is still being created", "archived": "is archived; unarchive it first",
                "broken": "is broken; see `warden health NAME --repair`"}
_REMOTE = re.compile(r"[A-Za-z0-9._-]{1,100}")
_CHUNK = 500  # paths per git command line
_GITLINK = "160000"  # a tree entry naming a commit of another repository (a submodule)
# On every diff: `--ignore-submodules` given (so git reads no `.gitmodules` of the bot's for its
# `ignore` setting, and fails on none of its other keys) and summaries never opening a submodule.
_DIFF_SUBMODULES = ("--ignore-submodules=none", "--submodule=short")


@dataclass(frozen=True)
class CloneResult:
    url: str
    branch: str | None
    commit: str | None
    files: int

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "branch": self.branch, "commit": self.commit, "files": self.files}


@dataclass(frozen=True)
class DiffResult:
    files: tuple[tuple[str, str], ...]
    diff: str

    def to_json(self) -> dict[str, Any]:
        return {"files": [{"status": s, "path": p} for s, p in self.files], "diff": self.diff}


@dataclass(frozen=True)
class PushResult:
    id: str
    commit: str
    remote: str
    branch: str
    stale: tuple[str, ...] = ()  # the other proposals, made on the HEAD this push moved on from
    done_before: bool = False  # pushed by an earlier answer that was cut short: only finished now

    def to_json(self) -> dict[str, Any]:
        done = {"done_before": True} if self.done_before else {}
        return {"id": self.id, "commit": self.commit, "remote": self.remote, "branch": self.branch,
                "stale": list(self.stale), **done}


@dataclass(frozen=True)
class DiscardResult:
    id: str
    restored: tuple[str, ...]
    kept: tuple[str, ...] = field(default=())  # changed again since staged: left as they are
    shared: tuple[str, ...] = field(default=())  # another waiting proposal carries them: left as they are
    stale: bool = False  # made on an older HEAD: dropped, the working tree not touched

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "restored": list(self.restored), "kept": list(self.kept),
                "shared": list(self.shared), "stale": self.stale, "ref": DISCARDED_REF + self.id}


@dataclass(frozen=True)
class PullResult:
    before: str
    after: str
    files: int

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "files": self.files,
                "updated": self.before != self.after}


def _new_id() -> str:
    return "p-" + os.urandom(4).hex()


class GitService:
    """Git on workspaces, for one process; `actor` on each call says who asked."""

    def __init__(self, *, workspaces: WorkspaceService, git: GitRunner, audit: AuditLog,
                 secrets: Callable[[], SecretService], leases: LeaseService | None = None,
                 forbidden_roots: Sequence[str] = (), new_id: Callable[[], str] = _new_id,
                 before_pull: Callable[[WorkspaceRecord, str], object] | None = None,
                 room: Callable[[WorkspaceRecord], None] | None = None) -> None:
        self._workspaces = workspaces
        self._git = git
        self._audit = audit
        self._secrets = secrets
        self._leases = leases
        self._forbidden_roots = tuple(forbidden_roots)
        self._new_id = new_id
        # The checkpoint service's hook (a checkpoint of the workspace before a pull changes it),
        # wired by bootstrap; (record, actor).
        self._before_pull = before_pull
        # The workspace quota (workspace.max_disk, max_files, min_free): TooLarge when a clone, a
        # pull or a stage, which bring content in, would start from a workspace already at a limit.
        self._room = room

    # -- plumbing ----------------------------------------------------------------------------
    def _record(self, name: str) -> WorkspaceRecord:
        record = self._workspaces.get(name)
        if record.status in _UNAVAILABLE:
            raise Conflict(f"workspace {record.name} {_UNAVAILABLE[record.status]}")
        return record

    def _do(self, op: str, name: str, actor: str, work: Callable[[WorkspaceRecord], T], *,
            changes: bool, detail: Callable[[T], dict[str, Any]] | None = None,
            asked: dict[str, Any] | None = None, audited: bool = True) -> T:
        """Run `work` on workspace `name` under the workspace's rules, audited as `git.<op>`
        (unless not `audited`: a caller that audits the request itself)."""
        target = name
        try:
            record = self._record(name)
            target = record.name
            with self._held(record, op, changes):
                result = work(record)
        except WardenError as exc:
            if not audited:
                raise
            self._audit.record(actor=actor, action=f"git.{op}", target=target,
                               decision="deny" if isinstance(exc, Denied) else "allow",
                               rule=exc.rule or "", result=exc.code,
                               detail={**(asked or {}), "error": exc.message})
            raise
        if audited:  # done: a row that fails now is said, not raised (AuditLog.record_made)
            self._audit.record_made(actor=actor, action=f"git.{op}", target=target, decision="allow",
                                    detail={**(asked or {}), **(detail(result) if detail else {})})
        return result

    @contextlib.contextmanager
    def _held(self, record: WorkspaceRecord, op: str, changes: bool) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if changes and self._leases is not None:
                # A shared lease, as any write: no archive, destroy or lock by another terminal meanwhile.
                stack.enter_context(self._leases.hold(record.name, "shared", f"git.{op}"))
                now = self._workspaces.get(record.name).status
                if now in _UNAVAILABLE:
                    raise Conflict(f"workspace {record.name} {_UNAVAILABLE[now]}")
            stack.enter_context(self._git.locked(record.path))
            yield

    def _run(self, record: WorkspaceRecord, *args: str, **kwargs: Any) -> str:
        return self._git.run(record.path, list(args), **kwargs).stdout

    def _rev(self, record: WorkspaceRecord, rev: str) -> str | None:
        found = self._git.run(record.path, ["rev-parse", "--verify", "-q", "--end-of-options", rev], check=False)
        return found.stdout.strip() or None if found.code == 0 else None

    def _head(self, record: WorkspaceRecord) -> str | None:
        """HEAD's commit; None on a branch with no commit yet (a new, empty repository)."""
        return self._rev(record, "HEAD^{commit}")

    def _base(self, record: WorkspaceRecord, commit: str | None) -> str:
        """What to diff against: `commit`, or the empty tree before a first commit."""
        return commit or self._run(record, "mktree", input="").strip()

    def _branch(self, record: WorkspaceRecord) -> str:
        found = self._git.run(record.path, ["symbolic-ref", "-q", "--short", "HEAD"], check=False)
        if found.code != 0 or not found.stdout.strip():
            raise Conflict(f"the repository of workspace {record.name} is not on a branch (detached HEAD)")
        return found.stdout.strip()

    def _upstream(self, record: WorkspaceRecord, branch: str) -> tuple[str, str]:
        """(remote, remote branch) that `branch` follows; origin and the same name by default."""
        remote = self._config(record, f"branch.{branch}.remote") or "origin"
        merge = self._config(record, f"branch.{branch}.merge") or f"refs/heads/{branch}"
        if not _REMOTE.fullmatch(remote) or remote.startswith("-"):
            raise InvalidInput(f"branch {branch} follows remote {remote!r}, which Warden does not push to")
        return remote, check_branch(merge.removeprefix("refs/heads/"))

    def _config(self, record: WorkspaceRecord, key: str) -> str | None:
        found = self._git.run(record.path, ["config", "--get", key], check=False)
        return found.stdout.strip() or None if found.code == 0 else None

    def _credential(self, record: WorkspaceRecord | None, url: str, secret: str | None,
                    username: str | None, state: dict[str, str] | None = None) -> Credential | None:
        """The credential for `url`: the secret named now, else the one remembered at clone."""
        state = state or {}
        secret = secret or state.get("credential")
        if not secret:
            return None
        where = url_host(url)
        if where is None:
            raise InvalidInput(f"a credential is only for http(s) URLs; {url!r} is not one "
                               "(ssh uses the person's own keys)")
        injected = self._secrets().environment([secret])
        if secret not in injected.env:
            raise NotFound(f"no secret {secret!r} (store the token with `warden secret set {secret}`)")
        value = injected.env[secret]
        return Credential(username or state.get("username") or "x-access-token", value, "://".join(where))

    def _remote_credential(self, record: WorkspaceRecord, remote: str, secret: str | None,
                           username: str | None) -> Credential | None:
        url = self._config(record, f"remote.{remote}.url")
        if url is None:
            raise NotFound(f"the repository of workspace {record.name} has no remote {remote!r}")
        check_url(url, forbidden_roots=self._forbidden_roots)
        return self._credential(record, url, secret, username, self._git.load_state(record.path))

    def _refuse_strangers(self, record: WorkspaceRecord) -> None:
        """Refuse to let git look at a working tree holding a `.git` (folder, `gitdir:` file, link)
        or repository look-alike that is not the person's: `add -A` and `status` would open the
        repository it names, anywhere on this host (its HEAD then shows in the diff), and the
        git guard moves such entries aside only around runs, not while a bot's process runs."""
        found = [p for p in self._git.strangers(record.path) if p != ".git"]  # the top one: run() checks it
        if found:
            shown = ", ".join(repr(p or "(the workspace folder itself)") for p in found[:5])
            raise Denied(f"workspace {record.name} holds git control entries that are not yours ({shown}"
                         f"{' …' if len(found) > 5 else ''}): git would follow them out of the workspace. A bot's "
                         "process may have left them; remove them (or stop the process and run anything in the "
                         "workspace: the git guard moves them aside), then try again", rule="git.control")

    @contextlib.contextmanager
    def _working_tree(self, record: WorkspaceRecord, head: str | None, *,
                      keep: bool = False) -> Iterator[tuple[str, dict[str, str], list[str]]]:
        """(the tree of the working tree as `git add -A` sees it, ignores respected; the variables
        to read it with; the paths it makes gitlinks, against `head`). Built in a scratch index,
        so the person's index and branch stay as they are, and, unless `keep` (a stage), with a
        scratch object directory, so its blobs never land in the person's `.git`."""
        self._refuse_strangers(record)
        with contextlib.ExitStack() as stack:
            objects = {} if keep else stack.enter_context(self._git.scratch_objects(record.path))
            index = stack.enter_context(self._git.scratch_index(record.path))
            env = {**objects, "GIT_INDEX_FILE": index}
            if head is not None:
                self._run(record, "read-tree", head, extra_env=env)
            self._run(record, "add", "-A", extra_env=env)
            tree = self._run(record, "write-tree", extra_env=env).strip()
            # Again: one planted while `add` ran would show in the tree (a gitlink to its HEAD),
            # and one planted and gone again meanwhile left that gitlink behind.
            self._refuse_strangers(record)
            links = self._gitlinks(record, self._base(record, head), tree, env)
            planted = [p for p in links if not self._git.persons(record.path, f"{p}/.git")]
            if planted:
                raise Denied(f"the working tree of {record.name} names repositories that are not yours "
                             f"({', '.join(map(repr, planted[:5]))}): a bot's process may be making them; "
                             "try again once it ends", rule="git.control")
            yield tree, objects, links

    def _files(self, record: WorkspaceRecord, old: str, new: str,
               env: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
        raw = self._run(record, "diff-tree", "-r", "-z", "--no-renames", "--name-status", *_DIFF_SUBMODULES,
                        old, new, extra_env=env)
        parts = [p for p in raw.split("\0") if p]
        return tuple((parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2))

    def _gitlinks(self, record: WorkspaceRecord, old: str, new: str, env: dict[str, str] | None = None) -> list[str]:
        """Paths that `new` makes (or changes into) a gitlink, against `old`."""
        raw = self._run(record, "diff-tree", "-r", "-z", "--no-renames", *_DIFF_SUBMODULES, old, new, extra_env=env)
        parts = [p for p in raw.split("\0") if p]
        return [parts[i + 1] for i in range(0, len(parts) - 1, 2)
                if parts[i].startswith(":") and parts[i][1:].split(" ")[1] == _GITLINK]

    def _patch(self, record: WorkspaceRecord, old: str, new: str, env: dict[str, str] | None = None) -> str:
        return self._run(record, "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--no-renames",
                         *_DIFF_SUBMODULES, old, new, extra_env=env)

    # -- clone ---------------------------------------------------------------------------------
    def clone(self, name: str, url: str, *, branch: str | None = None, credential: str | None = None,
              username: str | None = None, actor: str = "user") -> CloneResult:
        """Clone `url` into the root of workspace `name`, which holds nothing but what Warden made
        there; its `.git` is the person's (read-only in runs). `credential` names a secret holding
        the token for the URL's host, remembered for later pulls and pushes."""
        def work(record: WorkspaceRecord) -> CloneResult:
            check_url(url, forbidden_roots=self._forbidden_roots)
            if branch is not None:
                check_branch(branch)
            entries = self._git.root_entries(record.path)
            if ".git" in entries:
                raise Conflict(f"workspace {record.name} already holds a repository")
            blockers = clone_blockers(entries)
            if blockers:
                shown = ", ".join(blockers[:5]) + (" …" if len(blockers) > 5 else "")
                raise Conflict(f"workspace {record.name} is not empty ({shown}); clone into a new workspace")
            cred = self._credential(None, url, credential, username)
            if self._room is not None:
                self._room(record)
            self._git.clone(record.path, url, branch, cred)
            try:
                result = self._check_out(record, url, entries)
            except BaseException:
                self._git.remove_repository(record.path)
                raise
            # The secret's name (never its value), for later pulls and pushes.
            self._git.save_state(record.path, {"credential": credential, **({"username": username} if username else {})}
                                 if credential else {})
            return result

        return self._do("clone", name, actor, work, changes=True, detail=lambda r: r.to_json(),
                        asked={"url": _shown_url(url), "branch": branch, "credential": credential})

    def _check_out(self, record: WorkspaceRecord, url: str, entries: list[str]) -> CloneResult:
        head = self._head(record)
        paths: list[str] = []
        if head is not None:
            paths = [p for p in self._run(record, "ls-tree", "-r", "-z", "--name-only", head).split("\0") if p]
            clash = tree_conflicts(paths)
            if clash:
                raise InvalidInput(f"the repository holds {', '.join(clash)}, which are Warden's own in a "
                                   "workspace; it cannot be cloned into one", rule="git.tree")
        top = {p.split("/", 1)[0] for p in paths}
        self._git.write_info(record.path, "exclude",
                             exclude_lines(n for n in SCAFFOLDING if n in entries and n not in top))
        if head is not None:
            # The repository's version of a scaffolding file (pyproject.toml …) replaces Warden's.
            # Written by descriptor (GitRunner.check_out), then the index made to match: what
            # `reset --hard` does, without git writing by path where a bot's process may be.
            self._git.check_out(record.path, head, None)
            self._run(record, "read-tree", head)
            self._git.run(record.path, ["update-index", "-q", "--refresh"], check=False)
        branch = self._git.run(record.path, ["symbolic-ref", "-q", "--short", "HEAD"], check=False).stdout.strip()
        return CloneResult(_shown_url(url), branch or None, head, len(paths))

    # -- reading ---------------------------------------------------------------------------------
    def status(self, name: str, *, actor: str = "user") -> Status:
        """The branch, how far it is from its upstream, and the changed paths."""
        def work(record: WorkspaceRecord) -> Status:
            self._refuse_strangers(record)
            raw = self._run(record, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all",
                            "--no-renames", "--ignore-submodules=all")
            self._refuse_strangers(record)  # one planted meanwhile: what git said may show it
            return parse_status(raw)

        return self._do("status", name, actor, work, changes=False, detail=lambda s: {"changes": len(s.changes)})

    def diff(self, name: str, *, actor: str = "user") -> DiffResult:
        """What `stage` would propose now: the working tree (new files too) against HEAD."""
        def work(record: WorkspaceRecord) -> DiffResult:
            head = self._head(record)
            base = self._base(record, head)
            with self._working_tree(record, head) as (tree, env, _):
                return DiffResult(self._files(record, base, tree, env), self._patch(record, base, tree, env))

        return self._do("diff", name, actor, work, changes=False, detail=lambda d: {"files": len(d.files)})

    def staged(self, name: str, *, actor: str = "user") -> list[Proposal]:
        """The proposals waiting, oldest first (id, message, actor, files, created)."""
        def work(record: WorkspaceRecord) -> list[Proposal]:
            head = self._head(record)
            found = [self._proposal(record, pid, head) for pid in self._proposal_ids(record)]
            return sorted(found, key=lambda p: (p.created, p.id))

        return self._do("staged", name, actor, work, changes=False, detail=lambda p: {"proposals": len(p)})

    def proposal(self, name: str, proposal_id: str, *, actor: str = "user") -> Proposal:
        """One proposal waiting, with its diff: what a person sees before approving its push."""
        def work(record: WorkspaceRecord) -> Proposal:
            return self._proposal(record, proposal_id, self._head(record), with_diff=True)

        return self._do("staged", name, actor, work, changes=False, detail=lambda p: {"id": p.id})

    def waiting(self, name: str, proposal_id: str | None, *, actor: str = "user") -> Proposal:
        """Proposal `proposal_id` (None: the only one waiting), without its diff and not audited:
        for an interface that audits the request it serves itself (a bot's push asked for
        approval). Only that proposal is read, never every one waiting."""
        def work(record: WorkspaceRecord) -> Proposal:
            pid = proposal_id or self._only_proposal(record)
            return self._proposal(record, pid, self._head(record))

        return self._do("staged", name, actor, work, changes=False, audited=False)

    def _proposal_ids(self, record: WorkspaceRecord) -> list[str]:
        raw = self._run(record, "for-each-ref", "--format=%(refname)", PROPOSAL_REF)
        return [line[len(PROPOSAL_REF):] for line in raw.splitlines() if line.startswith(PROPOSAL_REF)]

    def _proposal(self, record: WorkspaceRecord, pid: str, head: str | None, *, with_diff: bool = False) -> Proposal:
        """Proposal `pid`, stale unless made on `head` (HEAD's commit, None before a first one)."""
        check_proposal_id(pid)
        commit = self._rev(record, f"{PROPOSAL_REF}{pid}^{{commit}}")
        if commit is None:
            raise NotFound(f"no proposal {pid} in workspace {record.name} (see `warden git {record.name} staged`)")
        raw = self._run(record, "show", "-s", "--no-show-signature", *_DIFF_SUBMODULES,
                        "--format=%P%x00%cI%x00%B", commit)
        parents, created, message = raw.split("\0", 2)
        parent = parents.split()[0] if parents.split() else ""  # "": a first commit
        base = self._base(record, parent or None)
        marks = trailers(message)
        return Proposal(id=pid, commit=commit, parent=parent, branch=marks.get("branch", ""),
                        message=body(message), actor=marks.get("actor", ""), created=created,
                        files=self._files(record, base, commit),
                        diff=self._patch(record, base, commit) if with_diff else None,
                        stale=parent != (head or ""))

    # -- staging ---------------------------------------------------------------------------------
    def stage(self, name: str, message: str, *, actor: str = "user") -> Proposal:
        """Propose the working tree's changes as one commit on HEAD (the branch does not move);
        the proposal, with its diff."""
        text = check_message(message)

        def work(record: WorkspaceRecord) -> Proposal:
            head = self._head(record)
            branch = self._branch(record)
            if self._room is not None:
                self._room(record)  # the proposal's objects land in the workspace's .git
            with self._working_tree(record, head, keep=True) as (tree, _, links):
                if tree == self._rev(record, f"{self._base(record, head)}^{{tree}}"):
                    raise Conflict(f"nothing to stage: the working tree of {record.name} matches HEAD")
                if links and actor != "user":
                    # A gitlink names a commit of a repository elsewhere; a bot has no business
                    # pointing the person's repository at one (its `.git` would be a bot's).
                    raise Denied(f"the changes hold submodule entries ({', '.join(map(repr, links[:5]))}); "
                                 "a bot's proposal may not add or change a submodule", rule="git.gitlink")
                pid = check_proposal_id(self._new_id())
                who, email = self._git.identity(record.path)
                env = {"GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": email,
                       "GIT_COMMITTER_NAME": who, "GIT_COMMITTER_EMAIL": email}
                parents = ["-p", head] if head else []
                commit = self._run(record, "commit-tree", "--no-gpg-sign", tree, *parents, "-F", "-",
                                   input=proposal_message(text, actor=actor, proposal=pid, branch=branch),
                                   extra_env=env).strip()
            # An empty old value: the ref must not exist yet (git-update-ref(1)).
            self._run(record, "update-ref", "-m", "warden: stage", f"{PROPOSAL_REF}{pid}", commit, "")
            return self._proposal(record, pid, head, with_diff=True)

        return self._do("stage", name, actor, work, changes=True,
                        detail=lambda p: {"id": p.id, "commit": p.commit, "files": len(p.files)})

    def push(self, workspace: str, proposal_id: str | None = None, actor: str = "user", *,
             credential: str | None = None, username: str | None = None, commit: str | None = None) -> PushResult:
        """Push proposal `proposal_id` of `workspace` to its branch's upstream, fast-forward only,
        then move the local branch to it; the proposal is then gone.

        This is the method an approvals executor calls, once a person approved a bot's push,
        with the workspace name, the proposal id and the bot as `actor`: everything it needs is
        in the repository (the proposal's commit, its branch, the remote) and in what Warden
        remembered at clone (the credential's secret name). Without an id, the one proposal
        waiting. Refused (Conflict) when HEAD moved since staging (stage again) or when the
        remote branch moved (pull, then stage again); the remote is never forced. With `commit`
        (what a person approved), refused unless the proposal is still exactly that commit."""
        def work(record: WorkspaceRecord) -> PushResult:
            pid = proposal_id or self._only_proposal(record)
            head = self._head(record)
            if commit is not None and head == commit:
                return self._pushed_before(record, pid, commit)
            try:
                proposal = self._proposal(record, pid, head)
            except NotFound:
                if commit is None:
                    raise
                proposal = None
            if commit is not None and (proposal is None or proposal.commit != commit):
                raise Conflict(f"proposal {pid} is no longer the commit that was asked to be pushed "
                               "(pushed, discarded or staged again); nothing was pushed", rule="git.push")
            assert proposal is not None
            branch = self._branch(record)
            if proposal.parent != (head or "") or proposal.branch != branch:
                raise Conflict(f"proposal {pid} was staged on {proposal.branch} at {proposal.parent[:12] or '(none)'}; "
                               f"the workspace is now on {branch} at {(head or '(none)')[:12]}: stage again")
            remote, remote_branch = self._upstream(record, branch)
            cred = self._remote_credential(record, remote, credential, username)
            pushed = self._git.run(record.path, ["push", "--porcelain", "--quiet", "--no-verify",
                                                 "--receive-pack=git-receive-pack", remote,
                                                 f"{proposal.commit}:refs/heads/{remote_branch}"],
                                   credential=cred, check=False)
            if pushed.code != 0:
                said = pushed.stdout + pushed.stderr
                if any(w in said for w in ("[rejected]", "non-fast-forward", "fetch first", "stale info")):
                    raise Conflict(f"the remote branch {remote}/{remote_branch} moved since HEAD; run "
                                   f"`warden git {record.name} pull`, then stage again", rule="git.push")
                last = [line for line in pushed.stderr.splitlines() if line.strip()]
                raise Conflict(f"git push failed: {last[-1] if last else 'exit status ' + str(pushed.code)}",
                               rule="git.push")
            # The branch follows what was pushed; the index too (the working tree holds it already).
            # The old value checked (empty: the branch had no commit yet): nothing moved it meanwhile.
            self._run(record, "update-ref", "-m", f"warden: push {pid}", f"refs/heads/{branch}",
                      proposal.commit, head or "")
            self._run(record, "read-tree", proposal.commit)
            self._git.run(record.path, ["update-index", "-q", "--refresh"], check=False)
            self._run(record, "update-ref", "-d", f"{PROPOSAL_REF}{pid}", proposal.commit)
            return PushResult(pid, proposal.commit, remote, remote_branch, tuple(self._proposal_ids(record)))

        return self._do("push", workspace, actor, work, changes=True, detail=lambda r: r.to_json(),
                        asked={"id": proposal_id})

    def _pushed_before(self, record: WorkspaceRecord, pid: str, commit: str) -> PushResult:
        """The approved push of `commit` was done: the branch is at it, which a push makes it only
        once the remote took it. An approval answered again after a Warden killed before its end
        (or a record a full disk refused) found it so, and was told "stage again" or "nothing was
        pushed" and recorded failed, though pushed. What the push left undone is done now."""
        check_proposal_id(pid)
        branch = self._branch(record)
        remote, remote_branch = self._upstream(record, branch)
        tracked = self._rev(record, f"refs/remotes/{remote}/{remote_branch}^{{commit}}")
        if tracked is not None and tracked != commit:
            # The push updates it as the remote takes the commit: the branch was moved there on
            # the host instead (a merge of the proposal), and the remote does not have it.
            raise Conflict(f"the branch is at the commit asked to be pushed, but {remote}/{remote_branch} is not: "
                           f"it was not pushed; push it with `warden git {record.name} push`", rule="git.push")
        self._run(record, "read-tree", commit)
        self._git.run(record.path, ["update-index", "-q", "--refresh"], check=False)
        if self._rev(record, f"{PROPOSAL_REF}{pid}^{{commit}}") == commit:
            self._run(record, "update-ref", "-d", f"{PROPOSAL_REF}{pid}", commit)
        return PushResult(pid, commit, remote, remote_branch, tuple(self._proposal_ids(record)), done_before=True)

    def _only_proposal(self, record: WorkspaceRecord) -> str:
        ids = self._proposal_ids(record)
        if not ids:
            raise NotFound(f"no proposal waiting in workspace {record.name} (make one with `stage -m MESSAGE`)")
        if len(ids) > 1:
            raise InvalidInput(f"{len(ids)} proposals wait in workspace {record.name}; name one "
                               f"(`warden git {record.name} staged`)")
        return ids[0]

    def discard(self, name: str, proposal_id: str, *, actor: str = "user") -> DiscardResult:
        """Drop a proposal and restore its files to HEAD: changed ones get HEAD's content, new
        ones are removed. Left as they are: a file changed again since staging (`kept`), one that
        another waiting proposal carries too (`shared`: restoring it would take that proposal's
        content away), and every file when the proposal is stale (made on an older HEAD: the
        working tree has moved on since, a pull or a push, so it is only dropped). The commit
        stays reachable under refs/warden/discarded/<id>, so nothing is lost."""
        check_proposal_id(proposal_id)

        def work(record: WorkspaceRecord) -> DiscardResult:
            head = self._head(record)
            proposal = self._proposal(record, proposal_id, head)
            if proposal.stale:
                self._drop(record, proposal)
                return DiscardResult(proposal_id, (), stale=True)
            paths = [p for _, p in proposal.files]
            others = {p for pid in self._proposal_ids(record) if pid != proposal_id
                      for _, p in self._proposal(record, pid, head).files}
            with self._working_tree(record, head) as (tree, env, _):
                moved = set(self._names(record, "diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                        *_DIFF_SUBMODULES, proposal.commit, tree, paths=paths, env=env))
            restore = [p for p in paths if p not in moved and p not in others]
            in_head = set(self._names(record, "ls-tree", "-r", "-z", "--name-only", head, paths=restore)
                          if head else ())
            tracked = [p for p in restore if p in in_head]
            added = [p for p in restore if p not in in_head]
            if restore:
                # Written by descriptor from a scratch checkout (never by git, by path: a bot's
                # process could swap a folder for a link meanwhile); added files are removed.
                self._git.check_out(record.path, self._base(record, head), restore)
            for chunk in _chunks(tracked):
                self._run(record, "reset", "-q", head or "HEAD", "--", *chunk)  # the index only
            for chunk in _chunks(added):
                self._run(record, "rm", "-q", "--cached", "--ignore-unmatch", "--", *chunk)
            self._drop(record, proposal)
            return DiscardResult(proposal_id, tuple(restore), tuple(p for p in paths if p in moved),
                                 tuple(p for p in paths if p in others and p not in moved))

        return self._do("discard", name, actor, work, changes=True,
                        detail=lambda r: {"id": r.id, "restored": len(r.restored), "kept": len(r.kept),
                                          "shared": len(r.shared), "stale": r.stale})

    def _drop(self, record: WorkspaceRecord, proposal: Proposal) -> None:
        """Move a proposal's ref under refs/warden/discarded/ (its commit stays reachable)."""
        self._run(record, "update-ref", "-m", "warden: discard", f"{DISCARDED_REF}{proposal.id}", proposal.commit)
        self._run(record, "update-ref", "-d", f"{PROPOSAL_REF}{proposal.id}", proposal.commit)

    def _names(self, record: WorkspaceRecord, *args: str, paths: list[str],
               env: dict[str, str] | None = None) -> list[str]:
        found: list[str] = []
        for chunk in _chunks(paths):
            found += [p for p in self._run(record, *args, "--", *chunk, extra_env=env).split("\0") if p]
        return found

    # -- pulling ---------------------------------------------------------------------------------
    def _fast_forward(self, record: WorkspaceRecord, branch: str, before: str | None, target: str,
                      upstream: str) -> None:
        """What `git merge --ff-only TARGET` does, with the working tree written by descriptor
        (GitRunner.check_out) instead of by git: refused when `before` is not an ancestor of
        `target` or when a path the merge changes has local changes (in the index or the working
        tree, new untracked files too); then the files, the index and the branch."""
        if before == target:
            return
        if before is not None:
            ancestor = self._git.run(record.path, ["merge-base", "--is-ancestor", before, target], check=False)
            if ancestor.code == 1:
                raise Conflict(f"{branch} and {upstream} have diverged; Warden pulls only fast-forward: "
                               "reconcile them with git yourself", rule="git.pull")
            if ancestor.code != 0:
                raise Conflict(f"pull refused: git merge-base failed ({ancestor.stderr.strip()[:200]})",
                               rule="git.pull")
        base = self._base(record, before)
        changed = [p for p in self._run(record, "diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                        *_DIFF_SUBMODULES, base, target).split("\0") if p]
        clash = tree_conflicts(changed)
        if clash:
            # As a clone refuses such a repository: a pulled `.warden/zones.yaml` would be the
            # policy the next sandbox reads (a grant the remote wrote itself).
            raise InvalidInput(f"the pull brings {', '.join(clash)}, which are Warden's own in a workspace; "
                               "nothing was pulled", rule="git.tree")
        staged = {p for p in self._run(record, "diff-index", "--cached", "-z", "--no-renames", "--name-only",
                                       "--ignore-submodules=all", base).split("\0") if p}
        with self._working_tree(record, before) as (tree, env, _):
            local = {p for p in self._run(record, "diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                          *_DIFF_SUBMODULES, base, tree, extra_env=env).split("\0") if p}
        in_way = sorted((staged | local) & set(changed))
        if in_way:
            shown = ", ".join(map(repr, in_way[:5])) + (" …" if len(in_way) > 5 else "")
            raise Conflict(f"pull refused: local changes to {shown} would be overwritten (stage or discard "
                           "local changes first)", rule="git.pull")
        try:
            self._git.check_out(record.path, target, changed)
        except Conflict as exc:
            raise Conflict(f"{exc.message.rstrip('.')}. The pull stopped part-way: the branch was not moved; the "
                           "checkpoint taken before it (`warden checkpoints NAME`) rolls the files back",
                           rule=exc.rule) from None
        # The index follows, checking only itself (-i: the files are already written), then the branch.
        self._run(record, "read-tree", *(("-m", "-i", base) if before else ()), target)
        self._run(record, "update-ref", "-m", f"warden: pull {upstream}", f"refs/heads/{branch}", target,
                  before or "")
        self._git.run(record.path, ["update-index", "-q", "--refresh"], check=False)

    def pull(self, name: str, *, actor: str = "user", credential: str | None = None,
             username: str | None = None) -> PullResult:
        """Fetch the branch's upstream and fast-forward to it; refused when the branches have
        diverged or local changes are in the way."""
        def work(record: WorkspaceRecord) -> PullResult:
            branch = self._branch(record)
            remote, remote_branch = self._upstream(record, branch)
            cred = self._remote_credential(record, remote, credential, username)
            if self._room is not None:
                self._room(record)
            if self._before_pull is not None:
                self._before_pull(record, actor)
            self._run(record, "fetch", "--quiet", "--no-recurse-submodules", "--no-write-fetch-head",
                      "--upload-pack=git-upload-pack", remote,
                      f"+refs/heads/{remote_branch}:refs/remotes/{remote}/{remote_branch}", credential=cred)
            before = self._head(record) or ""
            target = self._rev(record, f"refs/remotes/{remote}/{remote_branch}^{{commit}}")
            if target is None:
                raise NotFound(f"the remote has no branch {remote_branch}")
            self._fast_forward(record, branch, before or None, target, f"{remote}/{remote_branch}")
            after = self._head(record) or ""
            files = len(self._files(record, self._base(record, before or None), after)) if before != after else 0
            return PullResult(before, after, files)

        return self._do("pull", name, actor, work, changes=True, detail=lambda r: r.to_json())


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


def _shown_url(url: str) -> str:
    """`url` for the audit log and output: any user name left out."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.scheme and parts.username and parts.hostname:
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url
