"""The forwarder's HTTP/1.1 link to other nodes (adapters/node_link.py), against real loopback
servers: one that answers as a server does (kept-alive, chunked, streamed, HEAD), and ones that
misbehave (close an idle connection, cut an answer short, send junk or huge headers)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest

from warden.adapters.node_link import LinkBroken, NodeLink

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _link(timeout: float = 5.0) -> NodeLink:
    return NodeLink(ssl_context=ssl.create_default_context, connect_timeout=2.0, timeout=timeout)


async def _serve(handler: Handler) -> tuple[asyncio.Server, str, list[int]]:
    """A loopback server; the list counts the connections it accepted."""
    accepted: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", accepted


async def _request_of(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """The head and body of the next request, or None at the end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


async def _echo_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request on the connection: its head and body back, as a kept-alive answer."""
    while (got := await _request_of(reader)) is not None:
        head, body = got
        if head.startswith(b"HEAD "):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 999\r\n\r\n")
        elif b" /chunked " in head:
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-kind: stream\r\n\r\n")
            for part in (b"one ", b"two ", b"three"):
                writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                await writer.drain()
                await asyncio.sleep(0.01)
            writer.write(b"0\r\n\r\n")
        else:
            answer = head + body
            writer.write(b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer))
        await writer.drain()


async def _read_all(link: NodeLink, base: str, method: str, target: str, body: bytes = b"",
                    headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    answer = await link.request(base, method, target, headers or [], body)
    try:
        got = b"".join([chunk async for chunk in answer.body()])
    finally:
        answer.close()
    return answer.status, answer.headers, got


def test_requests_go_out_as_given_and_reuse_one_kept_connection() -> None:
    async def main() -> None:
        server, base, accepted = await _serve(_echo_server)
        link = _link()
        try:
            for n in range(5):
                status, headers, got = await _read_all(link, base, "POST", f"/v1/x?n={n}", b"body-%d" % n,
                                                       [(b"authorization", b"Bearer t")])
                assert status == 201
                assert got.startswith(b"POST /v1/x?n=%d HTTP/1.1\r\nhost: 127.0.0.1:" % n)
                assert b"\r\nauthorization: Bearer t\r\n" in got and got.endswith(b"\r\n\r\nbody-%d" % n)
                assert (b"content-length", str(len(got)).encode()) in headers
            assert len(accepted) == 1  # one connection for all five
        finally:
            await link.aclose()
            server.close()

    asyncio.run(main())


def test_a_chunked_answer_arrives_de_chunked_piece_by_piece_and_head_has_no_body() -> None:
    async def main() -> None:
        server, base, _ = await _serve(_echo_server)
        link = _link()
        try:
            answer = await link.request(base, "GET", "/chunked", [], b"")
            assert answer.status == 200 and answer.content_length() is None
            pieces = [chunk async for chunk in answer.body()]
            answer.close()
            assert b"".join(pieces) == b"one two three" and len(pieces) >= 2  # as they came
            status, _, got = await _read_all(link, base, "HEAD", "/h")
            assert (status, got) == (200, b"")  # not waiting for 999 bytes that never come
            status, _, _ = await _read_all(link, base, "GET", "/after")
            assert status == 201
        finally:
            await link.aclose()
            server.close()

    asyncio.run(main())


def test_a_kept_connection_the_server_closed_is_replaced_once() -> None:
    async def one_answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _request_of(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        await asyncio.sleep(0.05)  # then gone, without saying so in the answer

    async def main() -> None:
        server, base, accepted = await _serve(one_answer_then_close)
        link = _link()
        try:
            for _ in range(3):
                assert (await _read_all(link, base, "GET", "/"))[2] == b"ok"
                await asyncio.sleep(0.15)
            assert len(accepted) == 3
        finally:
            await link.aclose()
            server.close()

    asyncio.run(main())


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",  # cut short
    b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
    b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 70000 + b"\r\n\r\n",  # headers over 64 KiB
    b"",  # closed at once
])
def test_a_broken_answer_is_link_broken_and_the_connection_is_not_kept(reply: bytes) -> None:
    async def misbehave(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _request_of(reader) is not None:
            writer.write(reply)
            await writer.drain()

    async def main() -> None:
        server, base, accepted = await _serve(misbehave)
        link = _link()
        try:
            for _ in range(2):
                with pytest.raises(LinkBroken) as broken:
                    await _read_all(link, base, "POST", "/x", b"{}")
                assert broken.value.sent  # the other node had it: it may have carried it out
            assert len(accepted) >= 2  # never a second request on a connection that broke
        finally:
            await link.aclose()
            server.close()

    asyncio.run(main())


def test_a_silent_server_times_out_and_a_closed_port_fails_to_connect() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes

    async def main() -> None:
        server, base, _ = await _serve(silent)
        link = _link(timeout=0.3)
        try:
            with pytest.raises(LinkBroken, match="Timeout") as slow:
                await _read_all(link, base, "GET", "/")
            assert slow.value.sent
        finally:
            server.close()
        closed, closed_base, _ = await _serve(silent)
        closed.close()
        await closed.wait_closed()
        with pytest.raises(LinkBroken, match="connecting") as refused:
            await _read_all(link, closed_base, "GET", "/")
        assert not refused.value.sent  # nothing reached it: asking again is safe
        await link.aclose()

    asyncio.run(main())


def test_a_request_on_a_kept_connection_that_times_out_is_not_sent_again() -> None:
    # Sent again, a slow exec would reach the other node twice (its nonce refuses the copy, and
    # the client would read a replay refusal instead of the timeout).
    seen: list[bytes] = []

    async def answers_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (got := await _request_of(reader)) is not None:
            seen.append(got[0])
            if len(seen) == 1:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()

    async def main() -> None:
        server, base, accepted = await _serve(answers_once)
        link = _link(timeout=0.3)
        try:
            assert (await _read_all(link, base, "GET", "/"))[2] == b"ok"
            with pytest.raises(LinkBroken, match="Timeout"):
                await _read_all(link, base, "POST", "/slow-exec", b"{}")
            await asyncio.sleep(0.1)
            assert len(accepted) == 1 and len(seen) == 2
        finally:
            await link.aclose()
            server.close()

    asyncio.run(main())
