"""core/forwards.py: where a forward may listen, which ports it may reach, whose sandbox it reaches."""

from __future__ import annotations

import pytest

from warden.core.errors import Denied, InvalidInput
from warden.core.forwards import Reach, allowed_ports, check_port, parse_listen, parse_port


def test_ports_are_whole_numbers_in_range() -> None:
    assert parse_port("8000") == 8000
    for bad in ("0", "65536", "http", "80.5", ""):
        with pytest.raises(InvalidInput):
            parse_port(bad)


def test_the_settings_ranges_decide_which_ports_are_reached() -> None:
    allowed = allowed_ports(["1024-65535"])
    assert check_port(8000, allowed) == 8000
    with pytest.raises(Denied, match=r"sandbox\.forward_ports: 1024-65535") as refused:
        check_port(80, allowed)
    # Below 1024 the setting is not what stands in the way: no server in the sandbox listens there.
    assert refused.value.rule == "forward.port" and "e.g. 8080" in refused.value.message
    assert "config set" not in refused.value.message
    with pytest.raises(Denied, match=r"config set sandbox\.forward_ports") as high:
        check_port(9000, allowed_ports(["3000-3999"]))
    assert "1024" not in high.value.message
    assert check_port(3000, allowed_ports(["3000", "5000-5001"])) == 3000
    with pytest.raises(InvalidInput):
        allowed_ports(["9000-8000"])


def test_a_forward_listens_on_loopback_alone() -> None:
    assert parse_listen(None, 8000) == ("127.0.0.1", 8000)
    assert parse_listen("9000", 8000) == ("127.0.0.1", 9000)
    assert parse_listen("0", 8000) == ("127.0.0.1", 0)
    assert parse_listen("[::1]:9000", 8000) == ("::1", 9000)
    assert parse_listen("localhost:9000", 8000) == ("127.0.0.1", 9000)
    for wide in ("0.0.0.0:9000", "192.168.1.2:9000", "[::]:9000"):
        with pytest.raises(Denied, match="loopback"):
            parse_listen(wide, 8000)
    with pytest.raises(InvalidInput):
        parse_listen("example.com:9000", 8000)


def test_reach_matches_the_person_a_bot_or_one_grant() -> None:
    bot = "bot:builder@acc_0123456789abcdef"
    assert Reach.of(None).matches("user") and not Reach.of(None).matches(bot)
    assert Reach.of("builder").matches(bot) and not Reach.of("builder").matches("user")
    assert not Reach.of("build").matches(bot) and not Reach.of("other").matches(bot)
    assert Reach.of("acc_0123456789abcdef").matches(bot)
    assert not Reach.of("acc_ffffffffffffffff").matches(bot)
    for bad in ("bot:builder", "a@b", ""):
        with pytest.raises(InvalidInput):
            Reach.of(bad or " ")
