"""The pinned HTTP transport: every outbound request of Tollgate goes through :func:`egress_get`.

For each hop (the first request and every redirect) it checks the URL with
:func:`policies.egress.check_url`, resolves the host once with an injectable resolver, checks
*every* resolved address with :func:`policies.egress.check_addresses`, and connects to exactly
the address it checked: the httpcore network backend refuses any connection that was not
pinned, so there is no second lookup for a rebinding DNS server to answer differently. TLS
still verifies the certificate against the host name. Redirects are followed by hand, each one
re-checked, at most ``max_redirects`` of them; the body is capped in bytes and the whole
exchange in time. Proxy variables are ignored (``trust_env=False`` and our own transport).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpcore
import httpx

from tollgate.policies.egress import (
    PRIVATE_NETWORKS, EgressDecision, EgressPolicy, check_addresses, check_endpoint, check_redirect, check_url,
)
from tollgate.policies.errors import EgressDenied, Unavailable

__all__ = [
    "EgressClient",
    "EgressLimits",
    "FetchedResponse",
    "PinnedBackend",
    "PinnedTransport",
    "Resolver",
    "egress_get",
    "egress_request",
    "system_resolver",
]

_log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""Resolves (host, port) to IP address strings. Tests inject one; nothing else looks names up."""

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_USER_AGENT: Final = "Tollgate/0.1 (+governed tool runtime)"


async def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (``getaddrinfo``), de-duplicated in answer order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    seen: dict[str, None] = {}
    for info in infos:
        seen.setdefault(str(info[4][0]), None)
    return list(seen)


@dataclass(frozen=True, slots=True)
class EgressLimits:
    """Caps on one outbound exchange (all hops together)."""

    max_redirects: int = 3
    """Redirects followed before giving up."""
    max_bytes: int = 2_000_000
    """Largest response body accepted; a larger one is refused, not truncated."""
    timeout_seconds: float = 10.0
    """Wall-clock budget for the whole exchange, redirects included."""

    def __post_init__(self) -> None:
        if not 0 <= self.max_redirects <= 10:
            raise ValueError("max_redirects must be between 0 and 10")
        if not 0 < self.max_bytes <= 50_000_000:
            raise ValueError("max_bytes must be between 1 and 50,000,000")
        if not 0 < self.timeout_seconds <= 120:
            raise ValueError("timeout_seconds must be between 0 and 120")


