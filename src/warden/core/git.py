"""Running the person's git safely on a workspace: the decisions, without running anything (pure).

Warden runs `git` on the host, as the person, in folders a bot writes to. Every git feature
that starts a program must therefore be switched off or pinned, whatever the repository's own
`.git/config`, the working tree (`.gitattributes`, `.gitmodules`) or the caller's environment
say. The vectors (git-config(1), githooks(5), gitattributes(5), git(1) ENVIRONMENT), and the
answer to each:

- hooks (pre-commit, post-checkout, pre-push, reference-transaction, …):
  `core.hooksPath=/dev/null`
- core.fsmonitor (CVE-2022-24765 family), untracked cache: `core.fsmonitor=false`,
  `core.untrackedCache=false`
- core.pager, pager.<cmd>: `--no-pager`, `GIT_PAGER=cat`, `core.pager=cat`
- core.editor, sequence.editor: `GIT_EDITOR`/`GIT_SEQUENCE_EDITOR=false` (env wins); never an
  editing command
- diff.external, diff.<drv>.command, diff.<drv>.textconv: `--no-ext-diff --no-textconv` on every
  diff; refused in config
- filter.<drv>.clean/smudge/process (`.gitattributes` is the bot's): refused in config (a driver
  named in an attribute but not configured does nothing)
- merge.<drv>.driver: refused in config; pulls are fast-forward only
- credential.helper, credential.<url>.*: reset by `credential.helper=` then Warden's own; refused
  in config
- core.sshCommand, GIT_SSH, GIT_SSH_COMMAND: `GIT_SSH_COMMAND` set by Warden (env beats config)
- core.askPass, GIT_ASKPASS, SSH_ASKPASS: `GIT_ASKPASS=` (empty: git then asks nobody),
  `GIT_TERMINAL_PROMPT=0`
- remote.<n>.uploadpack/receivepack (run locally for file:// and by ssh):
  `--upload-pack`/`--receive-pack` pinned; refused in config
- core.gitProxy, core.alternateRefsCommand, gpg.* (commit.gpgSign): refused in config; signing off
- include.path, includeIf.* (a path to a bot-written file): refused in config (read with `--file`,
  no includes)
- protocol.*.allow, url.*.insteadOf (`ext::` runs a command): `GIT_ALLOW_PROTOCOL` (env beats
  config), URLs vetted, `url.*` refused
- system and global config, GIT_CONFIG_PARAMETERS/COUNT, GIT_DIR, …: `GIT_CONFIG_NOSYSTEM=1`,
  `GIT_CONFIG_GLOBAL=/dev/null`, the environment rebuilt
- repository discovery (a bot's `.git` elsewhere): `GIT_DIR` and `GIT_WORK_TREE` given, the `.git`
  the person's (gitguard)
- submodules (`.gitmodules` is the bot's; `update=!cmd`): never recursed into; every diff names
  `--ignore-submodules` itself (so git reads no `.gitmodules` for it) and `--submodule=short`;
  a `.git` or repository look-alike in the working tree that is not the person's is refused
  before git looks at the tree (git would read the repository it points to, anywhere on the host)
- objects: a diff's or status's scratch tree is written to a temporary object directory (the
  repository's objects as alternates), removed afterwards; only `stage` adds to `.git`
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from warden.core.errors import Denied, InvalidInput
from warden.core.paths import within

__all__ = [
    "ALLOWED_PROTOCOLS",
    "CREDENTIAL_ENV",
    "HARDENING",
    "PROPOSAL_REF",
    "WARDEN_ENTRIES",
    "Proposal",
    "body",
    "check_branch",
    "check_message",
    "check_proposal_id",
    "check_url",
    "clone_blockers",
    "credential_answer",
    "forbidden_config",
    "git_environ",
    "parse_status",
    "proposal_message",
    "trailers",
    "url_host",
]

ALLOWED_PROTOCOLS = ("file", "https", "http", "ssh")
PROPOSAL_REF = "refs/warden/proposals/"
DISCARDED_REF = "refs/warden/discarded/"
# Names of the variables (set only in the environment of the one git process that needs them)
# the credential helper answers from: never argv, never a URL, never `.git/config`.
CREDENTIAL_ENV = ("WARDEN_GIT_USERNAME", "WARDEN_GIT_PASSWORD", "WARDEN_GIT_HOST")

# Entries of a workspace's root that are Warden's, never a repository's: a clone refuses a tree
# that would write over them, and lists them in `.git/info/exclude`.
WARDEN_ENTRIES = (".workspace.json", ".workspace_configured", ".warden", ".venv", "node_modules")
# Files Warden writes into a fresh workspace: a clone replaces them with the repository's.
SCAFFOLDING = (".gitignore", "pyproject.toml", "package.json")

# `-c` overrides on every git command line; command-line config beats every file, so whatever
# the repository's config says, these hold. Values that name a program name none.
HARDENING: tuple[str, ...] = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.pager=cat",
    "core.editor=false",
    "sequence.editor=false",
    "core.askPass=",
    "credential.helper=",  # an empty value empties the list read so far (gitcredentials(7))
    "credential.interactive=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "push.gpgSign=false",
    "submodule.recurse=false",
    "diff.submodule=short",
    "status.submoduleSummary=false",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
    "protocol.allow=never",
    *(f"protocol.{name}.allow=always" for name in ALLOWED_PROTOCOLS),
    "protocol.ext.allow=never",
    "protocol.fd.allow=never",
    "core.protectNTFS=true",
    "core.protectHFS=true",
    "advice.detachedHead=false",
    "color.ui=false",
    "gc.auto=0",  # no background `git gc --auto` outliving the call
    "maintenance.auto=false",
)

# Keys of a repository's config that can make git run a program or read config from elsewhere,
# as lower-case patterns (git compares section and key names case-insensitively). `-c` cannot
# reach them all: a driver or remote has a name of its config's choosing.
_FORBIDDEN = tuple(re.compile(p) for p in (
    r"include\.path", r"includeif\..*\.path",
    r"core\.fsmonitor", r"core\.hookspath", r"core\.sshcommand", r"core\.gitproxy", r"core\.askpass",
    r"core\.alternaterefscommand", r"core\.pager", r"core\.editor", r"core\.worktree",
    r"sequence\.editor", r"pager\..*", r"diff\.external", r"diff\..*\.(command|textconv)",
    r"filter\..*\.(clean|smudge|process)", r"merge\..*\.driver", r"mergetool\..*", r"difftool\..*",
    r"credential\..*helper", r"gpg\..*", r"remote\..*\.(uploadpack|receivepack|vcs)",
    r"url\..*\.(insteadof|pushinsteadof)", r"uploadpack\.packobjectshook", r"protocol\..*",
    r"ssh\.variant", r"http\..*proxy.*", r"receive\.procreceiverefs",
))


def forbidden_config(entries: Iterable[tuple[str, str]]) -> list[str]:
    """The keys among a repository's config `entries` (key, value) that Warden will not run git
    beside: each names a program, a file of more config, or a rewrite of where git connects."""
    return sorted({key for key, _ in entries if any(p.fullmatch(key.lower()) for p in _FORBIDDEN)})


def git_environ(base: Mapping[str, str], *, git_dir: str, work_tree: str,
                extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of one git process: a few of `base` (PATH, HOME for ssh keys,
    locale), never a GIT_* of the caller, then Warden's pins and `extra` (an index file, a
    credential for this one call)."""
    keep = {k: base[k] for k in ("PATH", "HOME", "TZ", "SSH_AUTH_SOCK") if k in base}
    keep.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env = {
        **keep,
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_DIR": git_dir,
        "GIT_WORK_TREE": work_tree,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_SYSTEM": "/dev/null",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_EDITOR": "false",
        "GIT_SEQUENCE_EDITOR": "false",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "GIT_ALLOW_PROTOCOL": ":".join(ALLOWED_PROTOCOLS),
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_LITERAL_PATHSPECS": "1",  # a path is a path, never `:(glob)` magic a bot chose
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_CEILING_DIRECTORIES": work_tree,
    }
    env.update(extra or {})
    return env


