"""The live-sandbox protocol's parsers (core/live.py): a supervisor's answer is untrusted input,
so every shape Warden does not expect is refused as BadAnswer, never acted on."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from warden.core.errors import InvalidInput
from warden.core.live import (
    MAX_ANSWER,
    RING_BYTES,
    BadAnswer,
    Exited,
    Full,
    Spawned,
    check_process_id,
    complete_process_id,
    decode_frame_length,
    encode_frame,
    network_key,
    parse_chunk_event,
    parse_exit_event,
    parse_listing,
    parse_logs,
    parse_spawned,
    parse_waited,
    plan_fingerprint,
    signal_number,
)

PID = "0123456789abcdef"


def _j(value: object) -> bytes:
    return json.dumps(value).encode()


def test_frames_are_length_prefixed_and_bounded() -> None:
    frame = encode_frame({"op": "ping"})
    assert frame[:4] == struct.pack(">I", len(frame) - 4) and json.loads(frame[4:]) == {"op": "ping"}
    assert decode_frame_length(struct.pack(">I", 10)) == 10
    with pytest.raises(BadAnswer, match="over the limit"):
        decode_frame_length(struct.pack(">I", MAX_ANSWER + 1))
    with pytest.raises(BadAnswer):
        decode_frame_length(b"\x00\x01")
    with pytest.raises(InvalidInput, match="at most"):
        encode_frame({"env": {"X": "y" * (2 << 20)}})


def test_well_formed_answers_parse() -> None:
    assert parse_spawned(_j({"ok": True, "pid": 7})) == Spawned(7, False)  # a supervisor of older code
    assert parse_spawned(_j({"ok": True, "pid": 7, "joined": True})) == Spawned(7, True)
    # Protocol 3 says whether it waits for `go`; older ones held every command.
    assert parse_spawned(_j({"ok": True, "pid": 7, "joined": True, "held": False})) == Spawned(7, True, False)
    assert parse_spawned(_j({"ok": True, "pid": 7})).held is True
    with pytest.raises(BadAnswer):
        parse_spawned(_j({"ok": True, "pid": 7, "held": "no"}))
    listed = parse_listing(_j({"ok": True, "processes": [
        {"id": PID, "pid": 9, "status": "running", "background": True},
        {"id": "f" * 16, "pid": 10, "status": "exited", "exit_code": 143, "signal": 15, "timed_out": False,
         "ended_ago": 0.5}]}))
    assert [p.status for p in listed] == ["running", "exited"]
    assert listed[1].exited == Exited(143, 15) and listed[1].ended_ago == 0.5
    waited = parse_waited(_j({"ok": True, "process": {"id": PID, "pid": 9, "status": "exited", "exit_code": 3,
                                                        "signal": None, "timed_out": True}}))
    assert waited.exited == Exited(3, None, True)
    logs, ended = parse_logs(_j({"ok": True, "stdout": base64.b64encode(b"out").decode(), "stderr": "",
                                 "dropped": [5, 0], "exit": {"event": "exit", "exit_code": 0, "signal": None}}))
    assert (logs.stdout, logs.dropped_stdout, ended) == (b"out", 5, Exited(0, None))
    assert parse_chunk_event(_j({"event": "output", "stream": "stderr", "data": "aGk="})).data == b"hi"
    assert parse_exit_event(_j({"event": "exit", "exit_code": 1, "signal": 9})) == Exited(137, 9)
    used = parse_exit_event(_j({"event": "exit", "exit_code": 0, "signal": None, "cpu_ms": 230, "maxrss_kib": 2048}))
    assert (used, used.cpu_ms, used.maxrss_kib) == (Exited(0, None), 230, 2048)


@pytest.mark.parametrize("answer", [
    b"\xff\xfe not utf-8", b"not json", b"[1, 2]", b'"text"',
    _j({"ok": False, "error": "x" * 10_000}),  # a refusal, its reason cut
    _j({"pid": 7}),  # no ok
    _j({"ok": True, "pid": -1}), _j({"ok": True, "pid": 1 << 40}), _j({"ok": True, "pid": "7"}),
    _j({"ok": True, "pid": True}), _j({"ok": True, "pid": 7.5}), _j({"ok": True, "pid": 7, "joined": "yes"}),
    _j({"ok": False, "full": "yes"}),  # `full` only as itself
])
def test_bad_spawn_answers_are_refused(answer: bytes) -> None:
    with pytest.raises(BadAnswer) as caught:
        parse_spawned(answer)
    assert len(str(caught.value)) < 300


def test_a_refusal_for_fullness_is_told_apart_from_a_bad_answer() -> None:
    # The sandbox is sound: Warden forgets what it recorded ended and asks again (services/live).
    with pytest.raises(Full):
        parse_spawned(_j({"ok": False, "full": True, "error": "too many background processes in this sandbox"}))


@pytest.mark.parametrize("process", [
    {"id": "../../etc/passwd", "pid": 9, "status": "running"},  # not an id of ours
    {"id": PID.upper(), "pid": 9, "status": "running"},
    {"id": PID, "pid": 9, "status": "zombie"},
    {"id": PID, "pid": 0, "status": "running"},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 300},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "signal": 99},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "timed_out": "yes"},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "ended_ago": -1},
    {"id": PID, "pid": 9, "status": "running", "background": "no"},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "cpu_ms": -1},  # what it used: bounded numbers
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "cpu_ms": 1 << 62},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "maxrss_kib": "lots"},
    {"id": PID, "pid": 9, "status": "exited", "exit_code": 0, "maxrss_kib": 1.5},
    "a string",
])
def test_bad_listed_processes_are_refused(process: object) -> None:
    with pytest.raises(BadAnswer):
        parse_listing(_j({"ok": True, "processes": [process]}))


def test_listing_and_output_are_bounded() -> None:
    many = [{"id": f"{i:016x}", "pid": 9, "status": "running"} for i in range(257)]
    with pytest.raises(BadAnswer, match="at most 256"):
        parse_listing(_j({"ok": True, "processes": many}))
    with pytest.raises(BadAnswer):
        parse_listing(_j({"ok": True, "processes": {"not": "a list"}}))
    too_much = base64.b64encode(b"x" * (RING_BYTES + 3)).decode()
    with pytest.raises(BadAnswer, match="at most"):
        parse_logs(_j({"ok": True, "stdout": too_much, "stderr": "", "dropped": [0, 0]}))
    for bad in ("!!!", 5, None):
        with pytest.raises(BadAnswer):
            parse_logs(_j({"ok": True, "stdout": bad, "stderr": "", "dropped": [0, 0]}))
    with pytest.raises(BadAnswer):
        parse_logs(_j({"ok": True, "stdout": "", "stderr": "", "dropped": [0]}))
    with pytest.raises(BadAnswer):
        parse_chunk_event(_j({"event": "output", "stream": "stdin", "data": ""}))
    with pytest.raises(BadAnswer):
        parse_exit_event(_j({"event": "output"}))


def test_keys_ids_and_signals() -> None:
    assert network_key(None) == "none"
    one = network_key({"allowed": ["b.org", "a.org"], "denied": []})
    assert one == network_key({"allowed": ["a.org", "b.org"], "denied": []}) and one.startswith("net-")
    assert one != network_key({"allowed": ["a.org"], "denied": []})
    assert plan_fingerprint({"a": [1]}) != plan_fingerprint({"a": [2]})
    assert check_process_id(PID) == PID
    for bad in ("", "0123", "../x", PID + "0", "g" * 16, PID + "\n"):
        with pytest.raises(InvalidInput):
            check_process_id(bad)
    # `$` also matches before a last newline: an id or a start with one was taken as a whole id
    # (the newline then carried into the lookups and the error text) instead of refused.
    for bad in (PID + "\n", PID[:4] + "\n", "", "0" * 17):
        with pytest.raises(InvalidInput):
            complete_process_id(bad, [PID])
    assert complete_process_id(PID[:4], [PID]) == PID
    assert [signal_number(s) for s in ("TERM", "sigkill", "9", 2)] == [15, 9, 9, 2]
    for bad in ("SEGV", "0", 31, "-1"):
        with pytest.raises(InvalidInput):
            signal_number(bad)


def test_json_nested_past_the_stack_is_refused_not_raised() -> None:
    with pytest.raises(BadAnswer, match="not JSON"):
        parse_listing(b"[" * 200_000)
