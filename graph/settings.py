"""Tollgate settings, from the environment and ``.env`` (pydantic-settings)."""

from __future__ import annotations

import difflib
import secrets
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tollgate.graph.models.model_settings import ProviderSettings

__all__ = ["Settings", "misspelt_variables"]

_PLACEHOLDERS = frozenset({"", "changeme", "change-me", "secret", "dev", "development"})


class Settings(BaseSettings):
    """Configuration for every Tollgate process (server, CLI, worker, Studio)."""

    # hide_input_in_errors: a validation error must never echo the environment (secrets, API keys).
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_", env_file=".env", extra="ignore", hide_input_in_errors=True)

    environment: Literal["development", "production"] = "development"
    """``production`` refuses unsafe defaults (a missing or placeholder approval secret)."""
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    """PostgreSQL URL the server uses; unset means an embedded server under ``data_dir``."""
    migration_database_url: str | None = None
    """A privileged URL for schema changes at start-up (unset: ``DATABASE_URL``), so the serving
    role can be one without DDL."""
    data_dir: Path = Path("var")
    """Where the embedded PostgreSQL keeps its data and where dev secrets are stored."""
    approval_secret: SecretStr | None = None
    """HMAC key for approval tokens. In development a random key is kept under ``data_dir``."""
    credentials_key: SecretStr | None = None
    """Fernet key encrypting owners' tool secrets at rest; development derives one from the approval key."""
    approval_ttl_seconds: int = Field(default=3 * 24 * 3600, ge=60, le=30 * 24 * 3600)
    """How long an approval request stays valid."""
    step_budget: int = Field(default=8, ge=1, le=50)
    """Model answers with tool calls per chat turn (each may hold several calls)."""
    history_turns: int = Field(default=6, ge=0, le=50)
    """Earlier turns (request, tool calls and results, reply) shown to the picker, framed as data."""
    history_tokens: int = Field(default=2000, ge=0, le=50_000)
    """Token budget for those earlier turns (about four characters a token; oldest dropped first)."""
    max_calls_per_step: int = Field(default=8, ge=1, le=8)
    """Tool calls one model answer may make (the rest are refused back to the model)."""
    default_timezone: str = "UTC"
    """Timezone for owners who have none configured."""
    pool_max_size: int = Field(default=20, ge=1, le=200)
    """Maximum PostgreSQL connections per process (opened on demand). A turn takes one only while
    it runs a statement, never while it waits on a model, so this bounds database work, not turns."""
    db_wait_seconds: float = Field(default=10.0, gt=0, le=300)
    """How long a statement waits for one of the pool's connections under load (while the
    database is known to be away: one second), then fails as unavailable (503)."""
    db_connect_timeout_seconds: float = Field(default=5.0, ge=2, le=120)
    """How long opening a database connection may take (a host that does not answer)."""
    db_statement_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    """The longest one statement may run on the server before it is cancelled."""
    max_concurrent_turns: int = Field(default=1000, ge=1, le=100_000)
    """Turns one process runs at once; more wait for a slot (holding nothing)."""
    max_turns_per_owner: int = Field(default=16, ge=1, le=10_000)
    """Turns of one owner that one process runs at once, so one owner cannot starve the rest."""
    thread_lease_seconds: float = Field(default=30.0, ge=0.5, le=3600)
    """A turn's hold on its thread lasts this long unless renewed (it is, every third of it, while
    the turn runs): a process that dies frees its threads within this time."""
    thread_wait_seconds: float = Field(default=120.0, ge=0, le=3600)
    """How long a turn waits for its thread while another turn runs on it, then fails (unavailable)."""
    governance_mode: Literal["shadow", "enforce"] = "enforce"
    """``shadow`` only records what DLP would block or send for approval; tiers, schemas, ids and
    network safety are enforced in both modes."""
    egress_mode: Literal["off", "shadow", "enforce"] = "enforce"
    """The per-host egress allowlist: not consulted, misses only reported, or enforced."""
    egress_allow_hosts: list[str] = Field(default_factory=list)
    """Hosts Tollgate may connect to (JSON list; ``*.example.com`` for subdomains). The hosts of the
    configured web-tool base URLs are added. Empty and no web tools: nothing."""
    egress_allow_networks: list[str] = Field(default_factory=list)
    """Non-global networks explicitly allowed (loopback test servers); refused in production.
    Cloud metadata endpoints stay blocked whatever this says."""
    egress_max_redirects: int = Field(default=3, ge=0, le=10)
    """Redirects one outbound request may follow (each hop re-checked)."""
    egress_max_bytes: int = Field(default=2_000_000, ge=1_000, le=50_000_000)
    """Largest response body accepted from the web."""
    egress_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    """Wall-clock budget of one outbound request, redirects included."""
    web_tools: bool = False
    """Enable the web tools (weather, web search, URL fetch)."""
    weather_url: str = "https://api.open-meteo.com"
    """Base URL of an Open-Meteo-style forecast API."""
    geocoding_url: str = "https://geocoding-api.open-meteo.com"
    """Base URL of an Open-Meteo-style geocoding API (place name to coordinates)."""
    search_url: str | None = None
    """Base URL of a SearXNG-style JSON search API; unset leaves web search off."""
    worker_concurrency: int = Field(default=2, ge=1, le=32)
    """Background runs one worker process drives at once (each holds about two pool connections)."""
    worker_poll_seconds: float = Field(default=5.0, ge=0.05, le=300)
    """How often an idle worker polls the job queue (LISTEN/NOTIFY wakes it sooner)."""
    worker_heartbeat_seconds: float = Field(default=10.0, ge=0.1, le=600)
    """How often a worker records that it is alive."""
    worker_stall_seconds: float = Field(default=30.0, ge=0.5, le=3600)
    """A worker silent this long is presumed dead; its runs are taken up by another worker."""
    scheduler_tick_seconds: int = Field(default=10, ge=1, le=60)
    """Cadence of stall recovery, trigger evaluation and reminder firing (a divisor of 60)."""
    background_step_budget: int = Field(default=12, ge=1, le=50)
    """Tool steps per turn of a background run (chat turns use ``step_budget``)."""
    rate_limit_burst: int = Field(default=60, ge=1, le=100_000)
    """HTTP requests one principal may make at once (token-bucket capacity, kept per process)."""
    rate_limit_per_minute: int = Field(default=120, ge=1, le=1_000_000)
    """Sustained HTTP requests per minute per principal (token-bucket refill, kept per process)."""
    stream_idle_seconds: float = Field(default=120.0, ge=1.0, le=3600.0)
    """A followed stream of an unfinished turn ends after this long without a new event."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    """The largest request body the HTTP API reads (1 MiB); a larger one is refused with 413."""
    max_header_bytes: int = Field(default=16_384, ge=1024, le=1_048_576)
    """The most request-header bytes the HTTP API takes (16 KiB in all); more is refused with 431."""
    body_read_seconds: float = Field(default=10.0, gt=0, le=300)
    """How long a client may take to send its request body; slower is refused with 408."""
    log_format: Literal["text", "json"] = "text"
    """Log lines as readable text, or one JSON object a line (time, level, logger, message and the
    owner, thread, turn and approval ids)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """The least severe log lines written."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Also serve the Prometheus metrics, without authentication, on this port (``metrics_host``);
    unset: only ``GET /metrics``, for a credential with the admin scope."""
    metrics_host: str = "127.0.0.1"
    """The interface the metrics port binds (only the scraper should reach it)."""
    metrics_refresh_seconds: float = Field(default=10.0, ge=0.1, le=3600)
    """How often the metrics port reads its database gauges (approvals, runs, the queue); ``/metrics`` reads them at each scrape."""
    picker_providers: list[ProviderSettings] = Field(default_factory=list)
    """Ordered OpenAI-compatible endpoints for the picker (JSON list); empty: the offline picker."""
    naturalizer_providers: list[ProviderSettings] = Field(default_factory=list)
    """Ordered endpoints for phrasing replies (JSON list); empty: grounded renderers."""
    picker_model: str | None = None
    """Shorthand: one picker provider at ``OPENAI_BASE_URL`` with this model."""
    naturalizer_model: str | None = None
    """Shorthand: one naturalizer provider at ``OPENAI_BASE_URL`` with this model."""
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    """Base URL for the shorthand providers (default: OpenAI's)."""
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    """API key for the shorthand providers."""
    calendar_backend: Literal["builtin", "caldav"] = "builtin"
    """Where owners' calendars are: Tollgate's own table, or each owner's CalDAV account
    (``tollgate account add --kind caldav``)."""
    calendar_backend_owners: dict[str, Literal["builtin", "caldav"]] = Field(default_factory=dict)
    """Per-owner choices that override ``calendar_backend`` (JSON object: owner id -> backend)."""
    mail_backend: Literal["builtin", "imap"] = "builtin"
    """Where owners' mail is: Tollgate's own tables, or each owner's IMAP and SMTP servers
    (``tollgate account add --kind imap``)."""
    mail_backend_owners: dict[str, Literal["builtin", "imap"]] = Field(default_factory=dict)
    """Per-owner choices that override ``mail_backend`` (JSON object: owner id -> backend)."""
    connector_plaintext_hosts: list[str] = Field(default_factory=list)
    """Hosts whose accounts may log in without TLS (``http://``, ``imap://``, ``smtp://``: a server on
    the LAN); refused otherwise."""
    connector_private_networks: dict[str, list[Literal["caldav", "imap"]]] = Field(default_factory=dict)
    """Owners whose own calendar or mail server is on a LAN (JSON object: owner id -> ``["caldav"]``,
    ``["imap"]`` or both): those accounts, and only they, may reach private addresses (RFC 1918
    and CGNAT IPv4; never loopback, link-local or a metadata endpoint). Allowed in production."""
    model_fallback: Literal["offline", "none"] | None = None
    """When every configured picker provider fails: ``offline`` answers with the offline picker,
    ``none`` answers that the model is unavailable and does nothing. Unset: ``offline`` in
    development, ``none`` in production (a production deployment never silently downgrades)."""
    model_max_attempts: int = Field(default=3, ge=1, le=10)
    """Attempts per provider for 429, 5xx and timeouts before moving to the next provider."""
    model_retry_budget_seconds: float = Field(default=20.0, gt=0, le=600)
    """Time budget per provider for those attempts."""
    checkpoint_prune_every: int = Field(default=25, ge=0, le=100_000)
    """About one finished turn in N prunes its thread to the latest checkpoint (0: keep all)."""
    tools: list[str] = Field(default_factory=list)
    """Plug-in tools to serve besides the built-ins: a JSON list of ``"package.module:NAME"``
    (a ToolSpec, a list of them, or a callable taking these settings)."""
    tool_entry_points: bool = True
    """Also serve the tools installed packages register under the ``tollgate.tools`` entry points."""
    destructive_approvable: list[str] = []
    """Destructive actions (``tool.action``) the owner may approve instead of having them refused; each
    must also declare the ``confirmation`` tier. Empty by default: a destructive action is refused."""
    outbound_flow: Literal["off", "approve", "refuse"] = "approve"
    """An outbound read (search, fetch, weather, a remote tool's read) whose values copy what the
    model was shown, or carry contact data the user did not type: asks for approval, is refused,
    or runs as any read (``off``)."""
    approval_rules: Path | None = None
    """A TOML file of per-action approval rules (:mod:`policies.approval_rules`); none: every
    confirmation-tier call asks."""
    mcp_policy: Path | None = None
    """A TOML policy naming MCP servers and how each of their tools is governed (tools/mcp_tools.py)."""
    disabled_tools: list[str] = Field(default_factory=list)
    """Built-in tools to switch off (JSON list of names: ``["reminders", "triggers"]``)."""
    menu_cap: int = Field(default=32, ge=1, le=512)
    """Most functions offered to the model; larger registries get a BM25 shortlist."""
    auth: Literal["tokens", "oidc"] = "tokens"
    """How HTTP callers authenticate: Tollgate's own stored bearer tokens, or an OpenID Connect
    provider's JWT access tokens (``oidc_*``)."""
    oidc_issuer: str | None = None
    """The provider's issuer URL (the ``iss`` every token must carry)."""
    oidc_audience: str | None = None
    """The audience every token must carry (``aud``): this API's identifier at the provider."""
    oidc_jwks_url: str | None = None
    """Where the provider's signing keys are; unset: the ``jwks_uri`` of the issuer's discovery document."""
    oidc_owner_claim: Literal["sub", "email"] = "sub"
    """The claim that names the owner (a verified ``email`` only: ``email_verified`` must be true)."""
    oidc_algorithms: list[Literal["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]] = Field(
        default_factory=lambda: ["RS256", "ES256"], min_length=1)
    """Signature algorithms accepted (asymmetric only: ``none`` and HMAC are never accepted)."""
    oidc_clock_skew_seconds: int = Field(default=30, ge=0, le=300)
    """Leeway on ``exp``, ``nbf`` and ``iat``."""
    oidc_jwks_cache_seconds: int = Field(default=300, ge=10, le=86_400)
    """How long fetched keys are used before they are fetched again (an unknown ``kid`` refetches sooner)."""
    oidc_jwks_refetch_seconds: float = Field(default=10.0, ge=0, le=3600)
    """The least time between two fetches of the keys for unknown ``kid``s, so forged ``kid``s cannot
    turn into a stream of requests to the provider."""
    auth_scopes: dict[Literal["chat", "approvals", "background", "admin"], list[str]] = Field(default_factory=dict)
    """Scopes a token must carry per route group (JSON object), e.g. ``{"approvals": ["tollgate.approve"]}``."""

    def offline_fallback(self) -> bool:
        """Whether the offline picker answers when every configured picker provider fails."""
        return (self.model_fallback or ("none" if self.environment == "production" else "offline")) == "offline"

    @model_validator(mode="after")
    def _check_worker_timing(self) -> Settings:
        if 60 % self.scheduler_tick_seconds:
            raise ValueError("TOLLGATE_SCHEDULER_TICK_SECONDS must divide 60")
        if self.worker_stall_seconds <= 2 * self.worker_heartbeat_seconds:
            raise ValueError("TOLLGATE_WORKER_STALL_SECONDS must exceed twice the heartbeat interval")
        return self

    @model_validator(mode="after")
    def _check_oidc(self) -> Settings:
        if self.auth == "oidc" and not (self.oidc_issuer and self.oidc_audience):
            raise ValueError("TOLLGATE_AUTH=oidc needs TOLLGATE_OIDC_ISSUER and TOLLGATE_OIDC_AUDIENCE")
        for url in (self.oidc_issuer, self.oidc_jwks_url):
            if url and not url.startswith(("https://", "http://")):
                raise ValueError("TOLLGATE_OIDC_ISSUER and TOLLGATE_OIDC_JWKS_URL must be http(s) URLs")
            if url and url.startswith("http://") and self.environment == "production":
                raise ValueError("the OIDC issuer and its keys must be reached over https in production")
        return self

    @model_validator(mode="after")
    def _refuse_private_egress_in_production(self) -> Settings:
        if self.environment == "production" and self.egress_allow_networks:
            raise ValueError("TOLLGATE_EGRESS_ALLOW_NETWORKS (private destinations) is refused in production")
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_defaults(self) -> Settings:
        secret = self.approval_secret.get_secret_value() if self.approval_secret else ""
        if secret.lower() in _PLACEHOLDERS or len(secret) < 16:
            if self.environment == "production":
                raise ValueError(
                    "TOLLGATE_APPROVAL_SECRET must be set to a random value of at least 16 characters in production"
                )
            if secret:
                warnings.warn("TOLLGATE_APPROVAL_SECRET is a placeholder; using a generated key", stacklevel=2)
                self.approval_secret = None
        return self

    def approval_key(self) -> bytes:
        """The approval HMAC key; in development, generated once and kept under ``data_dir``."""
        if self.approval_secret is not None:
            return self.approval_secret.get_secret_value().encode()
        path = self.data_dir / "approval.key"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(secrets.token_hex(32))
        return path.read_text().strip().encode()


_READ_ELSEWHERE: Final = frozenset({"TOLLGATE_STUDIO_OPEN", "TOLLGATE_DEV_OWNER", "TOLLGATE_TOKEN",
                                    "TOLLGATE_AGENT_CHAT_UI"})
"""``TOLLGATE_*`` variables that are not settings: ``make studio-open``'s two, the token the
README's client snippets read, and where the tests find agent-chat-ui."""


def misspelt_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``TOLLGATE_*`` variable of ``environ`` that no setting reads (it is ignored),
    naming the closest real one when there is one."""
    known = {field.validation_alias if isinstance(field.validation_alias, str) else f"TOLLGATE_{name.upper()}"
             for name, field in Settings.model_fields.items()} | _READ_ELSEWHERE
    out = []
    for name in sorted(environ):
        if not name.startswith("TOLLGATE_") or name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        out.append(f"{name} is not a Tollgate setting and is ignored" + (f"; did you mean {close[0]}?" if close else ""))
    return out
