"""core/nodes.py on its own: node names, the node-to-node signature (every part of a request it
binds, the clock skew, header formats and sizes), dead instances and the nodes view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from warden.core import nodes
from warden.core.errors import Denied, InvalidInput
from warden.core.nodes import Instance

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = nodes.node_key(b"p" * 32)
NONCE = "0123456789abcdef0123456789abcdef"
REQUEST: dict[str, Any] = {"method": "POST", "path": "/v1/workspaces/w/exec", "query": "a=1",
                           "body": b'{"cmd":["true"]}'}


def _signed(**changes: Any) -> dict[str, str]:
    parts: dict[str, Any] = {**REQUEST, "origin": "node-b", "target": "node-a", "timestamp": int(T0.timestamp()),
                             "nonce": NONCE, **changes}
    return nodes.sign(KEY, **parts).headers()


def _verify(headers: dict[str, str], *, keys: list[bytes] | None = None, now: datetime = T0, node: str = "node-a",
            **request: Any) -> nodes.Signed:
    return nodes.verify([KEY] if keys is None else keys, headers, **{**REQUEST, **request}, node=node, now=now)


# -- names -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "node-a", "Node_1.example", "9", "x" * 63])
def test_good_node_names(name: str) -> None:
    assert nodes.check_node_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "_a", "x" * 64, "a/b", "../a", "a b", "a\n", "nöde", "a:1"])
def test_bad_node_names_are_one_line_refusals(name: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        nodes.check_node_name(name)
    assert "\n" not in caught.value.message and caught.value.message.startswith("bad WARDEN_NODE")


def test_a_very_long_bad_name_is_cut_in_the_message() -> None:
    with pytest.raises(InvalidInput) as caught:
        nodes.check_node_name("/" * 5000)
    assert len(caught.value.message) < 300


# -- the key -------------------------------------------------------------------------------------

def test_node_key_is_hkdf_sha256_of_the_pepper() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    pepper = bytes(range(32))
    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=nodes.MAC_INFO).derive(pepper)
    assert nodes.node_key(pepper) == expected
    assert nodes.node_key(pepper) != pepper and nodes.node_key(b"q" * 32) != nodes.node_key(b"p" * 32)


# -- sign and verify -------------------------------------------------------------------------------

def test_a_signed_request_verifies() -> None:
    signed = _verify(_signed())
    assert (signed.origin, signed.target, signed.nonce) == ("node-b", "node-a", NONCE)
    assert set(_signed()) == set(nodes.NODE_HEADERS)


def test_the_method_is_compared_in_upper_case() -> None:
    assert _verify(_signed(method="post")).origin == "node-b"


@pytest.mark.parametrize("changed", [
    {"method": "GET"}, {"method": "DELETE"},
    {"path": "/v1/workspaces/other/exec"}, {"path": "/v1/workspaces/w/exec/"},
    {"query": "a=2"}, {"query": ""}, {"query": "a=1&b=2"},
    {"body": b'{"cmd":["rm"]}'}, {"body": b""}, {"body": REQUEST["body"] + b" "},
])
def test_any_tampered_part_of_the_request_is_refused(changed: dict[str, Any]) -> None:
    with pytest.raises(Denied) as caught:
        _verify(_signed(), **changed)
    assert "wrong signature" in caught.value.message and caught.value.rule == "node.mac"


@pytest.mark.parametrize("header, value", [
    ("x-warden-node", "node-c"),                      # another sender named
    ("x-warden-node-time", str(int(T0.timestamp()) + 1)),  # another time, within the skew
    ("x-warden-node-nonce", "f" * 32),               # another nonce (a replay under a fresh one)
    ("x-warden-node-mac", "0" * 64),
])
def test_a_tampered_header_is_refused(header: str, value: str) -> None:
    headers = {**_signed(), header: value}
    with pytest.raises(Denied, match="wrong signature"):
        _verify(headers)


def test_a_request_for_another_node_is_refused_even_when_signed_right() -> None:
    with pytest.raises(Denied, match="addressed to 'node-c'"):
        _verify(_signed(target="node-c"))


def test_another_clusters_key_is_refused_and_a_kept_key_is_taken() -> None:
    other = nodes.node_key(b"other" * 8)
    with pytest.raises(Denied, match="wrong signature"):
        _verify(_signed(), keys=[other])
    with pytest.raises(Denied):
        _verify(_signed(), keys=[])
    assert _verify(_signed(), keys=[other, KEY]).nonce == NONCE  # a rotation keeps the old pepper


@pytest.mark.parametrize("offset, ok", [(0, True), (30, True), (-30, True), (31, False), (-31, False),
                                        (3600, False), (-86400, False)])
def test_the_timestamp_may_be_off_by_the_skew_and_no_more(offset: int, ok: bool) -> None:
    now = T0 + timedelta(seconds=offset)
    if ok:
        assert _verify(_signed(), now=now).timestamp == int(T0.timestamp())
    else:
        with pytest.raises(Denied, match="too old or from the future"):
            _verify(_signed(), now=now)


@pytest.mark.parametrize("header, value", [
    ("x-warden-node-nonce", "0123456789ABCDEF0123456789ABCDEF"),  # upper case
    ("x-warden-node-nonce", NONCE[:-1]), ("x-warden-node-nonce", NONCE + "0"), ("x-warden-node-nonce", "g" * 32),
    ("x-warden-node-nonce", ""), ("x-warden-node-nonce", NONCE + "\n"),
    ("x-warden-node-mac", "a" * 63), ("x-warden-node-mac", "a" * 65), ("x-warden-node-mac", "A" * 64),
    ("x-warden-node-time", "-1"), ("x-warden-node-time", "1e9"), ("x-warden-node-time", " 1"),
    ("x-warden-node-time", "1" * 13),  # past 12 digits: no huge integers parsed
    ("x-warden-node-time", "١٢٣"),  # Unicode digits
    ("x-warden-node", ""), ("x-warden-node", "x" * 64), ("x-warden-node", "a/b"),
    ("x-warden-node-to", "x" * 10_000),
])
def test_malformed_headers_are_refused_before_any_mac(header: str, value: str) -> None:
    headers = {**_signed(), header: value}
    with pytest.raises(Denied) as caught:
        _verify(headers)
    assert caught.value.message == "malformed node-to-node request: refused"


@pytest.mark.parametrize("missing", nodes.NODE_HEADERS)
def test_a_missing_header_is_refused(missing: str) -> None:
    headers = {k: v for k, v in _signed().items() if k != missing}
    with pytest.raises(Denied, match="malformed"):
        _verify(headers)


def test_a_refusal_never_says_the_expected_mac() -> None:
    good = _signed()
    with pytest.raises(Denied) as caught:
        _verify({**good, "x-warden-node-mac": "0" * 64})
    assert good["x-warden-node-mac"] not in caught.value.message


@pytest.mark.parametrize("first, second", [
    ({"path": "/a", "query": "b\nc"}, {"path": "/a\nb", "query": "c"}),  # a path may hold a newline (%0A)
    ({"path": "/a", "query": ""}, {"path": "", "query": "/a"}),
    ({"origin": "ab", "target": "c"}, {"origin": "a", "target": "bc"}),
])
def test_text_cannot_move_from_one_field_to_the_next(first: dict[str, str], second: dict[str, str]) -> None:
    base: dict[str, Any] = {"method": "GET", "path": "/p", "query": "q", "body_sha256": "0", "origin": "x",
                            "target": "y", "timestamp": 1, "nonce": NONCE}
    assert nodes.mac_of(KEY, **{**base, **first}) != nodes.mac_of(KEY, **{**base, **second})


# -- instances and the nodes view ---------------------------------------------------------------

def _instance(ident: str, node: str, beat: datetime, *, kind: str = "serve", url: str | None = None,
              pid: int = 100) -> Instance:
    return Instance(ident, node, kind, pid, 7, beat.isoformat(), beat.isoformat(), url)


def test_dead_instances_by_heartbeat_window_or_by_pid_on_this_node_only() -> None:
    window = timedelta(seconds=60)
    fresh_here = _instance("i1", "a", T0, pid=1)
    stale_there = _instance("i2", "b", T0 - timedelta(seconds=61), pid=2)
    edge_there = _instance("i3", "b", T0 - timedelta(seconds=60), pid=3)
    gone_here = _instance("i4", "a", T0, pid=4)
    gone_there = _instance("i5", "b", T0, pid=5)  # its pid means nothing on this machine
    asked: list[str] = []

    def alive(instance: Instance) -> bool:
        asked.append(instance.id)
        return instance.pid != 4

    found = nodes.dead_instances([fresh_here, stale_there, edge_there, gone_here, gone_there], T0, window, "a", alive)
    assert [i.id for i in found] == ["i2", "i4"]
    assert "i5" not in asked and "i3" not in asked


def test_nodes_view_live_down_known_and_the_newest_live_server() -> None:
    window = timedelta(seconds=60)
    rows = [
        _instance("s-old", "a", T0 - timedelta(seconds=20), url="https://a:1"),
        _instance("s-new", "a", T0 - timedelta(seconds=5), url="https://a:2"),
        _instance("d", "a", T0, kind="daemon"),
        _instance("s-dead", "b", T0 - timedelta(seconds=120), url="http://b:1"),
        _instance("c-only", "c", T0, kind="command"),
    ]
    view = {v.node: v for v in nodes.nodes_view(rows, T0, window, known=("d-empty",))}
    assert sorted(view) == ["a", "b", "c", "d-empty"]
    assert (view["a"].live, view["a"].url, view["a"].instances) == (True, "https://a:2", 3)
    assert view["a"].last_heartbeat == T0.isoformat()
    assert (view["b"].live, view["b"].url, view["b"].instances) == (False, None, 0)  # a dead server is no API
    assert (view["c"].live, view["c"].url) == (True, None)  # up, but no server to forward to
    assert (view["d-empty"].live, view["d-empty"].last_heartbeat) == (False, None)
