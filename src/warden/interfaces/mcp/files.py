"""The file tools: read, write, edit, list, tree, search, stat, delete, move — each through the
caller's file service (services/files.py: the policy, approvals, the safe file layer beneath
the workspace and the audit), here only shaped for a model: line ranges, diffs, bounded walks."""

from __future__ import annotations

import base64
import codecs
import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warden.core.diffs import replacement_diff
from warden.core.errors import InvalidInput, TooLarge, WardenError
from warden.core.paths import canonical
from warden.interfaces.mcp.texts import Answer

if TYPE_CHECKING:
    from warden.services.files import FileService

__all__ = ["FILE_TOOLS", "LINES", "OpenFiles"]

LINES = 2000  # lines read_file returns when no limit is given
MAX_TEXT = 256 * 1024  # characters of file text in one answer
# Bytes of a binary file read_file (or a resource read) answers whole. Over HTTP an answer is
# written whole to its connection: a bot that asked for a 20 MB sparse file (no disk) four times
# and read no answer made the server hold 600 MB (base64, twice, in JSON), one for each
# connection it keeps open; a text of NULs is 6 bytes of JSON each.
MAX_WHOLE = 1 << 20
# Bytes of a file edit_file changes (it holds the file whole a few times over); more: exec.
MAX_EDIT = 8 << 20
TREE_ENTRIES = 400
# Entries list_directory answers (by name): a folder of 200,000 files was one answer of tens of MB.
LIST_ENTRIES = 1000
SEARCH_SCANNED = 5000
SEARCH_RESULTS = 100
# File text one search with `contains` reads, all files together: 5,000 hard links to one 1 MiB
# text file (1 MiB of the bot's disk) made each search read 5 GiB, 19 s of the server's CPU.
SEARCH_BYTES = 32 << 20
_NOT_EXPANDED = frozenset({".git", ".venv", "node_modules", "__pycache__", ".warden", ".mypy_cache",
                           ".pytest_cache", ".ruff_cache"})

# The caller's file service on the call's workspace, once its grant allows the permission named.
OpenFiles = Callable[[str], "FileService"]


def _entry_name(name: str, kind: str) -> str:
    return name + ("/" if kind == "dir" else "@" if kind == "symlink" else "")

# A file is read for read_file this many bytes at a time, and only the lines asked for are kept:
# the whole file read, decoded and split made one read of a 100 MB file of short lines hold
# gigabytes (a string per line), and 40 such reads (the server's threads) at once far more.
READ_PIECE = 256 * 1024
_LINE_ENDS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")  # as str.splitlines splits


class _Lines:
    """The lines `first`..`first + limit - 1` of a UTF-8 file fed in pieces (as str.splitlines
    splits them, ends kept), at most MAX_TEXT characters of them, and the count of all lines;
    a line's characters past MAX_TEXT are counted, not kept."""

    def __init__(self, first: int, limit: int) -> None:
        self.first = first
        self.limit = limit
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.count = 0  # lines ended so far
        self.carry = ""  # the line not yet ended (or ending in \r: a \n may follow)
        self.dropped = 0  # its characters not kept
        self.chosen: list[str] = []
        self.size = 0
        self.cut = ""
        self.full = False  # the answer is full: later lines are only counted

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self.carry + self.decoder.decode(data, final)  # UnicodeDecodeError: a binary file
        dropped, self.dropped = self.dropped, 0
        lines = text.splitlines(keepends=True)
        self.carry = ""
        if lines and not final and (lines[-1][-1] not in _LINE_ENDS or lines[-1][-1] == "\r"):
            self.carry = lines.pop()
            if len(lines) == 0:
                self.dropped = dropped
            if len(self.carry) > MAX_TEXT + 1:  # keep its start and its last character
                self.dropped += len(self.carry) - MAX_TEXT - 1
                self.carry = self.carry[:MAX_TEXT] + self.carry[-1]
            if not lines:
                return
        for index, line in enumerate(lines):
            self._line(line, dropped if index == 0 else 0)

    def _line(self, line: str, dropped: int) -> None:
        self.count += 1
        if self.full or self.count < self.first:
            return
        if self.count >= self.first + self.limit:
            self.full = True
            return
        length = len(line) + dropped
        if self.size + length > MAX_TEXT and self.chosen:
            self.full = True
            return
        if length > MAX_TEXT:  # one line past the bound, the first: a file of one 100 MB line
            self.cut = f"\n[line {self.first} cut at {MAX_TEXT} of its {length} characters]"
            line = line[:MAX_TEXT]
        self.chosen.append(line)
        self.size += len(line)


