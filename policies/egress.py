"""The egress gate: may Tollgate open a connection to this URL, host or address?

Pure decisions over strings and addresses; resolution and the connection itself live in
``tools/perimeter/egress_transport.py``, which calls :func:`check_url` before every hop and
:func:`check_addresses` on every resolved address, then connects to the address it checked.

Deny by default. Only ``http`` and ``https``; no credentials in URLs; host names in the
special-use and metadata lists are refused by name; numeric hosts must be canonical dotted
quads or bracketed IPv6 (``127.1``, ``0x7f.0.0.1``, ``2130706433`` and ``0177.0.0.1`` are
refused: resolvers read them as loopback); every address must be globally routable, with IPv4
embedded in IPv6 (mapped, NAT64, 6to4) judged by the IPv4 inside. Cloud metadata endpoints are
refused unconditionally, even inside an explicitly allowed network. An allowed host is reachable
on ports 80 and 443; any other port needs its own ``host:port`` entry. A redirect from https to
http is refused (:func:`check_redirect`). The per-host allowlist runs
in ``off`` (not consulted), ``shadow`` (misses allowed but reported) or ``enforce`` mode; network
safety is never shadowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import StringConstraints

__all__ = [
    "PRIVATE_NETWORKS",
    "EgressDecision",
    "EgressMode",
    "EgressPolicy",
    "EgressReason",
    "EgressUrl",
    "IPAddress",
    "IPNetwork",
    "METADATA_ADDRESSES",
    "METADATA_HOSTNAMES",
    "NON_GLOBAL_V4",
    "NON_GLOBAL_V6",
    "UrlField",
    "address_problem",
    "DEFAULT_PORTS",
    "check_addresses",
    "check_endpoint",
    "check_redirect",
    "check_url",
    "embedded_ipv4",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

EgressMode = Literal["off", "shadow", "enforce"]
"""How the per-host allowlist applies: not consulted, reported only, or enforced."""

EgressReason = Literal[
    "allowed",
    "bad_url",
    "scheme_not_allowed",
    "credentials_in_url",
    "nonstandard_ip_form",
    "special_use_name",
    "metadata_endpoint",
    "non_global_address",
    "embedded_ipv4",
    "not_allowlisted",
    "no_address",
    "parser_mismatch",
    "too_many_redirects",
    "insecure_redirect",
    "port_not_allowed",
    "response_too_large",
    "timeout",
    "connection_failed",
]
"""Why a destination was allowed or refused (audit reason; never carries the URL)."""


def _nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


NON_GLOBAL_V4: Final = _nets(
    "0.0.0.0/8",  # RFC 1122 §3.2.1.3: "this network"
    "10.0.0.0/8",  # RFC 1918: private use
    "100.64.0.0/10",  # RFC 6598: shared address space (carrier-grade NAT; Alibaba metadata lives here)
    "127.0.0.0/8",  # RFC 1122 §3.2.1.3: loopback
    "169.254.0.0/16",  # RFC 3927: link-local (AWS, GCP, Azure, OpenStack metadata)
    "172.16.0.0/12",  # RFC 1918: private use
    "192.0.0.0/24",  # RFC 6890: IETF protocol assignments (Oracle Cloud metadata 192.0.0.192)
    "192.0.2.0/24",  # RFC 5737: documentation (TEST-NET-1)
    "192.88.99.0/24",  # RFC 7526: deprecated 6to4 relay anycast
    "192.168.0.0/16",  # RFC 1918: private use
    "198.18.0.0/15",  # RFC 2544: benchmarking
    "198.51.100.0/24",  # RFC 5737: documentation (TEST-NET-2)
    "203.0.113.0/24",  # RFC 5737: documentation (TEST-NET-3)
    "224.0.0.0/4",  # RFC 5771: multicast
    "240.0.0.0/4",  # RFC 1112 §4: reserved, including 255.255.255.255 broadcast (RFC 919)
)
"""IPv4 ranges that are never a public destination."""

GLOBAL_UNICAST_V6: Final = ipaddress.ip_network("2000::/3")  # RFC 4291 §2.4: the only global unicast block
"""IPv6 outside this block (loopback, ULA, link-local, multicast, mapped...) is never global."""

NON_GLOBAL_V6: Final = _nets(
    "2001::/23",  # RFC 2928: IETF protocol assignments (Teredo 2001::/32 RFC 4380, ORCHID RFC 7343)
    "2001:db8::/32",  # RFC 3849: documentation
    "3fff::/20",  # RFC 9637: documentation
    "5f00::/16",  # RFC 9602: SRv6 SIDs
)
"""IPv6 ranges inside 2000::/3 that are still not a public destination."""

PRIVATE_NETWORKS: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
"""A LAN: RFC 1918 and carrier-grade NAT (RFC 6598), where an owner's own server at home or in
the office is; never loopback, link-local or a metadata endpoint (those stay refused whatever
allows this). IPv4 only: an allowed IPv6 network is at most a /32, and a LAN's ULA prefix is
each site's own."""

