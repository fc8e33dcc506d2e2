"""Checkpoint routes for bots: make one, list them (rollback stays with the person: CLI, Python).

Both act on the whole workspace, so a grant limited to zones cannot use them (it would save or
list files outside its zones); making one needs `write`, listing needs `read`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter
from pydantic import BaseModel, Field

from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.checkpoints import Manifest

__all__ = ["CheckpointInfo", "CheckpointRequest", "router"]


class CheckpointRequest(BaseModel):
    message: str = Field("", max_length=1000, description="what the checkpoint is for")


class CheckpointInfo(BaseModel):
    id: str
    created_at: str
    message: str
    actor: str
    files: int
    size: int
    added_bytes: int


def _info(manifest: Manifest) -> CheckpointInfo:
    return CheckpointInfo(id=manifest.id, created_at=manifest.created_at, message=manifest.message,
                          actor=manifest.actor, files=manifest.files, size=manifest.size,
                          added_bytes=manifest.added_bytes)


def router(app: App) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["checkpoints"])

    @api.post("/v1/workspaces/{name}/checkpoints", response_model=CheckpointInfo, status_code=201)
    @threaded
    def create(name: WorkspaceName, body: CheckpointRequest, token: Token) -> CheckpointInfo:
        """Save the workspace's content as a checkpoint (needs `write` on the whole workspace)."""
        with Call(app, "checkpoint.create", name) as call:
            call.authenticate(token_of(token))
            record = call.authorize(name, "write", whole_workspace=True)
            call.audited_by_service = True
            return _info(app.checkpoints.create(record, body.message, call.actor))

    @api.get("/v1/workspaces/{name}/checkpoints", response_model=list[CheckpointInfo])
    @threaded
    def listing(name: WorkspaceName, token: Token) -> list[CheckpointInfo]:
        """The workspace's checkpoints, newest first (needs `read` on the whole workspace)."""
        with Call(app, "checkpoint.list", name) as call:
            call.authenticate(token_of(token))
            record = call.authorize(name, "read", whole_workspace=True)
            return [_info(m) for m in reversed(app.checkpoints.list(record))]

    return api
