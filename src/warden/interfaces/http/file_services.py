"""The file services of callers over HTTP and MCP, one per (workspace, caller, scope), and the
grant check before one is handed out.

Apart from the routes (files.py) so that `warden mcp`, which uses these and no route, does not
load FastAPI and every route at start (0.1–0.35 s of its start-up, measured).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.workspaces import WorkspaceRecord
    from warden.core.zones import Zone
    from warden.interfaces.http.calls import Call
    from warden.services.auth import Principal
    from warden.services.files import FileService

__all__ = ["FileServices", "files_for"]


class FileServices:
    """File services kept per (workspace, caller, scope), so each keeps its built policy between
    requests (it rebuilds itself when a policy file changes); bounded, oldest dropped first."""

    def __init__(self, app: App, size: int = 256) -> None:
        self._app = app
        self._size = size
        self._cache: OrderedDict[Hashable, FileService] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, record: WorkspaceRecord, principal: Principal, scope: dict[str, Zone] | None) -> FileService:
        actor = principal.actor
        key = (record.id, record.path, record.status, actor,
               None if scope is None else tuple(sorted(scope.items())))
        with self._lock:
            service = self._cache.get(key)
            if service is not None:
                self._cache.move_to_end(key)
                return service
        # A zone's `ask` stores the operation in the approvals queue and answers 202 pending.
        service = self._app.files(record, actor=actor, scope=scope, approver=self._app.approvals.queue(principal))
        with self._lock:
            self._cache[key] = service
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return service


def files_for(app: App, services: FileServices, call: Call, name: str, permission: str) -> FileService:
    """The file service for the authenticated caller, after its grant allowed `permission`."""
    assert call.principal is not None
    record = call.authorize(name, permission)
    scope = app.auth.zone_scope(call.principal, lambda: app.sandbox_paths.zones(record))
    call.audited_by_service = True
    return services.get(record, call.principal, scope)
