"""Tollgate graph: state, turn wiring, checkpointer and database."""

import graph._env  # noqa: F401  - must run before langgraph is imported
