"""Process-wide safety switches that must be set before langgraph is imported.

Imported first by :mod:`graph`; the Makefile, CI and the Studio config set the same values.
"""

from __future__ import annotations

import os

# Checkpoint deserialization restricted to LangGraph's safe types (no arbitrary imports).
os.environ["LANGGRAPH_STRICT_MSGPACK"] = "true"
# Tollgate never phones home: no analytics, tracing or version checks from langgraph tooling.
os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
os.environ.setdefault("LANGGRAPH_NO_VERSION_CHECK", "true")
