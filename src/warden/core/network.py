"""The domain allowlist of sandboxed network access (pure: DNS answers come in as arguments).

Entries are `example.com` (that name only), `*.example.com` (strict subdomains only, never
`example.com` itself), each optionally with `:PORT`; without a port every port matches.
A deny entry beats any allow entry. IP literals, and names whose addresses are loopback,
private, link-local, shared (CGNAT), multicast, reserved or a cloud metadata service, are
refused unless an allow entry names that host *with its port* — the SSRF rule of
sandbox-runtime, tightened so that listing a name is not enough to reach 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from warden.core.decisions import Decision
from warden.core.errors import Denied, InvalidInput

__all__ = [

    "NetworkPolicy",
    "Rule",
    "check_addresses",
    "check_host",
    "covers",
    "is_ip_literal",
    "normalise_host",
    "parse_rule",
    "parse_target",
    "ported",
    "special_address",
    "uncovered",
]

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_INET_ATON_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
# Metadata services that are not already link-local or private.
_METADATA = {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("192.0.0.192"),
             ipaddress.ip_address("fd00:ec2::254")}
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Rule:
    """One entry: a host pattern and an optional port."""

    host: str          # normalised; `*.` prefix for a wildcard
    port: int | None

    @property
    def text(self) -> str:
        return self.host if self.port is None else f"{_bracket(self.host)}:{self.port}"

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host


@dataclass(frozen=True)
class NetworkPolicy:
    allowed: tuple[Rule, ...] = ()
    denied: tuple[Rule, ...] = ()
    # The allowed entries that may reach an IP literal or a loopback, private or metadata address
    # (each still names its host with its port). None: every such entry of `allowed`, for the
    # person's own lists. A bot's command gets only those its grant names exactly so
    # (`within_grant`): a grant of `*.corp` or `localhost` does not let a bot pick the port.
    special: tuple[Rule, ...] | None = None

    @classmethod
    def parse(cls, allowed: Iterable[str], denied: Iterable[str] = ()) -> NetworkPolicy:
        """Parse the entries; InvalidInput names a bad one."""
        return cls(tuple(parse_rule(a) for a in allowed), tuple(parse_rule(d) for d in denied))

    @classmethod
    def within_grant(cls, asked: Iterable[str], granted: Iterable[str], denied: Iterable[str] = ()) -> NetworkPolicy:
        """A bot's command reaching exactly `asked`, each covered by its grant's `granted` (Denied,
        rule `grant.network`, naming those that are not; InvalidInput for a bad entry)."""
        wanted, given = list(asked), list(granted)
        beyond = uncovered(wanted, given)
        if beyond:
            raise Denied(f"the grant does not allow network to {', '.join(beyond)}", rule="grant.network")
        exact = {rule for rule in map(parse_rule, given) if rule.port is not None and not rule.host.startswith("*.")}
        allowed = tuple(dict.fromkeys(parse_rule(w) for w in wanted))
        return cls(allowed, tuple(parse_rule(d) for d in denied), tuple(r for r in allowed if r in exact))

    @classmethod
    def from_json(cls, shown: Mapping[str, object]) -> NetworkPolicy:
        """The policy `to_json` showed, `special` kept: a live sandbox's proxy, a process of its own,
        gets its policy so, and a bot's grant of `localhost` must not reach 127.0.0.1 there either."""
        def entries(key: str) -> list[str]:
            value = shown.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidInput(f"bad network policy: {key} must be a list of entries")
            return value

        special = tuple(parse_rule(s) for s in entries("special")) if "special" in shown else None
        return cls(tuple(map(parse_rule, entries("allowed"))), tuple(map(parse_rule, entries("denied"))), special)

    def to_json(self) -> dict[str, list[str]]:
        shown = {"allowed": [r.text for r in self.allowed], "denied": [r.text for r in self.denied]}
        if self.special is not None:
            shown["special"] = [r.text for r in self.special]
        return shown