@dataclass(frozen=True, slots=True)
class FetchedResponse:
    """A completed response (after redirects)."""

    url: str
    """The final URL."""
    status: int
    """HTTP status of the final response."""
    content_type: str
    """The media type, lowercase, without parameters."""
    charset: str | None
    """The declared charset, if any."""
    body: bytes
    """The body (at most ``max_bytes``)."""
    hops: int
    """Redirects followed."""
    shadow: tuple[str, ...] = ()
    """Hosts that passed only because the allowlist is in shadow mode."""
    etag: str | None = None
    """The response's ETag header, if any (WebDAV writes are conditional on it)."""

    def text(self) -> str:
        """The body decoded with its declared charset (UTF-8 by default), undecodable bytes replaced."""
        try:
            return self.body.decode(self.charset or "utf-8", errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


def _pin_key(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return host.lower().rstrip(".")


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the gate pinned for (host, port); refuses everything else."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._pins: dict[tuple[str, int], str] = {}

    def pin(self, host: str, port: int, address: str) -> None:
        """Allow connections to (host, port), made to ``address``."""
        self._pins[(_pin_key(host), port)] = address

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        address = self._pins.get((_pin_key(host), port))
        if address is None:
            raise EgressDenied("connection_failed")
        return await self._inner.connect_tcp(
            address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise EgressDenied("scheme_not_allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over httpcore with the :class:`PinnedBackend`; no proxies, no retries."""

    def __init__(self, backend: PinnedBackend, ssl_context: ssl.SSLContext | None = None) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            network_backend=backend,
            http1=True,
            http2=False,
            retries=0,
            max_connections=4,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        resp = await self._pool.handle_async_request(req)
        return httpx.Response(
            status_code=resp.status, headers=resp.headers, stream=_Body(resp.stream), extensions=resp.extensions
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def _same_host(decision: EgressDecision, url: httpx.URL) -> bool:
    return _pin_key(url.raw_host.decode("ascii", errors="replace")) == _pin_key(decision.host) and (
        url.port or (443 if url.scheme == "https" else 80)
    ) == decision.port


async def _checked_hop(url: str, policy: EgressPolicy, resolver: Resolver, backend: PinnedBackend) -> tuple[httpx.URL, EgressDecision]:
    decision = check_url(url, policy)
    if not decision.allowed:
        raise EgressDenied(decision.reason)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        raise EgressDenied("bad_url") from None
    if not _same_host(decision, parsed):
        raise EgressDenied("parser_mismatch")
    if decision.address:
        addresses: Sequence[str] = [decision.address]
    else:
        try:
            addresses = list(await resolver(decision.host, decision.port))
        except OSError:
            raise EgressDenied("no_address") from None
    pinned = check_addresses(decision, addresses, policy)
    if not pinned.allowed:
        raise EgressDenied(pinned.reason)
    backend.pin(pinned.host, pinned.port, pinned.address)
    return parsed, pinned


async def egress_get(
    url: str,
    *,
    policy: EgressPolicy,
    resolver: Resolver = system_resolver,
    limits: EgressLimits = EgressLimits(),
    params: Mapping[str, str] | None = None,
    accept: str = "*/*",
) -> FetchedResponse:
    """GET ``url`` through the egress gate; raise :class:`EgressDenied` or :class:`Unavailable`.

    Errors carry reasons only, never the URL (it may hold a query the user typed).
    """
    return await egress_request("GET", url, policy=policy, resolver=resolver, limits=limits, params=params, accept=accept)


async def egress_request(
    method: str,
    url: str,
    *,
    policy: EgressPolicy,
    resolver: Resolver = system_resolver,
    limits: EgressLimits = EgressLimits(),
    params: Mapping[str, str] | None = None,
    accept: str = "*/*",
    headers: Mapping[str, str] | None = None,
    json_body: Any = None,
    content: bytes | None = None,
) -> FetchedResponse:
    """One request through the egress gate, as :func:`egress_get` checks it.

    The body is ``json_body`` (as JSON) or ``content`` (bytes, with the caller's Content-Type).
    Only a GET follows redirects (each hop re-checked); any other method gets the redirect
    response itself, so a body is never re-sent somewhere the caller did not name.
    """
    if params:
        url = str(httpx.URL(url, params=dict(params)))
    backend = PinnedBackend()
    shadow: list[str] = []
    sent = {**(headers or {}), "User-Agent": _USER_AGENT, "Accept": accept, "Accept-Encoding": "identity"}
    try:
        async with asyncio.timeout(limits.timeout_seconds):
            async with httpx.AsyncClient(
                transport=PinnedTransport(backend),
                trust_env=False,
                follow_redirects=False,
                timeout=httpx.Timeout(limits.timeout_seconds),
                headers=sent,
            ) as client:
                current = url
                for hop in range(limits.max_redirects + 1):
                    parsed, decision = await _checked_hop(current, policy, resolver, backend)
                    if decision.shadow:
                        shadow.append(decision.host)
                    async with client.stream(method, parsed, json=json_body, content=content) as response:
                        location = response.headers.get("location")
                        if response.status_code in _REDIRECTS and location and method == "GET":
                            try:
                                following = str(parsed.join(location))
                            except (httpx.InvalidURL, ValueError):
                                raise EgressDenied("bad_url") from None
                            refused = check_redirect(str(parsed), following)
                            if refused is not None:
                                raise EgressDenied(refused)
                            current = following
                            continue
                        declared = response.headers.get("content-length", "")
                        if declared.isdigit() and int(declared) > limits.max_bytes:
                            raise EgressDenied("response_too_large")
                        chunks: list[bytes] = []
                        size = 0
                        async for chunk in response.aiter_raw():
                            size += len(chunk)
                            if size > limits.max_bytes:
                                raise EgressDenied("response_too_large")
                            chunks.append(chunk)
                        media = response.headers.get("content-type", "")
                        content_type = media.split(";", 1)[0].strip().lower()
                        return FetchedResponse(
                            url=str(parsed),
                            status=response.status_code,
                            content_type=content_type,
                            charset=response.charset_encoding,
                            body=b"".join(chunks),
                            hops=hop,
                            shadow=tuple(shadow),
                            etag=response.headers.get("etag"),
                        )
                raise EgressDenied("too_many_redirects")
    except TimeoutError:
        raise EgressDenied("timeout") from None
    except (httpx.HTTPError, httpcore.TimeoutException) as exc:
        if isinstance(exc, (httpx.TimeoutException, httpcore.TimeoutException)):
            raise EgressDenied("timeout") from None
        raise Unavailable("web destination") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, OSError, ssl.SSLError):
        raise Unavailable("web destination") from None
    finally:
        if shadow:
            _log.info("egress allowlist (shadow mode) let %d host(s) through", len(shadow))


@dataclass(frozen=True, slots=True)
class EgressClient:
    """HTTP for tools (``ExecContext.http``): every request through the egress gate, with its caps.

    Hosts a tool may reach are the operator's allowlist (``TOLLGATE_EGRESS_ALLOW_HOSTS``); errors
    carry reasons, never URLs.
    """

    policy: EgressPolicy
    """Where requests may go."""
    limits: EgressLimits = EgressLimits()
    """Redirect, size and time caps."""
    resolver: Resolver = system_resolver
    """Host name resolution."""

    async def get(self, url: str, *, params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None,
                  accept: str = "*/*") -> FetchedResponse:
        """GET ``url`` (redirects followed, each re-checked)."""
        return await egress_request("GET", url, policy=self.policy, resolver=self.resolver, limits=self.limits,
                                    params=params, headers=headers, accept=accept)

    async def post(self, url: str, *, json: Any = None, headers: Mapping[str, str] | None = None,
                   accept: str = "application/json") -> FetchedResponse:
        """POST ``json`` to ``url`` (no redirect is followed)."""
        return await egress_request("POST", url, policy=self.policy, resolver=self.resolver, limits=self.limits,
                                    headers=headers, json_body=json, accept=accept)

    async def request(self, method: str, url: str, *, content: bytes | None = None,
                      headers: Mapping[str, str] | None = None, accept: str = "*/*") -> FetchedResponse:
        """Any method (WebDAV's PROPFIND, REPORT, PUT...) with a raw body; only a GET follows redirects."""
        return await egress_request(method, url, policy=self.policy, resolver=self.resolver, limits=self.limits,
                                    headers=headers, content=content, accept=accept)

    async def address(self, host: str, port: int) -> str:
        """The one address a connection of another protocol (IMAP, SMTP) to ``host:port`` must go to.

        The destination is checked as an HTTP request's would be (:func:`~policies.egress.check_endpoint`),
        resolved once and every address checked; the caller connects to the address returned
        and verifies TLS against ``host``. Raises :class:`EgressDenied` with a reason only.
        """
        decision = check_endpoint(host, port, self.policy)
        if not decision.allowed:
            raise EgressDenied(decision.reason)
        if decision.address:
            return decision.address
        try:
            addresses = list(await self.resolver(decision.host, decision.port))
        except OSError:
            raise EgressDenied("no_address") from None
        pinned = check_addresses(decision, addresses, self.policy)
        if not pinned.allowed:
            raise EgressDenied(pinned.reason)
        return pinned.address

    def for_hosts(self, *hosts: str, private_network: bool = False) -> EgressClient:
        """This client, allowed to reach ``hosts`` (``host`` or ``host:port``) only: an account's own
        server, with the operator's networks, mode and caps; with ``private_network``, also when
        those hosts are on a LAN (:data:`~policies.egress.PRIVATE_NETWORKS`: the operator allowed it
        for this one account)."""
        networks = [str(n) for n in self.policy.allow_networks] + (list(PRIVATE_NETWORKS) if private_network else [])
        policy = EgressPolicy.build(mode=self.policy.mode, allow_hosts=hosts, allow_networks=networks)
        return EgressClient(policy, self.limits, self.resolver)
