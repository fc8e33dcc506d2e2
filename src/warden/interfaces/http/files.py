"""File routes: list or stat, read, write, delete, move — through the safe file service.

Paths are workspace-relative (`/` is the workspace root; zones are top-level folders). The
grant decides first (read for list/stat/read, write for write/delete); a grant limited to
zones reaches the file service as a restricted actor whose scope is exactly those zones, and
the service applies the workspace policy, opens beneath the workspace and audits the
operation with the caller's name (bot and accessor).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from warden.core.errors import Conflict
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.file_services import FileServices, files_for
from warden.interfaces.http.models import FileDeleted, FileEntry, FileMove, FileMoved, FilesResult, FileWritten
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.shares import Shares
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.ports import FileEntry as Entry

__all__ = ["CONTENT_ROOM", "ContentHeld", "FileServices", "files_for", "read_content", "router"]

FilePath = Annotated[str, Query(min_length=1, max_length=4096,
                                description="workspace-relative path; / is the workspace root")]

# Entries of a directory in one answer (an answer is written whole to its connection): a bot's
# folder of 200,000 empty files with long names was one 97 MB answer, 7 s of the server's CPU,
# held in full for each connection whose client did not read it.
LIST_PAGE = 5000

_BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def _kind_name(kind: str) -> str:
    return "directory" if kind == "dir" else kind


def _kind(entry: Entry) -> str:
    return _kind_name(entry.type)


def _entry(parent: str, item: Entry) -> FileEntry:
    base = parent.rstrip("/")
    return FileEntry(name=item.name, path=f"{base}/{item.name}", type=_kind(item), size=item.size,
                     mtime=item.mtime)


# A file's bytes go to the client in pieces of this size, each handed on once the one before has
# left (uvicorn waits for its socket's buffer to drain): a whole body written at once sat in the
# connection's buffer for as long as the client did not read it.
CONTENT_PIECE = 1 << 20
# The sizes of the files being sent to clients, and of those being received. A bot that read a
# 99 MB sparse file (no disk) on ten connections and never read the answers made the server hold
# 1.3 GB more; on 256 (api.max_connections), 25 GB. An upload's body is held whole until it has
# all come (limits.py): one that sent all but the last byte of a 99 MB file on each of them held
# 25 GB too, for minutes. Now at most this many bytes for all bots together (answers being sent,
# each holding a piece of its file in memory, `Content`, and a connection; bodies being
# received), and at most CONTENT_SENDS_PER_BOT files of more than a piece being sent, and bodies
# a token let in (any size) being received, for one bot (its grants' root), each a connection
# busy until its client reads it or sends it all.
CONTENT_HELD = 1 << 30
CONTENT_SENDS_PER_BOT = 4


class ContentHeld(Shares):
    """The file content being sent (answers of more than one piece) or received (bodies a token
    let in), bounded in bytes overall and in transfers for each bot."""

    def __init__(self, total: int = CONTENT_HELD, per_bot: int = CONTENT_SENDS_PER_BOT) -> None:
        super().__init__(per_bot, total,
                         bot_full=lambda n: f"this bot already has {n} large files or bodies on their way at once; "
                                            "finish sending or reading one, then retry",
                         all_full=lambda _: "the server holds as much file content being sent or received as it "
                                            "may at once; retry in a moment")

    def take(self, bot: str, amount: int = 1, *, upload: bool = False) -> Callable[[], None]:
        """Room for `amount` bytes of `bot`'s (`upload`: a body being received, counted however
        small; see Shares.take)."""
        if amount <= CONTENT_PIECE and not upload:
            return _nothing  # sent in one piece: never held past its send
        # A body on its way is counted whatever its size: its token let it in, so it never gives
        # way at api.max_connections (protocol.py), and one bot's slow small uploads held them all.
        return super().take(bot, amount)


def _nothing() -> None:
    return None


CONTENT_ROOM = ContentHeld()  # the server's (one per process)


@dataclass
class Content:
    """A file's bytes on their way to a client, read from its descriptor a piece at a time as the
    client takes them (the first piece read at once), with the room they take (`ContentHeld`).
    A file of 100 MB was read whole before its first byte was sent: up to 40 such reads at once
    (the server's threads), the room all bots share (1 GiB) in memory at once."""

    first: bytes
    size: int
    fd: int | None  # the rest to read (None: `first` is all of it)
    give_back: Callable[[], None]

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        self.give_back()

    async def send(self, send: Send) -> None:
        """The body, piece by piece; the room is given back once all of it left (or the client did)."""
        try:
            await send({"type": "http.response.body", "body": self.first, "more_body": self.fd is not None})
            offset = len(self.first)
            while self.fd is not None and offset < self.size:
                want = min(CONTENT_PIECE, self.size - offset)
                piece = await run_in_threadpool(os.pread, self.fd, want, offset)
                if len(piece) < want:  # it shrank while being sent: the answer cannot be whole
                    raise RuntimeError(f"the file shrank to {offset + len(piece)} of its {self.size} bytes "
                                       "while being sent; the connection is closed")
                offset += want
                await send({"type": "http.response.body", "body": piece, "more_body": offset < self.size})
        finally:
            self.close()


def read_content(app: App, services: FileServices, token: str | None, name: str, path: str,
                 held: ContentHeld = CONTENT_ROOM) -> Content:
    """GET …/files/content: a file for the holder of `token` (the route and the fast path), opened
    and its first piece read, with its room among the bytes being sent (`ContentHeld`)."""
    taken: list[Callable[[], None]] = []

    def room(size: int) -> None:  # before the file is read: a refused one is never read at all
        taken.append(held.take(principal.minter, size))

    try:
        with Call(app, "files.read", f"{name}:{path}") as call:
            principal = call.authenticate(token)
            fd, size = files_for(app, services, call, name, "read").open_read(path, room=room)
    except BaseException:
        # Room taken for a read that then failed (a read error, the audit's write): kept, each
        # held its file's size for good, and one bot's few reads of a large file made every
        # bot's large reads 503 until a restart.
        for taken_back in taken:
            taken_back()
        raise
    content = Content(b"", size, fd, taken[-1] if taken else _nothing)
    try:
        first = os.pread(fd, min(size, CONTENT_PIECE), 0)
        if len(first) < min(size, CONTENT_PIECE):
            raise Conflict(f"{path} changed while being read; read it again")
    except BaseException:
        content.close()
        raise
    content.first = first
    if size <= CONTENT_PIECE:  # all of it: the descriptor is not kept
        os.close(fd)
        content.fd = None
    return content


class ContentResponse(Response):
    """A `Content`, sent as `Content.send` does."""

    def __init__(self, content: Content) -> None:
        super().__init__(media_type="application/octet-stream")
        self.content = content
        self.headers["content-length"] = str(content.size)
        weakref.finalize(self, content.close)  # a response dropped unsent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await self.content.send(send)


def router(app: App, services: FileServices) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["files"])

    @api.get("/v1/workspaces/{name}/files", response_model=FilesResult)
    @threaded
    def list_or_stat(name: WorkspaceName, path: FilePath, token: Token,
                     offset: Annotated[int, Query(ge=0, description="entries to skip (a listing's next_offset)")] = 0,
                     limit: Annotated[int, Query(ge=1, le=LIST_PAGE, description="entries at most, "
                                                 f"{LIST_PAGE} by default")] = LIST_PAGE) -> FilesResult:
        """List a directory (a page of entries by name: `next_offset` asks for the next one), or
        the status of one file (needs `read`)."""
        from warden.core.paths import canonical

        with Call(app, "files.list", f"{name}:{path}") as call:
            call.authenticate(token_of(token))
            rel = canonical(path)
            files = files_for(app, services, call, name, "read")
            info = files.stat(rel)
            if info.type != "dir":
                return FilesResult(path=rel, type=_kind(info), size=info.size, mtime=info.mtime)
            listed = files.list(rel)
            entries = [_entry(rel, item) for item in listed[offset:offset + limit]]
            more = offset + limit if offset + limit < len(listed) else None
            return FilesResult(path=rel, type=_kind(info), size=info.size, mtime=info.mtime, entries=entries,
                               next_offset=more)

    @api.get("/v1/workspaces/{name}/files/content", response_class=Response,
             responses={200: {"content": _BINARY, "description": "the file's bytes"}})
    @threaded
    def read_file(name: WorkspaceName, path: FilePath, token: Token) -> Response:
        """A file's bytes (needs `read`)."""
        return ContentResponse(read_content(app, services, token_of(token), name, path))

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
