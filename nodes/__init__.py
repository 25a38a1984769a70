"""Tollgate nodes."""
