"""core/bodies.py: a JSON body's values counted before it is parsed, never what its strings hold."""

from __future__ import annotations

import json

from warden.core.bodies import json_values


def test_ordinary_bodies_pass_on_the_cheap_count() -> None:
    assert json_values(json.dumps({"cmd": ["sh", "-c", "echo hi"], "env": {"A": "1"}}).encode()) is None
    # What a real exec may carry: 4096 arguments and some environment.
    body = json.dumps({"cmd": ["x"] * 4096, "env": {f"K{i}": "v" for i in range(2000)}}).encode()
    assert json_values(body) is None


def test_brackets_and_commas_inside_one_string_are_not_values() -> None:
    # 16 MiB of stdin made of nothing but JSON punctuation, escaped quotes and backslashes.
    stdin = '[{,"\\' * (1 << 20)
    body = json.dumps({"cmd": ["cat"], "stdin": stdin}).encode()
    assert body.count(b"[") > 1_000_000  # so the cheap count cannot let it through
    assert json_values(body) is None
    # A string ending in an escaped backslash closes where JSON says it does.
    assert json_values(json.dumps(["a\\", "[" * 200_000]).encode()) is None


def test_many_containers_commas_or_strings_are_counted() -> None:
    lists = b'{"cmd": [' + b",".join([b"[]"] * 150_000) + b"]}"
    assert json_values(lists) is not None and json_values(lists) >= 300_000  # type: ignore[operator]
    numbers = b'{"cmd": [' + b",".join([b"0"] * 150_000) + b"]}"
    assert json_values(numbers) is not None
    strings = json.dumps({"env": {f"K{i}": "" for i in range(60_000)}}).encode()
    assert json_values(strings) is not None
    # A quote hidden behind pairs of backslashes still closes its string: counted, not skipped.
    masked = b"[" + b",".join([b'"a\\\\"'] * 120_000) + b"]"
    assert json_values(masked) is not None
    assert json_values(lists, limit=10_000_000) is None
