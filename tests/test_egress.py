"""The egress gate: SSRF forms, metadata endpoints, rebinding, redirects, caps and proxies.

Pure checks run without a network; transport checks use a real server on 127.0.0.1 that is
allowed only through explicit configuration, and an injected resolver (no real DNS).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tollgate.tools.perimeter.egress_transport import EgressLimits, egress_get
from tollgate.policies.egress import EgressPolicy, address_problem, check_addresses, check_redirect, check_url
from tollgate.policies.errors import EgressDenied, TollgateError
from tests.webserver import WebServer, serve, build_app, Hits, web_server  # noqa: F401 - the fixture

OPEN = EgressPolicy.build(mode="off")
"""Allowlist off: only network safety applies."""


def _resolver(table: dict[str, Sequence[str]], calls: list[str] | None = None):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> Sequence[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise OSError("no such host in the test resolver")
        return table[host]

    return resolve


# --- pure decisions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param("ftp://example.com/x", "scheme_not_allowed", id="ftp"),
        pytest.param("file:///etc/passwd", "scheme_not_allowed", id="file"),
        pytest.param("gopher://example.com:70/_x", "scheme_not_allowed", id="gopher"),
        pytest.param("javascript:alert(1)", "scheme_not_allowed", id="javascript"),
        pytest.param("http://user:pass@example.com/", "credentials_in_url", id="userinfo"),
        pytest.param("http://example.com@127.0.0.1/", "credentials_in_url", id="at-sign-confusion"),
        pytest.param("http://127.0.0.1/", "non_global_address", id="loopback"),
        pytest.param("http://127.1/", "nonstandard_ip_form", id="short-127.1"),
        pytest.param("http://0x7f.0.0.1/", "nonstandard_ip_form", id="hex-octet"),
        pytest.param("http://0x7f000001/", "nonstandard_ip_form", id="hex-integer"),
        pytest.param("http://2130706433/", "nonstandard_ip_form", id="decimal-integer"),
        pytest.param("http://0177.0.0.1/", "nonstandard_ip_form", id="octal-octet"),
        pytest.param("http://017700000001/", "nonstandard_ip_form", id="octal-integer"),
        pytest.param("http://127.0.0.01/", "nonstandard_ip_form", id="zero-padded"),
        pytest.param("http://0/", "nonstandard_ip_form", id="zero-host"),
        pytest.param("http://0.0.0.0/", "non_global_address", id="unspecified-v4"),
        pytest.param("http://10.0.0.1/", "non_global_address", id="rfc1918-10"),
        pytest.param("http://172.16.5.4/", "non_global_address", id="rfc1918-172"),
        pytest.param("http://192.168.1.1/", "non_global_address", id="rfc1918-192"),
        pytest.param("http://100.64.0.1/", "non_global_address", id="cgnat"),
        pytest.param("http://198.18.0.1/", "non_global_address", id="benchmarking"),
        pytest.param("http://224.0.0.1/", "non_global_address", id="multicast"),
        pytest.param("http://255.255.255.255/", "non_global_address", id="broadcast"),
        pytest.param("http://[::1]/", "non_global_address", id="loopback-v6"),
        pytest.param("http://[::]/", "non_global_address", id="unspecified-v6"),
        pytest.param("http://[fc00::1]/", "non_global_address", id="ula"),
        pytest.param("http://[fe80::1]/", "non_global_address", id="link-local-v6"),
        pytest.param("http://[::ffff:127.0.0.1]/", "embedded_ipv4", id="v4-mapped-loopback"),
        pytest.param("http://[::ffff:7f00:1]/", "embedded_ipv4", id="v4-mapped-hex"),
        pytest.param("http://[::ffff:10.0.0.1]/", "embedded_ipv4", id="v4-mapped-private"),
        pytest.param("http://[64:ff9b::7f00:1]/", "embedded_ipv4", id="nat64-loopback"),
        pytest.param("http://[64:ff9b::a9fe:a9fe]/", "metadata_endpoint", id="nat64-metadata"),
        pytest.param("http://[64:ff9b:1::a00:1]/", "embedded_ipv4", id="nat64-local-use"),
        pytest.param("http://[2002:7f00:1::]/", "embedded_ipv4", id="6to4-loopback"),
        pytest.param("http://[2002:a9fe:a9fe::]/", "metadata_endpoint", id="6to4-metadata"),
        pytest.param("http://[::127.0.0.1]/", "non_global_address", id="v4-compatible"),
        pytest.param("http://[2001:db8::1]/", "non_global_address", id="documentation-v6"),
        pytest.param("http://169.254.169.254/latest/meta-data/", "metadata_endpoint", id="aws-azure-gcp-metadata"),
        pytest.param("http://[fd00:ec2::254]/latest/", "metadata_endpoint", id="aws-metadata-v6"),
        pytest.param("http://100.100.100.200/latest/meta-data/", "metadata_endpoint", id="alibaba-metadata"),
        pytest.param("http://169.254.170.2/v2/credentials", "metadata_endpoint", id="aws-ecs-metadata"),
        pytest.param("http://metadata.google.internal/computeMetadata/v1/", "metadata_endpoint", id="gcp-metadata-name"),
        pytest.param("http://METADATA.google.internal./", "metadata_endpoint", id="gcp-metadata-case-dot"),
        pytest.param("http://localhost/", "special_use_name", id="localhost"),
        pytest.param("http://api.localhost/", "special_use_name", id="sub-localhost"),
        pytest.param("http://printer.local/", "special_use_name", id="mdns-local"),
        pytest.param("http://db.internal/", "special_use_name", id="internal-tld"),
        pytest.param("http://ⓛocalhost/", "special_use_name", id="unicode-localhost"),
        pytest.param("http://127。0。0。1/", "non_global_address", id="ideographic-dots"),
        pytest.param("http://exa mple.com/", "bad_url", id="space-in-host"),
        pytest.param("http://example.com\\@127.0.0.1/", "bad_url", id="backslash"),
        pytest.param("http://exam\tple.com/", "bad_url", id="tab-stripped-by-parsers"),
        pytest.param("http://%31%32%37.0.0.1/", "bad_url", id="percent-encoded-host"),
        pytest.param("http://[127.0.0.1]/", "bad_url", id="bracketed-v4"),
        pytest.param("http:///path", "bad_url", id="no-host"),
        pytest.param("http://example.com:0/", "bad_url", id="port-zero"),
        pytest.param("http://example.com:99999/", "bad_url", id="port-out-of-range"),
        pytest.param("", "bad_url", id="empty"),
    ],
)
def test_ssrf_forms_are_refused(url: str, reason: str) -> None:
    decision = check_url(url, OPEN)
    assert not decision.allowed
    assert decision.reason == reason


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("127.0.0.1", id="loopback"),
        pytest.param("10.1.2.3", id="private"),
        pytest.param("169.254.169.254", id="metadata"),
        pytest.param("::ffff:192.168.0.1", id="mapped-private"),
        pytest.param("64:ff9b::c0a8:1", id="nat64-private"),
        pytest.param("2002:c0a8:1::1", id="6to4-private"),
        pytest.param("fe80::1%eth0", id="scoped-link-local"),
        pytest.param("not-an-ip", id="garbage-fails-closed"),
        pytest.param("", id="empty-fails-closed"),
    ],
)
def test_every_non_global_resolved_address_is_refused(address: str) -> None:
    assert address_problem(address, OPEN) is not None


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "::ffff:93.184.215.14", "64:ff9b::5db8:d70e"],
    ids=["public-v4", "public-v6", "mapped-public", "nat64-public"],
)
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(address, OPEN) is None


def test_one_private_answer_refuses_the_whole_host() -> None:
    first = check_url("https://rebind.example/x", OPEN)
    assert first.allowed
    mixed = check_addresses(first, ["93.184.215.14", "127.0.0.1"], OPEN)
    assert not mixed.allowed and mixed.reason == "non_global_address"
    assert check_addresses(first, [], OPEN).reason == "no_address"
    ok = check_addresses(first, ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"], OPEN)
    assert ok.allowed and ok.address == "93.184.215.14"


def test_deny_by_default() -> None:
    default = EgressPolicy()
    assert default.mode == "enforce" and not default.allow_hosts
    assert check_url("https://example.com/", default).reason == "not_allowlisted"


@pytest.mark.parametrize(
    ("mode", "url", "allowed", "shadow"),
    [
        pytest.param("enforce", "https://api.open-meteo.com/v1/forecast", True, (), id="enforce-listed"),
        pytest.param("enforce", "https://en.wikipedia.org/wiki/X", True, (), id="enforce-wildcard"),
        pytest.param("enforce", "https://wikipedia.org/", False, (), id="enforce-wildcard-not-apex"),
        pytest.param("enforce", "https://evil.example/", False, (), id="enforce-unlisted"),
        pytest.param("enforce", "https://api.open-meteo.com.evil.example/", False, (), id="enforce-suffix-trick"),
        pytest.param("shadow", "https://evil.example/", True, ("not_allowlisted",), id="shadow-unlisted-reported"),
        pytest.param("shadow", "http://127.0.0.1/", False, (), id="shadow-never-shadows-network-safety"),
        pytest.param("off", "https://evil.example/", True, (), id="off-unlisted"),
        pytest.param("off", "http://169.254.169.254/", False, (), id="off-still-blocks-metadata"),
    ],
)
def test_allowlist_modes(mode: str, url: str, allowed: bool, shadow: tuple[str, ...]) -> None:
    policy = EgressPolicy.build(mode=mode, allow_hosts=["api.open-meteo.com", "*.wikipedia.org"])  # type: ignore[arg-type]
    decision = check_url(url, policy)
    assert decision.allowed is allowed
    assert decision.shadow == shadow


def test_loopback_only_through_explicit_configuration() -> None:
    assert check_url("http://127.0.0.1:8080/", OPEN).reason == "non_global_address"
    explicit = EgressPolicy.build(mode="off", allow_networks=["127.0.0.1/32"])
    assert check_url("http://127.0.0.1:8080/", explicit).allowed
    assert check_url("http://127.0.0.2:8080/", explicit).reason == "non_global_address"
    assert check_url("http://[::ffff:127.0.0.1]:8080/", explicit).allowed


def test_metadata_is_refused_even_inside_an_allowed_network() -> None:
    policy = EgressPolicy.build(mode="off", allow_networks=["169.254.0.0/16", "fd00:ec2::/32", "100.64.0.0/10"])
    assert address_problem("169.254.10.10", policy) is None
    for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "::ffff:169.254.169.254"):
        assert address_problem(address, policy) == "metadata_endpoint", address


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        pytest.param({"mode": "open"}, "egress mode", id="unknown-mode"),
        pytest.param({"allow_networks": ["0.0.0.0/0"]}, "too broad", id="everything-v4"),
        pytest.param({"allow_networks": ["::/0"]}, "too broad", id="everything-v6"),
        pytest.param({"allow_hosts": ["https://x.example/"]}, "must be a host", id="url-not-host"),
        pytest.param({"allow_hosts": ["*"]}, "must be a host", id="bare-star"),
    ],
)
def test_impossible_configurations_are_rejected(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        EgressPolicy.build(**kwargs)  # type: ignore[arg-type]


# --- the pinned transport, against a real loopback server ----------------------------------


def _loopback_policy(*hosts: str, port: int) -> EgressPolicy:
    """Loopback (it stands in for the web here) and ``hosts``, each on 80, 443 and ``port``."""
    names = ["127.0.0.1", *hosts]
    return EgressPolicy.build(mode="enforce", allow_hosts=[*names, *(f"{h}:{port}" for h in names)],
                              allow_networks=["127.0.0.1/32"])


async def test_fetch_through_the_gate(web_server: WebServer) -> None:
    got = await egress_get(web_server.url("/plain"), policy=_loopback_policy(port=web_server.port))
    assert got.status == 200 and got.content_type == "text/plain"
    assert got.text().startswith("Plain text page.")


async def test_loopback_is_refused_without_explicit_configuration(web_server: WebServer) -> None:
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url("/plain"), policy=EgressPolicy.build(mode="off"))
    assert caught.value.reason == "non_global_address"


async def test_connects_to_the_checked_address_with_one_lookup(web_server: WebServer) -> None:
    """DNS rebinding: the name is resolved once per hop and the connection goes to that answer.

    ``evil.example`` does not exist in real DNS, so the fetch can only succeed by connecting to
    the pinned answer; the resolver would answer differently on a second lookup.
    """
    calls: list[str] = []
    answers = iter([["127.0.0.1"], ["10.0.0.1"]])

    async def rebinding(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return next(answers)

    got = await egress_get(
        f"http://evil.example:{web_server.port}/plain", policy=_loopback_policy("evil.example", port=web_server.port), resolver=rebinding
    )
    assert got.status == 200 and calls == ["evil.example"]


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        pytest.param(["127.0.0.1"], "non_global_address", id="name-to-loopback"),
        pytest.param(["169.254.169.254"], "metadata_endpoint", id="name-to-metadata"),
        pytest.param(["::ffff:127.0.0.1"], "embedded_ipv4", id="name-to-mapped-loopback"),
        pytest.param(["93.184.215.14", "10.0.0.7"], "non_global_address", id="public-then-private"),
        pytest.param([], "no_address", id="no-answer"),
        pytest.param(["not-an-address"], "non_global_address", id="garbage-answer"),
    ],
)
async def test_resolved_addresses_are_each_checked(answers: list[str], reason: str) -> None:
    policy = EgressPolicy.build(mode="enforce", allow_hosts=["evil.example"])  # loopback NOT allowed here
    with pytest.raises(EgressDenied) as caught:
        await egress_get("http://evil.example/x", policy=policy, resolver=_resolver({"evil.example": answers}))
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        pytest.param("http://10.0.0.1/", "non_global_address", id="to-private"),
        pytest.param("http://169.254.169.254/latest/meta-data/iam/", "metadata_endpoint", id="to-metadata"),
        pytest.param("http://[::ffff:169.254.169.254]/", "metadata_endpoint", id="to-mapped-metadata"),
        pytest.param("http://localhost/", "special_use_name", id="to-localhost"),
        pytest.param("http://127.1/", "nonstandard_ip_form", id="to-short-loopback"),
        pytest.param("file:///etc/passwd", "scheme_not_allowed", id="to-file"),
        pytest.param("https://evil.example/", "not_allowlisted", id="to-unlisted-host"),
        pytest.param("http://127.0.0.2/", "non_global_address", id="to-other-loopback"),
    ],
)
async def test_every_redirect_hop_is_rechecked(web_server: WebServer, target: str, reason: str) -> None:
    web_server.hits.clear()
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url("/redirect"), params={"to": target}, policy=_loopback_policy(port=web_server.port))
    assert caught.value.reason == reason
    assert web_server.hits.paths == ["/redirect"]


async def test_relative_redirects_are_followed(web_server: WebServer) -> None:
    got = await egress_get(web_server.url("/redirect"), params={"to": "/plain"}, policy=_loopback_policy(port=web_server.port))
    assert got.hops == 1 and got.text().startswith("Plain text page.")


async def test_redirect_hops_are_capped(web_server: WebServer) -> None:
    web_server.hits.clear()
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url("/loop"), policy=_loopback_policy(port=web_server.port), limits=EgressLimits(max_redirects=2))
    assert caught.value.reason == "too_many_redirects"
    assert web_server.hits.paths == ["/loop"] * 3


@pytest.mark.parametrize("path", ["/big", "/big-declared"], ids=["streamed", "declared-length"])
async def test_bodies_are_capped(web_server: WebServer, path: str) -> None:
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url(path), policy=_loopback_policy(port=web_server.port), limits=EgressLimits(max_bytes=100_000))
    assert caught.value.reason == "response_too_large"


async def test_time_is_capped(web_server: WebServer) -> None:
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url("/slow"), policy=_loopback_policy(port=web_server.port), limits=EgressLimits(timeout_seconds=0.3))
    assert caught.value.reason == "timeout"


async def test_proxy_variables_are_ignored(web_server: WebServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy from the environment would see the request; the gate connects directly."""
    proxy_hits = Hits()
    async with serve(build_app(proxy_hits)) as proxy_port:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy_port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        got = await egress_get(web_server.url("/plain"), policy=_loopback_policy(port=web_server.port))
    assert got.status == 200
    assert proxy_hits.paths == []


