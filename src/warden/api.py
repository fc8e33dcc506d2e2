"""The Python API: `Warden.open()` → `Workspace` objects (names pinned by tests/test_public_api.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from warden.bootstrap import App, bootstrap
from warden.core.runs import RunResult
from warden.core.workspaces import WorkspaceRecord

if TYPE_CHECKING:
    from warden.core.checkpoints import Manifest
    from warden.services.files import FileService

__all__ = ["RunResult", "Warden", "Workspace"]


class Workspace:
    """One workspace: its record, its files and its sandboxed runs."""

    def __init__(self, app: App, record: WorkspaceRecord) -> None:
        self._app = app
        self.record = record

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def path(self) -> str:
        return self.record.path

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def files(self) -> FileService:
        """Safe file operations (read_text/read_bytes/write_text/write_bytes/delete/list/stat/exists/mkdir).

        Paths are workspace-relative ("/" is the workspace root). The caller is the local
        person, so zones whose approval is `ask` proceed as approved by them.
        """
        from warden.services.files import approve_local_user

        return self._app.files(self.record, approver=approve_local_user)

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
            memory: str | int | None = None, cpu: int | None = None, pids: int | None = None,
            net: str | None = None, allow_domains: Sequence[str] = (), cwd: str | None = None) -> RunResult:
        """Run `argv` in this workspace's sandbox and wait for it; a `Refused` error (a Denied,
        Locked, ... as the reason was) when Warden would not start it. `cwd`: its working folder,
        relative to the workspace (or absolute inside it)."""
        from warden.services.runs import RunRequest

        return self._app.runs.execute(RunRequest(self.name, argv, timeout=timeout, memory=memory, cpu=cpu,
                                                 pids=pids, net=net, allow_domains=allow_domains,
                                                 env=env or {}, stdin=stdin, cwd=cwd))

    def checkpoint(self, message: str = "") -> Manifest:
        """Save the workspace's content as a checkpoint (`warden checkpoint`); its `.id` rolls back to it."""
        return self._app.checkpoints.create(self.name, message)

    def checkpoints(self) -> list[Manifest]:
        """The workspace's checkpoints, oldest first."""
        return self._app.checkpoints.list(self.name)

    def rollback(self, checkpoint: str, *, path: str | None = None) -> dict[str, object]:
        """Bring the workspace (or only `path`) back to `checkpoint`; what was there is saved first."""
        return self._app.checkpoints.rollback(self.name, checkpoint, path=path)

    def refresh(self) -> Workspace:
        self.record = self._app.workspaces.get(self.name)
        return self

    def __repr__(self) -> str:
        return f"Workspace({self.name!r}, status={self.status!r}, path={self.path!r})"


class Warden:
    """The broker in a Python process; every call goes through the same services as the CLI."""

    def __init__(self, app: App) -> None:
        self.app = app

    @classmethod
    def open(cls, home: str | os.PathLike[str] | None = None, *,
             environ: Mapping[str, str] | None = None) -> Warden:
        """Open Warden at `home` (default: $WARDEN_HOME or ~/.warden)."""
        return cls(bootstrap(home, environ=environ))

    def create(self, name: str, *, kind: str = "user", ttl: timedelta | None = None,
               **options: Any) -> Workspace:
        record = self.app.workspaces.create(name, kind=kind, ttl=ttl, **options)
        return Workspace(self.app, record)

    def get(self, name: str) -> Workspace:
        return Workspace(self.app, self.app.workspaces.get(name))

    def list(self, *, status: str | None = None, kind: str | None = None) -> list[Workspace]:
        return [Workspace(self.app, r) for r in self.app.workspaces.list(status=status, kind=kind)]

    def destroy(self, name: str, *, archive: bool = True) -> None:
        self.app.workspaces.destroy(name, archive=archive)

    def close(self) -> None:
        self.app.close()

    def __enter__(self) -> Warden:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
