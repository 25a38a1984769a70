"""OpenID Connect access tokens: JWTs checked against the provider's published keys (JWKS).

PyJWT does the verification (signature, ``exp``, ``nbf``, ``iat``, ``iss``, ``aud``, with a
leeway): it is the JWT library the Python ecosystem relies on most (MCP, FastAPI's docs, Django
REST's simplejwt), its ``PyJWK`` reads JWKS entries, and it is already in our lock through the
MCP SDK. Its own JWKS client fetches with ``urllib``; keys are fetched here instead, through
the egress transport (pinned addresses, size and time caps), from the issuer's host only.

What is refused, before any key is used: a token whose ``alg`` is not one of the configured
asymmetric algorithms (so ``none`` and HMAC, including "HS256 signed with the public key", never
verify), an unknown ``kid`` after one refetch of the keys, a key whose type or declared ``alg``
does not fit the token's. After the signature: an ID token offered as an access token (RFC 9068:
a ``typ`` other than ``at+jwt``, or ``JWT`` from providers that still send it, and ID-token-only
claims, ``nonce``, ``at_hash``, ``c_hash``), and time claims that are not numbers (PyJWT takes
``"exp": "1999999999"``). The owner is the configured claim (``sub``, or a verified ``email``),
and must be a valid owner id.

The keys are fetched once at a time: requests that arrive during a fetch wait for that one, and
a failed fetch is not tried again for a backoff (1 s, doubling to the refetch interval or 60 s),
during which the keys already held keep serving, so a provider that is down costs one timeout,
not one per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import jwt

from tollgate.tools.perimeter.config import egress_limits
from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.policies.egress import EgressPolicy
from tollgate.policies.errors import TollgateError
from tollgate.web.identity import Identity, bearer_token

__all__ = ["JwksKeys", "OidcAuthenticator"]

_log = logging.getLogger("tollgate.identity")

_KEY_TYPES: Final = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_ACCESS_TOKEN_TYPES: Final = frozenset({"at+jwt", "application/at+jwt", "jwt"})
"""``typ`` values of an access token: RFC 9068's, and ``JWT``, which many providers still send."""
_ID_TOKEN_CLAIMS: Final = ("nonce", "at_hash", "c_hash")
"""Claims only an ID token carries (OpenID Connect Core 1.0, section 2 and 3.3.2.11)."""
_TIME_CLAIMS: Final = ("exp", "nbf", "iat")
_FIRST_BACKOFF: Final = 1.0
_MAX_BACKOFF: Final = 60.0


@dataclass(frozen=True, slots=True)
class _Key:
    jwk: jwt.PyJWK
    alg: str | None
    """The ``alg`` the JWKS entry declares, if it declares one."""


