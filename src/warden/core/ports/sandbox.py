"""Processes and the sandbox: what runs, lifecycle and the sweeper need."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warden.core.bwrap_argv import Bind
    from warden.core.gitcontrol import GitSweep
    from warden.core.ports.live import LiveSandboxes
    from warden.core.runs import RunResult, SandboxRequest

__all__ = [
    "GitGuard",
    "GitGuards",
    "Leftovers",
    "MountSources",
    "Processes",
    "RunCgroups",
    "SandboxBackend",
    "SandboxRunner",
    "Unarchiver",
]


class Processes(Protocol):
    """Processes of this machine, named by pid and kernel start time (a pid alone is reused)."""

    def alive(self, pid: int, started: int | None = None) -> bool:
        """Whether `pid` runs (and is the same process, when its start time is given)."""
        ...

    def start_time(self, pid: int) -> int | None:
        """The kernel's start time of `pid` (clock ticks since boot), None when it is gone."""
        ...

    def stop_processes(self, root: str) -> list[int]:
        """Stop the sandboxed processes of the workspace folder `root` (SIGTERM, then SIGKILL
        what is left after a grace period); the pids of the commands it stopped (not bwrap or a
        live sandbox's supervisor around them: what a person counts as a workspace's processes)."""
        ...

    def orphan_sandboxes(self, roots: Sequence[str], keep: Collection[int] = ()) -> set[int]:
        """Sandboxes (with their process trees) whose Warden died before it could stop them,
        working in a folder under one of `roots`; never the sandboxes `keep` names (live sandboxes,
        which outlive the Warden that started them on purpose), nor their trees."""
        ...

    def kill_orphan_sandboxes(self, roots: Sequence[str], keep: Collection[int] = ()) -> list[int]:
        """SIGKILL what `orphan_sandboxes` finds; the pids killed."""
        ...


class SandboxRunner(Protocol):
    """Runs one command in a sandbox (bubblewrap): only the workspace writable, limits on
    memory, CPU, processes and time, the network through a filtering proxy or none."""

    def run(self, request: SandboxRequest) -> RunResult:
        """Build the sandbox `request` describes, run its command to the end and say how it ended.

        Raises, before the command starts: Denied (a protected path or a mount source is a
        link), Unavailable (the sandbox cannot be set up here; the message names the host's fix
        when one is known), InvalidInput (the folder is missing, a bad variable name).
        """
        ...


class SandboxBackend(Protocol):
    """Where bot commands run: one kind of sandbox, named by the `sandbox.backend` setting.

    What Warden needs of it is a command run to its end in a workspace, with the run's limits,
    network policy and mounts (`runner`), and long-lived sandboxes it can start, run commands
    in and stop (`live`). Bubblewrap on this host is the one runnable backend today;
    docs/kubernetes.md designs a second on agent-sandbox pods, whose manifests
    core/kubernetes.py writes. Policy, grants, approvals, audit and secrets stay in Warden's
    services whatever the backend: a backend only runs what they have already allowed.
    """

    @property
    def name(self) -> str:
        """The backend's name, as `sandbox.backend` spells it."""
        ...

    def runner(self) -> SandboxRunner:
        """Runs one command to its end in a sandbox of its own."""
        ...

    def live(self) -> LiveSandboxes:
        """Long-lived sandboxes: started once, commands run in them, stopped when idle."""
        ...


class GitGuard(Protocol):
    """The git-control guard of one folder: what a bot leaves there that would make a person's
    `git` run a program is moved aside (core/gitcontrol says why)."""

    def before(self, *, bot_active: bool) -> GitSweep:
        """Before bot activity: the person's `.git` entries, to bind read-only. New ones are the
        person's unless a bot was active since the last sweep (`bot_active`); then they are moved aside."""
        ...

    def after(self) -> GitSweep:
        """After bot activity: move aside every structure that is not the person's."""
        ...


class GitGuards(Protocol):
    def workspace(self, path: str) -> GitGuard:
        """The guard of the workspace folder `path` (its state kept in its `.warden/`)."""
        ...

    def allowed_folder(self, path: str, fd: int, workspace: str) -> GitGuard:
        """The guard of the allowed read-write folder `path`, open (and judged) as `fd`, its
        state kept in the `.warden/` of the workspace folder `workspace`."""
        ...


class MountSources(Protocol):
    """Paths outside a workspace that a sandbox mounts, opened by descriptor with no link
    followed and judged by inode against Warden's own state, so no rename can swap them."""

    def open_binds(self, binds: Sequence[Bind], workspace: str
                   ) -> contextlib.AbstractContextManager[tuple[list[Bind], list[tuple[str, int]], list[str]]]:
        """Open each of `binds` outside `workspace`: yields the binds to mount, the (path, fd)
        of those opened, and "PATH (why)" for each one skipped; the fds close when the block ends."""
        ...

    def open_beneath(self, dir_fd: int, rel: str) -> contextlib.AbstractContextManager[int | None]:
        """`rel` beneath the folder open as `dir_fd`, no link followed, as a descriptor closed
        when the block ends; None when it cannot be opened so."""
        ...


class RunCgroups(Protocol):
    def sweep_orphans(self) -> list[str]:
        """Remove the cgroups of runs whose Warden process is gone; the ones removed."""
        ...


class Unarchiver(Protocol):
    """Brings archived workspace folders back from Warden's own archives (`archives/*.tar.zst`)."""

    def restore(self, archive: str, folder: str) -> None:
        """Unpack `archive` into `folder` (its links and protected names as they were), whole or
        not at all: through a staging folder beside it, trashed on failure. FileExistsError when
        something is at `folder`."""
        ...

    def discard(self, archive: str) -> None:
        """Delete `archive` once its folder is back (gone already: fine)."""
        ...


class Leftovers(Protocol):
    """Files a killed Warden leaves behind: half-written archives, trash never emptied, git's
    scratch folders in workspaces."""

    def temp_archives(self, folder: str) -> list[tuple[str, int]]:
        """Half-written files in `folder` (`.NAME.PID.tmp`: an archive, a backup's registry copy,
        an atomic write), each with its writer's pid."""
        ...

    def trashed(self, root: str) -> list[str]:
        """What lies in the trash of the workspaces root `root` (its background `rm` never finished)."""
        ...

    def folders(self, root: str) -> list[str]:
        """The names of the folders in `root` (none starting with "."; [] when it is missing)."""
        ...

    def git_scratch(self, workspace: str) -> list[tuple[str, int]]:
        """Scratch entries Warden's git made in workspace folder `workspace`'s `.warden/` (a
        checkout, a clone, an index, an object folder), each with the pid of the Warden that made it."""
        ...

    def workspace_temps(self, workspace: str) -> list[tuple[str, int, int]]:
        """Temporary files of Warden's writes anywhere in workspace folder `workspace` (relative
        paths), each with its writer's pid and start time; only names a Warden of this home
        signed, never a bot's file that looks like one."""
        ...

    def remove_workspace_temp(self, workspace: str, path: str) -> None:
        """Delete temporary file `path` (of `workspace_temps`) of workspace folder `workspace`,
        by descriptor, never through a link, and only while it is still such a file."""
        ...

    def remove_scratch(self, path: str) -> None:
        """Delete leftover `path` (of `temp_archives` or `git_scratch`), file or folder, now, never
        following a link (gone already: fine)."""
        ...

    def remove_in_background(self, path: str) -> None:
        """Delete the tree at `path` without waiting for it."""
        ...