async def test_unreachable_destination_is_a_typed_failure() -> None:
    """Port 1 on loopback is closed: a typed error, never a raw socket exception."""
    with pytest.raises(TollgateError) as caught:
        await egress_get("http://127.0.0.1:1/", policy=_loopback_policy(port=1), limits=EgressLimits(timeout_seconds=5))
    assert caught.value.code in ("unavailable", "egress_denied")


async def test_errors_never_carry_the_url(web_server: WebServer) -> None:
    secret_path = "/redirect?to=http://10.0.0.1/?token=hunter2-very-secret"
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url(secret_path), policy=_loopback_policy(port=web_server.port))
    assert "hunter2" not in str(caught.value) and "10.0.0.1" not in str(caught.value)


def test_an_allowed_host_is_reachable_on_80_and_443_and_other_ports_only_when_listed() -> None:
    policy = EgressPolicy.build(mode="enforce", allow_hosts=["api.example", "*.cdn.example:8443"])
    assert check_url("https://api.example/", policy).allowed and check_url("http://api.example/", policy).allowed
    for port in (22, 25, 5432, 6379, 11211, 8443):
        assert check_url(f"http://api.example:{port}/", policy).reason == "port_not_allowed"
    assert check_url("https://img.cdn.example:8443/x", policy).allowed
    assert check_url("https://img.cdn.example:8444/x", policy).reason == "port_not_allowed"
    with pytest.raises(ValueError, match="optionally :port"):
        EgressPolicy.build(allow_hosts=["api.example:ssh"])


async def test_a_loopback_server_on_an_unlisted_port_is_refused(web_server: WebServer) -> None:
    policy = EgressPolicy.build(mode="enforce", allow_hosts=["127.0.0.1"], allow_networks=["127.0.0.1/32"])
    with pytest.raises(EgressDenied) as caught:
        await egress_get(web_server.url("/plain"), policy=policy)
    assert caught.value.reason == "port_not_allowed"


@pytest.mark.parametrize(
    ("source", "target", "refused"),
    [
        ("https://a.example/x", "http://a.example/y", True),
        ("https://a.example/x", "HTTP://b.example/y", True),
        ("https://a.example/x", "https://b.example/y", False),
        ("http://a.example/x", "https://a.example/y", False),
        ("http://a.example/x", "http://a.example/y", False),
    ],
)
def test_a_redirect_from_https_down_to_http_is_refused(source: str, target: str, refused: bool) -> None:
    assert (check_redirect(source, target) == "insecure_redirect") is refused