def covers(outer: Rule, inner: Rule) -> bool:
    """Whether every (host, port) `inner` matches is matched by `outer` too.

    `*.example.com` covers `a.example.com` and `*.a.example.com`, never `example.com`; a rule
    with a port covers only rules with that same port, one without covers every port.
    """
    if outer.port is not None and inner.port != outer.port:
        return False
    if not outer.host.startswith("*."):
        return inner.host == outer.host
    if inner.host == outer.host:
        return True
    host = inner.host[2:] if inner.host.startswith("*.") else inner.host
    return host.endswith(outer.host[1:]) and len(host) > len(outer.host) - 1


def uncovered(wanted: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """The entries of `wanted` that no entry of `allowed` covers (both parsed by parse_rule,
    InvalidInput for a bad one): what a request asks beyond what it was given."""
    rules = [parse_rule(a) for a in allowed]
    return [parse_rule(w).text for w in wanted if not any(covers(r, parse_rule(w)) for r in rules)]


def ported(wanted: str, allowed: Iterable[str]) -> list[str]:
    """`wanted` (an entry without a port, which asks for every port) with each port an entry of
    `allowed` gives its host: what to ask for instead when only those ports are granted (`pypi.org`
    under a grant of `pypi.org:443` → `pypi.org:443`); empty when `wanted` names a port or none fits."""
    rule = parse_rule(wanted)
    if rule.port is not None:
        return []
    found = (Rule(rule.host, r.port) for r in map(parse_rule, allowed) if r.port is not None)
    return list(dict.fromkeys(r.text for r in found if not uncovered([r.text], allowed)))


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def normalise_host(host: str) -> str:
    """Lower case, no trailing dot, IPv6 without brackets; InvalidInput for a malformed name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.lower().rstrip(".")
    if not text or len(text) > 253:
        raise InvalidInput(f"bad host {host!r}")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if not text.isascii():
        raise InvalidInput(f"bad host {host!r}: write international names in their xn-- form")
    labels = text[2:].split(".") if text.startswith("*.") else text.split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise InvalidInput(f"bad host {host!r}: use a domain name, *.domain or an IP address")
    return text


def is_ip_literal(host: str) -> bool:
    """True for any spelling that the C resolver reads as an address (127.1, 0x7f.0.0.1, 2130706433)."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    parts = host.split(".")
    return 1 <= len(parts) <= 4 and all(_INET_ATON_PART.match(p) for p in parts)


def parse_target(text: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or a bare host (with `default_port`) → (host, port)."""
    raw = text.strip()
    port_text: str | None = None
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise InvalidInput(f"bad target {text!r}")
        host, rest = raw[1:end], raw[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise InvalidInput(f"bad target {text!r}")
            port_text = rest[1:]
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
    else:
        host = raw
    if port_text is None:
        if default_port is None:
            raise InvalidInput(f"bad target {text!r}: a port is needed (host:port)")
        return normalise_host(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidInput(f"bad port in {text!r}: use 1-65535")
    return normalise_host(host), int(port_text)


def parse_rule(text: str) -> Rule:
    """An allow or deny entry: `example.com`, `*.example.com`, `host:443`, `127.0.0.1:8080`."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("empty network entry: write a domain such as pypi.org or *.example.com")
    raw = text.strip()
    try:
        if raw.startswith("[") or raw.count(":") == 1:
            host, port = parse_target(raw)
            return Rule(host, port)
        return Rule(normalise_host(raw), None)
    except InvalidInput as exc:
        raise InvalidInput(f"bad network entry {text!r}: {exc.message}; write example.com, "
                           "*.example.com or host:PORT") from None


def special_address(address: str) -> str | None:
    """Why `address` is not a public unicast address (None when it is)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return special_address(str(embedded)) or "an IPv4 address in IPv6 form"
    if ip in _METADATA:
        return "a cloud metadata address"
    for attr, why in (("is_loopback", "loopback"), ("is_link_local", "link-local"),
                      ("is_unspecified", "unspecified"), ("is_multicast", "multicast"),
                      ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(ip, attr):
            return f"a {why} address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "a shared (CGNAT) address"
    return None


def _listed_with_port(policy: NetworkPolicy, host: str, port: int) -> Rule | None:
    return next((r for r in (policy.allowed if policy.special is None else policy.special)
                 if r.port == port and not r.host.startswith("*.") and r.host == host), None)


def _how_to_allow(policy: NetworkPolicy, target: str) -> str:
    """What lets `target` reach an IP literal or a special address. A bot's command already names
    its host with its port (`within_grant`): what it lacks is its grant's entry saying so, so "list
    it with its port" alone sent a bot to repeat what it had just asked."""
    if policy.special is None:
        return f"list it with its port ({target}) to allow it"
    return (f"a bot's command reaches it only by asking for {target}, with its port, under a grant that names "
            f"it so: a person runs `warden grant WORKSPACE BOT --allow-domain {target}`")


def check_host(policy: NetworkPolicy, host: str, port: int) -> Decision:
    """The decision on a name before any lookup: deny list, then IP literal, then allow list."""
    try:
        name = normalise_host(host)
    except InvalidInput:
        return Decision(False, "network.bad_host", f"{host!r} is not a valid host name")
    target = f"{_bracket(name)}:{port}"
    for rule in policy.denied:
        if rule.matches(name, port):
            return Decision(False, f"network.denied:{rule.text}", f"{target} is in the denied list")
    if is_ip_literal(name):
        by_address = _denied_address(policy, name, port)
        if by_address is not None:
            return Decision(False, f"network.denied:{by_address.text}", f"{target} is in the denied list")
        listed = _listed_with_port(policy, name, port)
        if listed is None:
            return Decision(False, "network.ip_literal",
                               f"{target} is an IP address; {_how_to_allow(policy, target)}")
        return Decision(True, f"network.allowed:{listed.text}", f"{target} is listed")
    for rule in policy.allowed:
        if rule.matches(name, port):
            return Decision(True, f"network.allowed:{rule.text}", f"{target} is allowed")
    return Decision(False, "network.not_allowed", f"{target} is not in the allowed domains")


def check_addresses(policy: NetworkPolicy, host: str, port: int,
                    addresses: Sequence[str]) -> tuple[Decision, list[str]]:
    """After lookup: the decision and the addresses that may be dialled (pinned, so a second
    lookup cannot rebind the name to a private address)."""
    name = normalise_host(host)
    target = f"{_bracket(name)}:{port}"
    if not addresses:
        return Decision(False, "network.no_address", f"{target} has no address"), []
    listed = _listed_with_port(policy, name, port)
    usable: list[str] = []
    refused_why = ""
    denied_rule: Rule | None = None
    for address in addresses:
        # A deny on an address holds whatever name leads there (`localhost:PORT` against a
        # denied 127.0.0.1): checked on every address the name resolves to.
        rule = _denied_address(policy, address, port)
        if rule is not None:
            denied_rule = denied_rule or rule
            continue
        why = special_address(address)
        if why is None or listed is not None:
            usable.append(address)
        else:
            refused_why = refused_why or f"{target} resolves to {address}, {why}"
    if not usable and denied_rule is not None and not refused_why:
        return Decision(False, f"network.denied:{denied_rule.text}",
                           f"{target} resolves to an address in the denied list"), []
    if not usable:
        return Decision(False, "network.special_address",
                           f"{refused_why}; {_how_to_allow(policy, target)}"), []
    return Decision(True, "network.allowed", f"{target} is allowed"), usable


def _same_address(a: str, b: str) -> bool:
    """Whether two IP texts name one address (IPv4-mapped IPv6 folded to IPv4)."""
    try:
        x, y = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return False
    x = x.ipv4_mapped or x if isinstance(x, ipaddress.IPv6Address) else x
    y = y.ipv4_mapped or y if isinstance(y, ipaddress.IPv6Address) else y
    return x == y


def _denied_address(policy: NetworkPolicy, address: str, port: int) -> Rule | None:
    """The deny entry naming `address` (an IP literal entry, with its port if it has one)."""
    return next((r for r in policy.denied if is_ip_literal(r.host) and (r.port is None or r.port == port)
                 and _same_address(r.host.strip("[]"), address)), None)
