"""The network allowlist: matching, deny beats allow, IP literals and special addresses."""

from __future__ import annotations

import pytest

from warden.core.errors import Denied, InvalidInput
from warden.core.network import (
    NetworkPolicy,
    check_addresses,
    check_host,
    covers,
    parse_rule,
    parse_target,
    ported,
    special_address,
    uncovered,
)


def policy(allowed: list[str], denied: list[str] | None = None) -> NetworkPolicy:
    return NetworkPolicy.parse(allowed, denied or [])


def test_exact_and_wildcard_matching() -> None:
    p = policy(["pypi.org", "*.example.com"])
    assert check_host(p, "pypi.org", 443).allowed
    assert check_host(p, "PyPI.org.", 443).allowed  # case and trailing dot do not matter
    assert not check_host(p, "files.pypi.org", 443).allowed
    assert check_host(p, "a.example.com", 443).allowed
    assert check_host(p, "a.b.example.com", 80).allowed
    # A wildcard never matches the bare domain, nor a name that merely ends alike.
    assert not check_host(p, "example.com", 443).allowed
    assert not check_host(p, "badexample.com", 443).allowed


def test_ports_in_entries() -> None:
    p = policy(["api.test:8443"])
    assert check_host(p, "api.test", 8443).allowed
    assert not check_host(p, "api.test", 443).allowed


def test_deny_beats_allow() -> None:
    p = policy(["*.example.com", "example.org"], ["evil.example.com", "example.org:22"])
    decision = check_host(p, "evil.example.com", 443)
    assert not decision.allowed and decision.rule.startswith("network.denied")
    assert check_host(p, "good.example.com", 443).allowed
    assert check_host(p, "example.org", 443).allowed
    assert not check_host(p, "example.org", 22).allowed


@pytest.mark.parametrize("host", ["127.0.0.1", "10.0.0.1", "8.8.8.8", "::1", "2130706433", "127.1",
                                  "0x7f.0.0.1", "[::1]"])
def test_ip_literals_need_an_entry_with_their_port(host: str) -> None:
    assert not check_host(policy(["*.example.com"]), host, 80).allowed
    assert check_host(policy(["example.com"]), host, 80).rule in ("network.ip_literal", "network.bad_host")


def test_listed_ip_with_port_is_allowed() -> None:
    p = policy(["127.0.0.1:8080", "[::1]:9000"])
    assert check_host(p, "127.0.0.1", 8080).allowed
    assert not check_host(p, "127.0.0.1", 8081).allowed
    assert check_host(p, "::1", 9000).allowed
    decision, usable = check_addresses(p, "127.0.0.1", 8080, ["127.0.0.1"])
    assert decision.allowed and usable == ["127.0.0.1"]


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "100.100.100.200", "0.0.0.0", "::1", "fe80::1",
                                     "fd00:ec2::254", "::ffff:127.0.0.1", "224.0.0.1", "64:ff9b::a00:1"])
def test_names_resolving_to_special_addresses_are_refused(address: str) -> None:
    assert special_address(address) is not None
    p = policy(["internal.test"])
    decision, usable = check_addresses(p, "internal.test", 443, [address])
    assert not decision.allowed and usable == []
    assert decision.rule == "network.special_address"
    # Listed with its port, the same name may reach it.
    listed = policy(["internal.test:443"])
    assert check_addresses(listed, "internal.test", 443, [address])[0].allowed


def test_public_addresses_pass_and_private_ones_are_dropped_from_a_mix() -> None:
    assert special_address("93.184.216.34") is None
    decision, usable = check_addresses(policy(["mixed.test"]), "mixed.test", 443, ["10.0.0.5", "93.184.216.34"])
    assert decision.allowed and usable == ["93.184.216.34"]
    assert not check_addresses(policy(["x.test"]), "x.test", 443, [])[0].allowed


