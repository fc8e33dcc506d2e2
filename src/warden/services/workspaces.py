"""Workspace use cases: create, look up, list, destroy (lifecycle grows in later issues)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from warden.adapters.atomic import write_atomic
from warden.adapters.store import workspaces as rows
from warden.adapters.store.db import Database
from warden.core.errors import Conflict, NotFound
from warden.core.workspaces import WorkspaceRecord, check_name, check_type
from warden.services.audit import AuditLog

__all__ = ["CONFIGURED_MARKER", "METADATA_FILE", "WorkspaceService"]

METADATA_FILE = ".workspace.json"
CONFIGURED_MARKER = ".workspace_configured"


class WorkspaceService:
    def __init__(self, db: Database, audit: AuditLog, root_dir: Path,
                 clock: Callable[[], datetime]) -> None:
        self._db = db
        self._audit = audit
        self.root_dir = root_dir
        self._clock = clock

    # -- queries -------------------------------------------------------------------------
    def get(self, name: str) -> WorkspaceRecord:
        check_name(name)
        with self._db.transaction(write=False) as tx:
            record = rows.get(tx, name)
        if record is None:
            raise NotFound(f"no workspace named {name!r}: `warden list` shows the workspaces")
        return record

    def list(self, *, status: str | None = None, kind: str | None = None) -> list[WorkspaceRecord]:
        with self._db.transaction(write=False) as tx:
            return rows.list_all(tx, status=status, kind=kind)

    # -- commands ------------------------------------------------------------------------
    def create(self, name: str, *, kind: str = "user", ttl: timedelta | None = None,
               actor: str = "user", template: str | None = None) -> WorkspaceRecord:
        """Claim the name in the registry, make the folder, write metadata, mark it ready."""
        check_name(name)
        check_type(kind)
        now = self._clock()
        path = self.root_dir / name
        record = WorkspaceRecord(
            id="ws_" + secrets.token_hex(8), name=name, path=str(path), type=kind,
            status="creating", created_at=now.isoformat(), last_accessed=now.isoformat(),
            template=template, expires_at=(now + ttl).isoformat() if ttl else None,
            created_by=actor, meta={"pid": os.getpid()})
        # The row is the claim: two creators of one name race on the UNIQUE constraint.
        with self._db.transaction() as tx:
            rows.insert(tx, record)
        try:
            self.root_dir.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir(mode=0o755)
            except FileExistsError:
                raise Conflict(f"folder {path} already exists but is not a registered "
                               "workspace; move it away or pick another name") from None
            self._write_metadata(record)
            write_atomic(path / CONFIGURED_MARKER, now.isoformat().encode())
        except BaseException as exc:
            with self._db.transaction() as tx:
                rows.delete(tx, name)
                self._audit.record(actor=actor, action="workspace.create", target=name,
                                   result=getattr(exc, "code", "internal"), tx=tx)
            if not isinstance(exc, Conflict):
                shutil.rmtree(path, ignore_errors=True)
            raise
        with self._db.transaction() as tx:
            rows.update(tx, name, {"status": "ready", "meta": {}})
            self._audit.record(actor=actor, action="workspace.create", target=name,
                               detail={"type": kind, "template": template}, tx=tx)
        return self.get(name)

    def destroy(self, name: str, *, actor: str = "user") -> None:
        """Remove the registry row and the folder (the folder first renamed, so it is gone at once)."""
        record = self.get(name)
        path = Path(record.path)
        trash = self.root_dir / f".trash-{name}-{secrets.token_hex(4)}"
        with self._db.transaction() as tx:
            rows.delete(tx, name)
            self._audit.record(actor=actor, action="workspace.destroy", target=name, tx=tx)
        if path.exists():
            path.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)

    def touch(self, name: str) -> None:
        with self._db.transaction() as tx:
            rows.update(tx, name, {"last_accessed": self._clock().isoformat()})

    def _write_metadata(self, record: WorkspaceRecord) -> None:
        """Seed 000's `.workspace.json` (no access key in it: tokens live hashed in the registry)."""
        metadata = {
            "id": record.id, "name": record.name, "path": record.path,
            "created": record.created_at, "isolated": True, "type": record.type,
            "template": record.template, "layer_id": record.layer_id,
            "expires": record.expires_at, "python_venv": record.meta.get("python_venv"),
        }
        write_atomic(Path(record.path) / METADATA_FILE,
                     (json.dumps(metadata, indent=2) + "\n").encode("utf-8"))