def _host_entry(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return host if parts.port is None else f"{host}:{parts.port}"


class JwksKeys:
    """The provider's signing keys by ``kid``, fetched through the egress gate and cached."""

    def __init__(self, http: EgressClient, *, issuer: str, jwks_url: str | None, ttl: float, refetch: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._http = http
        self._issuer = issuer.rstrip("/")
        self._jwks_url = jwks_url
        self._ttl = ttl
        self._refetch = refetch
        self._clock = clock
        self._keys: dict[str, _Key] = {}
        self._fetched_at: float | None = None
        self._failed_until = 0.0
        self._backoff = _FIRST_BACKOFF
        self._lock = asyncio.Lock()

    async def _get_json(self, url: str) -> Any:
        response = await self._http.get(url, accept="application/json")
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        return json.loads(response.body)

    async def _jwks_uri(self) -> str:
        if self._jwks_url is None:
            discovery = await self._get_json(f"{self._issuer}/.well-known/openid-configuration")
            uri = discovery.get("jwks_uri") if isinstance(discovery, dict) else None
            if not isinstance(uri, str):
                raise ValueError("the discovery document names no jwks_uri")
            self._jwks_url = uri
        return self._jwks_url

    async def _fetch(self) -> None:
        document = await self._get_json(await self._jwks_uri())
        keys: dict[str, _Key] = {}
        for entry in document.get("keys", []) if isinstance(document, dict) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                declared = entry.get("alg")
                keys[str(entry.get("kid", ""))] = _Key(jwt.PyJWK(entry), declared if isinstance(declared, str) else None)
            except jwt.PyJWTError:
                continue  # a key type or curve we cannot use: skip it, keep the rest
        self._keys = keys
        self._fetched_at = self._clock()

    async def key(self, kid: str | None) -> _Key | None:
        """The key for ``kid`` (``None``: the only key there is), fetching or refetching as needed.

        One fetch at a time: a caller that waited for another's fetch uses its result. After a
        failed fetch none is tried until the backoff has passed; the keys held meanwhile serve.
        """
        async with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= self._ttl
            unknown = kid is not None and kid not in self._keys
            may_refetch = self._fetched_at is None or now - self._fetched_at >= self._refetch
            if (stale or (unknown and may_refetch)) and now >= self._failed_until:
                try:
                    await self._fetch()
                except (TollgateError, ValueError, OSError) as exc:
                    # Keep the keys we have (a provider that is briefly down must not log everyone out).
                    _log.warning("fetching the OIDC signing keys failed: %s", type(exc).__name__)
                    self._failed_until = self._clock() + self._backoff
                    self._backoff = min(self._backoff * 2, max(self._refetch, _MAX_BACKOFF))
                else:
                    self._failed_until, self._backoff = 0.0, _FIRST_BACKOFF
            if kid is None:
                return next(iter(self._keys.values())) if len(self._keys) == 1 else None
            return self._keys.get(kid)


@dataclass
class OidcAuthenticator:
    """Authenticates ``Authorization: Bearer <JWT>`` issued by the configured provider."""

    keys: JwksKeys
    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    owner_claim: str
    leeway: int

    @classmethod
    def from_settings(cls, settings: Settings) -> OidcAuthenticator:
        """The authenticator ``settings`` configure (``TOLLGATE_OIDC_*``)."""
        assert settings.oidc_issuer is not None and settings.oidc_audience is not None  # checked by Settings
        hosts = {_host_entry(settings.oidc_issuer)}
        if settings.oidc_jwks_url:
            hosts.add(_host_entry(settings.oidc_jwks_url))
        policy = EgressPolicy.build(mode="enforce", allow_hosts=hosts, allow_networks=settings.egress_allow_networks)
        http = EgressClient(policy, egress_limits(settings))
        keys = JwksKeys(http, issuer=settings.oidc_issuer, jwks_url=settings.oidc_jwks_url,
                        ttl=settings.oidc_jwks_cache_seconds, refetch=settings.oidc_jwks_refetch_seconds)
        return cls(keys=keys, issuer=settings.oidc_issuer, audience=settings.oidc_audience,
                   algorithms=tuple(settings.oidc_algorithms), owner_claim=settings.oidc_owner_claim,
                   leeway=settings.oidc_clock_skew_seconds)

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        token = bearer_token(headers)
        if token is None or token.count(".") != 2:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg = header.get("alg")
        if alg not in self.algorithms:  # none, HS256 (the public key as a secret), anything not configured
            return self._refused("algorithm")
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in _ACCESS_TOKEN_TYPES):
            return self._refused("not_an_access_token")
        kid = header.get("kid")
        key = await self.keys.key(kid if isinstance(kid, str) else None)
        if key is None:
            return self._refused("unknown_key")
        if key.jwk.key_type != _KEY_TYPES.get(str(alg)[:2]) or key.alg not in (None, alg):
            return self._refused("key_mismatch")
        try:
            claims = jwt.decode(
                token, key=key.jwk.key, algorithms=[str(alg)], audience=self.audience, issuer=self.issuer,
                leeway=self.leeway, options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            return self._refused(type(exc).__name__)
        if any(name in claims for name in _ID_TOKEN_CLAIMS):
            return self._refused("id_token")
        if any(name in claims and (isinstance(claims[name], bool) or not isinstance(claims[name], int | float))
               for name in _TIME_CLAIMS):
            return self._refused("time_claim_not_a_number")
        return self._identity(claims)

    def _identity(self, claims: Mapping[str, Any]) -> Identity | None:
        owner = claims.get(self.owner_claim)
        if self.owner_claim == "email" and claims.get("email_verified") is not True:
            return self._refused("email_not_verified")
        if not isinstance(owner, str):
            return self._refused("no_owner_claim")
        try:
            Context(owner_id=owner)
        except ValueError:
            return self._refused("owner_id_invalid")
        scope = claims.get("scope", claims.get("scp", ""))
        scopes = frozenset(scope.split() if isinstance(scope, str) else (str(s) for s in scope or ()))
        name = claims.get("name") or claims.get("preferred_username") or ""
        zone, locale = claims.get("zoneinfo"), claims.get("locale")
        return Identity(owner_id=owner, display_name=str(name)[:200], scopes=scopes,
                        timezone=zone if isinstance(zone, str) else None,
                        locale=locale if isinstance(locale, str) else None)

    def _refused(self, reason: str) -> None:
        _log.info("an OIDC token was refused: %s", reason)  # the reason only: never the token or its claims
        return None

    async def aclose(self) -> None:
        return None