@pytest.mark.parametrize("bad", ["", "exa mple.com", "*.", "-a.com", "a.com:99999", "a.com:x", "bücher.de"])
def test_bad_entries_are_refused_with_a_hint(bad: str) -> None:
    with pytest.raises(InvalidInput):
        parse_rule(bad)


def test_parse_target_forms() -> None:
    assert parse_target("example.com:443") == ("example.com", 443)
    assert parse_target("[::1]:8080") == ("::1", 8080)
    assert parse_target("example.com", default_port=80) == ("example.com", 80)
    with pytest.raises(InvalidInput):
        parse_target("example.com")
    assert policy(["a.test"], ["b.test:22"]).to_json() == {"allowed": ["a.test"], "denied": ["b.test:22"]}


def test_a_denied_address_holds_whatever_name_leads_there() -> None:
    """network.denied_domains=127.0.0.1 must stop `--allow-domain localhost:PORT` too."""
    from warden.core.network import NetworkPolicy, check_addresses, check_host

    policy = NetworkPolicy.parse(["localhost:8080", "[::ffff:127.0.0.1]:8080", "api.example.com"],
                                 ["127.0.0.1", "10.1.2.3:443"])
    assert check_host(policy, "localhost", 8080).allowed  # the name alone is not denied...
    decision, usable = check_addresses(policy, "localhost", 8080, ["127.0.0.1"])
    assert not decision.allowed and decision.rule == "network.denied:127.0.0.1" and usable == []
    mapped = check_host(policy, "::ffff:127.0.0.1", 8080)
    assert not mapped.allowed and mapped.rule == "network.denied:127.0.0.1"
    # Only the denied address is dropped; a deny with a port holds on that port only.
    decision, usable = check_addresses(policy, "api.example.com", 443, ["10.1.2.3", "93.184.216.34"])
    assert decision.allowed and usable == ["93.184.216.34"]
    decision, usable = check_addresses(policy, "api.example.com", 80, ["93.184.216.34"])
    assert decision.allowed


@pytest.mark.parametrize(("outer", "inner", "covered"), [
    ("example.com", "example.com", True), ("example.com", "example.com:443", True),
    ("example.com:443", "example.com:443", True), ("example.com:443", "example.com", False),
    ("example.com:443", "example.com:80", False), ("example.com", "a.example.com", False),
    ("*.example.com", "a.example.com:443", True), ("*.example.com", "*.a.example.com", True),
    ("*.example.com", "*.example.com", True), ("*.example.com", "example.com", False),
    ("*.example.com", "evilexample.com", False), ("*.example.com", "a.example.com.evil", False),
    ("127.0.0.1:8080", "127.0.0.1:8080", True), ("127.0.0.1:8080", "127.0.0.1:8081", False),
    ("a.example.com", "*.example.com", False)])
def test_one_entry_covers_another_only_when_it_matches_all_it_matches(outer: str, inner: str, covered: bool) -> None:
    """A grant's domains bound a command's request and a child grant's: never wider."""
    assert covers(parse_rule(outer), parse_rule(inner)) is covered


def test_uncovered_names_what_a_request_asks_beyond_what_was_given() -> None:
    assert uncovered(["PyPI.org:443", "files.pythonhosted.org"], ["pypi.org", "*.pythonhosted.org:443"]) == \
        ["files.pythonhosted.org"]
    assert uncovered(["a.test"], []) == ["a.test"]
    with pytest.raises(InvalidInput):
        uncovered(["not a host"], ["a.test"])


