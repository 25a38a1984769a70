"""Tollgate policies."""