NAT64_WELL_KNOWN: Final = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: IPv4 in the last 32 bits
NAT64_LOCAL: Final = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: local-use NAT64, never global
SIX_TO_FOUR: Final = ipaddress.ip_network("2002::/16")  # RFC 3056: IPv4 in bits 16-47

METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS IMDS, GCP, Azure IMDS, OpenStack, DigitalOcean, Oracle
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity agent
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity agent over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "192.0.0.192",  # Oracle Cloud legacy metadata
    )
)
"""Cloud metadata endpoints: refused even inside an explicitly allowed network."""

METADATA_HOSTNAMES: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",  # GCP
        "metadata.goog",  # GCP
        "metadata.azure.internal",
        "instance-data",  # AWS legacy name
        "instance-data.ec2.internal",  # AWS legacy name
    }
)
"""Host names of metadata services, refused by name before any resolution."""

# RFC 6761 (localhost, invalid, test), RFC 6762 (local), RFC 8375 (home.arpa), and the
# ICANN-reserved private TLD "internal": names that only ever lead inside a network.
_SPECIAL_SUFFIXES: Final = ("localhost", "local", "internal", "home.arpa", "localdomain", "invalid", "test", "lan")

_SCHEMES: Final = frozenset({"http", "https"})
_MAX_URL: Final = 2048
_HOST_LABEL: Final = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# A label made only of digits or 0x-hex: resolvers parse such hosts as (legacy) IPv4 forms.
_NUMERIC_LABEL: Final = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
_CANONICAL_V4: Final = re.compile(r"^(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}$")
_UNSAFE_URL_CHARS: Final = re.compile(r"[\x00-\x20\x7f\\]")

EgressUrl = Annotated[str, StringConstraints(min_length=8, max_length=_MAX_URL, strip_whitespace=True)]
"""A URL argument that leaves Tollgate. Mark the field with :class:`UrlField` so governance checks it."""


@dataclass(frozen=True, slots=True)
class UrlField:
    """Field metadata: this argument is a URL Tollgate will connect to (egress-checked before it runs)."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Where Tollgate may connect. Build it with :meth:`build`; the defaults deny everything."""

    mode: EgressMode = "enforce"
    """How the per-host allowlist applies."""
    allow_hosts: frozenset[str] = frozenset()
    """Allowed hosts: exact names or IP literals, or ``*.example.com`` for any subdomain."""
    allow_networks: tuple[IPNetwork, ...] = ()
    """Non-global networks explicitly allowed (test servers on loopback); metadata never is."""
    allow_ports: frozenset[tuple[str, int]] = frozenset()
    """Ports besides 80 and 443, per host: from allowlist entries written ``host:port``."""

    @classmethod
    def build(
        cls, *, mode: EgressMode = "enforce", allow_hosts: Iterable[str] = (), allow_networks: Iterable[str] = ()
    ) -> EgressPolicy:
        """Normalize friendly configuration once; refuse impossible or dangerous configurations."""
        if mode not in ("off", "shadow", "enforce"):
            raise ValueError(f"egress mode must be off, shadow or enforce, not {mode!r}")
        hosts: set[str] = set()
        ports: set[tuple[str, int]] = set()
        for raw in allow_hosts:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            entry, port = _split_port(entry, raw)
            name = entry[2:] if entry.startswith("*.") else entry
            if "*" in name or "/" in name or (":" in name and not _is_ip(name.strip("[]"))):
                raise ValueError(f"allowlist entry {raw!r} must be a host, an IP literal or *.domain")
            host = entry.strip("[]") if _is_ip(entry.strip("[]")) else entry
            hosts.add(host)
            if port is not None:
                ports.add((host, port))
        networks: list[IPNetwork] = []
        for raw in allow_networks:
            net = ipaddress.ip_network(raw.strip(), strict=False)
            if net.prefixlen < (8 if net.version == 4 else 32):
                raise ValueError(f"allowed network {raw!r} is too broad (at most a /8 or an IPv6 /32)")
            networks.append(net)
        return cls(mode=mode, allow_hosts=frozenset(hosts), allow_networks=tuple(networks), allow_ports=frozenset(ports))

    def host_allowed(self, host: str) -> bool:
        """Whether ``host`` (normalized) matches the allowlist."""
        if host in self.allow_hosts:
            return True
        return any(e.startswith("*.") and host.endswith(e[1:]) and len(host) > len(e) - 1 for e in self.allow_hosts)

    def port_allowed(self, host: str, port: int) -> bool:
        """Whether ``port`` of ``host`` may be reached: 80 and 443 anywhere, others only as listed."""
        return port in DEFAULT_PORTS or (host, port) in self.allow_ports or any(
            h.startswith("*.") and host.endswith(h[1:]) and p == port for h, p in self.allow_ports)