def test_a_bot_s_policy_reaches_special_addresses_only_through_exact_grant_entries() -> None:
    grant = ["*.corp.test", "localhost", "127.0.0.1:8080", "db.corp.test:5432"]
    policy = NetworkPolicy.within_grant(["app.corp.test:443", "db.corp.test:5432", "localhost:22", "127.0.0.1:8080"],
                                        grant)
    assert check_addresses(policy, "app.corp.test", 443, ["10.0.0.5"])[0].rule == "network.special_address"
    assert check_addresses(policy, "db.corp.test", 5432, ["10.0.0.6"])[0].allowed
    assert check_addresses(policy, "localhost", 22, ["127.0.0.1"])[0].rule == "network.special_address"
    assert check_host(policy, "127.0.0.1", 8080).allowed
    assert check_addresses(policy, "app.corp.test", 443, ["93.184.215.14"])[0].allowed  # public: as asked
    assert not check_host(policy, "other.corp.test", 443).allowed  # only what the command asked for
    with pytest.raises(Denied) as caught:
        NetworkPolicy.within_grant(["corp.test:443"], grant)
    assert caught.value.rule == "grant.network"
    assert policy.to_json()["special"] == ["db.corp.test:5432", "127.0.0.1:8080"]
    assert "special" not in NetworkPolicy.parse(["a.test"]).to_json()


def test_a_refused_special_address_says_what_allows_it_to_a_bot_and_to_a_person() -> None:
    # Found as a newcomer: a grant of `pypi.org`, on a machine whose pypi.org resolves to a mirror's
    # private address; the bot asked for "pypi.org:443" and was told to "list the host with its port".
    bot = NetworkPolicy.within_grant(["pypi.org:443", "10.0.0.9:8080"], ["pypi.org", "10.0.0.9"])
    refused = check_addresses(bot, "pypi.org", 443, ["203.0.113.80"])[0]
    assert refused.rule == "network.special_address"
    assert refused.reason == ("pypi.org:443 resolves to 203.0.113.80, a private address; a bot's command reaches "
                              "it only by asking for pypi.org:443, with its port, under a grant that names it so: "
                              "a person runs `warden grant WORKSPACE BOT --allow-domain pypi.org:443`")
    bare = NetworkPolicy.within_grant(["pypi.org"], ["pypi.org:443", "pypi.org"])  # asked without the port
    assert "by asking for pypi.org:443, with its port" in check_addresses(bare, "pypi.org", 443, ["10.0.0.1"])[0].reason
    literal = check_host(bot, "10.0.0.9", 8080)
    assert literal.rule == "network.ip_literal" and "--allow-domain 10.0.0.9:8080`" in literal.reason
    person = policy(["pypi.org"])
    assert check_addresses(person, "pypi.org", 443, ["203.0.113.80"])[0].reason.endswith(
        "; list it with its port (pypi.org:443) to allow it")
    assert check_host(policy([]), "10.0.0.9", 8080).reason == (
        "10.0.0.9:8080 is an IP address; list it with its port (10.0.0.9:8080) to allow it")


def test_a_policy_shown_as_json_comes_back_the_same_with_its_special_entries() -> None:
    bot = NetworkPolicy.within_grant(["localhost:22", "127.0.0.1:8080"], ["localhost", "127.0.0.1:8080"], ["b.test"])
    again = NetworkPolicy.from_json(bot.to_json())
    assert again == bot and again.special is not None
    assert check_addresses(again, "localhost", 22, ["127.0.0.1"])[0].rule == "network.special_address"
    person = NetworkPolicy.parse(["localhost:22"])
    assert NetworkPolicy.from_json(person.to_json()) == person
    for bad in ({"allowed": "a.test"}, {"allowed": [1]}, {"allowed": ["a.test"], "special": ["bad host!"]}):
        with pytest.raises(InvalidInput):
            NetworkPolicy.from_json(bad)


def test_an_entry_without_a_port_is_told_the_ports_a_grant_gives_its_host() -> None:
    assert ported("pypi.org", ["pypi.org:443"]) == ["pypi.org:443"]
    assert ported("a.x.test", ["*.x.test:443", "x.test:80"]) == ["a.x.test:443"]
    assert ported("pypi.org:80", ["pypi.org:443"]) == []  # it named its port: another one is not a fix
    assert ported("other.test", ["pypi.org:443"]) == []