def check_url(url: str, *, forbidden_roots: Sequence[str] = ()) -> str:
    """`url` when Warden will fetch from it: https, http, ssh (also `user@host:path`) or file://
    outside every folder of `forbidden_roots` (workspaces are bots' to write: a repository there
    is theirs, its hooks run on a push to it); never a transport helper (`ext::`, `fd::`), an
    option (`-u…`), a bare path, or a password in the URL."""
    if not url or url != url.strip() or any(c in url for c in "\0\n\r"):
        raise InvalidInput(f"bad git URL {url!r}: give https://, ssh:// or file:// URL")
    if url.startswith("-"):
        raise InvalidInput(f"bad git URL {url!r}: a URL cannot start with '-'")
    if "::" in url.split("/", 1)[0] or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*::", url):
        raise Denied(f"git URL {url!r} names a transport helper; Warden fetches only over "
                     f"{', '.join(ALLOWED_PROTOCOLS)}", rule="git.protocol")
    if "://" not in url and re.fullmatch(r"([A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:[^:-].*", url):
        return url  # ssh's scp form, user@host:path (git reads it so when no '/' precedes the ':')
    parts = urlsplit(url)
    if not parts.scheme and url.startswith("/"):
        # Refused still (a bare path is git's local transport, whose rules are not file://'s),
        # but the person typed a folder of this machine: say the URL that reaches it.
        raise Denied(f"git URL {url!r} is a bare path; write a repository of this machine as a file URL: "
                     f"file://{url}", rule="git.protocol")
    if parts.scheme not in ALLOWED_PROTOCOLS:
        raise Denied(f"git URL {url!r}: protocol {parts.scheme or '(none)'!r} is not allowed; use "
                     f"{', '.join(p + '://' for p in ALLOWED_PROTOCOLS)}", rule="git.protocol")
    if parts.password is not None:
        raise InvalidInput("a git URL must not carry a password; store it with `warden secret set` "
                           "and pass --credential SECRET")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise InvalidInput(f"bad file URL {url!r}: use file:///absolute/path")
        if within(parts.path, list(forbidden_roots)):
            raise Denied(f"git URL {url!r} is inside Warden's workspaces, which bots write; "
                         "keep the repository elsewhere", rule="git.local_remote")
    elif not parts.hostname:
        raise InvalidInput(f"bad git URL {url!r}: no host")
    return url


