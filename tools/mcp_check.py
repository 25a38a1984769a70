"""``tollgate mcp check POLICY``: what an MCP policy file will do, before a server starts with it.

It reads the policy as the server would (:func:`tools.mcp_tools.load_policy`), then connects to
every server it names and compares: tools the policy names that the server does not offer (a
typo, or a tool the server dropped), tools the server offers that the policy does not name
(never offered to the model), tables with keys the policy format does not have (a misspelt
``efect`` would otherwise be silently ignored), tools without ``usage_examples`` (the offline
picker matches requests against them) and schemas that no longer match their pin.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcp import Client

from tollgate.tools.mcp_tools import SERVER_KEYS, TOOL_KEYS, McpPolicyError, load_policy, schema_hash, server_target

__all__ = ["Finding", "check_policy"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the check found: an ``error`` the server would refuse to start with, or a ``warning``."""

    level: Literal["error", "warning"]
    where: str
    """``server`` or ``server.tool`` (or the file, for the file itself)."""
    message: str


def _unknown_keys(table: dict[str, Any], known: frozenset[str], where: str) -> list[Finding]:
    out = []
    for key in sorted(set(table) - known):
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        out.append(Finding("error", where, f"unknown key {key!r}" + (f"; did you mean {close[0]!r}?" if close else "")))
    return out


async def check_policy(path: Path) -> list[Finding]:
    """Every finding for the policy at ``path``, errors first (none: the policy is ready)."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        return [Finding("error", str(path), str(exc))]
    findings = _unknown_keys(raw, frozenset({"servers"}), str(path))
    for name, server in (raw.get("servers") or {}).items():
        findings += _unknown_keys(server, SERVER_KEYS, name)
        for tool, table in (server.get("tools") or {}).items():
            findings += _unknown_keys(table, TOOL_KEYS, f"{name}.{tool}")
            if "effect" not in table:
                findings.append(Finding("error", f"{name}.{tool}", "no effect (read, write or destructive): it is never assumed"))
            if not table.get("usage_examples"):
                findings.append(Finding("warning", f"{name}.{tool}", "no usage_examples: the offline picker has no "
                                                                     "request to match it by"))
    try:
        servers = load_policy(path)
    except McpPolicyError as exc:
        if not any(f.level == "error" for f in findings):
            findings.append(Finding("error", str(path), str(exc)))
        return _ordered(findings)
    for server in servers:
        try:
            async with Client(server_target(server)) as client:
                listed = (await client.list_tools()).tools
        except Exception as exc:  # noqa: BLE001 - reported, like the server would at start-up
            findings.append(Finding("error", server.name, f"cannot connect or list its tools ({type(exc).__name__})"))
            continue
        offered = {tool.name: tool for tool in listed}
        for name in sorted(set(server.tools) - set(offered)):
            close = difflib.get_close_matches(name, sorted(offered), n=1, cutoff=0.6)
            findings.append(Finding("error", f"{server.name}.{name}", "the server offers no such tool"
                                    + (f"; did you mean {close[0]!r}?" if close else "")))
        for name in sorted(set(offered) - set(server.tools)):
            findings.append(Finding("warning", f"{server.name}.{name}", "offered by the server but not named in the "
                                                                         "policy: never offered to the model"))
        for name, policy in server.tools.items():
            tool = offered.get(name)
            if tool is not None and policy.schema_sha256 and policy.schema_sha256 != schema_hash(tool.input_schema):
                findings.append(Finding("error", f"{server.name}.{name}", "its schema is not the one the policy pins "
                                        f"(it is now {schema_hash(tool.input_schema)})"))
    return _ordered(findings)


def _ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.level != "error", f.where))