DEFAULT_PORTS: Final = frozenset({80, 443})
"""The ports any allowed host may be reached on; any other needs a ``host:port`` allowlist entry."""


def _split_port(entry: str, raw: str) -> tuple[str, int | None]:
    """``host:port`` (or ``[v6]:port``) into the host and the port; a bare host has none."""
    if entry.startswith("["):
        host, _, rest = entry.partition("]")
        host += "]"
    elif entry.count(":") == 1:
        host, _, rest = entry.partition(":")
        rest = ":" + rest
    else:
        return entry, None
    if not rest:
        return host, None
    if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
        raise ValueError(f"allowlist entry {raw!r} must be a host, an IP literal or *.domain, optionally :port")
    return host, int(rest[1:])


def check_redirect(from_url: str, to_url: str) -> EgressReason | None:
    """Why a redirect from ``from_url`` to ``to_url`` may not be followed, or ``None``: a hop from
    https down to http would send what follows in clear (the new URL is checked as any other)."""
    if urlsplit(from_url).scheme.lower() == "https" and urlsplit(to_url).scheme.lower() != "https":
        return "insecure_redirect"
    return None


@dataclass(frozen=True, slots=True)
class EgressDecision:
    """The gate's verdict on one destination."""

    allowed: bool
    """Whether the connection may be made."""
    reason: EgressReason
    """Why (``allowed`` when nothing objected)."""
    scheme: str = ""
    """``http`` or ``https`` (empty when the URL did not parse)."""
    host: str = ""
    """The normalized host: lowercase ASCII name, or an IP literal without brackets."""
    port: int = 0
    """The port the connection goes to."""
    address: str = ""
    """For an IP-literal host or after :func:`check_addresses`: the address to connect to."""
    shadow: tuple[EgressReason, ...] = field(default=())
    """Reasons that would refuse in ``enforce`` mode but were only reported (``shadow`` mode)."""

    @classmethod
    def deny(cls, reason: EgressReason, *, scheme: str = "", host: str = "", port: int = 0) -> EgressDecision:
        """A refusal."""
        return cls(False, reason, scheme, host, port)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def embedded_ipv4(addr: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address carried inside an IPv6 one (mapped, NAT64 well-known prefix, 6to4), if any."""
    if not isinstance(addr, ipaddress.IPv6Address):
        return None
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.sixtofour is not None:
        return addr.sixtofour
    return None


def _is_metadata(addr: IPAddress) -> bool:
    inner = embedded_ipv4(addr)
    return addr in METADATA_ADDRESSES or (inner is not None and inner in METADATA_ADDRESSES)


def _non_global(addr: IPAddress) -> bool:
    if isinstance(addr, ipaddress.IPv4Address):
        return any(addr in net for net in NON_GLOBAL_V4)
    if addr.scope_id:
        return True
    if addr not in GLOBAL_UNICAST_V6:
        return True
    return any(addr in net for net in NON_GLOBAL_V6)


def address_problem(address: str, policy: EgressPolicy) -> EgressReason | None:
    """Why ``address`` may not be connected to, or ``None``. Anything unparsable is refused."""
    try:
        addr: IPAddress = ipaddress.ip_address(address)
    except ValueError:
        return "non_global_address"
    if _is_metadata(addr):
        return "metadata_endpoint"
    inner = embedded_ipv4(addr)
    if inner is not None:
        if _non_global(inner) and not any(inner in net for net in policy.allow_networks if net.version == 4):
            return "embedded_ipv4"
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr in NAT64_LOCAL:
        return "embedded_ipv4"
    if _non_global(addr) and not any(addr in net for net in policy.allow_networks if net.version == addr.version):
        return "non_global_address"
    return None


def _normalize_host(raw: str) -> str | None:
    """Lowercase ASCII (IDNA) host without a trailing dot, or ``None`` when it is not a valid name."""
    host = raw.lower().rstrip(".")
    if not host or len(host) > 253:
        return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    labels = host.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        return None
    return host


def check_url(url: str, policy: EgressPolicy) -> EgressDecision:
    """Check a URL before resolving it: scheme, credentials, host form, special names, allowlist."""
    if not isinstance(url, str) or not 0 < len(url) <= _MAX_URL or _UNSAFE_URL_CHARS.search(url):
        return EgressDecision.deny("bad_url")
    try:
        parts = urlsplit(url)
        port_given = parts.port
    except ValueError:
        return EgressDecision.deny("bad_url")
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        return EgressDecision.deny("scheme_not_allowed")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        return EgressDecision.deny("credentials_in_url", scheme=scheme)
    raw_host = parts.hostname or ""
    port = port_given if port_given is not None else (443 if scheme == "https" else 80)
    if not raw_host or port == 0:
        return EgressDecision.deny("bad_url", scheme=scheme)
    if parts.netloc.startswith("["):
        if not _is_ip(raw_host):
            return EgressDecision.deny("bad_url", scheme=scheme)
        host = str(ipaddress.ip_address(raw_host))
        literal = host
    else:
        normalized = _normalize_host(raw_host)
        if normalized is None:
            return EgressDecision.deny("bad_url", scheme=scheme)
        host = normalized
        last = host.rsplit(".", 1)[-1]
        if _NUMERIC_LABEL.match(last) or (len(host.split(".")) == 1 and _NUMERIC_LABEL.match(host)):
            if not _CANONICAL_V4.match(host):
                return EgressDecision.deny("nonstandard_ip_form", scheme=scheme, host=host, port=port)
            literal = host
        else:
            literal = ""
    if not literal:
        if host in METADATA_HOSTNAMES:
            return EgressDecision.deny("metadata_endpoint", scheme=scheme, host=host, port=port)
        if any(host == s or host.endswith("." + s) for s in _SPECIAL_SUFFIXES):
            return EgressDecision.deny("special_use_name", scheme=scheme, host=host, port=port)
    else:
        problem = address_problem(literal, policy)
        if problem is not None:
            return EgressDecision.deny(problem, scheme=scheme, host=host, port=port)
    shadow: tuple[EgressReason, ...] = ()
    if policy.mode != "off" and not policy.host_allowed(host):
        if policy.mode == "enforce":
            return EgressDecision.deny("not_allowlisted", scheme=scheme, host=host, port=port)
        shadow = ("not_allowlisted",)
    elif policy.mode != "off" and not policy.port_allowed(host, port):
        # The allowlist names ports too: an allowed host's 22, 25, 5432 or 6379 answer as well as its 443.
        if policy.mode == "enforce":
            return EgressDecision.deny("port_not_allowed", scheme=scheme, host=host, port=port)
        shadow = ("port_not_allowed",)
    return EgressDecision(True, "allowed", scheme, host, port, literal, shadow)


def check_endpoint(host: str, port: int, policy: EgressPolicy) -> EgressDecision:
    """Check a TCP destination of another protocol (IMAP, SMTP) before resolving it.

    It is checked exactly as an ``https`` URL of the same host and port would be (host form,
    special names, literal addresses, the allowlist with its ports), so no protocol has a gate of
    its own; the decision's ``scheme`` is ``tcp``.
    """
    if not isinstance(host, str) or not host or any(c in host for c in "/@?#[]\\ ") or not 0 < port < 65536:
        return EgressDecision.deny("bad_url", scheme="tcp")
    literal = f"[{host}]" if ":" in host else host
    return replace(check_url(f"https://{literal}:{port}/", policy), scheme="tcp")


def check_addresses(decision: EgressDecision, addresses: Sequence[str], policy: EgressPolicy) -> EgressDecision:
    """Check every resolved address of an allowed URL; pick the one to connect to.

    One bad address refuses the whole destination (a rebinding resolver may hand out a public
    address first and a private one next). No address at all is a refusal too.
    """
    if not decision.allowed:
        return decision
    if not addresses:
        return EgressDecision.deny("no_address", scheme=decision.scheme, host=decision.host, port=decision.port)
    for address in addresses:
        problem = address_problem(address, policy)
        if problem is not None:
            return EgressDecision.deny(problem, scheme=decision.scheme, host=decision.host, port=decision.port)
    first = str(ipaddress.ip_address(addresses[0]))
    return EgressDecision(True, "allowed", decision.scheme, decision.host, decision.port, first, decision.shadow)