def url_host(url: str) -> tuple[str, str] | None:
    """(protocol, host[:port]) of an http(s) URL, as git names them to a credential helper."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return parts.scheme, host


_LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


def credential_answer(request: str, env: Mapping[str, str], operation: str) -> str:
    """What Warden's credential helper prints for git's `request` (gitcredentials(7): lines of
    `key=value`): the username and password of `env` when git asks to `get` them for the very
    protocol and host they were given for; nothing for any other host (a redirect elsewhere),
    for plain http beyond this machine, or for `store`/`erase` (Warden keeps its own)."""
    if operation != "get":
        return ""
    asked = dict(line.split("=", 1) for line in request.splitlines() if "=" in line)
    user, password, where = (env.get(k, "") for k in CREDENTIAL_ENV)
    if not password or not where:
        return ""
    protocol, _, host = where.partition("://")
    if asked.get("protocol") != protocol or asked.get("host", "").lower() != host.lower():
        return ""
    if protocol == "http" and host.rsplit(":", 1)[0] not in _LOOPBACK and not host.startswith("[::1]"):
        return ""  # a token in clear text only to this machine (a test server)
    return f"username={user or 'x-access-token'}\npassword={password}\n"


_BRANCH = re.compile(r"[A-Za-z0-9._/-]{1,200}")


def check_branch(branch: str) -> str:
    """A branch name git accepts and that no option or revision syntax can hide in."""
    if (not _BRANCH.fullmatch(branch) or branch.startswith(("-", "/", ".")) or branch.endswith((".", "/", ".lock"))
            or ".." in branch or "//" in branch or "/." in branch or branch == "HEAD"):
        raise InvalidInput(f"bad branch name {branch!r}")
    return branch


_ID = re.compile(r"p-[0-9a-f]{8}")


def check_proposal_id(proposal: str) -> str:
    if not _ID.fullmatch(proposal):
        raise InvalidInput(f"bad proposal id {proposal!r}: ids look like p-1a2b3c4d (see `warden git NAME staged`)")
    return proposal


_TRAILER_PREFIX = "warden-"


def check_message(message: str) -> str:
    """A stage message Warden puts into a commit: the person's (or a bot's) words and nothing that
    could pass for Warden's own trailers (`Warden-Proposal:` … say who proposed it for which
    branch) or hide text from whoever reviews it (a carriage return, an escape sequence)."""
    text = message.strip()
    if not text:
        raise InvalidInput("give a commit message with -m MESSAGE")
    if len(text.encode()) > 64 * 1024:
        raise InvalidInput("the commit message is longer than 64 KiB")
    bad = sorted({f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) == "Cc"})
    if bad:
        raise InvalidInput(f"the commit message holds control characters ({', '.join(bad[:5])}); "
                           "only line breaks and tabs may be in it")
    if any(line.lstrip().lower().startswith(_TRAILER_PREFIX) for line in text.split("\n")):
        raise InvalidInput("a line of the commit message starts with 'Warden-': those lines are Warden's "
                           "own trailers (who proposed it, for which branch); reword that line")
    return text


def proposal_message(message: str, *, actor: str, proposal: str, branch: str) -> str:
    """The commit message of a proposal: the person's words, then trailers saying who proposed
    it for which branch (git interpret-trailers(1) form, so `git log` shows them as such)."""
    return f"{message}\n\nWarden-Proposal: {proposal}\nWarden-Actor: {actor}\nWarden-Branch: {branch}\n"


def _split_trailers(message: str) -> tuple[str, dict[str, str]]:
    """(the words, Warden's trailers) of a commit message. Trailers are read from the last
    paragraph only, and only when every line of it is a `Warden-Key: value` line: a block of
    look-alikes further up (or followed by more text) is words, shown as such."""
    text = message.rstrip("\n")
    words, sep, last = text.rpartition("\n\n")
    found: dict[str, str] = {}
    for line in last.split("\n"):
        key, colon, value = line.partition(": ")
        if not colon or not key.startswith("Warden-") or not key[len("Warden-"):].isalpha():
            return text.strip(), {}
        found[key[len("Warden-"):].lower()] = value.strip()
    return (words.strip() if sep else ""), found


def trailers(message: str) -> dict[str, str]:
    """The Warden-* trailers of a proposal's message: its last paragraph's, if it is theirs."""
    return _split_trailers(message)[1]


def body(message: str) -> str:
    """A proposal's message less Warden's trailer paragraph: every word its author chose."""
    return _split_trailers(message)[0]


@dataclass(frozen=True)
class Proposal:
    """One staged change set: a commit on HEAD kept under refs/warden/proposals/<id>."""

    id: str
    commit: str
    parent: str
    branch: str
    message: str
    actor: str
    created: str
    files: tuple[tuple[str, str], ...] = ()  # (status letter A/M/D/…, path)
    diff: str | None = None
    # Made on a commit that is no longer HEAD (a pull or another proposal's push since): it can
    # no longer be pushed, and discarding it leaves the working tree alone.
    stale: bool = False

    @property
    def subject(self) -> str:
        """The message's first line, for a one-line listing (with a count of the lines it hides)."""
        lines = self.message.split("\n")
        more = len([line for line in lines[1:] if line.strip()])
        return lines[0] + (f" (+{more} more line{'s' if more > 1 else ''})" if more else "")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "commit": self.commit, "parent": self.parent,
                                "branch": self.branch, "message": self.message, "actor": self.actor,
                                "created": self.created, "stale": self.stale,
                                "files": [{"status": s, "path": p} for s, p in self.files]}
        if self.diff is not None:
            data["diff"] = self.diff
        return data


