"""File routes: list or stat, read, write, delete, move — through the safe file service.

Paths are workspace-relative (`/` is the workspace root; zones are top-level folders). The
grant decides first (read for list/stat/read, write for write/delete); a grant limited to
zones reaches the file service as a restricted actor whose scope is exactly those zones, and
the service applies the workspace policy, opens beneath the workspace and audits the
operation with the caller's name (bot and accessor).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.file_services import FileServices, files_for
from warden.interfaces.http.models import FileDeleted, FileEntry, FileMove, FileMoved, FilesResult, FileWritten
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.ports import FileEntry as Entry

__all__ = ["FileServices", "files_for", "read_content", "router"]

FilePath = Annotated[str, Query(min_length=1, max_length=4096,
                                description="workspace-relative path; / is the workspace root")]

_BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def _kind_name(kind: str) -> str:
    return "directory" if kind == "dir" else kind


def _kind(entry: Entry) -> str:
    return _kind_name(entry.type)


def _entry(parent: str, item: Entry) -> FileEntry:
    base = parent.rstrip("/")
    return FileEntry(name=item.name, path=f"{base}/{item.name}", type=_kind(item), size=item.size,
                     mtime=item.mtime)


def read_content(app: App, services: FileServices, token: str | None, name: str, path: str) -> bytes:
    """GET …/files/content: a file's bytes for the holder of `token` (the route and the fast path)."""
    with Call(app, "files.read", f"{name}:{path}") as call:
        call.authenticate(token)
        return files_for(app, services, call, name, "read").read_bytes(path)


def router(app: App, services: FileServices) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["files"])

    @api.get("/v1/workspaces/{name}/files", response_model=FilesResult)
    @threaded
    def list_or_stat(name: WorkspaceName, path: FilePath, token: Token) -> FilesResult:
        """List a directory, or the status of one file (needs `read`)."""
        from warden.core.paths import canonical

        with Call(app, "files.list", f"{name}:{path}") as call:
            call.authenticate(token_of(token))
            rel = canonical(path)
            files = files_for(app, services, call, name, "read")
            info = files.stat(rel)
            entries = [_entry(rel, item) for item in files.list(rel)] if info.type == "dir" else None
            return FilesResult(path=rel, type=_kind(info), size=info.size, mtime=info.mtime, entries=entries)

    @api.get("/v1/workspaces/{name}/files/content", response_class=Response,
             responses={200: {"content": _BINARY, "description": "the file's bytes"}})
    @threaded
    def read_file(name: WorkspaceName, path: FilePath, token: Token) -> Response:
        """A file's bytes (needs `read`)."""
        data = read_content(app, services, token_of(token), name, path)
        return Response(content=data, media_type="application/octet-stream")

    @api.put("/v1/workspaces/{name}/files/content", response_model=FileWritten,
             openapi_extra={"requestBody": {"required": True, "content": _BINARY}})
    async def write_file(name: WorkspaceName, path: FilePath, token: Token, request: Request) -> FileWritten:
        """Replace a file with the request body (needs `write`); atomic, within the size limit."""
        data = await request.body()

        def write() -> FileWritten:
            with Call(app, "files.write", f"{name}:{path}") as call:
                call.authenticate(token_of(token))
                size = files_for(app, services, call, name, "write").write_bytes(path, data)
                return FileWritten(path=path, size=size)

        return await run_in_threadpool(write)

    @api.delete("/v1/workspaces/{name}/files", response_model=FileDeleted)
    @threaded
    def delete_file(name: WorkspaceName, path: FilePath, token: Token) -> FileDeleted:
        """Delete a file, a link or an empty folder (needs `write`)."""
        with Call(app, "files.delete", f"{name}:{path}") as call:
            call.authenticate(token_of(token))
            files_for(app, services, call, name, "write").delete(path)
            return FileDeleted(path=path, deleted=True)

    @api.post("/v1/workspaces/{name}/files/move", response_model=FileMoved)
    @threaded
    def move_file(name: WorkspaceName, body: FileMove, token: Token) -> FileMoved:
        """Move (rename) a file or folder, never over an existing one (needs `write`; the policy
        decides removing the source and writing the destination)."""
        with Call(app, "files.move", f"{name}:{body.source}") as call:
            call.authenticate(token_of(token))
            kind = files_for(app, services, call, name, "write").move(body.source, body.destination)
            return FileMoved(source=body.source, destination=body.destination, type=_kind_name(kind))

    return api
