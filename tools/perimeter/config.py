"""The security perimeter's configuration, built once per settings value.

Turns :class:`~graph.settings.Settings` into the pure policies of ``policies/`` (governance,
egress, limits) so every node and tool applies the same rules. The hosts of configured web-tool
base URLs join the egress allowlist: configuring a service is allowlisting it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from tollgate.tools.perimeter.egress_transport import EgressClient, EgressLimits, Resolver, system_resolver
from tollgate.policies.egress import EgressPolicy
from tollgate.policies.governance import GovernancePolicy

__all__ = ["egress_client", "egress_limits", "egress_policy", "governance_policy", "service_urls"]


_FIELDS = (
    "web_tools", "weather_url", "geocoding_url", "search_url", "egress_allow_hosts", "egress_allow_networks",
    "egress_mode", "egress_max_redirects", "egress_max_bytes", "egress_timeout_seconds", "governance_mode",
    "destructive_approvable",
)


def _values(settings: Mapping[str, Any] | BaseModel | None) -> Mapping[str, Any]:
    if settings is None:
        return {}
    if isinstance(settings, BaseModel):
        # Only the perimeter's fields: cheaper than a full dump on every governed call.
        return {name: getattr(settings, name) for name in _FIELDS if hasattr(settings, name)}
    return settings


def service_urls(settings: Mapping[str, Any] | BaseModel | None) -> dict[str, str]:
    """The configured web-tool base URLs (only when the web tools are on)."""
    values = _values(settings)
    if not values.get("web_tools"):
        return {}
    urls = {name: values.get(f"{name}_url") for name in ("weather", "geocoding", "search")}
    return {name: str(url).rstrip("/") for name, url in urls.items() if url}


@lru_cache(maxsize=32)
def _egress(mode: str, hosts: tuple[str, ...], networks: tuple[str, ...]) -> EgressPolicy:
    return EgressPolicy.build(mode=mode, allow_hosts=hosts, allow_networks=networks)  # type: ignore[arg-type]


def egress_policy(settings: Mapping[str, Any] | BaseModel | None) -> EgressPolicy:
    """Deny by default; the allowlist plus the hosts of the configured service URLs."""
    values = _values(settings)
    hosts = list(values.get("egress_allow_hosts") or [])
    for url in service_urls(values).values():
        parts = urlsplit(url)
        if parts.hostname:
            hosts.append(parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}")
    networks = tuple(values.get("egress_allow_networks") or ())
    return _egress(str(values.get("egress_mode", "enforce")), tuple(sorted(set(hosts))), networks)


def egress_limits(settings: Mapping[str, Any] | BaseModel | None) -> EgressLimits:
    """Redirect, size and time caps from settings."""
    values = _values(settings)
    return EgressLimits(
        max_redirects=int(values.get("egress_max_redirects", 3)),
        max_bytes=int(values.get("egress_max_bytes", 2_000_000)),
        timeout_seconds=float(values.get("egress_timeout_seconds", 10.0)),
    )


def egress_client(settings: Mapping[str, Any] | BaseModel | None, *, resolver: Resolver = system_resolver) -> EgressClient:
    """The egress-gated HTTP client tools get (``ExecContext.http``), for ``settings``."""
    return EgressClient(egress_policy(settings), egress_limits(settings), resolver)


def governance_policy(settings: Mapping[str, Any] | BaseModel | None) -> GovernancePolicy:
    """The governance policy for ``settings``."""
    values = _values(settings)
    return GovernancePolicy(mode=values.get("governance_mode", "enforce"), egress=egress_policy(values),
                            approvable_destructive=frozenset(
                                tuple(name.split(".", 1)) for name in values.get("destructive_approvable") or ()
                                if "." in name))  # type: ignore[misc]