def read_file(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    first = int(args.get("offset", 1))
    lines = _Lines(first, int(args.get("limit", LINES)))
    head = bytearray()  # the first bytes, for a binary file's answer (MAX_WHOLE at most)
    binary = False
    size = whole = 0

    def take(piece: bytes, stat_size: int) -> bool:
        nonlocal binary, size, whole
        size += len(piece)
        whole = stat_size
        if len(head) <= MAX_WHOLE:
            head.extend(piece[:MAX_WHOLE + 1 - len(head)])
        try:
            lines.feed(piece)
        except UnicodeDecodeError:
            binary = True
        return not binary or size <= MAX_WHOLE

    open_files("read").read_pieces(path, take, piece=READ_PIECE)
    if not binary:
        try:
            lines.feed(b"", final=True)
        except UnicodeDecodeError:
            binary = True
    if binary:
        if "offset" in args or "limit" in args:
            raise InvalidInput(f"{path} is a binary file; read it whole (it comes back as base64)")
        if size > MAX_WHOLE:
            workspace = args.get("workspace", "NAME")
            raise InvalidInput(f"{path} is a binary file of {max(whole, size)} bytes, over the {MAX_WHOLE >> 20} MiB "
                               "read_file returns; "
                               "read a part of it with exec (`head -c`, `od -A d -t x1 -j SKIP -N COUNT`), or all of "
                               f"it over HTTP: GET /v1/workspaces/{workspace}/files/content?path={path} (the SDK's "
                               f"workspace({workspace!r}).files.read)")
        encoded = base64.b64encode(bytes(head)).decode("ascii")
        return Answer(f"{path} is binary ({size} bytes); base64:\n{encoded}",
                      {"path": path, "encoding": "base64", "size": size, "content": encoded})
    if first > max(lines.count, 1):
        raise InvalidInput(f"offset {first} is past the end of {path} ({lines.count} lines)")
    last = first - 1 + len(lines.chosen)
    body = "".join(lines.chosen) + lines.cut
    # The text goes once, as the content a model reads; the structured part says what it is.
    data_out: dict[str, Any] = {"path": path, "encoding": "utf-8", "size": size, "lines": lines.count,
                                "offset": first, "returned_lines": len(lines.chosen)}
    if first == 1 and last >= lines.count and not lines.cut:
        return Answer(body, data_out)
    more = f"; call read_file with offset={last + 1} for the rest" if last < lines.count else ""
    return Answer(f"[{path}: lines {first}-{last} of {lines.count}{more}]\n{body}", data_out)


def write_file(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    if args.get("encoding") == "base64":
        try:
            data = base64.b64decode(args["content"], validate=True)
        except ValueError:
            raise InvalidInput("content is not valid base64") from None
    else:
        data = args["content"].encode("utf-8")
    size = open_files("write").write_bytes(path, data)
    return Answer(f"wrote {size} bytes to {path}", {"path": path, "size": size})


def edit_file(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    files = open_files("write")

    def room(size: int) -> None:
        # A file is held whole a few times over while it is edited (its bytes, its text, the
        # text changed): one bot's dozens of calls on files of 100 MB would take gigabytes.
        if size > MAX_EDIT:
            raise TooLarge(f"{path} holds {size} bytes, over the {MAX_EDIT >> 20} MiB edit_file changes; change "
                           "it with exec (sed, a script) or write it whole with write_file")

    try:
        before = files.read_bytes(path, room=room).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not valid utf-8 text; read it as bytes") from None
    old, new = args["old"], args["new"]
    found = before.count(old)
    if found == 0:
        raise InvalidInput(f"the text to replace does not occur in {path}; read_file it and copy the exact "
                           "text, whitespace and line breaks included")
    if found > 1:
        raise InvalidInput(f"the text to replace occurs {found} times in {path}; include more of the lines "
                           "around it so that it occurs once")
    at = before.find(old)
    files.write_text(path, before[:at] + new + before[at + len(old):])
    # Of the lines around the change, in time linear in them (core/diffs.py): difflib's own diff of
    # the whole of a bot's crafted file held a server thread for minutes.
    diff = "".join(replacement_diff(before, at, len(old), new, f"a{path}", f"b{path}"))
    return Answer(diff or "(no change)", {"path": path, "diff": diff})


def list_directory(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    files = open_files("read")
    listed = files.list(path)
    entries = listed[:LIST_ENTRIES]
    rows = [{"name": e.name, "type": "directory" if e.type == "dir" else e.type, "size": e.size}
            for e in entries]
    text = "\n".join(_entry_name(e.name, e.type) for e in entries) or f"{path} is empty"
    if len(listed) > len(entries):
        text += (f"\n… {len(listed) - len(entries)} more entries not shown (at most {LIST_ENTRIES}); "
                 "narrow it with search_files and a pattern")
    return Answer(text, {"path": path, "entries": rows, "truncated": len(listed) > len(entries)})


def directory_tree(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    start = canonical(args.get("path", "/"))
    depth = int(args.get("depth", 3))
    files = open_files("read")
    lines: list[str] = []
    cut = False

    def walk(folder: str, level: int) -> None:
        nonlocal cut
        for entry in files.list(folder):
            if len(lines) >= TREE_ENTRIES:
                cut = True
                return
            child = f"{folder.rstrip('/')}/{entry.name}"
            note = "  (not expanded)" if entry.type == "dir" and entry.name in _NOT_EXPANDED else ""
            lines.append("  " * level + _entry_name(entry.name, entry.type) + note)
            if entry.type == "dir" and not note and level + 1 < depth:
                walk(child, level + 1)

    with files.one_event("tree", start):
        walk(start, 0)
    if cut:
        lines.append(f"… more entries not shown (at most {TREE_ENTRIES}); ask for a deeper path")
    return Answer(f"{start}\n" + "\n".join(lines), {"path": start, "tree": lines, "truncated": cut})


def search_files(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    start = canonical(args.get("path", "/"))
    pattern = args["pattern"]
    flat = pattern.replace("**/", "")
    needle = args.get("contains")
    files = open_files("read")
    with files.one_event("search", start):
        found, bounded = _search(files, start, pattern, flat, needle, [start])
    out: list[str] = []
    for item in found:
        out.append(item["path"])
        out.extend(f"  {hit['line']}: {hit['text']}" for hit in item.get("lines", ()))
    if bounded:
        out.append(f"… search stopped (at most {SEARCH_RESULTS} results, {SEARCH_SCANNED} entries looked at, "
                   f"{SEARCH_BYTES >> 20} MiB of text read); "
                   "narrow it with path or pattern")
    return Answer("\n".join(out) or "no matches", {"matches": found, "truncated": bounded})


def _search(files: FileService, start: str, pattern: str, flat: str, needle: str | None,
            queue: list[str]) -> tuple[list[dict[str, Any]], bool]:
    found: list[dict[str, Any]] = []
    scanned = 0
    read = 0
    bounded = False
    while queue and not bounded:
        folder = queue.pop(0)
        for entry in files.list(folder):
            scanned += 1
            if scanned > SEARCH_SCANNED or len(found) >= SEARCH_RESULTS:
                bounded = True
                break
            full = f"{folder.rstrip('/')}/{entry.name}"
            rel = full[len(start.rstrip("/")) + 1:]
            if entry.type == "dir":
                if entry.name not in _NOT_EXPANDED:
                    queue.append(full)
                continue
            if not any(fnmatch.fnmatchcase(candidate, glob) for candidate in (entry.name, rel)
                       for glob in (pattern, flat)):
                continue
            if needle is None:
                found.append({"path": full})
                continue
            if entry.type != "file" or entry.size > 1 << 20:
                continue
            read += entry.size
            if read > SEARCH_BYTES:
                bounded = True
                break
            try:
                text = files.read_text(full)
            except WardenError:
                continue  # binary or unreadable: not a match for text
            hits = [(n, line) for n, line in enumerate(text.splitlines(), 1) if needle in line][:5]
            if hits:
                found.append({"path": full, "lines": [{"line": n, "text": line[:300]} for n, line in hits]})
    return found, bounded


def file_info(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    info = open_files("read").stat(path).to_json()
    info["path"] = path
    info["type"] = "directory" if info["type"] == "dir" else info["type"]
    return Answer("\n".join(f"{k}: {info[k]}" for k in ("path", "type", "size", "mode", "mtime", "nlink")),
                   info)


def delete_file(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    path = canonical(args["path"])
    kind = open_files("write").delete(path, recursive=bool(args.get("recursive")))
    return Answer(f"deleted {path}", {"path": path, "type": "directory" if kind == "dir" else kind})


def move_file(open_files: OpenFiles, args: dict[str, Any]) -> Answer:
    source, destination = canonical(args["source"]), canonical(args["destination"])
    kind = open_files("write").move(source, destination)
    return Answer(f"moved {source} to {destination}", {"source": source, "destination": destination,
                                                         "type": "directory" if kind == "dir" else kind})


FILE_TOOLS: dict[str, Callable[[OpenFiles, dict[str, Any]], Answer]] = {
    "read_file": read_file, "write_file": write_file, "edit_file": edit_file, "list_directory": list_directory,
    "directory_tree": directory_tree, "search_files": search_files, "file_info": file_info,
    "delete_file": delete_file, "move_file": move_file}
