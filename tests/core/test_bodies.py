"""core/bodies.py: a JSON body's values counted before it is parsed, never what its strings hold."""

from __future__ import annotations

import json

import pytest

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


def test_a_utf16_or_utf32_body_is_counted_as_what_it_decodes_to() -> None:
    # json.loads takes UTF-16 and UTF-32: U+0122 is the bytes 22 01 in UTF-16-LE, a `"` to a
    # count of bytes, so the 150,000 lists between two such strings looked like one string.
    text = '{"cmd": ["\u0122"' + ",[]" * 150_000 + ',"\u0122"]}'
    for encoding in ("utf-16-le", "utf-16-be", "utf-16", "utf-32-le", "utf-32", "utf-8-sig"):
        body = text.encode(encoding)
        assert len(json.loads(body)["cmd"]) == 150_002  # what the server would build
        assert json_values(body) is not None and json_values(body) >= 150_000, encoding  # type: ignore[operator]
    # Ordinary text in those encodings still passes; a body that does not decode is json.loads's to refuse.
    assert json_values(json.dumps({"cmd": ["\u0122"] * 100, "stdin": "[]," * 200_000}).encode("utf-16")) is None
    broken = b'{\x00"\x00' + b"[\x00" * 200_000 + b"x"  # UTF-16 of an odd length
    assert json_values(broken) is None
    with pytest.raises(UnicodeDecodeError):
        json.loads(broken)