@dataclass(frozen=True)
class Status:
    """`git status` of a workspace: the branch, how far from its upstream, the changed paths."""

    branch: str | None
    upstream: str | None
    ahead: int
    behind: int
    changes: tuple[tuple[str, str], ...] = field(default=())  # (XY code, path)

    def to_json(self) -> dict[str, Any]:
        return {"branch": self.branch, "upstream": self.upstream, "ahead": self.ahead, "behind": self.behind,
                "changes": [{"code": c, "path": p} for c, p in self.changes]}


def parse_status(raw: str) -> Status:
    """`git status --porcelain=v2 --branch -z` output, parsed (git-status(1), "Porcelain Format Version 2")."""
    branch: str | None = None
    upstream: str | None = None
    ahead = behind = 0
    changes: list[tuple[str, str]] = []
    records = raw.split("\0")
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if rec.startswith("# branch.head "):
            head = rec[len("# branch.head "):]
            branch = None if head == "(detached)" else head
        elif rec.startswith("# branch.upstream "):
            upstream = rec[len("# branch.upstream "):]
        elif rec.startswith("# branch.ab "):
            a, b = rec[len("# branch.ab "):].split()
            ahead, behind = int(a), -int(b)
        elif rec.startswith("1 "):
            fields = rec.split(" ", 8)
            changes.append((fields[1].replace(".", " "), fields[8]))
        elif rec.startswith("2 "):
            fields = rec.split(" ", 9)
            changes.append((fields[1].replace(".", " "), f"{records[i]} -> {fields[9]}"))
            i += 1  # the original path follows as its own record
        elif rec.startswith("u "):
            fields = rec.split(" ", 10)
            changes.append(("UU", fields[10]))
        elif rec.startswith("? "):
            changes.append(("??", rec[2:]))
    return Status(branch, upstream, ahead, behind, tuple(changes))


def clone_blockers(root_entries: Iterable[str]) -> list[str]:
    """The entries of a workspace's root that stop a clone into it: anything but Warden's own
    folders and files and the scaffolding a fresh workspace gets (the repository's replace it)."""
    allowed = set(WARDEN_ENTRIES) | set(SCAFFOLDING)
    return sorted(name for name in root_entries if name not in allowed)


def tree_conflicts(paths: Iterable[str]) -> list[str]:
    """Paths of a repository's tree that would write over Warden's own entries of the root."""
    own = {name.casefold() for name in WARDEN_ENTRIES}
    return sorted({p.split("/", 1)[0] for p in paths if p.split("/", 1)[0].casefold() in own})


def exclude_lines(untracked_scaffolding: Iterable[str]) -> str:
    """`.git/info/exclude` of a clone: Warden's own entries, and the scaffolding files the
    repository does not track, never proposed as the repository's."""
    names = [*WARDEN_ENTRIES, *untracked_scaffolding]
    return "# Warden's own files of this workspace, never part of the repository\n" + "".join(
        f"/{name}\n" for name in names)
