"""Approval tokens: bound to the exact thread, owner, call and arguments.

``args_hash`` is SHA-256 over the RFC 8785 canonical JSON of the validated arguments. A
token is ``v1.<claims>.<mac>``: base64url canonical-JSON claims and an HMAC-SHA256 over them
with the server secret. Reading a token checks the signature (constant time) before anything
else; binding then checks every claim against the pending plan and the caller.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import rfc8785

from tollgate.policies.storable import MAX_DEPTH, depth_of

from tollgate.policies.errors import ApprovalExpired, ApprovalInvalid

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_SUMMARIES",
    "ApprovalClaims",
    "args_hash",
    "raw_args_hash",
    "canonical_json",
    "check_binding",
    "derive_nonce",
    "mint_token",
    "read_token",
    "seal_plan",
    "verify_seal",
]

SCHEMA_VERSION: Final = "v1"
SCHEMA_VERSION_SUMMARIES: Final = {
    "v1": "HMAC-SHA256 over canonical claims: thread, owner, tool, action, args_hash, exp, nonce",
}
"""One line per token schema version; an unknown version is refused."""

_MAX_TOKEN_LEN: Final = 2048


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) canonical JSON."""
    return rfc8785.dumps(value)


def args_hash(args: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of validated arguments."""
    return hashlib.sha256(canonical_json(args)).hexdigest()


def raw_args_hash(raw: object) -> str:
    """The hash of arguments as a model sent them (for the audit of a refused call); ``""`` when
    they are no JSON object, nest deeper than :data:`~policies.storable.MAX_DEPTH`, or cannot be
    canonicalized."""
    if not isinstance(raw, dict) or depth_of(raw) > MAX_DEPTH:
        return ""  # canonicalizing recurses: arguments nested past the bound are refused unhashed
    try:
        return args_hash(raw)
    except (TypeError, ValueError, RecursionError):
        return ""


@dataclass(frozen=True, slots=True)
class ApprovalClaims:
    """What a token asserts."""

    thread_id: str
    """The thread whose pending turn this approves."""
    owner_id: str
    """The only owner who may decide it."""
    tool: str
    """The tool of the pending call."""
    action: str
    """The action of the pending call."""
    args_hash: str
    """Hash of the exact arguments that will run."""
    exp: int
    """Expiry, Unix seconds."""
    nonce: str
    """Unique per approval; also the approval's id and its idempotency key."""

    @property
    def expires_at(self) -> datetime:
        """Expiry as an aware datetime."""
        return datetime.fromtimestamp(self.exp, UTC)


def derive_nonce(key: bytes, *parts: str) -> str:
    """A deterministic nonce for an approval, so a re-executed node mints the same token."""
    mac = hmac.new(key, b"tollgate-approval-nonce\x00" + "\x00".join(parts).encode(), hashlib.sha256)
    return "apv_" + mac.hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, f"{SCHEMA_VERSION}.{payload}".encode("ascii"), hashlib.sha256).digest()


def mint_token(claims: ApprovalClaims, key: bytes) -> str:
    """Sign ``claims`` with ``key``."""
    payload = _b64(canonical_json(asdict(claims)))
    return f"{SCHEMA_VERSION}.{payload}.{_b64(_mac(key, payload))}"


def read_token(token: object, key: bytes, *, now: datetime) -> ApprovalClaims:
    """Verify a token's signature and expiry and return its claims.

    Raises :class:`ApprovalInvalid` for anything malformed, of an unknown version or badly
    signed, and :class:`ApprovalExpired` for a genuine token past its expiry.
    """
    if not isinstance(token, str) or not 0 < len(token) <= _MAX_TOKEN_LEN:
        raise ApprovalInvalid("malformed token")
    parts = token.split(".")
    if len(parts) != 3:
        raise ApprovalInvalid("malformed token")
    version, payload, signature = parts
    if version not in SCHEMA_VERSION_SUMMARIES:
        raise ApprovalInvalid("unknown token version")
    try:
        given = _unb64(signature)
    except (binascii.Error, ValueError):
        raise ApprovalInvalid("malformed token") from None
    if not hmac.compare_digest(given, _mac(key, payload)):
        raise ApprovalInvalid("bad signature")
    try:
        raw = json.loads(_unb64(payload))
        claims = ApprovalClaims(**raw)
    except (binascii.Error, ValueError, TypeError):
        raise ApprovalInvalid("malformed claims") from None
    if not isinstance(claims.exp, int):
        raise ApprovalInvalid("malformed claims")
    if now.timestamp() >= claims.exp:
        raise ApprovalExpired(claims.expires_at.isoformat())
    return claims


def check_binding(
    claims: ApprovalClaims,
    *,
    thread_id: str,
    owner_id: str,
    tool: str,
    action: str,
    hash_: str,
    nonce: str,
) -> None:
    """Refuse a token that does not match the caller and the pending plan exactly."""
    if not hmac.compare_digest(claims.owner_id, owner_id):
        raise ApprovalInvalid("token belongs to another owner")
    if claims.thread_id != thread_id:
        raise ApprovalInvalid("token belongs to another thread")
    if claims.nonce != nonce:
        raise ApprovalInvalid("token is not for the pending approval")
    if (claims.tool, claims.action) != (tool, action):
        raise ApprovalInvalid("token is for another action")
    if not hmac.compare_digest(claims.args_hash, hash_):
        raise ApprovalInvalid("arguments changed since the approval was requested")


SealPurpose = Literal["gate", "server"]
"""Who sealed a plan: the gate (a model's call that passed every check) or the server itself
(a call it built from its own facts, such as the offer to continue in the background)."""


def seal_plan(
    key: bytes, *, purpose: SealPurpose, thread_id: str, owner_id: str, turn_id: str, call_id: str, tool: str,
    action: str, args_hash: str, verdict: str = "",
) -> str:
    """The gate's seal on a call it decided: an HMAC over who, where, which call, which arguments
    and what the gate decided for it (``verdict``: ``propose`` means it runs only approved).

    Execute runs only sealed calls, so a plan written into the state by anything but the gate
    (``Command(update=...)``, ``update_state``, an edited checkpoint) runs nothing, and one whose
    verdict was changed from ``propose`` has no valid seal.
    """
    material = "\x00".join(("tollgate-seal", purpose, thread_id, owner_id, turn_id, call_id, tool, action, args_hash,
                            verdict))
    return f"{purpose}.{hmac.new(key, material.encode(), hashlib.sha256).hexdigest()}"


def verify_seal(
    key: bytes, seal: object, *, thread_id: str, owner_id: str, turn_id: str, call_id: str, tool: str,
    action: str, args_hash: str, verdict: str = "",
) -> SealPurpose | None:
    """The purpose of a valid seal for exactly this call, or ``None`` (constant-time compare)."""
    if not isinstance(seal, str):
        return None
    purpose = _PURPOSES.get(seal.split(".", 1)[0])
    if purpose is None:
        return None
    expected = seal_plan(key, purpose=purpose, thread_id=thread_id, owner_id=owner_id, turn_id=turn_id,
                         call_id=call_id, tool=tool, action=action, args_hash=args_hash, verdict=verdict)
    return purpose if hmac.compare_digest(seal, expected) else None


_PURPOSES: Final[dict[str, SealPurpose]] = {"gate": "gate", "server": "server"}
