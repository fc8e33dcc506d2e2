"""What one read_file holds: a piece of the file and the lines asked for, never the whole file.

read_file read the whole file, decoded it and split it into lines (a string each): one read of a
file of 8 MB of short lines made `warden serve` hold some 300 MB at its peak, and 40 at once (its
threads) far more. It is read a piece at a time now; the lines kept are those answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.mcp import World, make_world
from tests.support.servers import ServeProcess
from warden.interfaces.mcp.files import MAX_TEXT, _Lines


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[World, ServeProcess]]:
    base = tmp_path_factory.mktemp("mcp-read")
    world = make_world(base)
    with ServeProcess(world.environ, base) as server:
        yield world, server


def _peak_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) >> 10 for line in status if line.startswith("VmHWM:"))


def _read_file(world: World, server: ServeProcess, **arguments: Any) -> dict[str, Any]:
    answer = httpx.post(server.url + "/mcp", timeout=120,
                        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "read_file", "arguments": {"workspace": "paper", **arguments}}},
                        headers={"Authorization": f"Bearer {world.tokens['alice@paper']}",
                                 "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def test_reading_a_few_lines_of_a_large_file_holds_a_piece_not_the_file(
        served: tuple[World, ServeProcess]) -> None:
    world, server = served
    assert server.proc is not None
    (world.path("paper") / "drafts" / "many.txt").write_bytes(b"a\n" * (4 << 20))  # 8 MiB, 4 Mi lines
    (world.path("paper") / "drafts" / "few.txt").write_bytes(b"a\n" * 10)
    assert not _read_file(world, server, path="/drafts/few.txt")["isError"]  # the MCP layer warmed up
    before = _peak_mib(server.proc.pid)
    said = _read_file(world, server, path="/drafts/many.txt", offset=1000, limit=3)
    grown = _peak_mib(server.proc.pid) - before
    assert not said["isError"], said
    assert said["structuredContent"]["lines"] == 4 << 20 and said["structuredContent"]["returned_lines"] == 3
    assert said["content"][0]["text"] == f"[/drafts/many.txt: lines 1000-1002 of {4 << 20}; call read_file with " \
                                         "offset=1003 for the rest]\na\na\na\n"
    assert grown < 64, f"one read_file of an 8 MiB file raised the server's peak by {grown} MiB"


def _as_splitlines_reads(data: bytes, first: int, limit: int, piece: int) -> tuple[list[str], int, str]:
    lines = _Lines(first, limit)
    for start in range(0, len(data), piece):
        lines.feed(data[start:start + piece])
    lines.feed(b"", final=True)
    return lines.chosen, lines.count, lines.cut


def test_lines_read_in_pieces_are_the_lines_of_the_whole_text() -> None:
    # Pieces end inside a CRLF, inside a UTF-8 character and inside a line over MAX_TEXT.
    short = "one\r\ntwo\rthree\n\u00e9t\u00e9\u2028x\x0cy\r\n\r\n\n"
    for piece in (1, 2, 3, 7):
        chosen, count, cut = _as_splitlines_reads(short.encode(), 1, 100, piece)
        assert (chosen, count, cut) == (short.splitlines(keepends=True), 8, ""), piece
        assert _as_splitlines_reads(short.encode(), 3, 2, piece)[0] == short.splitlines(keepends=True)[2:4]
    text = short + "z" * (MAX_TEXT + 10) + "\r\nlast"
    data = text.encode()
    whole = text.splitlines(keepends=True)
    for piece in (1000, 1024, 4097, len(data)):
        chosen, count, cut = _as_splitlines_reads(data, 1, 100, piece)
        assert count == len(whole) == 10, piece
        assert chosen == whole[:8], piece  # the long line does not fit after others
        chosen, count, cut = _as_splitlines_reads(data, 9, 100, piece)
        assert chosen == ["z" * MAX_TEXT], piece  # cut, and the answer full
        assert cut == f"\n[line 9 cut at {MAX_TEXT} of its {MAX_TEXT + 12} characters]", piece
        assert _as_splitlines_reads(data, 10, 1, piece)[0] == ["last"], piece
