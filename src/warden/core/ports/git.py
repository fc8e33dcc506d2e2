"""Git: what the git service needs from the host (the person's git, run hardened)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

__all__ = ["Credential", "GitResult", "GitRunner"]


class GitResult(NamedTuple):
    code: int
    stdout: str
    stderr: str


class Credential(NamedTuple):
    """A username and token for one `protocol://host`, handed to git's credential helper through
    the environment of that one git process."""

    username: str
    password: str
    where: str  # "https://host[:port]"


class GitRunner(Protocol):
    """The person's `git` on one workspace folder: its `.git` at the root, run with Warden's
    hardened configuration (core/git.py) and nothing of the caller's or the repository's that
    names a program."""

    def run(self, workspace: str, args: Sequence[str], *, extra_env: Mapping[str, str] | None = None,
            input: str | None = None, credential: Credential | None = None, check: bool = True,
            timeout: float = 600.0) -> GitResult:
        """`git ARGS` in `workspace`; with `check`, a non-zero exit raises WardenError (git's
        last line of complaint in its message). Refused (Denied) when the repository's config
        holds a key that names a program (core.git.forbidden_config)."""
        ...

    def clone(self, workspace: str, url: str, branch: str | None, credential: Credential | None) -> None:
        """Clone `url` into the root of `workspace` without checking anything out: its `.git`
        lands at the root, made the person's (the git guard learns it)."""
        ...

    def check_out(self, workspace: str, commit: str, paths: Sequence[str] | None) -> None:
        """Make `paths` of the working tree (None: all of `commit`) what `commit` holds, a path it
        lacks removed (never a folder), without ever writing through a link a bot's process
        planted meanwhile (Conflict then). The person's index is left as it is."""
        ...

    def has_repository(self, workspace: str) -> bool:
        """Whether the workspace's root holds a `.git` folder that is the person's (not a link,
        not a gitfile, one the git guard knows)."""
        ...

    def root_entries(self, workspace: str) -> list[str]:
        ...

    def write_info(self, workspace: str, name: str, text: str) -> None:
        """Write `.git/info/NAME` (exclude) of the workspace's repository."""
        ...

    def remove_repository(self, workspace: str) -> None:
        """Remove the workspace's `.git` (a clone that was refused after it fetched)."""
        ...

    def scratch_index(self, workspace: str) -> contextlib.AbstractContextManager[str]:
        """A path for a temporary index file (GIT_INDEX_FILE), removed when the block ends."""
        ...

    def scratch_objects(self, workspace: str) -> contextlib.AbstractContextManager[dict[str, str]]:
        """Environment variables for git that write new objects to a temporary object directory
        (the repository's objects read as alternates), removed when the block ends."""
        ...

    def strangers(self, workspace: str) -> list[str]:
        """Workspace paths of git control structures (`.git` entries, repository look-alikes) that
        are not known as the person's: git must not look at a tree holding them."""
        ...

    def persons(self, workspace: str, path: str) -> bool:
        """Whether the `.git` entry at workspace path `path` is known as the person's."""
        ...

    def identity(self, workspace: str) -> tuple[str, str]:
        """(name, email) for commits Warden makes for the person: the repository's user.name and
        user.email, else the person's ~/.gitconfig's (read as files, no include), else the login."""
        ...

    def load_state(self, workspace: str) -> dict[str, str]:
        """What Warden remembers of the workspace's repository (`.warden/git-remote.json`)."""
        ...

    def save_state(self, workspace: str, state: dict[str, str]) -> None:
        ...

    def locked(self, workspace: str) -> contextlib.AbstractContextManager[None]:
        """One Warden git operation at a time on the workspace (an flock in its `.warden/`)."""
        ...
