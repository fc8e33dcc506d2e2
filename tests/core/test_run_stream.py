"""The events of a streamed exec and the control messages of a PTY, decided without running anything."""

from __future__ import annotations

import json

import pytest

from warden.core.errors import InvalidInput
from warden.core.run_stream import MAX_EVENT, OutputEvents, error_event, exit_event, merge, ndjson
from warden.core.runs import RunResult
from warden.core.terminal import Resize, check_term, parse_control, size_of


def test_a_character_split_between_reads_arrives_whole() -> None:
    events = OutputEvents(max_output=1024)
    assert events.feed("stdout", b"ca" + "é".encode()[:1]) == [{"type": "stdout", "data": "ca"}]
    assert events.feed("stdout", "é".encode()[1:] + b"!") == [{"type": "stdout", "data": "é!"}]
    assert events.finish() == []


def test_invalid_bytes_and_a_cut_character_become_replacement_characters() -> None:
    events = OutputEvents(max_output=1024)
    assert events.feed("stderr", b"\xff ok") == [{"type": "stderr", "data": "\ufffd ok"}]
    assert events.feed("stderr", "é".encode()[:1]) == []
    assert events.finish() == [{"type": "stderr", "data": "\ufffd"}]


def test_output_past_the_cap_is_counted_and_said_in_a_last_line() -> None:
    events = OutputEvents(max_output=10)
    sent = events.feed("stdout", b"0123456789abcdef") + events.feed("stdout", b"more") + events.feed("stderr", b"e")
    assert "".join(e["data"] for e in sent if e["type"] == "stdout") == "0123456789"
    assert events.dropped == {"stdout": 10, "stderr": 0}
    notice = OutputEvents.notice(b"warden: a line of Warden's own\n")  # outside the cap
    assert notice == [{"type": "stderr", "data": "warden: a line of Warden's own\n"}]
    last = events.finish()
    assert last == [{"type": "stderr", "data": "warden: output beyond 10 bytes per stream was dropped "
                                               "(stdout 10 bytes; api.max_output)\n"}]


def test_events_are_bounded_and_merged_only_within_one_stream() -> None:
    events = OutputEvents(max_output=1 << 30)
    big = events.feed("stdout", b"x" * (3 * MAX_EVENT + 5))
    assert [len(e["data"]) for e in big] == [MAX_EVENT, MAX_EVENT, MAX_EVENT, 5]
    assert all(len(e["data"]) <= MAX_EVENT for e in merge(big))
    small = [{"type": "stdout", "data": "a"}, {"type": "stdout", "data": "b"}, {"type": "stderr", "data": "c"},
             {"type": "stdout", "data": "d"}]
    assert merge(small) == [{"type": "stdout", "data": "ab"}, {"type": "stderr", "data": "c"},
                            {"type": "stdout", "data": "d"}]


def test_the_exit_and_error_lines_and_their_ndjson() -> None:
    result = RunResult(exit_code=137, stdout="", stderr="", duration_s=1.23456789, signal=9)
    lines = ndjson([{"type": "stdout", "data": "é\n"}, exit_event(result), error_event("unavailable", "gone")])
    assert lines.endswith(b"\n") and lines.count(b"\n") == 3
    first, exit_line, error_line = (json.loads(line) for line in lines.splitlines())
    assert first == {"type": "stdout", "data": "é\n"}
    assert exit_line == {"type": "exit", "exit_code": 137, "timed_out": False, "signal": 9, "duration_s": 1.234568}
    assert error_line == {"type": "error", "error": {"code": "unavailable", "message": "gone"}}


def test_resize_messages_are_checked() -> None:
    assert parse_control('{"type": "resize", "cols": 132, "rows": 50}') == Resize(132, 50)
    for bad in ('{"type": "resize", "cols": 0, "rows": 50}', '{"type": "resize", "cols": 70000, "rows": 5}',
                '{"type": "resize", "cols": true, "rows": 5}', '{"type": "resize", "cols": "80", "rows": 5}',
                '{"type": "paste", "data": "rm -rf /"}', "[1, 2]", "not json", " " * 5000):
        with pytest.raises(InvalidInput):
            parse_control(bad)
    assert size_of(80, 24) == Resize(80, 24)
    assert check_term("xterm-256color") == "xterm-256color"
    for bad in ("", "x" * 65, "xterm\n", "$(id)", "../x"):
        with pytest.raises(InvalidInput):
            check_term(bad)
