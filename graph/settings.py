"""Tollgate settings, from the environment and ``.env`` (pydantic-settings)."""

from __future__ import annotations

import secrets
import warnings
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]

_PLACEHOLDERS = frozenset({"", "changeme", "change-me", "secret", "dev", "development"})


class Settings(BaseSettings):
    """Configuration for every Tollgate process (server, CLI, worker, Studio)."""

    model_config = SettingsConfigDict(env_prefix="TOLLGATE_", env_file=".env", extra="ignore")

    environment: Literal["development", "production"] = "development"
    """``production`` refuses unsafe defaults (a missing or placeholder approval secret)."""
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    """PostgreSQL URL; unset means an embedded server under ``data_dir``."""
    data_dir: Path = Path("var")
    """Where the embedded PostgreSQL keeps its data and where dev secrets are stored."""
    approval_secret: SecretStr | None = None
    """HMAC key for approval tokens. In development a random key is kept under ``data_dir``."""
    approval_ttl_seconds: int = Field(default=3 * 24 * 3600, ge=60, le=30 * 24 * 3600)
    """How long an approval request stays valid."""
    step_budget: int = Field(default=3, ge=1, le=10)
    """Tool steps (reads chained, or one write) per turn."""
    history_turns: int = Field(default=6, ge=0, le=50)
    """Prior user turns shown to the picker, framed as data."""
    history_chars: int = Field(default=2000, ge=0, le=20000)
    """Character budget for those prior turns."""
    default_timezone: str = "UTC"
    """Timezone for owners who have none configured."""
    pool_max_size: int = Field(default=10, ge=1, le=200)
    """Maximum PostgreSQL connections per process."""

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
