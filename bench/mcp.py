"""What the MCP server costs against the HTTP API, both measured in the same run on one server.

    .venv/bin/python bench/mcp.py [-n 50]

Rows: `exec true` and a 4 KiB `read_file`, each through the HTTP API (the SDK's `Client`,
keep-alive; the read also through the async `httpx2` client the MCP SDK's client runs on, in the
same event loop: the like-for-like baseline of the MCP HTTP client row), through MCP over
streamable HTTP at /mcp of the same `warden serve` (the official `mcp` SDK's client, one session;
and the read as one raw JSON-RPC POST, which shows the server's share apart from the SDK
client's), and through MCP over stdio (`python -m warden mcp`). Every MCP call authenticates its
token again and goes through the same services and audit as HTTP's. The rows are measured in
turns (one call of each, then again; execs and reads in separate rounds), so load from elsewhere
on the machine falls on all of them alike. Target: MCP <= 1.5x the HTTP API for each.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import bench_home  # noqa: E402
from api import start_server  # noqa: E402

# This file is bench/mcp.py: with its folder on sys.path, `import mcp` would find it, not the SDK.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]

TEXT = (("0123456789abcdef" * 4 + "\n") * 64)[:4095] + "\n"  # 4 KiB of text


async def timed(fn: Callable[[], Awaitable[object] | object]) -> float:
    """Milliseconds of one call of `fn` (awaited when it is a coroutine function)."""
    start = time.perf_counter()
    answer = fn()
    if asyncio.iscoroutine(answer):
        await answer
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=50, help="calls per row")
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "src" / "warden"), quiet=1)
    sys.path.insert(0, str(REPO / "src"))
    import httpx
    import httpx2
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    from warden import Warden
    from warden.client import Client

    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home, env = bench_home(tmp)
        with Warden.open(home, environ=env) as w:
            w.create("bench", template="minimal").files.write_text("data/4k.txt", TEXT)
            w.app.grants.register_bot("bench-bot")
            token = w.app.grants.grant("bench", "bench-bot", "read,write,execute").token
        server, url = start_server(env, Path(tmp) / "serve.log")
        try:
            remote = Client(url, token).workspace("bench")

            def http_exec() -> None:
                assert remote.run(["true"]).exit_code == 0

            def http_read() -> None:
                assert remote.files.read_text("/data/4k.txt") == TEXT

            async def exec_on(session: Any) -> None:
                result = await session.call_tool("exec", {"workspace": "bench", "cmd": ["true"]})
                assert not result.is_error and result.structured_content["exit_code"] == 0, result

            async def read_on(session: Any) -> None:
                result = await session.call_tool("read_file", {"workspace": "bench", "path": "/data/4k.txt"})
                assert result.content[0].text == TEXT, result

            raw = httpx.Client(headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                                        "Accept": "application/json, text/event-stream",
                                        "MCP-Protocol-Version": "2025-06-18"}, timeout=60)
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "read_file", "arguments": {"workspace": "bench", "path": "/data/4k.txt"}}}

            def raw_read() -> None:
                # One JSON-RPC POST, its answer parsed by hand: the server's share of the cost.
                answer = raw.post(url + "/mcp", json=call)
                if answer.headers["content-type"].startswith("text/event-stream"):
                    message = json.loads(next(line[5:] for line in answer.text.splitlines()
                                              if line.startswith("data:")))
                else:
                    message = answer.json()
                assert message["result"]["content"][0]["text"] == TEXT

            async def in_turns() -> list[tuple[str, list[float]]]:
                params = StdioServerParameters(command=sys.executable, args=["-m", "warden", "mcp"],
                                               env={**env, "WARDEN_TOKEN": token})
                async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
                            streamable_http_client(url + "/mcp", http_client=http) as (read, write),
                            ClientSession(read, write) as over_http,
                            stdio_client(params) as (sread, swrite),
                            ClientSession(sread, swrite) as over_stdio):
                    await over_http.initialize()
                    await over_stdio.initialize()
                    async def http_read_async() -> None:
                        # The HTTP API through the very client library and event loop the MCP SDK's
                        # client uses: the like-for-like baseline of the MCP HTTP rows.
                        answer = await http.get(url + "/v1/workspaces/bench/files/content",
                                                params={"path": "/data/4k.txt"})
                        assert answer.content.decode() == TEXT

                    execs: list[tuple[str, Callable[[], Any]]] = [
                        ("HTTP API exec true", http_exec), ("MCP HTTP exec true", lambda: exec_on(over_http)),
                        ("MCP stdio exec true", lambda: exec_on(over_stdio))]
                    reads: list[tuple[str, Callable[[], Any]]] = [
                        ("HTTP API read 4 KiB", http_read),
                        ("HTTP API read 4 KiB, async client", http_read_async),
                        ("MCP HTTP read_file 4 KiB", lambda: read_on(over_http)),
                        ("  same, raw POST (no SDK client)", raw_read),
                        ("MCP stdio read_file 4 KiB", lambda: read_on(over_stdio))]
                    times: dict[str, list[float]] = {name: [] for name, _ in execs + reads}
                    # Execs and reads in separate rounds: a run's aftermath (its audit row, the
                    # sandbox's teardown) would otherwise fall on whichever read came next.
                    for calls in (execs, reads):
                        for turn in range(args.n + 1):
                            for name, fn in calls:
                                took = await timed(fn)
                                if turn:  # the first turn warms up
                                    times[name].append(took)
                    return list(times.items())

            rows += asyncio.run(in_turns())
        finally:
            server.terminate()
            server.wait(10)
    medians = {name: statistics.median(times) for name, times in rows}
    base = {"exec": medians["HTTP API exec true"], "read": medians["HTTP API read 4 KiB"],
            "async read": medians["HTTP API read 4 KiB, async client"]}
    print(f"{'what':34} {'median ms':>10} {'p90 ms':>8} {'x HTTP API':>11}")
    verdicts = []
    for name, times in rows:
        med = statistics.median(times)
        p90 = sorted(times)[int(len(times) * 0.9) - 1]
        kind = "exec" if "exec" in name else "read"
        ratio = med / base[kind]
        print(f"{name:34} {med:10.2f} {p90:8.2f} {ratio:11.2f}")
        if name.startswith("MCP") or name.startswith("  same"):
            verdicts.append((name, ratio, None))
        if name == "MCP HTTP read_file 4 KiB":  # the SDK's async client against the API through the same
            verdicts.append((name, med / base["async read"], "HTTP API, async client"))
    print()
    for name, ratio, against in verdicts:
        name = name.strip()
        print(f"target {name} <= 1.5x {against or 'HTTP API'}: {ratio:.2f}x ({'met' if ratio <= 1.5 else 'MISSED'})")


if __name__ == "__main__":
    main()
